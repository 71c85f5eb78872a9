// SPDX-License-Identifier: Apache-2.0
// ddo-plan prints the plan ddo-run runs: for several presets and device sizes, the plan made by
// ddo-plan's code path (its --tokens reserve, --vram-gb host_sim device, --ram-gb) equals the
// plan the offloader ddo-run builds holds after setup, and the plan enable_offload runs with the
// same inputs — all three through ddo/setup/setup.hpp.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ddo/plan/plan_format.hpp"
#include "ddo/setup/enable_offload.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/setup/setup.hpp"
#include "runner/run_setup.hpp"

namespace {

/// A small DiT-like transformer: an embedding, blocks of attention and MLP GEMMs, a head.
struct dit_model {
  ddo::weight_table table;
  std::vector<std::vector<std::byte>> bytes;
  explicit dit_model(std::uint32_t seed) {
    std::mt19937 rng(seed);
    bytes.reserve(64);
    auto add = [&](const std::string& name, ddo::module_kind kind, std::int64_t out, std::int64_t in) {
      auto& b = bytes.emplace_back(static_cast<std::size_t>(out * in * 2));
      for (auto& x : b) x = static_cast<std::byte>(rng() & 0xff);
      ddo::weight_info w;
      w.name = name + ".weight";
      w.module_name = name;
      w.kind = kind;
      w.type = ddo::dtype::bf16;
      w.shape = {out, in};
      w.source = ddo::host_source{b.data()};
      table.add(w);
    };
    add("x_embedder", ddo::module_kind::linear, 256, 64);
    for (int blk = 0; blk < 6; ++blk) {
      const std::string p = "transformer_blocks." + std::to_string(blk);
      for (const char* m : {".attn.to_q", ".attn.to_k", ".attn.to_v", ".attn.to_out.0"})
        add(p + m, ddo::module_kind::linear, 256, 256);
      add(p + ".ff.net.0.proj", ddo::module_kind::linear, 1024, 256);
      add(p + ".ff.net.2", ddo::module_kind::linear, 256, 1024);
    }
    add("proj_out", ddo::module_kind::linear, 64, 256);
  }
};

std::string text_of(const ddo::offload_plan& plan, const ddo::weight_table& table) {
  return ddo::format_plan(plan, table, ddo::plan_format::text);
}

}  // namespace

TEST_SUITE("runner") {
  TEST_CASE("ddo-plan's plan equals the plan ddo-run runs for several presets and budgets") {
    const dit_model model(std::random_device{}());
    const auto shape = ddo::runner::compute_shape_of(model.table);
    CHECK(shape.width == 1024);
    const std::uint64_t model_bytes = model.table.total_bytes();
    int compared = 0;
    for (const char* preset : {"auto", "low_ram_safe", "one_shot_fast", "diffusers_offload_compat",
                               "diffusers_leaf_offload_compat", "off"})
      for (double device_fraction : {0.35, 0.7, 1.5})
        for (std::uint64_t ram_gib : {1, 64}) {
          CAPTURE(preset);
          CAPTURE(device_fraction);
          CAPTURE(ram_gib);
          ddo::resolve_inputs inputs;
          inputs.use_environment = false;
          inputs.preset = preset;
          inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{4096}},
                              {ddo::field_id::system_ram_headroom_gb, 0.0}};
          inputs.component = ddo::runner::run_component;
          inputs.model_bytes = model_bytes;
          const auto settings = ddo::resolve_settings(inputs);
          const std::int64_t tokens = 8 + 56 * (compared % 3);
          const std::uint64_t reserve = ddo::runner::activation_reserve_bytes(tokens, shape);
          const std::uint64_t device =
              static_cast<std::uint64_t>(static_cast<double>(model_bytes) * device_fraction) +
              ddo::runner::default_sim_device_bytes(model.table, settings, reserve) - model_bytes / 2;

          // ddo-plan: --tokens T --vram-gb X --ram-gb Y.
          auto plan_options = ddo::runner::run_setup_options(inputs, reserve, ram_gib * ddo::gib);
          plan_options.host_sim.device_capacity_bytes = device;
          const auto component = ddo::component_for(settings, plan_options.inputs);
          auto plan_transport = ddo::make_transport<ddo::host_sim_transport>(settings, plan_options.host_sim);
          if (std::string(preset) == "off" &&
              model_bytes > device - reserve - ddo::runtime_device_reserve_bytes) {
            // Route none keeps every weight: refused at planning time, as ddo-run would be.
            CHECK_THROWS_AS((void)ddo::setup_offload(model.table, settings, component, plan_options,
                                                     plan_transport),
                            ddo::out_of_memory);
            continue;
          }
          const auto printed =
              ddo::setup_offload(model.table, settings, component, plan_options, plan_transport);

          // ddo-run: --tokens T --vram-gb X --ram-gb Y: the offloader it runs.
          auto run_options = ddo::runner::run_setup_options(inputs, reserve, ram_gib * ddo::gib);
          run_options.host_sim.device_capacity_bytes = device;
          run_options.runtime.metrics = true;  // ddo-run's runtime extras do not change the plan
          auto run_transport = ddo::make_transport<ddo::host_sim_transport>(settings, run_options.host_sim);
          auto run_setup = ddo::setup_offload(model.table, settings,
                                              ddo::component_for(settings, run_options.inputs),
                                              run_options, run_transport);
          CHECK(run_setup.component.route == printed.component.route);
          ddo::offloader<ddo::host_sim_transport> ran(model.table, std::move(run_setup), run_transport);
          CHECK(text_of(ran.plan(), model.table) == text_of(printed.plan, model.table));

          // enable_offload with the same inputs runs the same plan too.
          auto enable_options = run_options;
          enable_options.host_sim.device_capacity_bytes = device;
          ddo::host_sim_transport enable_transport(enable_options.host_sim);
          auto enabled = ddo::enable_offload(model.table, std::nullopt, enable_options, enable_transport);
          CHECK(text_of(enabled->plan(), model.table) == text_of(printed.plan, model.table));
          CHECK(enabled.component.route == printed.component.route);
          ++compared;
        }
    CHECK(compared >= 32);
  }

  TEST_CASE("ddo-plan and ddo-run state the same machine: ring, reserves, RAM") {
    const dit_model model(std::random_device{}());
    ddo::resolve_inputs inputs;
    inputs.use_environment = false;
    inputs.component = ddo::runner::run_component;
    const auto settings = ddo::resolve_settings(inputs);
    const auto shape = ddo::runner::compute_shape_of(model.table);
    const std::uint64_t reserve = ddo::runner::activation_reserve_bytes(8, shape);
    CHECK(reserve == 2 * 8 * 1024 * 2);
    auto options = ddo::runner::run_setup_options(inputs, reserve, 3 * ddo::gib);
    options.host_sim.device_capacity_bytes =
        ddo::runner::default_sim_device_bytes(model.table, settings, reserve);
    auto transport = ddo::make_transport<ddo::host_sim_transport>(settings, options.host_sim);
    const auto groups = ddo::infer_execution_groups(model.table, settings.config.resident_module_patterns);
    const auto kept_by_rules = ddo::rule_kept_weights(model.table, groups, settings.config);
    const auto m =
        ddo::machine_for(transport, model.table, groups, settings.config,
                         ddo::machine_inputs_for(settings, options, options.inputs.paths,
                                                 model.table,
                                                 ddo::runtime_options_from(settings.config)),
                         ddo::runtime_options_from(settings.config), true, kept_by_rules);
    CHECK(m.engine_reserve_bytes == reserve);
    CHECK(m.runtime_reserve_bytes == ddo::runtime_device_reserve_bytes);
    CHECK(m.ring_bytes == ddo::ring_bytes_for(m.slot_bytes, m.slots));
    CHECK(m.capacity.available_ram_bytes == 3 * ddo::gib);
    CHECK(m.ram.source == ddo::ram_source::engine);
    // The default simulated device leaves the plan what the rules keep resident and half of the
    // rest: exactly that, once the ring and both reserves are taken off.
    std::uint64_t kept = 0;
    for (std::size_t w = 0; w < model.table.size(); ++w)
      if (kept_by_rules[w]) kept += model.table[w].bytes;
    // The rules' bytes as the plan reports them (no budget on an unbounded machine).
    auto rules_only = settings.config;
    rules_only.auto_budget_policy = ddo::budget_policy::off;
    CHECK(ddo::make_plan(model.table, rules_only, ddo::machine_capacity{})
              .budgets.rule_resident_bytes == kept);
    CHECK(kept <= model.table.total_bytes());
    CHECK(m.capacity.free_vram_bytes == kept + (model.table.total_bytes() - kept) / 2);
  }
}
