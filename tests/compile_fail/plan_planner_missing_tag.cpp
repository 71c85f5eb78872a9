// SPDX-License-Identifier: Apache-2.0
// Near miss: plan_residency is right, but the planner never opts in with the tag. Must not
// compile (make_plan's static_assert names ddo::residency_planner and plan/concepts.hpp).
#include "ddo/plan/planner.hpp"

struct untagged_planner {
  [[nodiscard]] ddo::residency_result plan_residency(const ddo::plan_context&) const { return {}; }
};

int main() {
  const ddo::weight_table table;
  const auto plan = ddo::make_plan(table, ddo::dynamic_offload_config{}, ddo::machine_capacity{},
                                   untagged_planner{});
  return static_cast<int>(plan.groups.size());
}
