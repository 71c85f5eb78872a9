// SPDX-License-Identifier: Apache-2.0
// Misuse: an engine's own residency planner and resident_selection<S> (which configures ddo's
// default planner). Must not compile.
#include "ddo/plan/selectors.hpp"
#include "ddo/runtime/offloader.hpp"

struct my_planner {
  using planner_category = ddo::residency_planner_tag;
  [[nodiscard]] ddo::residency_result plan_residency(const ddo::plan_context&) const { return {}; }
};

int main() {
  using bad = ddo::offloader<ddo::host_sim_transport, my_planner,
                             ddo::resident_selection<ddo::first_selector>>;
  return sizeof(bad::planner_type) > 0 ? 0 : 1;
}
