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
/// API) that runs a ready plan: `offloader(table, plan, options, transport)`, or what
/// setup_offload decided (`offloader(table, offload_setup, transport)`). Planning from settings
/// is the setup path's (setup/setup.hpp: enable_offload, prepare_offload, ...), which this header
/// does not include: an engine that plans once in one translation unit does not pay for it in
/// every other (docs/design.md, "Layers").

#include <concepts>
#include <type_traits>
#include <utility>

#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/policy_set.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {

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
};

static_assert(std::is_same_v<detail::policy_set<>::transport_type, linear_transport>,
              "ddo::offloader<> streams over the linear transport");

}  // namespace v0
}  // namespace ddo
