// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::offloader<Policies...>: compile-time composition of a residency planner, a pin
/// selector, a transport and config sources, in any order, each recognised by its concept
/// (residency_planner, pin_selector: plan/concepts.hpp; transport: transport/concepts.hpp;
/// config_source: config/concepts.hpp). Missing policies take the defaults
/// (default_residency_planner, default_pin_selector, linear_transport).
///
/// It is a basic_offloader (same acquire / lease / metrics API) with three ways in:
/// - a ready plan (`offloader(table, plan, options, transport)`),
/// - resolved settings (`offloader(table, settings, inputs, transport)`): plans with the
///   Planner and PinSelector against the machine the transport reports,
/// - config source objects of the ConfigSources types (`offloader(table, context, sources...)`):
///   resolves settings from them first (config/resolve.hpp), then as above.

#include <cstddef>
#include <cstdio>
#include <string>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddo/config/concepts.hpp"
#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/resolve_context.hpp"  // the resolver itself: ddo/config/resolve.hpp
#include "ddo/memory/system_probe.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/plan/concepts.hpp"
#include "ddo/plan/pin_selector.hpp"
#include "ddo/plan/planner.hpp"
#include "ddo/profile/profile_lookup.hpp"
#include "ddo/plan/residency_planner.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/linear.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {

template <class P>
inline constexpr int policy_kinds = int(residency_planner<P>) + int(pin_selector<P>) +
                                    int(transport<P>) + int(config_source<P>);

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

template <class... Ps>
struct source_list {
  using type = std::tuple<>;
};
template <class P, class... Ps>
struct source_list<P, Ps...> {
  using rest = typename source_list<Ps...>::type;
  using type = std::conditional_t<config_source<P>,
                                  decltype(std::tuple_cat(std::declval<std::tuple<P>>(), std::declval<rest>())),
                                  rest>;
};

/// Sorts a policy pack by concept.
template <class... Policies>
struct policy_set {
  static_assert(((policy_kinds<Policies> == 1) && ...),
                "ddo::offloader: every template argument must model exactly one of "
                "ddo::residency_planner, ddo::pin_selector (ddo/plan/concepts.hpp), ddo::transport "
                "(ddo/transport/concepts.hpp) or ddo::config_source (ddo/config/concepts.hpp)");
  static_assert((int(residency_planner<Policies>) + ... + 0) <= 1,
                "ddo::offloader: more than one residency planner given");
  static_assert((int(pin_selector<Policies>) + ... + 0) <= 1,
                "ddo::offloader: more than one pin selector given");
  static_assert((int(transport<Policies>) + ... + 0) <= 1,
                "ddo::offloader: more than one transport given");
  using planner = typename first_matching<is_planner_policy, default_residency_planner, Policies...>::type;
  using pin = typename first_matching<is_pin_policy, default_pin_selector, Policies...>::type;
  using transport_type = typename first_matching<is_transport_policy, linear_transport, Policies...>::type;
  using sources = typename source_list<Policies...>::type;
};

}  // namespace detail

/// @brief What an offloader needs besides settings when it plans for itself.
struct offloader_inputs {
  /// The engine's execution groups; empty: inferred from `resident_module_patterns`.
  std::optional<std::vector<execution_group>> groups;
  /// Base runtime options; the config's runtime fields (strategy, pin workers, fallback, cache
  /// namespace, file backend) are applied on top.
  runtime_options runtime;
  /// The application's pinned-weight cache, used when `cache_pinned_weights` is on.
  pinned_weight_cache* pinned_cache = nullptr;
  /// Device bytes to leave free for the engine (activations, workspaces) when planning.
  std::uint64_t reserve_device_bytes = 0;
};

/// @brief The machine as a plan sees it: free/total VRAM from the transport minus the ring and
/// the engine's reserve, available RAM (memory/system_probe.hpp), WSL.
template <class Transport>
[[nodiscard]] machine_capacity machine_capacity_for(Transport& t, const weight_table& table,
                                                    const std::vector<execution_group>& groups,
                                                    const dynamic_offload_settings& settings,
                                                    const offloader_inputs& inputs) {
  machine_capacity m;
  const auto info = t.device_memory();
  std::uint64_t largest = 0;
  for (const auto& g : groups) {
    std::uint64_t b = 0;
    for (std::size_t w : g.weights) b += round_up(table[w].bytes, inputs.runtime.alignment);
    largest = std::max(largest, b);
  }
  const std::uint64_t reserve =
      inputs.runtime.slot_count * largest + inputs.reserve_device_bytes + 64 * mib;
  // 0 means "unknown" to the planner (checks off): keep at least one byte.
  m.free_vram_bytes = info.free_bytes > reserve ? info.free_bytes - reserve : 1;
  m.total_vram_bytes = info.total_bytes;
  m.available_ram_bytes = available_ram_bytes().value_or(0);
  m.running_on_wsl = settings.running_on_wsl;
  m.disable_pin_on_wsl = settings.disable_pin_on_wsl;
  const std::string note = apply_capacity_profile(m, settings.config, settings.profile_dir);
  if (settings.config.verbose && !note.empty()) std::fprintf(stderr, "ddo: %s\n", note.c_str());
  return m;
}

/// @brief Runtime options from resolved settings on top of @p base.
[[nodiscard]] inline runtime_options runtime_options_for(const dynamic_offload_settings& settings,
                                                         runtime_options base,
                                                         pinned_weight_cache* cache) {
  const auto& c = settings.config;
  base.strategy = c.linear_runtime_strategy;
  base.pin_workers = c.pin_cpu_workers > 0 ? c.pin_cpu_workers : 1;
  base.allow_pin_fallback = c.allow_pin_memory_fallback;
  base.cache_namespace = c.pinned_weight_cache_namespace;
  base.file_backend = c.load_safetensors_backend;
  base.pinned_cache = c.cache_pinned_weights ? cache : nullptr;
  return base;
}

/// @brief The offload runtime composed from policies. See the file comment.
/// @tparam Policies residency planner, pin selector, transport and config sources, any order.
template <class... Policies>
class offloader : public basic_offloader<typename detail::policy_set<Policies...>::transport_type> {
  using set = detail::policy_set<Policies...>;

 public:
  using planner_type = typename set::planner;
  using pin_selector_type = typename set::pin;
  using transport_type = typename set::transport_type;
  using config_sources = typename set::sources;
  using base_type = basic_offloader<transport_type>;

  /// @brief Runs a ready plan.
  offloader(const weight_table& table, offload_plan plan, runtime_options options = {},
            transport_type transport = transport_type{})
      : base_type(std::move(transport), table, std::move(plan), std::move(options)) {}

  /// @brief Plans with planner_type / pin_selector_type under @p settings, then sets up.
  /// @throws config_error, out_of_memory (budgets), usage_error, cuda_error.
  offloader(const weight_table& table, const dynamic_offload_settings& settings,
            offloader_inputs inputs = {}, transport_type transport = transport_type{},
            planner_type planner = {}, pin_selector_type pins = {})
      : base_type(transport, table, plan_for(table, settings, inputs, transport, planner, pins),
                  runtime_options_for(settings, inputs.runtime, inputs.pinned_cache)),
        settings_(settings) {}

  /// @brief Resolves settings from the config source objects (one per ConfigSources type, in
  /// the order given), then plans and sets up.
  template <class... Sources>
    requires(sizeof...(Sources) > 0 && (config_source<Sources> && ...))
  offloader(const weight_table& table, const resolve_context& context, const Sources&... sources)
      : offloader(table, resolve_from_sources(context, sources...)) {}

  /// @brief The settings the offloader planned with (null for the ready-plan constructor).
  [[nodiscard]] const dynamic_offload_settings* settings() const noexcept {
    return settings_ ? &*settings_ : nullptr;
  }

 private:
  static offload_plan plan_for(const weight_table& table, const dynamic_offload_settings& settings,
                               const offloader_inputs& inputs, transport_type& transport,
                               planner_type& planner, pin_selector_type& pins) {
    auto groups = inputs.groups ? *inputs.groups
                                : infer_execution_groups(table, settings.config.resident_module_patterns);
    const auto machine = machine_capacity_for(transport, table, groups, settings, inputs);
    return make_plan(table, std::move(groups), settings.config, machine, planner, pins);
  }

  std::optional<dynamic_offload_settings> settings_;
};

static_assert(std::is_same_v<offloader<>::transport_type, linear_transport>);

}  // namespace v0
}  // namespace ddo
