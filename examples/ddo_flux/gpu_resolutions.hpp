// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux --resolutions on a GPU (resolutions.hpp's phases with the GPU forward): the
/// engine's reserve per image size measured once per size before the setup (its cuBLASLt
/// runner and forward made at that size, the device memory sampled: runner/
/// device_memory_sampler.hpp through ddo::measure_workload_reserve), one offloader on the
/// emulated card of --vram-gb; between phases the forward of the old size is freed, the
/// offloader moved (ddo::set_device_reserve at the new size) and the new size's forward made,
/// so the card holds at every moment the context, one forward and ddo's bytes (never above
/// max(before, after) through a move). Per phase: the move, the steady step against
/// max(C, W / B) (C the all-resident step at that size, B the pinned rate), the latents against
/// the all-resident run's, whether context + reserve + ddo's peak stayed within the card, and a
/// cached re-setup's time. Needs a GPU and nvcc (DDO_FLUX_GPU). Example code.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

#include "ddo/platform/cuda_device.hpp"
#include "ddo/setup/workload_reserve.hpp"
#include "ddo_flux/gpu_steps.hpp"
#include "ddo_flux/latents.hpp"
#include "ddo_flux/resolutions.hpp"
#include "flux/flux_gpu_runs.hpp"
#include "runner/compare_run.hpp"
#include "runner/device_memory_sampler.hpp"
#include "runner/vram_budget.hpp"

namespace ddo_flux {

/// The engine's reserve at each phase's image size, measured on the device (see the file
/// comment): a fresh cuBLASLt runner (its workspace) and forward (its activations) per size.
inline ddo::workload_reserve measure_gpu_reserve(const flux::config& c,
                                                 const resolution_phases& p) {
  std::vector<std::int64_t> sizes;
  for (const auto& in : p.inputs) sizes.push_back(static_cast<std::int64_t>(in.image_tokens));
  const std::size_t text = p.inputs.front().text_tokens;
  ddo::runner::device_memory_sampler probe;
  return ddo::measure_workload_reserve("image tokens", sizes, probe, [&](std::int64_t n) {
    flux::gpu::gemm_runner gemms;
    flux::gpu::device_forward f(c, static_cast<std::size_t>(n), text, gemms);
    DDO_CUDA_TRY(cudaDeviceSynchronize());
    probe.sample();
  });
}

/// The GPU phases' card: what of it is not ddo's, and the cap on ddo's transport.
struct gpu_phase_card {
  std::uint64_t vram = 0, context = 0, limit = 0;
};

/// Every phase streamed through one offloader on @p transport (see the file comment).
template <class Transport>
void gpu_phase_steps(Transport transport, const gpu_run& r, const resolution_phases& p,
                     const ddo::setup_options& options, const ddo::workload_reserve& reserve,
                     const gpu_phase_card& card, std::vector<resolution_row>& rows,
                     std::vector<flux::stage>& stages) {
  auto prepared = ddo::prepare_offload<>(r.table, r.settings, options, std::move(transport));
  auto enabled = prepared.start();
  auto& off = *enabled.offloader;
  auto compute = off.transport().make_stream();
  const auto view = Transport::view(compute);
  flux::gpu::gemm_runner gemms;
  std::optional<flux::gpu::device_forward> f;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto& row = rows[i];
    if (i > 0) {
      f.reset();  // the old size's activations leave the card before ddo takes more of it
      ddo::set_device_reserve(off, r.settings, options, reserve,
                              static_cast<std::int64_t>(row.image_tokens));
      row.move = off.metrics().budget_moves.back();
    }
    f.emplace(r.c, row.image_tokens, p.inputs[i].text_tokens, gemms);
    f->bind(view.handle);
    row.resident = off.plan().total_bytes(ddo::placement::gpu_resident);
    const std::uint64_t ddo_peak = row.move ? row.move->device_peak_bytes : off.device_bytes();
    row.within = card.context + row.reserve + std::max(ddo_peak, off.device_bytes()) <= card.vram;
    std::printf("phase %zu: %dx%d, %zu image tokens, engine reserve %s (measured), %s resident, "
                "ring %zu x %s\n",
                i, row.size.width, row.size.height, row.image_tokens,
                ddo::format_bytes_exact(row.reserve).c_str(),
                ddo::format_bytes(row.resident).c_str(), off.slot_count(),
                ddo::format_bytes(off.slot_bytes()).c_str());
    std::fflush(stdout);
    stages = flux::plan_stages(r.table, off.plan());
    std::vector<double> ms;
    row.latents = flux::timed_denoise(off, view, stages, *f, p.inputs[i], r.steps, ms, false);
    row.step_ms = flux::steady_median(ms);
  }
}

/// C at each phase (the all-resident loop without ddo: every weight copied once to the device,
/// a forward of the phase's size) and its latents against the phase's, to the bit.
inline void gpu_resident_phases(const gpu_run& r, const resolution_phases& p,
                                const std::vector<flux::stage>& stages,
                                std::vector<resolution_row>& rows) {
  std::optional<flux::gpu::device_weights> weights;
  {
    const flux::host_weights host(r.table);  // freed once uploaded
    weights.emplace(host.refs());
  }
  flux::gpu::gemm_runner gemms;
  cudaStream_t stream = nullptr;
  DDO_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  try {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      flux::gpu::device_forward f(r.c, rows[i].image_tokens, p.inputs[i].text_tokens, gemms);
      f.bind(stream);
      ddo::runner::step_clock clock;
      const auto latents =
          flux::denoise(p.inputs[i], r.steps, flux::clocked(clock, [&](const auto& x, float t) {
                          return flux::resident_forward(*weights, stages, f, x, t);
                        }));
      clock.close();
      rows[i].compute_ms = flux::steady_median(clock.times().interval_ms);
      rows[i].equal = same_bits(latents, rows[i].latents);
    }
  } catch (...) {
    DDO_CUDA_TRY_NOTHROW(cudaStreamDestroy(stream));
    throw;
  }
  DDO_CUDA_TRY(cudaStreamDestroy(stream));
}

/// A cached re-setup's time at each phase's size (the offloader torn down and set up again on a
/// fresh capped transport with the run's plan cache and pinned cache), then C at each size, B
/// (the pinned rate on an uncapped linear transport) and each phase's bound.
inline void gpu_resident_rows_and_setups(const gpu_run& r, const resolution_phases& p,
                                         const ddo::setup_options& options,
                                         const gpu_phase_card& card,
                                         const std::vector<flux::stage>& stages,
                                         std::vector<resolution_row>& rows) {
  for (auto& row : rows) {
    auto at = options;
    at.reserve_device_bytes = row.reserve;
    const auto t0 = std::chrono::steady_clock::now();
    flux::on_card_transport(r.settings, card.limit, [&](auto transport) {
      auto prepared = ddo::prepare_offload<>(r.table, r.settings, at, std::move(transport));
      (void)prepared.start();
    });
    row.resetup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  gpu_resident_phases(r, p, stages, rows);
  auto probe_transport = ddo::make_transport<ddo::linear_transport>(r.settings);
  const double gbps =
      ddo::runner::measure_pinned_rates(probe_transport, 512ull << 20).best_gbps();
  for (auto& row : rows)
    row.bound_ms =
        ddo::runner::bound_ms_of(row.compute_ms, r.table.total_bytes() - row.resident, gbps);
}

/// The GPU path's --resolutions run (see the file comment): exit status.
inline int run_gpu_resolutions(const gpu_run& r, const ddo::cuda_device_probe& probe,
                               const resolution_phases& p) {
  const auto memory = ddo::query_device_memory(0);
  const auto reserve = measure_gpu_reserve(r.c, p);
  std::vector<resolution_row> rows(p.sizes.size());
  std::uint64_t largest = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i].size = p.sizes[i];
    rows[i].image_tokens = p.inputs[i].image_tokens;
    rows[i].reserve = reserve.bytes_at(static_cast<std::int64_t>(rows[i].image_tokens));
    largest = std::max(largest, rows[i].reserve);
  }
  const ddo::runner::vram_budget budget{static_cast<std::uint64_t>(r.vram_gib * double(ddo::gib)),
                                        memory.total_bytes - memory.free_bytes, largest};
  const gpu_phase_card card{budget.vram_bytes, budget.context_bytes,
                            budget.ddo_limit_bytes(ddo::runtime_device_reserve_bytes)};
  std::printf("device: %s; emulating a %s card (ddo's transport capped at %s, the card minus the "
              "%s CUDA context)\n",
              probe.name.c_str(), ddo::format_bytes(card.vram).c_str(),
              ddo::format_bytes(card.limit).c_str(), ddo::format_bytes(card.context).c_str());
  ddo::plan_cache plans;
  ddo::pinned_weight_cache pins;
  ddo::setup_options options;
  options.inputs = r.inputs;
  options.runtime.metrics = true;  // the moves are read from the metrics
  options.plans = &plans;
  options.pinned_cache = &pins;
  options.reserve_device_bytes = rows[0].reserve;
  std::vector<flux::stage> stages;
  flux::on_card_transport(r.settings, card.limit, [&](auto transport) {
    gpu_phase_steps(std::move(transport), r, p, options, reserve, card, rows, stages);
  });
  gpu_resident_rows_and_setups(r, p, options, card, stages, rows);
  print_resolution_table(rows, "the pinned host-to-device rate measured");
  bool within = true;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::printf("card: phase %zu context + engine reserve + ddo's peak %s the %s card\n", i,
                rows[i].within ? "within" : "OVER", ddo::format_bytes(card.vram).c_str());
    within = within && rows[i].within;
  }
  return print_phase_checks(rows) && within ? 0 : ddo::runner::exit_failure;
}

}  // namespace ddo_flux
