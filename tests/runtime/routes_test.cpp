// SPDX-License-Identifier: Apache-2.0
// Routes (none, diffusers group offload), the policy-composed offloader and enable_offload /
// enable_pipeline_offload, all on host_sim.
#include <doctest/doctest.h>

#include <random>

#include "ddo/setup/enable_offload.hpp"
#include "ddo/setup/pipeline_offload.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/runtime/routes.hpp"
#include "ddo/transport/host_sim.hpp"
#include "lease_check.hpp"
#include "random_bytes.hpp"

using ddo::host_sim_transport;

namespace {

/// A transformer-like component: blocks of four linear modules plus an embedding.
struct block_model {
  ddo::weight_table table;
  std::vector<std::vector<std::byte>> bytes;
  explicit block_model(std::size_t blocks, std::uint32_t seed, const std::string& prefix = "transformer_blocks") {
    std::mt19937 rng(seed);
    bytes.reserve(blocks * 4 + 1);
    auto add = [&](const std::string& name, ddo::module_kind kind, std::int64_t elems) {
      std::vector<std::byte> b(static_cast<std::size_t>(elems) * 2);
      ddo_test::fill_random_bytes(b, rng);
      bytes.push_back(std::move(b));
      ddo::weight_info w;
      w.name = name;
      w.kind = kind;
      w.type = ddo::dtype::bf16;
      w.shape = {elems};
      w.source = ddo::host_source{bytes.back().data()};
      table.add(w);
    };
    add("embed.weight", ddo::module_kind::embedding, 20000);
    for (std::size_t b = 0; b < blocks; ++b)
      for (const char* m : {"attn.to_q", "attn.to_k", "ff.up", "ff.down"})
        add(prefix + "." + std::to_string(b) + "." + m + ".weight", ddo::module_kind::linear,
            100000 + static_cast<std::int64_t>(rng() % 50000));
  }
};

ddo::resolve_inputs quiet_inputs() {
  ddo::resolve_inputs in;
  in.use_environment = false;
  in.running_on_wsl = false;
  in.detected_ram_gb = 64.0;
  return in;
}

}  // namespace

TEST_SUITE_BEGIN("runtime");

TEST_CASE("block_level group offload merges num_blocks_per_group blocks into one streamed group") {
  block_model m(6, 1);
  auto blocks = ddo::infer_execution_groups(m.table);
  ddo::group_offload_options o;
  o.num_blocks_per_group = 2;
  const auto plan = ddo::make_group_offload_plan(m.table, blocks, o, true);
  std::size_t block_groups = 0;
  for (const auto& g : plan.groups)
    if (g.name.find("transformer_blocks") != std::string::npos) {
      ++block_groups;
      CHECK(g.weights.size() == 8);
    } else {
      CHECK(g.weights.size() == 1);  // the embedding is not a block: never merged with one
    }
  CHECK(block_groups == 3);
  for (const auto& d : plan.decisions) CHECK(d.where == ddo::placement::pinned_host);
  host_sim_transport sim;
  ddo::basic_offloader<host_sim_transport> off(sim, m.table, plan, ddo::group_offload_runtime_options(o));
  CHECK(off.slot_count() == 2);
  CHECK(ddo_test::count_mismatches(off, sim, m.bytes, 2) == 0);
  CHECK(off.metrics().route == ddo::executed_route::diffusers_group_offload);
}

TEST_CASE("leaf_level group offload streams every module as its own group") {
  block_model m(3, 2);
  ddo::group_offload_options o;
  o.offload_type = ddo::group_offload_type::leaf_level;
  o.num_blocks_per_group = 0;  // ignored for leaf_level
  const auto plan = ddo::make_group_offload_plan(m.table, ddo::infer_execution_groups(m.table), o, true);
  CHECK(plan.groups.size() == m.table.size());
  host_sim_transport sim;
  ddo::basic_offloader<host_sim_transport> off(sim, m.table, plan, ddo::group_offload_runtime_options(o));
  CHECK(ddo_test::count_mismatches(off, sim, m.bytes, 2) == 0);
}

TEST_CASE("low_cpu_mem_usage and use_stream=false stage per use with no prefetch") {
  block_model m(4, 3);
  ddo::group_offload_options o;
  o.low_cpu_mem_usage = true;
  o.use_stream = false;
  const auto plan = ddo::make_group_offload_plan(m.table, ddo::infer_execution_groups(m.table), o, true);
  for (const auto& d : plan.decisions) CHECK(d.where == ddo::placement::pageable_host);
  const auto ro = ddo::group_offload_runtime_options(o);
  CHECK(ro.slot_count == 1);
  CHECK(ro.prefetch_depth == 0);
  host_sim_transport sim;
  {
    ddo::basic_offloader<host_sim_transport> off(sim, m.table, plan, ro);
    CHECK(ddo_test::count_mismatches(off, sim, m.bytes, 2) == 0);
    CHECK(off.metrics().pinned_bytes == 0);
  }
  CHECK(sim.pageable_direct_copies() == 0);
  o.low_cpu_mem_usage = false;
  o.num_blocks_per_group = 0;
  CHECK_THROWS_AS((void)ddo::make_group_offload_plan(m.table, ddo::infer_execution_groups(m.table), o, true),
                  ddo::config_error);
}

TEST_CASE("route none uploads every weight once and streams nothing") {
  block_model m(3, 4);
  const auto plan = ddo::make_resident_plan(m.table, ddo::infer_execution_groups(m.table));
  host_sim_transport sim;
  ddo::basic_offloader<host_sim_transport> off(sim, m.table, plan);
  CHECK(off.slot_count() == 0);
  CHECK(off.device_bytes() >= m.table.total_bytes());
  CHECK(ddo_test::count_mismatches(off, sim, m.bytes, 2) == 0);
  CHECK(off.metrics().totals.bytes() == 0);
}

TEST_CASE("the offloader sorts its policies by concept, in any order, with defaults") {
  using a = ddo::offloader<host_sim_transport, ddo::default_pin_selector>;
  using b = ddo::offloader<ddo::default_pin_selector, ddo::default_residency_planner, host_sim_transport>;
  static_assert(std::is_same_v<a::transport_type, host_sim_transport>);
  static_assert(std::is_same_v<b::planner_type, ddo::default_residency_planner>);
  static_assert(std::is_same_v<ddo::offloader<>::transport_type, ddo::linear_transport>);
  static_assert(std::is_same_v<ddo::offloader<>::pin_selector_type, ddo::default_pin_selector>);
  CHECK(true);
}

TEST_CASE("an offloader plans from resolved settings against the transport's device") {
  block_model m(6, 5);
  auto in = quiet_inputs();
  in.overrides = {{ddo::field_id::resident_module_budget_gb, 0.0005},
                  {ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}},
                  {ddo::field_id::resident_module_patterns, std::vector<std::string>{"auto"}}};
  const auto settings = ddo::resolve_settings(in);
  ddo::host_sim_options so;
  so.device_capacity_bytes = 256 * ddo::mib;
  host_sim_transport sim(so);
  auto enabled = ddo::prepare_offload(m.table, settings, ddo::setup_options{}, sim).start();
  auto& off = *enabled;
  CHECK(enabled.settings.config.resident_module_budget_gb == 0.0005);
  CHECK(off.plan().decisions.size() == m.table.size());
  CHECK(off.plan().total_bytes(ddo::placement::gpu_resident) < m.table.total_bytes());
  CHECK(off.slot_count() > 0);
  CHECK(ddo_test::count_mismatches(off, sim, m.bytes, 2) == 0);
}

TEST_CASE("enable_offload resolves a preset and returns a ready offloader with its settings") {
  block_model m(5, 6);
  ddo::setup_options options;
  options.inputs = quiet_inputs();
  host_sim_transport sim;
  auto enabled = ddo::enable_offload(m.table, "auto", options, sim);
  REQUIRE(enabled.offloader);
  CHECK(enabled.settings.requested_preset == "auto");
  CHECK(enabled.settings.effective_preset != "auto");
  CHECK(enabled.component.route == ddo::component_route::dynamic_offload);
  CHECK(ddo_test::count_mismatches(*enabled, sim, m.bytes, 2) == 0);

  auto off = ddo::enable_offload(m.table, "off", options, sim);
  CHECK(off.component.route == ddo::component_route::none);
  CHECK(off->slot_count() == 0);
  CHECK(ddo_test::count_mismatches(*off, sim, m.bytes, 1) == 0);
}

TEST_CASE("enable_pipeline_offload routes each component by its own policy") {
  block_model transformer(4, 7);
  block_model vae(2, 8, "decoder_layers");
  ddo::setup_options options;
  options.inputs = quiet_inputs();
  ddo::component_policy leaf;
  leaf.route = ddo::component_route::diffusers_group_offload;
  leaf.offload_type = ddo::group_offload_type::leaf_level;
  options.inputs.component_policies["vae"] = leaf;
  host_sim_transport sim;
  auto pipe = ddo::enable_pipeline_offload(
      {{"transformer", &transformer.table, std::nullopt}, {"vae", &vae.table, std::nullopt}}, "auto",
      options, sim);
  CHECK(pipe.order == std::vector<std::string>{"transformer", "vae"});
  CHECK(pipe["vae"].component.route == ddo::component_route::diffusers_group_offload);
  CHECK(pipe["vae"]->metrics().route == ddo::executed_route::diffusers_group_offload);
  CHECK(pipe["vae"]->group_count() == vae.table.size());
  CHECK(ddo_test::count_mismatches(*pipe["transformer"], sim, transformer.bytes, 1) == 0);
  CHECK(ddo_test::count_mismatches(*pipe["vae"], sim, vae.bytes, 1) == 0);
  CHECK_THROWS_AS(pipe["unet"], ddo::usage_error);
}

TEST_SUITE_END();
