// SPDX-License-Identifier: Apache-2.0
#include "ddo/plan/plan_context.hpp"

#include <doctest/doctest.h>

#include <random>
#include <string>

#include "ddo/config/resolve.hpp"
#include "ddo/plan/planner.hpp"
#include "plan/plan_test_support.hpp"

namespace {

// Resolution that reads nothing from this machine: the environment given, RAM "detected" as
// @p detected_gb.
ddo::dynamic_offload_settings resolve_with(double detected_gb,
                                           std::map<std::string, std::string> env = {}) {
  ddo::resolve_inputs inputs;
  inputs.environment = std::move(env);
  inputs.detected_ram_gb = detected_gb;
  inputs.running_on_wsl = false;
  inputs.paths.meminfo = inputs.paths.self_cgroup = inputs.paths.proc_version =
      inputs.paths.osrelease = "/nonexistent/ddo-test";
  inputs.overrides = {{ddo::field_id::pin_cpu_memory, true}, {ddo::field_id::execution_mode, ddo::exec_mode::linear_runtime}};
  return ddo::resolve_settings(inputs);
}

ddo::machine_capacity big_gpu() {
  ddo::machine_capacity m;
  m.free_vram_bytes = 80 * ddo::gib;
  m.total_vram_bytes = 96 * ddo::gib;
  return m;
}

}  // namespace

TEST_SUITE("plan") {
  TEST_CASE("the RAM an engine states wins over the detected RAM, not over an explicit one") {
    std::mt19937_64 rng(std::random_device{}());
    const double detected_gb = static_cast<double>(64 + rng() % 64);
    const std::uint64_t stated = (8 + rng() % 24) * ddo::gib + (rng() % 1024) * ddo::mib;
    const auto table = ddo_test::flux_table(4);
    INFO("detected " << detected_gb << " GiB, stated " << stated << " B");

    // Detected only: the plan sees the detected value (as before).
    const auto detected = resolve_with(detected_gb);
    REQUIRE(detected.provenance.of(ddo::field_id::available_system_ram_gb).source ==
            ddo::origin::detected);
    auto plan = ddo::make_plan(table, detected.config, big_gpu());
    CHECK(plan.budgets.available_ram_bytes == ddo::gib_to_bytes(detected_gb));

    // The engine states its machine's RAM: it replaces the detected one.
    auto machine = big_gpu();
    CHECK(ddo::state_available_ram(machine, stated, detected.config, detected.provenance));
    CHECK(machine.available_ram_stated);
    plan = ddo::make_plan(table, detected.config, machine);
    CHECK(plan.budgets.available_ram_bytes == stated);

    // DDO_AVAILABLE_SYSTEM_RAM_GB set explicitly outranks what the engine states.
    const double explicit_gb = static_cast<double>(2 + rng() % 6);
    const auto set =
        resolve_with(detected_gb, {{"DDO_AVAILABLE_SYSTEM_RAM_GB", std::to_string(explicit_gb)}});
    REQUIRE(set.provenance.of(ddo::field_id::available_system_ram_gb).source == ddo::origin::env);
    machine = big_gpu();
    CHECK_FALSE(ddo::state_available_ram(machine, stated, set.config, set.provenance));
    plan = ddo::make_plan(table, set.config, machine);
    CHECK(plan.budgets.available_ram_bytes == ddo::gib_to_bytes(explicit_gb));
    // The headroom comes off whichever value won.
    CHECK(plan.budgets.usable_ram_bytes ==
          ddo::gib_to_bytes(explicit_gb) -
              std::min(ddo::gib_to_bytes(explicit_gb),
                       ddo::gib_to_bytes(set.config.system_ram_headroom_gb)));
  }

  TEST_CASE("a machine RAM that is measured, not stated, keeps the config value first") {
    auto config = ddo_test::planning_config();
    config.available_system_ram_gb = 12.0;  // direct config construction: the supplied value
    auto machine = big_gpu();
    machine.available_ram_bytes = 200 * ddo::gib;
    const auto plan = ddo::make_plan(ddo_test::flux_table(2), config, machine);
    CHECK(plan.budgets.available_ram_bytes == 12 * ddo::gib);
  }
}
