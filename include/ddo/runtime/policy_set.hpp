// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief How ddo::offloader<Policies...> sorts its template arguments, with a diagnostic for
/// every misuse (each has a compile-fail test in tests/compile_fail/offloader_*.cpp).
///
/// Accepted, in any order, at most one of each role:
/// - a transport (transport/concepts.hpp); default linear_transport;
/// - a residency planner, or `resident_selection<S>` to fix the default planner's selection;
/// - a pin selector, or `pin_selection<S>` to fix the default pin selector's selection;
/// - a bare weight selector (first_selector, spread_selector, largest_selector): both selections.
/// Config sources are not template arguments: settings come from resolution (presets, code,
/// TOML, environment, flags, component policies, in the reference's precedence), and the
/// offloader's source-object constructor takes the sources to consult as objects.

#include <concepts>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include "ddo/config/concepts.hpp"
#include "ddo/plan/concepts.hpp"
#include "ddo/plan/default_policies.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/linear.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {

/// A type that says it is a transport (its transport_category) but does not model the concept.
template <class T>
concept near_transport = requires { typename T::transport_category; } && !transport<T>;

template <class T>
concept transport_has_types = requires {
  typename T::stream;
  typename T::event;
  typename T::stream_view;
};

/// One static_assert per requirement of ddo::transport, so the compiler lists what is missing.
template <class T>
constexpr bool diagnose_transport() {
  static_assert(std::same_as<typename T::transport_category, transport_tag>,
                "ddo::transport: `transport_category` must be ddo::transport_tag");
  static_assert(std::copy_constructible<T>,
                "ddo::transport: the transport must be copy constructible (a cheap handle)");
  static_assert(requires { typename T::stream; }, "ddo::transport: missing member type `stream`");
  static_assert(requires { typename T::event; }, "ddo::transport: missing member type `event`");
  static_assert(requires { typename T::stream_view; },
                "ddo::transport: missing member type `stream_view`");
  static_assert(requires(const T& t) { { t.name() } -> std::convertible_to<std::string_view>; },
                "ddo::transport: missing `name() const` returning something convertible to "
                "std::string_view");
  static_assert(requires(T& t) { { t.device_memory() } -> std::same_as<device_memory_info>; },
                "ddo::transport: missing `device_memory()` returning ddo::device_memory_info");
  static_assert(requires(T& t, std::size_t n) { { t.allocate_device(n) } -> std::same_as<std::byte*>; },
                "ddo::transport: missing `allocate_device(std::size_t)` returning std::byte*");
  static_assert(requires(T& t, std::byte* d, std::size_t n) { t.free_device(d, n); },
                "ddo::transport: missing `free_device(std::byte*, std::size_t)`");
  static_assert(requires(T& t, std::size_t n) { { t.allocate_pinned(n) } -> std::same_as<std::byte*>; },
                "ddo::transport: missing `allocate_pinned(std::size_t)` returning std::byte*");
  static_assert(requires(T& t, std::byte* d, std::size_t n) { t.free_pinned(d, n); },
                "ddo::transport: missing `free_pinned(std::byte*, std::size_t)`");
  static_assert(requires(T& t, void* p, std::size_t n) { { t.register_host(p, n) } -> std::same_as<bool>; },
                "ddo::transport: missing `register_host(void*, std::size_t)` returning bool");
  static_assert(requires(T& t, void* p) { t.unregister_host(p); },
                "ddo::transport: missing `unregister_host(void*)`");
  if constexpr (transport_has_types<T>) {
    using S = typename T::stream;
    using E = typename T::event;
    using V = typename T::stream_view;
    static_assert(std::movable<S>, "ddo::transport: `stream` must be movable");
    static_assert(std::movable<E>, "ddo::transport: `event` must be movable");
    static_assert(std::copyable<V>, "ddo::transport: `stream_view` must be copyable");
    static_assert(requires(T& t) { { t.make_stream() } -> std::same_as<S>; },
                  "ddo::transport: missing `make_stream()` returning `stream`");
    static_assert(requires(S& s) { { T::view(s) } -> std::same_as<V>; },
                  "ddo::transport: missing static `view(stream&)` returning `stream_view`");
    static_assert(requires(T& t) { { t.make_event(bool{}) } -> std::same_as<E>; },
                  "ddo::transport: missing `make_event(bool timing)` returning `event`");
    static_assert(requires(T& t, E& e, V v) { t.record(e, v); },
                  "ddo::transport: missing `record(event&, stream_view)`");
    static_assert(requires(T& t, const E& e, V v) { t.wait(v, e); },
                  "ddo::transport: missing `wait(stream_view, const event&)`");
    static_assert(requires(T& t, const E& e) { { t.ready(e) } -> std::same_as<bool>; },
                  "ddo::transport: missing `ready(const event&)` returning bool");
    static_assert(requires(T& t, const E& e) { t.synchronize(e); },
                  "ddo::transport: missing `synchronize(const event&)`");
    static_assert(requires(T& t, V v) { t.synchronize(v); },
                  "ddo::transport: missing `synchronize(stream_view)`");
    static_assert(requires(T& t, const E& e) { { t.elapsed_ms(e, e) } -> std::convertible_to<double>; },
                  "ddo::transport: missing `elapsed_ms(const event&, const event&)`");
    static_assert(requires(T& t, std::byte* d, const std::byte* h, std::size_t n, V v) {
                    t.copy_to_device(d, h, n, v);
                  },
                  "ddo::transport: missing `copy_to_device(std::byte*, const std::byte*, "
                  "std::size_t, stream_view)`");
    static_assert(requires(T& t, std::byte* d, const std::byte* h, std::size_t n, V v) {
                    t.copy_to_host(d, h, n, v);
                  },
                  "ddo::transport: missing `copy_to_host(...)` (see transport/concepts.hpp)");
    static_assert(requires(T& t, std::byte* d, std::size_t n, V v) { t.fill_device(d, int{}, n, v); },
                  "ddo::transport: missing `fill_device(std::byte*, int, std::size_t, stream_view)`");
  }
  return true;
}

template <class P>
inline constexpr int policy_roles = int(residency_planner<P>) + int(pin_selector<P>) +
                                    int(transport<P>) + int(weight_selector<P>) +
                                    int(resident_selection_policy<P>) + int(pin_selection_policy<P>);

template <class P>
constexpr bool check_policy() {
  if constexpr (near_transport<P>) {
    return diagnose_transport<P>();
  } else {
    static_assert(!config_source<P>,
                  "ddo::offloader: config sources are not template arguments. Settings are "
                  "resolved in the reference's precedence (preset < code < TOML < environment < "
                  "flags < component policies): pass the source objects to the offloader's "
                  "constructor, or fill ddo::resolve_inputs (config/resolve.hpp)");
    static_assert(config_source<P> || policy_roles<P> == 1,
                  "ddo::offloader: every template argument must be one of: a ddo::transport "
                  "(ddo/transport/concepts.hpp), a ddo::residency_planner or ddo::pin_selector "
                  "(ddo/plan/concepts.hpp), ddo::resident_selection<S>, ddo::pin_selection<S>, "
                  "or a weight selector (first_selector, spread_selector, largest_selector: "
                  "ddo/plan/selectors.hpp)");
    return true;
  }
}

template <template <class> class Pred, class Default, class... Ps>
struct first_matching {
  using type = Default;
};
template <template <class> class Pred, class Default, class P, class... Ps>
struct first_matching<Pred, Default, P, Ps...> {
  using type = std::conditional_t<Pred<P>::value, P, typename first_matching<Pred, Default, Ps...>::type>;
};

template <class P> struct is_planner_policy : std::bool_constant<residency_planner<P>> {};
template <class P> struct is_pin_policy : std::bool_constant<pin_selector<P>> {};
template <class P> struct is_transport_policy : std::bool_constant<transport<P>> {};
template <class P>
struct is_resident_choice : std::bool_constant<resident_selection_policy<P> || weight_selector<P>> {};
template <class P>
struct is_pin_choice : std::bool_constant<pin_selection_policy<P> || weight_selector<P>> {};

template <class P> struct selector_of { using type = P; };  // a bare weight selector
template <class P>
  requires(resident_selection_policy<P> || pin_selection_policy<P>)
struct selector_of<P> {
  using type = typename P::selector;
};

/// Sorts a policy pack by role.
template <class... Policies>
struct policy_set {
  static constexpr bool valid = (check_policy<Policies>() && ... && true);
  static_assert((int(residency_planner<Policies>) + ... + 0) <= 1,
                "ddo::offloader: more than one residency planner given");
  static_assert((int(pin_selector<Policies>) + ... + 0) <= 1,
                "ddo::offloader: more than one pin selector given");
  static_assert((int(transport<Policies>) + ... + 0) <= 1,
                "ddo::offloader: more than one transport given");
  static_assert((int(is_resident_choice<Policies>::value) + ... + 0) <= 1,
                "ddo::offloader: more than one residency selection given (resident_selection<S> "
                "or a bare weight selector, which sets both selections)");
  static_assert((int(is_pin_choice<Policies>::value) + ... + 0) <= 1,
                "ddo::offloader: more than one pin selection given (pin_selection<S> or a bare "
                "weight selector, which sets both selections)");
  static_assert(!((int(residency_planner<Policies>) + ... + 0) == 1 &&
                  (int(is_resident_choice<Policies>::value) + ... + 0) == 1),
                "ddo::offloader: resident_selection<S> (or a bare weight selector) configures "
                "ddo's default residency planner; with your own residency planner, choose the "
                "selection inside it");
  static_assert(!((int(pin_selector<Policies>) + ... + 0) == 1 &&
                  (int(is_pin_choice<Policies>::value) + ... + 0) == 1),
                "ddo::offloader: pin_selection<S> (or a bare weight selector) configures ddo's "
                "default pin selector; with your own pin selector, choose the selection inside it");

  using resident_selector =
      typename selector_of<typename first_matching<is_resident_choice, by_config_selection, Policies...>::type>::type;
  using pin_selector_choice =
      typename selector_of<typename first_matching<is_pin_choice, by_config_selection, Policies...>::type>::type;
  /// The engine's planner; else chosen at run time: the overlap-aware planner where a stored
  /// capacity profile's group timings apply, the (selection's) default planner otherwise.
  using planner =
      typename first_matching<is_planner_policy,
                              by_profile_planner<basic_residency_planner<resident_selector>>,
                              Policies...>::type;
  using pin = typename first_matching<is_pin_policy, basic_pin_selector<pin_selector_choice>,
                                      Policies...>::type;
  using transport_type = typename first_matching<is_transport_policy, linear_transport, Policies...>::type;
  /// Whether the engine named the transport.
  static constexpr bool fixed_transport = (transport<Policies> || ... || false);
  /// Whether the engine named the residency planner.
  static constexpr bool fixed_planner = (residency_planner<Policies> || ... || false);
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo
