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
/// - a ready plan (`offloader(table, plan, options, transport)`),
/// - resolved settings (`offloader(table, settings, options[, transport])`): the one setup path
///   (runtime/setup.hpp) with this type's planner and pin selector,
/// - config source objects (`offloader(table, context, sources...)`): resolves settings from
///   them in the reference's precedence (config/resolve.hpp), then as above.

#include <optional>
#include <type_traits>
#include <utility>

#include "ddo/config/concepts.hpp"
#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/policy_set.hpp"
#include "ddo/runtime/setup.hpp"

namespace ddo {
inline namespace v0 {

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
  offloader(const weight_table& table, offload_setup setup, transport_type transport)
      : base_type(std::move(transport), table, std::move(setup.plan), std::move(setup.runtime)) {}

  /// @brief Plans @p settings' route for component `options.inputs.component` over @p transport
  /// with planner_type / pin_selector_type (setup_offload), then sets up.
  /// @throws config_error, out_of_memory (budgets), usage_error, cuda_error.
  offloader(const weight_table& table, const dynamic_offload_settings& settings,
            const setup_options& options, transport_type transport)
      : offloader(table,
                  setup_offload(table, settings, component_for(settings, options.inputs), options,
                                transport, planner_type{}, pin_selector_type{}),
                  transport) {
    settings_ = settings;
  }

  /// @brief As above over the transport the settings give (make_transport: execution_device).
  explicit offloader(const weight_table& table, const dynamic_offload_settings& settings,
                     const setup_options& options = {})
      : offloader(table, settings, options, make_transport<transport_type>(settings, options.host_sim)) {}

  /// @brief Resolves settings from the config source objects (consulted in the reference's
  /// precedence whatever the order given), then plans and sets up.
  template <class... Sources>
    requires(sizeof...(Sources) > 0 && (config_source<Sources> && ...))
  offloader(const weight_table& table, const resolve_context& context, const Sources&... sources)
      : offloader(table, resolve_from_sources(context, sources...)) {}

  /// @brief The settings the offloader planned with (null for the ready-plan constructors).
  [[nodiscard]] const dynamic_offload_settings* settings() const noexcept {
    return settings_ ? &*settings_ : nullptr;
  }

 private:
  std::optional<dynamic_offload_settings> settings_;
};

static_assert(std::is_same_v<offloader<>::transport_type, linear_transport>);

/// @brief setup_offload() and the composed offloader in one call: "make me an offloader".
/// @tparam Policies as for ddo::offloader; the transport type is that of @p transport.
template <class... Policies, class Transport>
[[nodiscard]] offloader<Policies...> make_offloader(const weight_table& table,
                                                    const dynamic_offload_settings& settings,
                                                    const resolved_component& component,
                                                    const setup_options& options,
                                                    Transport transport) {
  using result = offloader<Policies...>;
  static_assert(std::is_same_v<typename result::transport_type, Transport>,
                "ddo::make_offloader: the transport object's type differs from the offloader's "
                "transport policy");
  auto setup = setup_offload(table, settings, component, options, transport,
                             typename result::planner_type{}, typename result::pin_selector_type{});
  return result(table, std::move(setup), std::move(transport));
}

}  // namespace v0
}  // namespace ddo
