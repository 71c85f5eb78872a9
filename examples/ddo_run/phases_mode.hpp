// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run --tokens T1,T2,... (examples/ddo_run.cpp): one process, one offloader, the
/// device budget following the engine's activations (issue 41). Each phase's reserve is the
/// engine's own number for its token count, measured once per size before the setup
/// (ddo::measure_workload_reserve: the peak device memory of the engine's forward at that size,
/// sampled with cudaMemGetInfo on a GPU, host_sim's ledger on the CPU stand-in); between phases
/// ddo::set_device_reserve reads that table at the phase's size and moves the running offloader
/// to the plan a fresh setup at that size makes. Per phase: the move (weights and bytes
/// promoted/demoted, bytes read, device peak, time), the steady step against the bound
/// max(C, W / B) at that size, and after the run the time a cached re-setup at each size takes
/// (the offloader torn down and set up again with the plan cache and, when cache_pinned_weights
/// is on, the pinned cache: the best an engine could do before). Example code (docs/runner.md).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddo/model/synthetic_model.hpp"
#include "ddo/setup/workload_reserve.hpp"
#include "runner/device_memory_sampler.hpp"
#include "ddo_run/report.hpp"
#include "ddo_run/steps_mode.hpp"

namespace ddo_run {

/// One phase's figures, printed in the table after the run.
struct phase_row {
  std::int64_t tokens = 0;
  std::uint64_t reserve = 0;
  std::optional<ddo::budget_move> move;  // none for the first phase (the setup)
  double step_ms = 0.0;
  double bound_ms = 0.0;
  std::uint64_t resident = 0;
  double resetup_s = 0.0;
  std::uint64_t mismatches = 0;
};

/// The steady median step of @p steps eager steps after @p warmup at @p tokens over @p off.
template <class Engine, class Offloader>
double run_phase_steps(run_context& ctx, Offloader& off, std::int64_t tokens,
                       const model_compute& compute, std::uint64_t& mismatches) {
  Engine engine(off.transport(), tokens, compute.width, compute.type);
  auto view = engine.view();
  auto& t = off.transport();
  step_verifier verifier(ctx.table, ctx.opt.verify);
  const int total = ctx.opt.warmup + ctx.steps;
  progress_bar bar("steps", static_cast<std::uint64_t>(total), "steps",
                   ddo::runner::progress_style::quiet);
  std::vector<double> ms;
  for (int step = 0; step < total; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    off.begin_step();  // a pending move applies here
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, view);
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::size_t w = lease.weight_index(i);
        if (!compute.is_gemm[w]) continue;
        const auto& info = ctx.table[w];
        engine.linear(t, lease.data(i), info.shape[0], info.shape[1], info.type, compute.alpha[w],
                      compute.rows[w]);
      }
      if (verifier.on) verifier.check(ctx, off, view, lease, g, step, bar);
    }
    t.synchronize(view);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                     .count());
  }
  bar.finish();
  mismatches += verifier.mismatches;
  return ddo::runner::summarize_steps(ms, ctx.opt.warmup).median_ms;
}

/// The engine's forward at @p tokens as the reserve measurement runs it: the engine made at that
/// size, one step with every GEMM reading @p weight (a device buffer of the largest weight, made
/// before the probe starts: weights are ddo's bytes, not the engine's), @p sample called before
/// the engine frees its memory. The CPU stand-in computes in host memory: on host_sim its two
/// activation buffers [tokens, width] are held on the simulated device as the GPU engine holds
/// them, so the ledger sees what the card would.
template <class Engine, class Sample>
void reserve_forward(const run_context& ctx, typename Engine::transport_type& t,
                     const std::byte* weight, std::int64_t tokens, Sample&& sample) {
  const auto compute = describe_compute(ctx.table, ctx.files, tokens);
  Engine engine(t, tokens, compute.width, compute.type);
  std::byte* held = nullptr;
  std::size_t held_bytes = 0;
  if constexpr (ddo::runner::simulated_transport<typename Engine::transport_type>) {
    held_bytes = static_cast<std::size_t>(
        ddo::runner::activation_reserve_bytes(tokens, ddo::runner::compute_shape_of(ctx.table)));
    held = t.allocate_device(held_bytes);
  }
  for (std::size_t w = 0; w < ctx.table.size(); ++w)
    if (compute.is_gemm[w])
      engine.linear(t, weight, ctx.table[w].shape[0], ctx.table[w].shape[1], ctx.table[w].type,
                    compute.alpha[w], compute.rows[w]);
  t.synchronize(engine.view());
  sample();
  if (held) t.free_device(held, held_bytes);
}

/// The engine's reserve at each --tokens size, measured once per size on @p t before ddo's
/// setup (see the file comment).
template <class Engine>
ddo::workload_reserve measure_phase_reserves(const run_context& ctx,
                                             typename Engine::transport_type& t) {
  std::uint64_t largest = 0;
  for (const auto& w : ctx.table.weights()) largest = std::max(largest, w.bytes);
  const auto n = static_cast<std::size_t>(ddo::round_up(std::max<std::uint64_t>(largest, 4), 4));
  std::vector<std::byte> host(n);
  ddo::splitmix64 rng{0xc0ffee};
  ddo::fill_random_nonzero(host, ctx.compute.type, rng);
  std::byte* weight = t.allocate_device(n);
  struct freed {
    typename Engine::transport_type& t;
    std::byte* p;
    std::size_t n;
    ~freed() { t.free_device(p, n); }
  } guard{t, weight, n};
  {
    auto s = t.make_stream();
    t.copy_to_device(weight, host.data(), n, t.view(s));
    t.synchronize(t.view(s));
  }
  const auto& sizes = ctx.opt.token_phases;
  if constexpr (ddo::runner::simulated_transport<typename Engine::transport_type>) {
    ddo::ledger_peak_probe probe(t);
    return ddo::measure_workload_reserve("tokens", sizes, probe, [&](std::int64_t tokens) {
      reserve_forward<Engine>(ctx, t, weight, tokens, [] {});
    });
  } else {
    ddo::runner::device_memory_sampler probe;
    return ddo::measure_workload_reserve("tokens", sizes, probe, [&](std::int64_t tokens) {
      reserve_forward<Engine>(ctx, t, weight, tokens, [&] { probe.sample(); });
    });
  }
}

/// A cached re-setup at @p reserve: a transport of its own, the plan cache and pinned cache of
/// @p options (the run's), prepare_offload and start; seconds.
template <class Engine>
double time_cached_resetup(const run_context& ctx, ddo::setup_options options,
                           std::uint64_t reserve) {
  using T = typename Engine::transport_type;
  options.reserve_device_bytes = reserve;
  const auto t0 = std::chrono::steady_clock::now();
  auto prepared =
      ddo::prepare_offload<>(ctx.table, ctx.settings, options,
                             ddo::setup_transport<T>(ctx.settings, options));
  prepared.setup.runtime.profile_summary = nullptr;
  auto enabled = prepared.start();
  return seconds_since(t0);
}

inline void print_phase_table(const std::vector<phase_row>& rows, bool pinned_cache) {
  std::printf("\nphases (one offloader; the budget follows the activations):\n"
              "| tokens | reserve | promoted | demoted | read | D2H | move ms | peak device | "
              "resident | step ms | bound ms | x bound | cached re-setup s |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    const auto* m = r.move ? &*r.move : nullptr;
    std::printf("| %lld | %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.3f | %.2f |\n",
                static_cast<long long>(r.tokens), gb(r.reserve).c_str(),
                m ? (gb(m->bytes_promoted) + " (" + std::to_string(m->weights_promoted) + ")").c_str() : "setup",
                m ? (gb(m->bytes_demoted) + " (" + std::to_string(m->weights_demoted) + ")").c_str() : "-",
                m ? gb(m->bytes_read).c_str() : "-",
                m ? gb(m->bytes_copied_to_host).c_str() : "-",
                m ? std::to_string(static_cast<long long>(m->move_ms)).c_str() : "-",
                m ? gb(m->device_peak_bytes).c_str() : "-", gb(r.resident).c_str(), r.step_ms,
                r.bound_ms, r.bound_ms > 0 ? r.step_ms / r.bound_ms : 0.0, r.resetup_s);
  }
  std::printf("  move: ddo's device bytes never above max(before, after) (metrics' sampled peak);"
              " read: from the weights' sources, D2H: demoted bytes copied back from the device;"
              " re-setup: torn down and set up again with the plan cache%s\n",
              pinned_cache ? " and the pinned-weight cache"
                           : " (pinned weights packed again: --ddo-cache-pinned-weights true "
                             "caches them)");
}

/// Runs every --tokens phase over one offloader (see the file comment).
template <class Engine>
int run_phases(run_context& ctx, typename Engine::transport_type transport) {
  const auto& phases = ctx.opt.token_phases;
  std::vector<model_compute> computes;
  std::vector<phase_row> rows(phases.size());
  std::optional<ddo::runner::pinned_rates> rates;
  ddo::plan_cache plans;
  ddo::pinned_weight_cache pins;
  ctx.setup.plans = &plans;
  ctx.setup.pinned_cache = &pins;
  ctx.setup.runtime.metrics = true;  // the moves are read from the metrics
  for (std::size_t i = 0; i < phases.size(); ++i) {
    computes.push_back(describe_compute(ctx.table, ctx.files, phases[i]));
    rows[i].tokens = phases[i];
    if (!ctx.opt.bound) continue;
    // C at each size, before ddo's setup takes its memory; B once.
    run_context at{ctx.opt, ctx.settings, ctx.table, ctx.files, computes.back(), phases[i],
                   ctx.steps, ctx.gpu, ctx.requested_route, ctx.setup, ctx.budget,
                   ctx.emulated, {}, ctx.device_name, ctx.model_name};
    const auto b = measure_bound<Engine>(at, transport);
    rows[i].bound_ms = b.compute_ms;  // the copy term once W is known (after the plan)
    rates = b.rates;
  }
  const auto reserve = measure_phase_reserves<Engine>(ctx, transport);
  for (std::size_t i = 0; i < phases.size(); ++i) rows[i].reserve = reserve.bytes_at(phases[i]);
  ctx.setup.reserve_device_bytes = rows[0].reserve;
  auto prepared = ddo::prepare_offload<>(ctx.table, ctx.settings, ctx.setup, std::move(transport));
  prepared.setup.runtime.profile_summary = nullptr;
  auto enabled = prepared.start();
  auto& off = *enabled.offloader;
  std::uint64_t mismatches = 0;
  for (std::size_t i = 0; i < phases.size(); ++i) {
    if (i > 0) {
      ddo::set_device_reserve(off, ctx.settings, ctx.setup, reserve, phases[i]);
      rows[i].move = off.metrics().budget_moves.back();
    }
    rows[i].resident = off.plan().total_bytes(ddo::placement::gpu_resident);
    std::printf("phase %zu: %lld tokens, engine reserve %s (measured), resident %s, "
                "ring %zu x %s\n",
                i, static_cast<long long>(phases[i]),
                ddo::format_bytes_exact(rows[i].reserve).c_str(),
                gb(rows[i].resident).c_str(), off.slot_count(), gb(off.slot_bytes()).c_str());
    std::fflush(stdout);
    rows[i].step_ms = run_phase_steps<Engine>(ctx, off, phases[i], computes[i], mismatches);
    if (rates)
      rows[i].bound_ms = ddo::runner::bound_ms_of(
          rows[i].bound_ms, ctx.table.total_bytes() - rows[i].resident, rates->best_gbps());
  }
  enabled.offloader.reset();  // the re-setups below each take the device alone
  for (auto& r : rows) r.resetup_s = time_cached_resetup<Engine>(ctx, ctx.setup, r.reserve);
  print_phase_table(rows, ctx.settings.config.cache_pinned_weights);
  if (ctx.opt.verify)
    std::printf("  verify: %llu mismatch(es)\n", static_cast<unsigned long long>(mismatches));
  return mismatches == 0 ? 0 : exit_failure;
}

}  // namespace ddo_run
