// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux (examples/flux/ddo_flux.cpp) on a GPU, after the streamed run: its summary
/// (the median step, the prediction, --graph's verdict), --json's figures, and the
/// all-resident loop without ddo that --check compares bitwise and --profile times (one step's
/// GEMMs and attention by events, the bound). Needs a GPU and nvcc (DDO_FLUX_GPU). Example code
/// (docs/engine-walkthrough.md).

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/profile/profile_store.hpp"
#include "ddo_flux/gpu_steps.hpp"
#include "ddo_flux/latents.hpp"
#include "flux/flux_gpu.hpp"
#include "flux/flux_gpu_runs.hpp"
#include "runner/calibration_report.hpp"
#include "runner/compare_run.hpp"
#include "runner/step_timing.hpp"

namespace ddo_flux {

/// What --profile's lines need from the run.
struct profile_inputs {
  double resident_median = 0.0, streamed_median = 0.0;
  std::uint64_t streamed_bytes = 0;
  ddo::runner::pinned_rates rates;                 ///< B: the best of them
  std::vector<double> streamed_ms, streamed_spans;  ///< the steady steps, for a fault's figures
};

/// --profile: one more resident step with every GEMM and attention call timed by events, the
/// bound, printed and added to @p o.
inline void print_profile(flux::gpu::device_forward& f, const flux::gpu::gemm_runner& gemms,
                          const flux::gpu::device_weights& weights,
                          const std::vector<flux::stage>& stages, const flux::inputs& in,
                          cudaStream_t stream, ddo::json_writer& o, const profile_inputs& m) {
  flux::gpu::step_profile p;
  f.profile(&p);
  p.begin(stream);
  (void)flux::resident_forward(weights, stages, f, in, flux::pipeline_timestep(1.f));
  p.end(stream);
  f.profile(nullptr);
  const auto prof = p.sum();
  const double rest = prof.step_ms - prof.gemm_ms - prof.attention_ms;
  const double gemm_tflops = prof.gemm_flops / (prof.gemm_ms * 1e-3) / 1e12;
  const double attention_tflops =
      prof.attention_ms > 0 ? prof.attention_flops / (prof.attention_ms * 1e-3) / 1e12 : 0.0;
  std::printf(
      "profile (one resident step, events around each call): step %.2f ms; GEMMs %.2f ms, "
      "%.1f TFLOP/s; attention %.2f ms, %.1f TFLOP/s = %.3fx the GEMM rate; neither %.2f ms "
      "= %.1f%% of the step\n",
      prof.step_ms, prof.gemm_ms, gemm_tflops, prof.attention_ms, attention_tflops,
      attention_tflops / gemm_tflops, rest, 100.0 * rest / prof.step_ms);
  const auto [fused_bias, with_bias] = gemms.epilogue_bias_shapes();
  std::printf(
      "GEMM shapes with a bias: %zu of %zu add it in cuBLASLt's epilogue (the rest: a "
      "kernel after, counted in neither)\n",
      fused_bias, with_bias);
  // runner/step_timing.hpp: B the best pinned rate measured, the steps' intervals, a ratio
  // below the floor a measurement fault with its raw figures.
  const ddo::runner::bound_figures figures{m.streamed_ms, m.streamed_spans, m.resident_median,
                                           m.streamed_bytes, m.rates};
  const double pinned_gbps = m.rates.best_gbps();
  const double copy_ms = ddo::runner::copy_ms_at(m.streamed_bytes, pinned_gbps);
  const double bound = ddo::runner::bound_ms_of(figures);
  const auto verdict = ddo::runner::judge_ratio(m.streamed_median, bound);
  std::printf("bound: max(resident %.2f ms, %s streamed at %.1f GB/s pinned = %.2f ms) = %.2f ms "
              "(B the best of: %s); %s\n",
              m.resident_median, ddo::format_bytes(m.streamed_bytes).c_str(), pinned_gbps, copy_ms,
              bound, m.rates.describe().c_str(),
              ddo::runner::format_ratio("streamed median / bound", m.streamed_median, figures)
                  .c_str());
  o.member("pinned_gbps", pinned_gbps, 3);
  o.member("resident_ms", m.resident_median, 3).member("bound_ms", bound, 3);
  o.member("streamed_over_bound", verdict.ratio, 4).member("measurement_fault", verdict.fault);
  o.member("profile_step_ms", prof.step_ms, 3).member("gemm_ms", prof.gemm_ms, 3);
  o.member("gemm_tflops", gemm_tflops, 2).member("attention_ms", prof.attention_ms, 3);
  o.member("attention_tflops", attention_tflops, 2);
  o.member("attention_over_gemm_rate", attention_tflops / gemm_tflops, 4);
  o.member("neither_ms", rest, 3).member("neither_share", rest / prof.step_ms, 4);
}

/// The streamed median, the prediction against it, and --graph's replays against the eager
/// loop. Returns whether the graph's latents differ from @p latents.
inline bool print_gpu_summary(const gpu_run& r, const std::vector<float>& latents,
                              const gpu_results& res) {
  const double streamed_median = flux::steady_median(res.streamed_ms);
  std::printf("streamed: median %.2f ms/step between step starts over %zu steady steps (step 0 "
              "is the warm-up); the forwards' spans: median %.2f ms\n",
              streamed_median, res.streamed_ms.size() > 1 ? res.streamed_ms.size() - 1 : 1,
              flux::steady_median(res.streamed_spans));
  if (res.predicted_ms) {
    ddo::runner::print_predicted_vs_measured(*res.predicted_ms, streamed_median);
    std::printf("  predicted / measured = %.3f\n", *res.predicted_ms / streamed_median);
  }
  if (!r.modes.graph) return false;
  // Step 0 of the graph loop captured and instantiated the step: its replays are the figure.
  const double graph_median = flux::steady_median(res.graph_ms);
  const bool equal = same_bits(res.graph_latents, latents);
  std::printf(
      "graph: median %.2f ms/step over %zu replays (step 0, captured: %.2f ms); eager "
      "median %.2f ms/step; graph / eager = %.3fx\n",
      graph_median, res.graph_ms.size() > 1 ? res.graph_ms.size() - 1 : 1, res.graph_ms.front(),
      streamed_median, graph_median / streamed_median);
  std::printf("check: the graph's latents vs the eager loop's (GPU): %s\n",
              equal ? "bitwise equal" : "DIFFERENT");
  return !equal;
}

/// --json's figures of whatever ran (the object left open: --profile adds to it).
inline void begin_gpu_json(ddo::json_writer& o, const gpu_run& r, const std::string& device,
                           const gpu_results& res, bool graph_differs) {
  const double streamed_median = flux::steady_median(res.streamed_ms);
  o.begin_object(ddo::json_layout::lines).member("device", device);
  o.member("image_tokens", r.in.image_tokens).member("text_tokens", r.in.text_tokens);
  o.member("card_gib", r.vram_gib, 3).member("streamed_bytes_per_step", res.streamed_bytes);
  o.member("streamed_ms", streamed_median, 3);
  if (res.predicted_ms) {
    o.member("capacity_profile", r.modes.capacity_profile)
        .member("predicted_ms", *res.predicted_ms, 3);
    o.member("predicted_over_measured", *res.predicted_ms / streamed_median, 4);
  }
  if (res.saved) {
    o.member("capacity_profile", res.saved->name)
        .member("profile_path",
                ddo::profile_store(r.settings.profile_dir).path_of(res.saved->name).string());
    o.member("calibrated_tokens_low", res.saved->tokens_low)
        .member("calibrated_tokens_high", res.saved->tokens_high);
    o.member("profile_compute_ms", res.saved_step->compute_ms, 3)
        .member("profile_copy_ms", res.saved_step->copy_ms, 3);
  }
  if (r.modes.graph) {
    o.member("graph_ms", flux::steady_median(res.graph_ms), 3)
        .member("graph_capture_ms", res.graph_ms.front(), 3);
    o.member("graph_bitwise_equal", !graph_differs);
  }
}

/// --check and --profile: the same forward all resident on the device without ddo (so the same
/// GEMM algorithms, workspace and buffers), on its own stream. Returns whether its latents
/// differ from @p latents (--check).
inline bool gpu_resident_run(const gpu_run& r, gpu_engine& e, const gpu_results& res,
                             const std::vector<float>& latents,
                             const ddo::runner::pinned_rates& rates, ddo::json_writer& o) {
  flux::host_weights host(r.table);
  flux::gpu::device_weights weights(host.refs());
  // --lora: merged on the device by ddo's kernel, the one the streamed slots get.
  if (!r.loras.empty())
    weights.merge(merge_list(r.loras), r.table, flux::gpu::lora_merge_launcher());
  cudaStream_t stream = nullptr;
  DDO_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  e.f.bind(stream);
  ddo::runner::step_clock clock;
  const auto resident_latents =
      flux::denoise(r.in, r.steps, flux::clocked(clock, [&](const flux::inputs& x, float t) {
                      return flux::resident_forward(weights, res.stages, e.f, x, t);
                    }));
  clock.close();
  const double resident_median = flux::steady_median(clock.times().interval_ms);
  std::printf("resident: median %.2f ms/step (all %zu weights on the device, no ddo)\n",
              resident_median, r.table.size());
  if (r.modes.profile)
    print_profile(e.f, e.gemms, weights, res.stages, r.in, stream, o,
                  {resident_median, flux::steady_median(res.streamed_ms), res.streamed_bytes,
                   rates, flux::steady_steps(res.streamed_ms),
                   flux::steady_steps(res.streamed_spans)});
  DDO_CUDA_TRY(cudaStreamDestroy(stream));
  if (!r.modes.check) return false;
  const bool equal = same_bits(resident_latents, latents);
  std::printf("check: streamed through ddo vs all-resident without ddo (GPU): %s\n",
              equal ? "bitwise equal" : "DIFFERENT");
  return !equal;
}

}  // namespace ddo_flux
