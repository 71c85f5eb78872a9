// SPDX-License-Identifier: Apache-2.0
// The "using" TU of the compile-ddo-once check: compiled with DDO_EXTERN_TEMPLATES, it runs an
// offloader on host_sim from a ready plan and one planned from resolved settings, but compiles
// none of the runtime core, the setup path or the resolver (the nm test checks that);
// extern_instantiate.cpp, including ddo/instantiate.hpp, holds the only copy.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/setup.hpp"
#include "ddo/transport/host_sim.hpp"

#ifndef DDO_EXTERN_TEMPLATES
#error "extern_use.cpp must be compiled with DDO_EXTERN_TEMPLATES"
#endif

/// Streams a random two-group model through a one-slot ring for two steps and returns the
/// number of mismatched bytes the "kernel" saw (0 expected), or -1 when nothing was checked.
long run_extern_use() {
  std::mt19937 rng(20261202);
  std::vector<std::vector<std::byte>> host(4, std::vector<std::byte>(4096 + 512));
  for (auto& h : host)
    for (auto& b : h) b = static_cast<std::byte>(rng());
  ddo::weight_table table;
  ddo::offload_plan plan;
  plan.groups.resize(2);
  for (std::size_t w = 0; w < host.size(); ++w) {
    ddo::weight_info info;
    info.name = "blocks." + std::to_string(w / 2) + ".w" + std::to_string(w);
    info.type = ddo::dtype::bf16;
    info.shape = {static_cast<std::int64_t>(host[w].size() / 2)};
    info.bytes = host[w].size();
    info.source = ddo::host_source{host[w].data()};
    table.add(info);
    // one pinned and one pageable weight per group: both the copy and the staging path
    const auto where = w % 2 == 0 ? ddo::placement::pinned_host : ddo::placement::pageable_host;
    plan.decisions.push_back({where, w / 2, "extern check"});
    plan.groups[w / 2].name = "blocks." + std::to_string(w / 2);
    plan.groups[w / 2].weights.push_back(w);
  }
  ddo::host_sim_transport sim;
  ddo::runtime_options options;
  options.slot_count = 1;
  ddo::basic_offloader<ddo::host_sim_transport> off(sim, table, plan, options);
  auto compute = sim.make_stream();
  auto view = ddo::host_sim_transport::view(compute);
  long mismatches = 0;
  std::size_t checked = 0;
  for (int step = 0; step < 2; ++step)
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, view);
      std::vector<std::byte> back(host[lease.weight_index(0)].size());
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const auto& expected = host[lease.weight_index(i)];
        back.resize(expected.size());
        sim.copy_to_host(back.data(), lease.data(i), expected.size(), view);
        sim.synchronize(view);
        for (std::size_t k = 0; k < expected.size(); ++k) mismatches += back[k] != expected[k];
        checked += expected.size();
      }
    }
  const auto m = off.metrics(true);
  if (m.totals.group_loads < 4 || checked == 0) return -1;
  return mismatches;
}

/// Plans the same kind of model from settings resolved here (no environment) through the
/// offloader's settings constructor, and returns the mismatched bytes seen through the leases of
/// every group (0 expected), or -1 when nothing was checked.
long run_extern_setup() {
  std::mt19937 rng(20261204);
  std::vector<std::vector<std::byte>> host(6, std::vector<std::byte>(8192));
  for (auto& h : host)
    for (auto& b : h) b = static_cast<std::byte>(rng());
  ddo::weight_table table;
  for (std::size_t w = 0; w < host.size(); ++w)
    table.add({.name = "blocks." + std::to_string(w / 2) + ".proj" + std::to_string(w) + ".weight",
               .module_name = "blocks." + std::to_string(w / 2) + ".proj" + std::to_string(w),
               .kind = ddo::module_kind::linear,
               .type = ddo::dtype::bf16,
               .shape = {static_cast<std::int64_t>(host[w].size() / 2)},
               .bytes = 0,
               .source = ddo::host_source{host[w].data()}});
  ddo::resolve_inputs inputs;
  inputs.use_environment = false;
  const auto settings = ddo::resolve_settings(inputs);
  ddo::host_sim_transport sim({.device_capacity_bytes = 512 * ddo::mib});
  ddo::offloader<ddo::host_sim_transport> off(table, settings, ddo::setup_options{}, sim);
  auto compute = off.transport().make_stream();
  auto view = ddo::host_sim_transport::view(compute);
  long mismatches = 0;
  std::size_t checked = 0;
  for (std::size_t g = 0; g < off.group_count(); ++g) {
    auto lease = off.acquire(g, view);
    for (std::size_t i = 0; i < lease.size(); ++i) {
      const auto& expected = host[lease.weight_index(i)];
      std::vector<std::byte> back(expected.size());
      off.transport().copy_to_host(back.data(), lease.data(i), expected.size(), view);
      off.transport().synchronize(view);
      for (std::size_t k = 0; k < expected.size(); ++k) mismatches += back[k] != expected[k];
      checked += expected.size();
    }
  }
  if (off.group_count() != 3 || checked != 6 * 8192) return -1;
  return mismatches;
}
