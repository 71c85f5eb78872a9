// SPDX-License-Identifier: Apache-2.0
#include "ddo/plan/pin_selector.hpp"

#include <doctest/doctest.h>

#include "ddo/plan/planner.hpp"
#include "model/model_test_support.hpp"
#include "plan/plan_test_support.hpp"

namespace {

ddo::machine_capacity machine_with_ram(std::uint64_t ram) {
  ddo::machine_capacity m;
  m.free_vram_bytes = 80 * ddo::gib;
  m.total_vram_bytes = 96 * ddo::gib;
  m.available_ram_bytes = ram;
  return m;
}

std::uint64_t streamed(const ddo::offload_plan& p) {
  return p.total_bytes(ddo::placement::pinned_host) + p.total_bytes(ddo::placement::pageable_host) +
         p.total_bytes(ddo::placement::file);
}

}  // namespace

TEST_SUITE("plan") {
  TEST_CASE("pinning off leaves every streamed weight pageable with the reason") {
    const auto t = ddo_test::flux_table(4);
    auto c = ddo_test::planning_config();
    const auto plan = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib));
    CHECK(plan.budgets.pin_source == ddo::pin_budget_source::disabled);
    CHECK(plan.total_bytes(ddo::placement::pinned_host) == 0);
    CHECK(plan.total_bytes(ddo::placement::pageable_host) > 0);
    CHECK(plan.decisions[*t.find("transformer_blocks.0.attn.to_k.weight")].reason ==
          "not pinned: pin_cpu_memory off");
  }

  TEST_CASE("the WSL rule disables pinning unless DDO_DISABLE_PIN_ON_WSL is off") {
    const auto t = ddo_test::flux_table(4);
    auto c = ddo_test::planning_config();
    c.pin_cpu_memory = true;
    auto m = machine_with_ram(64 * ddo::gib);
    m.running_on_wsl = true;
    auto plan = ddo::make_plan(t, c, m);
    CHECK(plan.budgets.pin_source == ddo::pin_budget_source::wsl);
    CHECK(plan.total_bytes(ddo::placement::pinned_host) == 0);
    m.disable_pin_on_wsl = false;
    plan = ddo::make_plan(t, c, m);
    CHECK(plan.budgets.pin_source == ddo::pin_budget_source::automatic);
    CHECK(plan.total_bytes(ddo::placement::pinned_host) == streamed(plan));
  }

  TEST_CASE("auto pinning is limited by usable RAM and by max_pin_weight_budget_gb") {
    const auto t = ddo_test::flux_table(8);
    auto c = ddo_test::planning_config();
    c.pin_cpu_memory = true;
    auto plan = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib));
    const std::uint64_t all = streamed(plan);
    CHECK(plan.total_bytes(ddo::placement::pinned_host) == all);
    CHECK(plan.budgets.pin_budget_bytes == all);

    // available_system_ram_gb overrides the machine; the headroom comes off it.
    c.available_system_ram_gb = ddo::bytes_to_gib(all / 2 + 3 * ddo::mib);
    c.system_ram_headroom_gb = ddo::bytes_to_gib(3 * ddo::mib);
    plan = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib));
    CHECK(plan.budgets.usable_ram_bytes ==
          ddo::gib_to_bytes(c.available_system_ram_gb) - 3 * ddo::mib);
    CHECK(plan.budgets.pin_budget_bytes == plan.budgets.usable_ram_bytes);
    CHECK(plan.total_bytes(ddo::placement::pinned_host) <= plan.budgets.pin_budget_bytes);
    CHECK(plan.total_bytes(ddo::placement::pinned_host) > 0);
    CHECK(plan.total_bytes(ddo::placement::pageable_host) > 0);

    c.available_system_ram_gb = 0;
    c.system_ram_headroom_gb = 0;
    c.max_pin_weight_budget_gb = ddo::bytes_to_gib(all / 4);
    plan = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib));
    CHECK(plan.budgets.pin_budget_bytes == ddo::gib_to_bytes(c.max_pin_weight_budget_gb));
    CHECK(plan.total_bytes(ddo::placement::pinned_host) <= all / 4);
  }

  TEST_CASE("the pin ratio is a fraction of streamed bytes, clamped to 1") {
    const auto t = ddo_test::flux_table(8);
    auto c = ddo_test::planning_config();
    c.pin_cpu_memory = true;
    c.pin_weight_budget_ratio = 0.5;
    auto plan = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib));
    const std::uint64_t all = streamed(plan);
    CHECK(plan.budgets.pin_source == ddo::pin_budget_source::ratio);
    CHECK(plan.budgets.pin_budget_bytes == all / 2);
    CHECK(plan.total_bytes(ddo::placement::pinned_host) <= all / 2);
    c.pin_weight_budget_ratio = 7.0;
    plan = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib));
    CHECK(plan.budgets.pin_budget_bytes == all);
  }

  TEST_CASE("an explicit pin budget above usable RAM is clamped with fallback, refused without") {
    const auto t = ddo_test::flux_table(4);
    auto c = ddo_test::planning_config();
    c.pin_cpu_memory = true;
    c.pin_weight_budget_gb = 2.0;
    auto plan = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib));
    CHECK(plan.budgets.pin_source == ddo::pin_budget_source::explicit_budget);
    CHECK(plan.budgets.pin_budget_bytes == 2 * ddo::gib);
    plan = ddo::make_plan(t, c, machine_with_ram(ddo::gib));
    CHECK(plan.budgets.pin_budget_bytes == ddo::gib);
    CHECK(plan.budgets.pin_budget_detail.find("clamped") != std::string::npos);
    c.allow_pin_memory_fallback = false;
    try {
      (void)ddo::make_plan(t, c, machine_with_ram(ddo::gib));
      FAIL("no error");
    } catch (const ddo::out_of_memory& e) {
      CHECK(e.tier() == ddo::memory_tier::pinned_host);
      CHECK(e.tier_name() == "pinned_host");
      CHECK(e.requested_bytes() == 2 * ddo::gib);
      CHECK(e.available_bytes() == ddo::gib);
      CHECK(std::string(e.what()).find("pin_weight_budget_gb") != std::string::npos);
    }
  }

  TEST_CASE("pin selection picks whole modules evenly spaced, first, or largest") {
    const auto t = ddo_test::flux_table(8);
    auto c = ddo_test::planning_config();
    c.pin_cpu_memory = true;
    c.always_resident_modules_pattern = {"embed", "norm_out", "proj_out"};
    // Streamed modules: 6 per block (32, 32, 32, 32, 128, 128 KiB); budget: 2 ff modules.
    c.pin_weight_budget_gb = ddo::bytes_to_gib(256 * ddo::kib);
    c.pin_weight_selection = ddo::selection::largest;
    auto plan = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib));
    CHECK(plan.decisions[*t.find("transformer_blocks.0.ff.net.0.proj.weight")].where ==
          ddo::placement::pinned_host);
    CHECK(plan.decisions[*t.find("transformer_blocks.0.ff.net.2.weight")].where ==
          ddo::placement::pinned_host);
    CHECK(plan.total_bytes(ddo::placement::pinned_host) == 256 * ddo::kib);
    c.pin_weight_selection = ddo::selection::first;
    plan = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib));
    for (const char* m : {"to_q", "to_k", "to_v", "to_out.0"})
      CHECK(plan.decisions[*t.find(std::string("transformer_blocks.0.attn.") + m + ".weight")]
                .where == ddo::placement::pinned_host);
    c.pin_weight_selection = ddo::selection::spread;
    plan = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib));
    CHECK(plan.decisions[*t.find("transformer_blocks.0.attn.to_q.weight")].where ==
          ddo::placement::pinned_host);
    CHECK(plan.decisions[*t.find("transformer_blocks.7.ff.net.2.weight")].where ==
          ddo::placement::pinned_host);
    CHECK(plan.decisions[*t.find("transformer_blocks.7.ff.net.2.weight")].reason ==
          "pin_budget spread");
  }

  TEST_CASE("the file route streams unpinned file weights from their file") {
    ddo_test::temp_dir dir;
    ddo::synthetic_model_options o;
    o.output = dir.file("m.safetensors");
    o.blocks = 3;
    o.hidden = 64;
    (void)ddo::write_synthetic_model(o);
    const auto t = ddo::load_safetensors(o.output);
    auto c = ddo_test::planning_config();
    ddo::default_pin_selector file_route;
    file_route.file_route = true;
    const auto plan = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib),
                                     ddo::default_residency_planner{}, file_route);
    CHECK(plan.total_bytes(ddo::placement::file) > 0);
    CHECK(plan.total_bytes(ddo::placement::pageable_host) == 0);
    const auto plain = ddo::make_plan(t, c, machine_with_ram(64 * ddo::gib));
    CHECK(plain.total_bytes(ddo::placement::file) == 0);
    CHECK(plain.total_bytes(ddo::placement::pageable_host) ==
          plan.total_bytes(ddo::placement::file));
  }
}
