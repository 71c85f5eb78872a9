// SPDX-License-Identifier: Apache-2.0
// Reference models of residency_planner and pin_selector used with make_plan. Must compile.
#include "ddo/plan/planner.hpp"

struct my_planner {
  using planner_category = ddo::residency_planner_tag;
  [[nodiscard]] ddo::residency_result plan_residency(const ddo::plan_context& c) const {
    ddo::residency_result r;
    r.resident.assign(c.table.size(), 1);
    r.managed.assign(c.table.size(), 0);
    r.reason.assign(c.table.size(), "resident");
    return r;
  }
};

struct my_pin_selector {
  using pin_selector_category = ddo::pin_selector_tag;
  [[nodiscard]] ddo::pin_result select_pinned(const ddo::plan_context& c,
                                              const ddo::residency_result& r) const {
    ddo::pin_result p;
    p.where.assign(c.table.size(), ddo::placement::gpu_resident);
    p.reason = r.reason;
    return p;
  }
};

int main() {
  const ddo::weight_table table;
  const auto plan = ddo::make_plan(table, ddo::dynamic_offload_config{}, ddo::machine_capacity{},
                                   my_planner{}, my_pin_selector{});
  return static_cast<int>(plan.groups.size());
}
