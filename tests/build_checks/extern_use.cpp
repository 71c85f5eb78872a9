// SPDX-License-Identifier: Apache-2.0
// The "using" TU of the compile-ddo-once check: compiled with DDO_EXTERN_TEMPLATES, it runs an
// offloader on host_sim from a ready plan and one planned from resolved settings, but compiles
// none of the runtime core, the setup path or the resolver (the nm test checks that);
// src/ddo_instantiate.cpp, including ddo/instantiate.hpp, holds the only copy (extern_main.cpp
// has main()).
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/host_sim.hpp"
#include "random_bytes.hpp"

#ifndef DDO_EXTERN_TEMPLATES
#error "extern_use.cpp must be compiled with DDO_EXTERN_TEMPLATES"
#endif

namespace {

/// @p count random weights of @p size bytes each.
std::vector<std::vector<std::byte>> random_weights(std::size_t count, std::size_t size,
                                                   std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<std::byte>> host(count, std::vector<std::byte>(size));
  for (auto& h : host) ddo_test::fill_random_bytes(h, rng);
  return host;
}

/// Acquires every group of @p off @p steps times and compares what each lease addresses with the
/// host bytes of its weight: {mismatched bytes, bytes checked}.
template <class Offloader>
std::pair<long, std::size_t> check_leases(Offloader& off,
                                          const std::vector<std::vector<std::byte>>& host,
                                          int steps) {
  auto& sim = off.transport();
  auto compute = sim.make_stream();
  const auto view = ddo::host_sim_transport::view(compute);
  long mismatches = 0;
  std::size_t checked = 0;
  std::vector<std::byte> back;
  for (int step = 0; step < steps; ++step)
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, view);
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const auto& expected = host[lease.weight_index(i)];
        back.resize(expected.size());
        sim.copy_to_host(back.data(), lease.data(i), expected.size(), view);
        sim.synchronize(view);
        for (std::size_t k = 0; k < expected.size(); ++k) mismatches += back[k] != expected[k];
        checked += expected.size();
      }
    }
  return {mismatches, checked};
}

}  // namespace

/// Streams a random two-group model through a one-slot ring for two steps and returns the
/// number of mismatched bytes the "kernel" saw (0 expected), or -1 when nothing was checked.
long run_extern_use() {
  const auto host = random_weights(4, 4096 + 512, 20261202);
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
  ddo::runtime_options options;
  options.slot_count = 1;
  ddo::basic_offloader<ddo::host_sim_transport> off(ddo::host_sim_transport{}, table, plan,
                                                    options);
  const auto [mismatches, checked] = check_leases(off, host, 2);
  const auto m = off.metrics(true);
  if (m.totals.group_loads < 4 || checked == 0) return -1;
  return mismatches;
}

/// Plans the same kind of model from settings resolved here (no environment) through the
/// offloader's settings constructor, and returns the mismatched bytes seen through the leases of
/// every group (0 expected), or -1 when nothing was checked.
long run_extern_setup() {
  const auto host = random_weights(6, 8192, 20261204);
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
  auto enabled =
      ddo::prepare_offload(table, settings, ddo::setup_options{},
                           ddo::host_sim_transport({.device_capacity_bytes = 512 * ddo::mib}))
          .start();
  auto& off = *enabled;
  const auto [mismatches, checked] = check_leases(off, host, 1);
  if (off.group_count() != 3 || checked != 6 * 8192) return -1;
  return mismatches;
}
