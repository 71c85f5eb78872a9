// SPDX-License-Identifier: Apache-2.0
// The three offloader types docs/policies.md shows an engine writing. Must compile (the runtime
// test policies_test.cpp also runs them on host_sim).
#include <type_traits>

#include "ddo/setup/enable_offload.hpp"

// 1. Everything from the config (the run-time settings choose the selections), CUDA copies.
using config_driven = ddo::offloader<ddo::linear_transport>;
// 2. Spread residency, first pinning, fixed at compile time.
using spread_first = ddo::offloader<ddo::linear_transport, ddo::resident_selection<ddo::spread_selector>,
                                    ddo::pin_selection<ddo::first_selector>>;
// 3. The largest weights first for both budgets, on the simulated device (tests, CI).
using largest_sim = ddo::offloader<ddo::host_sim_transport, ddo::largest_selector>;

static_assert(std::is_same_v<config_driven::planner_type, ddo::default_offload_planner>);
static_assert(
    std::is_same_v<spread_first::planner_type,
                   ddo::by_profile_planner<ddo::basic_residency_planner<ddo::spread_selector>>>);
static_assert(std::is_same_v<spread_first::pin_selector_type, ddo::basic_pin_selector<ddo::first_selector>>);
static_assert(std::is_same_v<largest_sim::pin_selector_type, ddo::basic_pin_selector<ddo::largest_selector>>);
static_assert(std::is_same_v<largest_sim::transport_type, ddo::host_sim_transport>);

int main() {
  // What enable_offload returns for each.
  using e1 = decltype(ddo::enable_offload<ddo::resident_selection<ddo::spread_selector>,
                                          ddo::pin_selection<ddo::first_selector>>(
      std::declval<const ddo::weight_table&>(), std::nullopt, ddo::setup_options{},
      std::declval<ddo::linear_transport>()));
  static_assert(std::is_same_v<e1::offloader_type, spread_first>);
  return 0;
}
