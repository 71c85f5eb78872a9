// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::offloader<Policies...>: the offload runtime composed at compile time from a
/// transport, the planning policies and the selections, in any order (runtime/policy_set.hpp
/// lists what is accepted). Missing roles take the defaults: linear_transport,
/// default_residency_planner and default_pin_selector, whose selections follow the config
/// (`resident_module_selection`, `pin_weight_selection`) unless the engine fixes them:
/// @code
/// using my_offloader = ddo::offloader<ddo::linear_transport,
///                                     ddo::resident_selection<ddo::spread_selector>,
///                                     ddo::pin_selection<ddo::first_selector>>;
/// @endcode
/// It is what enable_offload returns, and a basic_offloader (same acquire / lease / metrics
/// API) with three ways in:
/// - a ready plan (`offloader(table, plan, options, transport)`, or what setup_offload returned),
/// - resolved settings (`offloader(table, settings, options[, transport])`): the one setup path
///   with this type's planner and pin selector,
/// - config source objects (`offloader(table, context, sources...)`): resolves settings from
///   them in the reference's precedence, then as above.
/// The last two need `#include <ddo/setup/setup.hpp>` (it includes this header): the setup
/// path brings the resolver, the capacity profiles, the plan cache and the transports ddo can
/// make, and an engine that plans once in one translation unit should not pay for them in
/// every other (docs/design.md, "Layers"). Without it those constructors stop at a
/// static_assert that says so.

#include <concepts>
#include <optional>
#include <type_traits>
#include <utility>

#include "ddo/config/concepts.hpp"
#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/policy_set.hpp"

namespace ddo {
inline namespace v0 {

struct resolve_context;  // config/resolve_context.hpp

namespace detail {

/// The settings-to-offloader path, defined by setup/setup.hpp for dynamic_offload_settings:
/// `options_type` (setup_options), `run<Planner, PinSelector>(table, settings, options,
/// transport)` (an offload_setup) and `transport<T>(settings, options)` (make_transport).
/// A template so that the offloader's settings constructors name it only when instantiated.
template <class Settings>
struct setup_path;

/// setup_path<Settings>, checked: the first error a TU without the setup path sees says what to
/// include instead of naming an incomplete type.
template <class Settings>
struct checked_setup_path {
  static_assert(requires { typename setup_path<Settings>::options_type; },
                "ddo::offloader: planning from settings or config sources needs "
                "#include <ddo/setup/setup.hpp> (the setup path: resolver, capacity profiles, "
                "plan cache, transport construction). The ready-plan constructor needs only "
                "<ddo/runtime/offloader.hpp>");
  using type = setup_path<Settings>;
};

/// The setup options type of the settings constructors when the call gives `{}`: setup_options
/// for dynamic_offload_settings (checked: the setup path must be included), void otherwise, so
/// that a ready-plan call never instantiates the setup path.
template <class Settings>
struct default_setup_options {
  using type = void;
};
template <class Settings>
  requires std::same_as<Settings, dynamic_offload_settings>
struct default_setup_options<Settings> {
  using type = typename checked_setup_path<Settings>::type::options_type;
};

/// dynamic_offload_settings, named through a template parameter so that the config-sources
/// constructor reaches the setup path only when instantiated.
template <class>
struct settings_for {
  using type = dynamic_offload_settings;
};

/// What setup_offload returns, as far as the offloader reads it (offload_setup, setup/setup.hpp).
template <class Setup>
concept ready_setup = requires(Setup& s) {
  { std::move(s.plan) } -> std::convertible_to<offload_plan>;
  { std::move(s.runtime) } -> std::convertible_to<runtime_options>;
};

}  // namespace detail

/// @brief The offload runtime composed from policies. See the file comment.
/// @tparam Policies a transport, a residency planner or resident_selection<S>, a pin selector or
/// pin_selection<S>, or a bare weight selector (both selections); any order, each at most once.
template <class... Policies>
class offloader : public basic_offloader<typename detail::policy_set<Policies...>::transport_type> {
  using set = detail::policy_set<Policies...>;
  static_assert(set::valid);

 public:
  using planner_type = typename set::planner;
  using pin_selector_type = typename set::pin;
  using transport_type = typename set::transport_type;
  using base_type = basic_offloader<transport_type>;
  /// Whether the engine named the transport (a different `backend` setting is then refused).
  static constexpr bool fixed_transport = set::fixed_transport;

  /// @brief Runs a ready plan.
  offloader(const weight_table& table, offload_plan plan, runtime_options options,
            transport_type transport)
      : base_type(std::move(transport), table, std::move(plan), std::move(options)) {}

  /// @brief Runs what setup_offload decided (its plan and runtime options).
  template <detail::ready_setup Setup>
  offloader(const weight_table& table, Setup setup, transport_type transport)
      : base_type(std::move(transport), table, std::move(setup.plan), std::move(setup.runtime)) {}

  /// @brief Plans @p settings' route for component `options.inputs.component` over @p transport
  /// with planner_type / pin_selector_type (setup_offload), then sets up. Needs setup/setup.hpp.
  /// @tparam Settings dynamic_offload_settings; @tparam Options setup_options.
  /// @throws config_error, out_of_memory (budgets), usage_error, cuda_error.
  template <class Settings,
            class Options = typename detail::default_setup_options<Settings>::type>
    requires std::same_as<Settings, dynamic_offload_settings>
  offloader(const weight_table& table, const Settings& settings, const Options& options,
            transport_type transport)
      : offloader(table,
                  detail::checked_setup_path<Settings>::type::template run<
                      planner_type, pin_selector_type>(table, settings, options, transport),
                  transport) {
      settings_.emplace(
          settings);  // copy-constructed: an assignment would be inlined member by member
  }

  /// @brief As above over the transport the settings give (make_transport: execution_device),
  /// with default setup options. Needs setup/setup.hpp.
  template <class Settings>
    requires std::same_as<Settings, dynamic_offload_settings>
  explicit offloader(const weight_table& table, const Settings& settings)
      : offloader(table, settings,
                  typename detail::checked_setup_path<Settings>::type::options_type{}) {}

  /// @brief As above over the transport the settings give, with @p options. Needs setup/setup.hpp.
  template <class Settings,
            class Options = typename detail::default_setup_options<Settings>::type>
    requires std::same_as<Settings, dynamic_offload_settings>
  offloader(const weight_table& table, const Settings& settings, const Options& options)
      : offloader(table, settings, options,
                  detail::checked_setup_path<Settings>::type::template transport<transport_type>(
                      settings, options)) {}

  /// @brief Resolves settings from the config source objects (consulted in the reference's
  /// precedence whatever the order given), then plans and sets up. Needs setup/setup.hpp.
  template <class Context, class... Sources>
    requires(std::same_as<Context, resolve_context> && sizeof...(Sources) > 0 &&
             (config_source<Sources> && ...))
  offloader(const weight_table& table, const Context& context, const Sources&... sources)
      : offloader(table, detail::checked_setup_path<typename detail::settings_for<Context>::type>::type::resolve(
                             context, sources...)) {}

  /// @brief The settings the offloader planned with (null for the ready-plan constructors).
  [[nodiscard]] const dynamic_offload_settings* settings() const noexcept {
    return settings_ ? &*settings_ : nullptr;
  }

 private:
  std::optional<dynamic_offload_settings> settings_;
};

static_assert(std::is_same_v<detail::policy_set<>::transport_type, linear_transport>,
              "ddo::offloader<> streams over the linear transport");

}  // namespace v0
}  // namespace ddo
