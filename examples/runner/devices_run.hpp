// SPDX-License-Identifier: Apache-2.0
#pragma once
// ddo-run --devices N (issue 28): N offloaders, one per device, each with its own transport,
// budget, ring, copy stream, plan and host thread, all reading one ddo::shared_weight_store —
// the whole model on each (data parallel) or a range of its execution groups on each
// (--shard layers, pipeline parallel). Reported per device and in total: the steady steps'
// combined copy rate against the pinned bound measured in the same run, the store's bytes and
// NUMA placement, and the host memory the run added against the store (one copy, not N).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ddo/core/format_bytes.hpp"
#include "ddo/memory/process_memory.hpp"
#include "ddo/memory/shared_weight_store.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/weight_shard.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "runner/compare_run.hpp"
#include "runner/device_threads.hpp"
#include "runner/run_model.hpp"
#include "runner/step_summary.hpp"
#include "runner/vram_budget.hpp"

namespace ddo::runner {

/// What a --devices run needs from ddo-run.
struct devices_inputs {
  const dynamic_offload_settings& settings;
  const weight_table& table;
  const std::vector<file_reader>& files;
  const model_compute& compute;
  std::int64_t tokens = 0;
  int steps = 0, warmup = 0;
  bool verify = false;
  bool shard_layers = false;  // --shard layers: each device its range of the groups
  bool bound = true;          // measure B (--no-bound: skip it)
  setup_options setup;        // copied per device; the store and the shard go on top
  vram_budget budget;         // each card's (the same size for every device)
};

/// One device's part of the run.
struct device_result {
  std::string shard = "the whole model";
  double setup_s = 0.0;
  std::vector<double> step_ms;  ///< intervals between step starts (runner/step_timing.hpp)
  std::uint64_t steady_bytes = 0;  // bytes streamed in the steady steps
  std::chrono::steady_clock::time_point steady_begin{}, steady_end{};
  std::uint64_t peak_device_bytes = 0, pinned_bytes = 0, verified = 0, mismatches = 0;
  bool within_budget = true;
  std::string error;  // empty: ran
};

namespace devices_internal {

/// Plans, sets up and runs one device on its thread; failures land in @p r.error.
template <class Engine>
void run_device(const devices_inputs& in, typename Engine::transport_type transport,
                const std::optional<sharded_table>& shard,
                const std::shared_ptr<shared_weight_store>& store, start_gate& gate,
                device_result& r) {
  bool arrived = false;
  try {
    if constexpr (requires { transport.bind_thread(); }) transport.bind_thread();
    const weight_table& table = shard ? shard->table : in.table;
    setup_options setup = in.setup;
    if (shard) setup.groups = shard->groups;
    setup.runtime.weight_store = store;
    setup.runtime.metrics = true;  // per-step bytes
    setup.runtime.poison_released_slots = setup.runtime.poison_released_slots || in.verify;
    setup.log = nullptr;  // N devices' setup notes would interleave; ddo-run prints the plan once
    const auto t0 = std::chrono::steady_clock::now();
    auto prepared = prepare_offload<>(table, in.settings, setup, std::move(transport));
    prepared.setup.runtime.profile_summary = nullptr;
    auto enabled = prepared.start();
    auto& off = *enabled.offloader;
    auto& t = off.transport();
    r.setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Engine engine(t, in.tokens, in.compute.width, in.compute.type);
    auto view = engine.view();
    std::vector<std::byte> device_copy, source_copy;
    if (in.verify) {
      std::uint64_t largest = 0;
      for (const auto& w : table.weights()) largest = std::max(largest, w.bytes);
      device_copy.resize(largest);
      source_copy.resize(largest);
    }
    gate.arrive(true);
    arrived = true;
    step_clock steps;  // a step's time: the interval to the next step's start
    for (int step = 0; step < in.warmup + in.steps; ++step) {
      if (step == in.warmup) r.steady_begin = std::chrono::steady_clock::now();
      steps.start();
      off.begin_step();
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, view);
        for (std::size_t i = 0; i < lease.size(); ++i) {
          const std::size_t w = lease.weight_index(i);
          const std::size_t whole = shard ? shard->whole_index[w] : w;
          if (!in.compute.is_gemm[whole]) continue;
          const auto& info = table[w];
          engine.linear(t, lease.data(i), info.shape[0], info.shape[1], info.type,
                        in.compute.alpha[whole], in.compute.rows[whole]);
        }
        if (!in.verify) continue;
        for (std::size_t i = 0; i < lease.size(); ++i) {
          const std::size_t w = lease.weight_index(i);
          const auto n = static_cast<std::size_t>(table[w].bytes);
          t.copy_to_host(device_copy.data(), lease.data(i), n, view);
          t.synchronize(view);
          read_source(table, in.files, w, std::span(source_copy.data(), n));
          r.verified += n;
          if (std::memcmp(device_copy.data(), source_copy.data(), n) != 0) ++r.mismatches;
        }
      }
      t.synchronize(view);
      steps.end();
    }
    steps.close();
    r.steady_end = std::chrono::steady_clock::now();
    r.step_ms = steps.times().interval_ms;
    const auto metrics = off.metrics(true);
    for (std::size_t s = static_cast<std::size_t>(in.warmup); s < metrics.steps.size(); ++s)
      r.steady_bytes += metrics.steps[s].bytes();
    r.pinned_bytes = metrics.pinned_bytes;
    r.peak_device_bytes = ddo_peak_device_bytes(t, metrics.peak_device_bytes);
    r.within_budget = check_accounted_peak(in.budget, r.peak_device_bytes).within();
  } catch (const std::exception& e) {
    r.error = e.what();
    if (!arrived) gate.arrive(false);
  }
}

}  // namespace devices_internal

/// The --devices run over the transports @p transports (one per device, made by the caller:
/// CUDA has started, so @p host_memory's baseline holds its context). Returns 0, or 1 when a
/// device failed, --verify found a mismatch or a device went over its card.
template <class Engine>
int run_devices(const devices_inputs& in, std::vector<typename Engine::transport_type> transports,
                memory_watch& host_memory, bool simulated) {
  const std::size_t n = transports.size();
  auto store = std::make_shared<shared_weight_store>();
  std::vector<std::optional<sharded_table>> shards(n);
  std::vector<device_result> results(n);
  if (in.shard_layers) {
    const auto groups =
        in.setup.groups
            ? *in.setup.groups
            : infer_execution_groups(in.table, in.settings.config.resident_module_patterns);
    for (std::size_t d = 0; d < n; ++d) {
      const auto s = even_shard(groups.size(), d, n);
      shards[d] = shard_weight_table(in.table, groups, s);
      results[d].shard = "groups " + std::to_string(s.first_group) + "-" +
                         std::to_string(s.end_group - 1) + " of " + std::to_string(groups.size());
    }
  }
  // B: pinned host-to-device bandwidth of one device, measured now, before any setup; the
  // devices of one emulation share its link, so their combined rate is held against it.
  double bound_gbps = 0.0;
  if (in.bound) {
    std::uint64_t copy_bytes = 256 * mib;
    if (const auto free = transports[0].device_memory().free_bytes; free != 0)
      copy_bytes = std::max<std::uint64_t>(mib, std::min(copy_bytes, free / 4));
    bound_gbps = measure_pinned_gbps(transports[0], copy_bytes);
  }
  std::printf("\n--devices %zu (%s): one shared weight store; ", n,
              in.shard_layers ? "layer-sharded" : "data parallel");
  if (in.bound)
    std::printf("pinned bound B %.2f GB/s measured on device 0\n", bound_gbps);
  else
    std::printf("no bound measured (--no-bound)\n");
  std::fflush(stdout);
  devices_internal::start_gate gate(n);
  // Each thread moves its own device's transport out; a device whose thread could not start
  // keeps its transport here (destroyed on return) and is reported failed.
  devices_internal::run_on_threads(
      n, gate,
      [&](std::size_t d) {
        devices_internal::run_device<Engine>(in, std::move(transports[d]), shards[d], store, gate,
                                             results[d]);
      },
      [&](std::size_t d, const std::string& why) { results[d].error = why; });
  host_memory.sample();

  bool ok = true;
  std::uint64_t total_bytes = 0;
  auto begin = std::chrono::steady_clock::time_point::max();
  auto end = std::chrono::steady_clock::time_point::min();
  for (std::size_t d = 0; d < n; ++d) {
    const auto& r = results[d];
    if (!r.error.empty()) {
      std::printf("  device %zu (%s): FAILED: %s\n", d, r.shard.c_str(), r.error.c_str());
      ok = false;
      continue;
    }
    const auto summary = summarize_steps(r.step_ms, in.warmup);
    const double steady_s = std::chrono::duration<double>(r.steady_end - r.steady_begin).count();
    std::printf(
        "  device %zu (%s): setup %.2f s; steady median %.1f ms/step between step starts "
        "(min %.1f, max %.1f); "
        "streamed %s in the steady steps (%.2f GB/s); pinned %s; peak device bytes %s of "
        "the %s card: %s",
        d, r.shard.c_str(), r.setup_s, summary.median_ms, summary.min_ms, summary.max_ms,
        format_decimal_gb(r.steady_bytes).c_str(),
        steady_s > 0 ? static_cast<double>(r.steady_bytes) / steady_s / 1e9 : 0.0,
        format_decimal_gb(r.pinned_bytes).c_str(), format_decimal_gb(r.peak_device_bytes).c_str(),
        format_size(in.budget.vram_bytes, size_unit::gib).c_str(),
        r.within_budget ? "within" : "OVER");
    if (in.verify)
      std::printf("; verify: %s checked, %llu mismatch(es)", format_decimal_gb(r.verified).c_str(),
                  static_cast<unsigned long long>(r.mismatches));
    std::printf("\n");
    ok = ok && r.within_budget && r.mismatches == 0;
    total_bytes += r.steady_bytes;
    begin = std::min(begin, r.steady_begin);
    end = std::max(end, r.steady_end);
  }
  const double wall_s = end > begin ? std::chrono::duration<double>(end - begin).count() : 0.0;
  const double combined = wall_s > 0 ? static_cast<double>(total_bytes) / wall_s / 1e9 : 0.0;
  std::printf("  total: %s streamed by %zu devices in %.3f s of steady steps: %.2f GB/s combined",
              format_decimal_gb(total_bytes).c_str(), n, wall_s, combined);
  if (bound_gbps > 0) std::printf(", %.2f of the pinned bound B", combined / bound_gbps);
  std::printf("\n");
  const std::uint64_t store_bytes = store->bytes();
  const auto placed = store->placement();
  std::printf(
      "  shared weight store: %s in %zu blocks (%zu weights), %s page-locked; NUMA: %d "
      "node(s) online",
      format_decimal_gb(store_bytes).c_str(), store->blocks(), store->weights(),
      format_decimal_gb(store->registered_bytes()).c_str(), placed.nodes_online);
  if (placed.unknown_reason.empty()) {
    std::printf(", sampled pages per node:");
    for (std::size_t node = 0; node < placed.pages_on_node.size(); ++node)
      std::printf(" %zu: %llu", node, static_cast<unsigned long long>(placed.pages_on_node[node]));
  } else {
    std::printf(" (placement unknown: %s)", placed.unknown_reason.c_str());
  }
  std::printf("\n");
  const auto& now = host_memory.last();
  const double s = store_bytes > 0 ? static_cast<double>(store_bytes) : 1.0;
  std::printf(
      "  host memory against the store (one copy): MemTotal-MemAvailable +%s (%.3fx) since "
      "CUDA started, peak RSS %s (%.3fx)",
      format_decimal_gb(host_memory.used_growth_bytes()).c_str(),
      static_cast<double>(host_memory.used_growth_bytes()) / s,
      format_decimal_gb(now.peak_rss_bytes).c_str(), static_cast<double>(now.peak_rss_bytes) / s);
  if (now.has_pss)
    std::printf(", PSS %s (%.3fx)", format_decimal_gb(now.pss_bytes).c_str(),
                static_cast<double>(now.pss_bytes) / s);
  std::printf("%s\n", simulated ? "; on host_sim the simulated devices' memory is host memory "
                                  "and counts too"
                                : "");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace ddo::runner
