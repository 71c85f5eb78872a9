// SPDX-License-Identifier: Apache-2.0
#include "ddo/plan/plan_format.hpp"

#include <doctest/doctest.h>
#include <toml++/toml.h>

#include "ddo/core/detail/json.hpp"
#include "ddo/plan/planner.hpp"
#include "plan/plan_test_support.hpp"

namespace {

ddo::offload_plan sample_plan(const ddo::weight_table& t) {
  auto c = ddo_test::planning_config();
  c.resident_module_patterns = {"auto"};
  c.resident_module_budget_gb = ddo::bytes_to_gib(2 * 384 * ddo::kib);
  c.pin_cpu_memory = true;
  c.pin_weight_budget_ratio = 0.5;
  ddo::machine_capacity m;
  m.free_vram_bytes = 10 * ddo::gib;
  m.total_vram_bytes = 16 * ddo::gib;
  m.available_ram_bytes = 32 * ddo::gib;
  return ddo::make_plan(t, c, m);
}

}  // namespace

TEST_SUITE("plan") {
  TEST_CASE("the summary names budgets, placements, the largest group and every group") {
    const auto t = ddo_test::flux_table(6);
    const auto plan = sample_plan(t);
    const std::string text = ddo::format_plan_summary(plan, t);
    INFO(text);
    CHECK(text.find("ddo offload plan: " + std::to_string(t.size()) + " weights") !=
          std::string::npos);
    CHECK(text.find("resident budget: 768.0 KiB [explicit, selection spread]") !=
          std::string::npos);
    CHECK(text.find("pin budget:") != std::string::npos);
    CHECK(text.find("[ratio, selection spread]") != std::string::npos);
    CHECK(text.find("free VRAM 10.00 GiB of 16.00 GiB") != std::string::npos);
    // context_embedder (1 MiB) makes <before> the largest streamed group.
    CHECK(text.find("largest streamed group: <before> (1.11 MiB)") != std::string::npos);
    for (const auto& g : plan.groups) CHECK(text.find("\n  " + g.name + " ") != std::string::npos);
    CHECK(text.find("resident_budget spread (block)") != std::string::npos);
    CHECK(ddo::format_plan(plan, t, ddo::plan_format::text) == text);
  }

  TEST_CASE("the JSON form parses and carries every decision") {
    const auto t = ddo_test::flux_table(3);
    const auto plan = sample_plan(t);
    const auto doc = ddo::detail::parse_json(ddo::format_plan_json(plan, t));
    REQUIRE(doc.find("weights") != nullptr);
    const auto& weights = doc.find("weights")->items();
    REQUIRE(weights.size() == t.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
      CHECK(weights[i].find("name")->text() == t[i].name);
      CHECK(weights[i].find("placement")->text() == ddo::to_string(plan.decisions[i].where));
      CHECK(weights[i].find("bytes")->as_u64() == t[i].bytes);
    }
    CHECK(doc.find("groups")->items().size() == plan.groups.size());
    CHECK(doc.find("budgets")->find("pin_budget_bytes")->as_u64() == plan.budgets.pin_budget_bytes);
    CHECK(doc.find("summary")->find("pinned_host_bytes")->as_u64() ==
          plan.total_bytes(ddo::placement::pinned_host));
  }

  TEST_CASE("the TOML form parses with toml++ and carries the same values") {
    const auto t = ddo_test::flux_table(3);
    const auto plan = sample_plan(t);
    const auto doc = toml::parse(ddo::format_plan_toml(plan, t));
    CHECK(doc["summary"]["weights"].value<std::int64_t>() == static_cast<std::int64_t>(t.size()));
    CHECK(doc["budgets"]["resident_budget_source"].value<std::string>() == "explicit");
    CHECK(doc["budgets"]["full_pin_zero_resident"].value<bool>() == false);
    const auto* weights = doc["weights"].as_array();
    REQUIRE(weights != nullptr);
    REQUIRE(weights->size() == t.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
      const auto& w = *(*weights)[i].as_table();
      CHECK(w["name"].value<std::string>() == t[i].name);
      CHECK(w["reason"].value<std::string>() == plan.decisions[i].reason);
      CHECK(w["shape"].as_array()->size() == t[i].shape.size());
    }
    CHECK(doc["groups"].as_array()->size() == plan.groups.size());
  }

  TEST_CASE("selections are enums that print their old names and read back from every form") {
    // The names plan files carried when the selections were strings: byte-identical, so a plan
    // written before the enum reads back to the same selection.
    const std::pair<ddo::plan_selection, std::string> names[] = {
        {ddo::plan_selection::none, ""},           {ddo::plan_selection::first, "first"},
        {ddo::plan_selection::spread, "spread"},   {ddo::plan_selection::largest, "largest"},
        {ddo::plan_selection::custom, "custom"},   {ddo::plan_selection::overlap, "overlap"}};
    const auto t = ddo_test::flux_table(1);
    for (const auto& entry : names) {
      const ddo::plan_selection which = entry.first;
      const std::string& name = entry.second;
      CAPTURE(name);
      auto plan = sample_plan(t);
      plan.budgets.resident_selection = which;
      plan.budgets.pin_selection = which;
      const std::string toml_text = ddo::format_plan_toml(plan, t);
      CHECK(toml_text.find("\nresident_selection = \"" + name + "\"\n") != std::string::npos);
      CHECK(toml_text.find("\npin_selection = \"" + name + "\"\n") != std::string::npos);
      const auto toml_doc = toml::parse(toml_text);
      const auto from_toml = toml_doc["budgets"]["resident_selection"].value<std::string>();
      REQUIRE(from_toml);
      CHECK(ddo::parse_enum<ddo::plan_selection>(*from_toml) == which);
      const auto json_doc = ddo::detail::parse_json(ddo::format_plan_json(plan, t));
      const std::string from_json = json_doc.find("budgets")->find("pin_selection")->text();
      CHECK(from_json == name);
      CHECK(ddo::parse_enum<ddo::plan_selection>(from_json) == which);
      const std::string text = ddo::format_plan_summary(plan, t);
      CHECK(text.find("selection " + name + "] ") != std::string::npos);
    }
    // A plan file written before the enum (selections as text) reads back to the enums.
    const auto old = toml::parse(
        "[budgets]\nresident_selection = \"overlap\"\npin_selection = \"spread\"\n");
    CHECK(ddo::parse_enum<ddo::plan_selection>(*old["budgets"]["resident_selection"].value<std::string>()) ==
          ddo::plan_selection::overlap);
    CHECK(ddo::parse_enum<ddo::plan_selection>(*old["budgets"]["pin_selection"].value<std::string>()) ==
          ddo::plan_selection::spread);
    // The planner's own answers: the config's selection, a known name, an engine's own name.
    CHECK(ddo::detail::selection_named("", ddo::selection::largest) == ddo::plan_selection::largest);
    CHECK(ddo::detail::selection_named("overlap", ddo::selection::first) ==
          ddo::plan_selection::overlap);
    CHECK(ddo::detail::selection_named("fixed", ddo::selection::first) ==
          ddo::plan_selection::custom);
    CHECK(ddo::plan_selection_of(ddo::selection::spread) == ddo::plan_selection::spread);
  }

  TEST_CASE("names with quotes and control characters stay valid in TOML and JSON") {
    ddo::weight_table t;
    ddo::weight_info w;
    w.name = "odd \"name\"\\\t\x01.weight";
    w.shape = {64, 64};
    w.source = ddo::host_source{};
    t.add(w);
    const auto plan = ddo::make_plan(t, ddo_test::planning_config(), ddo::machine_capacity{});
    const auto toml_doc = toml::parse(ddo::format_plan_toml(plan, t));
    CHECK((*toml_doc["weights"].as_array())[0].as_table()->get("name")->value<std::string>() ==
          w.name);
    const auto json_doc = ddo::detail::parse_json(ddo::format_plan_json(plan, t));
    CHECK(json_doc.find("weights")->items()[0].find("name")->text() == w.name);
  }

  TEST_CASE("format_bytes picks a readable unit") {
    CHECK(ddo::format_bytes(17) == "17 B");
    CHECK(ddo::format_bytes(12 * ddo::kib) == "12.0 KiB");
    CHECK(ddo::format_bytes(216 * ddo::mib) == "216.00 MiB");
    CHECK(ddo::format_bytes(3 * ddo::gib / 2) == "1.50 GiB");
  }
}
