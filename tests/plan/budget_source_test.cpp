// SPDX-License-Identifier: Apache-2.0
#include "ddo/plan/budget_source.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string_view>

#include "ddo/plan/plan_format.hpp"
#include "ddo/plan/planner.hpp"
#include "plan/plan_test_support.hpp"

TEST_SUITE("plan") {
  TEST_CASE("budget sources have unique canonical names that parse back") {
    std::set<std::string_view> seen;
    for (std::size_t i = 0; i < 9; ++i) {
      const auto source = static_cast<ddo::resident_budget_source>(i);
      CHECK(seen.insert(ddo::to_string(source)).second);
      CHECK(ddo::parse_resident_budget_source(ddo::to_string(source)) == source);
    }
    seen.clear();
    for (std::size_t i = 0; i < 8; ++i) {
      const auto source = static_cast<ddo::pin_budget_source>(i);
      CHECK(seen.insert(ddo::to_string(source)).second);
      CHECK(ddo::parse_pin_budget_source(ddo::to_string(source)) == source);
    }
    CHECK(ddo::to_string(ddo::resident_budget_source::explicit_budget) == "explicit");
    CHECK(ddo::to_string(ddo::pin_budget_source::automatic) == "auto");
    CHECK_FALSE(ddo::parse_pin_budget_source("Auto").has_value());
  }

  TEST_CASE("the plan summary and JSON print the budget sources and selections by name") {
    const auto t = ddo_test::flux_table(3);
    auto c = ddo_test::planning_config();
    c.resident_module_budget_gb = 0.001;
    c.resident_module_selection = ddo::selection::largest;
    c.pin_cpu_memory = true;
    c.pin_weight_selection = ddo::selection::first;
    ddo::machine_capacity m;
    m.free_vram_bytes = m.total_vram_bytes = 80 * ddo::gib;
    m.available_ram_bytes = 64 * ddo::gib;
    const auto plan = ddo::make_plan(t, c, m);
    CHECK(plan.budgets.resident_source == ddo::resident_budget_source::explicit_budget);
    CHECK(plan.budgets.resident_selection == ddo::plan_selection::largest);
    CHECK(plan.budgets.pin_source == ddo::pin_budget_source::automatic);
    CHECK(plan.budgets.pin_selection == ddo::plan_selection::first);
    const std::string summary = ddo::format_plan_summary(plan, t);
    CHECK(summary.find("[explicit, selection largest]") != std::string::npos);
    CHECK(summary.find("[auto, selection first]") != std::string::npos);
    const std::string json = ddo::format_plan(plan, t, ddo::plan_format::json);
    CHECK(json.find("\"pin_budget_source\": \"auto\"") != std::string::npos);
    CHECK(json.find("\"resident_selection\": \"largest\"") != std::string::npos);
  }
}
