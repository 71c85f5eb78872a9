// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp) --calibrate: after the plain run's steps, the capacity
/// profile built through the library (ddo/runtime/calibration.hpp) on the same offloader and
/// saved (docs/calibration.md). Example code (docs/runner.md).

#include "ddo_run/report.hpp"

namespace ddo_run {

/// Compute timed at a quarter of the tokens and at the tokens of this run (@p engine; a second
/// engine for the smaller count), loads per group, the free-memory low-water mark (on a GPU the
/// sampled cudaMemGetInfo, on host_sim ddo's accounting plus the @p activations) from
/// @p free_before; the profile saved and printed.
template <class Engine, class Offloader>
void calibrate_after_steps(const run_context& ctx, Offloader& offloader, Engine& engine,
                           ddo::calibration_recorder& recorder, std::uint64_t free_before,
                           std::uint64_t activations) {
  auto& t = offloader.transport();
  const auto& config = ctx.settings.config;
  // Through the library (ddo/runtime/calibration.hpp): compute timed at a quarter of the
  // tokens and at the tokens of this run, loads per group, the free-memory low-water mark
  // (on a GPU the sampled cudaMemGetInfo, on host_sim ddo's accounting plus the activations).
  const std::int64_t low_tokens = std::max<std::int64_t>(1, ctx.tokens / 4);
  Engine low_engine(offloader.transport(), low_tokens, ctx.compute.width, ctx.compute.type);
  const auto run_at = [&](std::uint64_t tokens) {
    Engine& e = static_cast<std::int64_t>(tokens) == ctx.tokens ? engine : low_engine;
    auto v = e.view();
    for (std::size_t g = 0; g < offloader.group_count(); ++g) {
      auto lease = offloader.acquire(g, v);
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::size_t w = lease.weight_index(i);
        if (!ctx.compute.is_gemm[w]) continue;
        const auto& info = ctx.table[w];
        const std::int64_t rows = &e == &engine ? ctx.compute.rows[w]
                                                : ddo::runner::token_rows(ddo::runner::token_stream_of(info.name),
                                                                          low_tokens);
        e.linear(t, lease.data(i), info.shape[0], info.shape[1], info.type, ctx.compute.alpha[w], rows);
      }
    }
    t.synchronize(v);
  };
  ddo::calibration_options calibration;
  calibration.tokens_low = static_cast<std::uint64_t>(low_tokens);
  calibration.tokens_high = static_cast<std::uint64_t>(ctx.tokens);
  calibration.free_vram_before = free_before;
  if (ctx.gpu) {
    calibration.free_vram = [&] { return ddo::query_device_memory(0).free_bytes; };
  } else {
    calibration.sustained_warmup_ms = 0.0;  // simulated compute has no power limit to settle
    calibration.free_vram = [&] {
      const auto peak = offloader.metrics().peak_device_bytes + activations;
      return free_before > peak ? free_before - peak : 0;
    };
  }
  std::fprintf(stderr, "ddo-run: calibrating (compute at %lld and %lld tokens)...\n",
               static_cast<long long>(low_tokens), static_cast<long long>(ctx.tokens));
  const auto profile = ddo::calibrate(offloader, recorder, config, run_at, calibration);
  const ddo::profile_store store(ctx.settings.profile_dir);
  store.save(profile);
  (void)ddo::runner::print_saved_profile(profile, store,
                                         static_cast<std::uint64_t>(ctx.tokens));
}

}  // namespace ddo_run
