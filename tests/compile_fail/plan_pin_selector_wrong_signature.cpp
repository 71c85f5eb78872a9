// SPDX-License-Identifier: Apache-2.0
// Near miss: tagged, but select_pinned is not const and returns the wrong type. Must not
// compile (make_plan's static_assert names ddo::pin_selector and plan/concepts.hpp).
#include "ddo/plan/planner.hpp"

struct wrong_pin_selector {
  using pin_selector_category = ddo::pin_selector_tag;
  std::vector<ddo::placement> select_pinned(const ddo::plan_context&, const ddo::residency_result&) {
    return {};
  }
};

int main() {
  const ddo::weight_table table;
  const auto plan = ddo::make_plan(table, ddo::dynamic_offload_config{}, ddo::machine_capacity{},
                                   ddo::default_residency_planner{}, wrong_pin_selector{});
  return static_cast<int>(plan.groups.size());
}
