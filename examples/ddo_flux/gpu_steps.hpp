// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux (examples/flux/ddo_flux.cpp) on a GPU: the streamed steps on the transport
/// the settings choose — ddo's setup and the plan's line (with --capacity-profile its predicted
/// step), the timed Euler loop, --graph's captured loop after it on the same offloader, and
/// --calibrate's profile. Needs a GPU and nvcc (DDO_FLUX_GPU). Example code
/// (docs/engine-walkthrough.md).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/runtime/calibration.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "flux/flux_calibration.hpp"
#include "flux/flux_engine.hpp"
#include "flux/flux_gpu.hpp"
#include "flux/flux_gpu_runs.hpp"
#include "flux/flux_modes.hpp"
#include "flux/flux_trace.hpp"
#include "ddo_flux/lora_option.hpp"
#include "ddo_flux/lora_switch.hpp"
#include "runner/calibration_report.hpp"
#include "runner/graph_launches.hpp"
#include "runner/step_timing.hpp"

namespace ddo_flux {

/// What one GPU run needs (run_gpu).
struct gpu_run {
  const ddo::weight_table& table;
  const ddo::dynamic_offload_settings& settings;
  const ddo::resolve_inputs& inputs;
  const flux::config& c;
  const flux::inputs& in;
  int steps = 1;
  double vram_gib = 12.0;
  flux::run_modes modes;
  std::string output;
  std::string json;
  std::size_t rows = 0, cols = 0;  ///< the image in 2x2 latent patches
  std::uint64_t seed = 0;
  std::string trace;  ///< --trace FILE.json ("": none)
  std::vector<lora_choice> loras;  ///< --lora, attached after setup (merged by ddo's kernel)
};

/// --calibrate: the smaller image the profile's low token count is timed at (half the rows and
/// columns of patches: a quarter of the image tokens, as ddo-run's quarter of --tokens).
inline flux::inputs low_inputs(const gpu_run& r) {
  return flux::seeded_inputs(r.c, std::max<std::size_t>(1, r.rows / 2),
                             std::max<std::size_t>(1, r.cols / 2), r.in.text_tokens, r.in.guidance,
                             r.seed);
}

/// The engine's device side: the forward's buffers and GEMMs (and --calibrate's smaller
/// forward), made before ddo's setup so that the plan leaves their memory free.
struct gpu_engine {
  flux::gpu::gemm_runner gemms;
  flux::gpu::device_forward f;
  std::optional<flux::inputs> in_low;  ///< --calibrate
  std::optional<flux::gpu::device_forward> f_low;

  explicit gpu_engine(const gpu_run& r) : f(r.c, r.in.image_tokens, r.in.text_tokens, gemms) {
    if (!r.modes.calibrate) return;
    in_low = low_inputs(r);
    f_low.emplace(r.c, in_low->image_tokens, in_low->text_tokens, gemms);
  }
};

/// What the streamed run hands to the report after its offloader is gone.
struct gpu_results {
  std::uint64_t streamed_bytes = 0;
  std::vector<flux::stage> stages;
  std::vector<double> streamed_ms, streamed_spans, graph_ms;  // intervals; spans apart
  std::vector<float> graph_latents;                           // --graph: the captured loop's
  std::optional<double> predicted_ms;          // --capacity-profile: the plan's predicted step
  std::optional<ddo::capacity_profile> saved;  // --calibrate: the profile saved
  std::optional<ddo::runner::profile_step> saved_step;
  std::optional<lora_switch_result> lora_switch;  // --lora-switch
};

/// What a streamed run is given besides the transport.
struct gpu_streaming {
  const gpu_run& r;
  const ddo::setup_options& options;
  gpu_engine& engine;
  ddo::calibration_recorder& recorder;
  flux::run_trace* trace;  ///< --trace (or null)
  std::uint64_t reserve;   ///< the engine's device bytes, outside ddo
};

/// The plan's line; with --capacity-profile (not --calibrate) its predicted step, kept in @p out.
/// @throws ddo::usage_error for --graph on the native VMM route, or without a stored profile.
template <class Prepared>
void print_gpu_plan(const Prepared& prepared, const gpu_run& r, gpu_results& out) {
  const auto& setup = prepared.setup;
  if (r.modes.graph && setup.runtime.native_vmm.enabled)
    throw ddo::usage_error(flux::native_vmm_graph);
  const std::uint64_t resident = setup.plan.total_bytes(ddo::placement::gpu_resident);
  out.streamed_bytes = r.table.total_bytes() - resident;
  std::printf("ddo: preset %s, %s transport, route %s: %s resident, %s streamed per step\n",
              r.settings.effective_preset.c_str(), std::string(prepared.transport.name()).c_str(),
              std::string(ddo::to_string(setup.runtime.route)).c_str(),
              ddo::format_bytes(resident).c_str(),
              ddo::format_bytes(r.table.total_bytes() - resident).c_str());
  if (r.modes.capacity_profile.empty() || r.modes.calibrate) return;
  const auto& timings = flux::require_profile_timings(prepared.profile, r.modes.capacity_profile,
                                                      r.settings.profile_dir);
  if (!timings.note.empty()) std::printf("%s\n", timings.note.c_str());
  out.predicted_ms =
      ddo::predict_plan(setup.plan, timings.timings, ddo::runner::ring_of(setup.runtime)).step_ms;
  std::printf(
      "  overlap-aware plan from capacity profile '%s' (resident budget %s: %s): "
      "predicted %.1f ms/step at %zu image tokens\n",
      r.modes.capacity_profile.c_str(),
      ddo::format_bytes(setup.plan.budgets.resident_budget_bytes).c_str(),
      setup.plan.budgets.resident_budget_detail.c_str(), *out.predicted_ms, r.in.image_tokens);
}

/// --graph: the same loop again on the same offloader and forward, its first step captured and
/// replayed for the rest. After the eager loop, which chose every GEMM shape's algorithm,
/// raised the attention kernel's shared memory and uploaded the constant inputs: work a capture
/// must not contain. The step's latents and timestep are staged on the device before each
/// launch (graph_forward).
/// @throws ddo::usage_error where the transport cannot stream through a captured graph.
template <class Offloader>
void gpu_graph_loop(Offloader& off, typename Offloader::stream_view view, const gpu_run& r,
                    flux::gpu::device_forward& f, gpu_results& out) {
  using transport_type = typename Offloader::transport_type;
  if constexpr (ddo::graph_streaming_transport<transport_type>) {
    flux::step_buffers buffers{r.in, 0.f, {}};
    flux::gpu::cuda_capture capture;
    std::optional<flux::gpu::captured_graph> captured;
    ddo::runner::step_clock clock;
    out.graph_latents = flux::denoise(r.in, r.steps, [&](const flux::inputs& x, float t) {
      clock.start();
      buffers.in.latents = x.latents;
      buffers.timestep = t;
      auto v = flux::graph_forward(off, view, out.stages, f, buffers, capture, captured);
      clock.end();
      std::printf("  graph step %zu: span %.2f ms (%s)\n", clock.started() - 1,
                  clock.last_span_ms(),
                  clock.started() == 1 ? "captured, instantiated, launched" : "replayed");
      return v;
    });
    clock.close();
    out.graph_ms = clock.times().interval_ms;
    ddo::runner::print_graph_launches(off);
  } else {
    throw ddo::usage_error("--graph: the " + std::string(off.transport().name()) +
                           " transport cannot stream through a captured graph");
  }
}

/// --calibrate, through the library (flux::calibrate_forward: ddo::calibrate), on this
/// offloader's calibration plan: one forward of the first step's timestep per run_step, at a
/// quarter of the image tokens (the smaller forward) and at all of them; each forward's stages
/// acquire, run and release every group, then the stream is synchronized. The profile is saved.
template <class Offloader>
void gpu_calibrate(Offloader& off, typename Offloader::stream_view view, const gpu_streaming& g,
                   std::uint64_t free_before, gpu_results& out) {
  const gpu_run& r = g.r;
  g.engine.f_low->bind(view.handle);
  ddo::calibration_options calibration;
  // Free on the card as the engine sees it: the capped transport's count less the engine's
  // reserve (allocated outside ddo), so the profile's peak in use counts the activations.
  calibration.free_vram_before = free_before;
  calibration.free_vram = [&off, reserve = g.reserve] {
    const std::uint64_t free = off.transport().device_memory().free_bytes;
    return free > reserve ? free - reserve : 0;
  };
  std::fprintf(stderr, "ddo-flux: calibrating (compute at %zu and %zu image tokens)...\n",
               g.engine.in_low->image_tokens, r.in.image_tokens);
  out.saved = flux::calibrate_forward(
      off, g.recorder, r.settings.config, view, out.stages, g.engine.f, r.in, *g.engine.f_low,
      *g.engine.in_low, flux::pipeline_timestep(flux::sigmas(r.steps, r.in.image_tokens)[0]),
      calibration);
  const ddo::profile_store store(r.settings.profile_dir);
  store.save(*out.saved);
  out.saved_step = ddo::runner::print_saved_profile(*out.saved, store, r.in.image_tokens);
}

/// The streamed run on @p transport (the settings' transport capped at the card): ddo's setup
/// (prepare_offload: with --capacity-profile the overlap-aware plan, with --calibrate the
/// zero-resident calibration plan), the timed Euler loop, then --graph or --calibrate on the
/// same offloader. Returns the eager loop's latents.
template <class Transport>
std::vector<float> gpu_streamed_run(Transport transport, const gpu_streaming& g,
                                    gpu_results& out) {
  const gpu_run& r = g.r;
  auto prepared = ddo::prepare_offload<>(r.table, r.settings, g.options, std::move(transport));
  print_gpu_plan(prepared, r, out);
  const std::uint64_t free_before = prepared.setup.machine.device.free_bytes;
  auto enabled = prepared.start();
  if (g.trace) g.trace->setup_finished();
  auto& off = *enabled.offloader;
  if (!r.loras.empty()) {
    off.set_lora_merge_launcher(flux::gpu::lora_merge_launcher());
    attach_loras(off, r.loras);
  }
  auto compute = off.transport().make_stream();
  const auto view = Transport::view(compute);
  g.engine.f.bind(view.handle);
  out.stages = flux::plan_stages(r.table, off.plan());
  auto latents = flux::timed_denoise(off, view, out.stages, g.engine.f, r.in, r.steps,
                                     out.streamed_ms, true, g.trace, &out.streamed_spans);
  if (r.modes.lora_switch) {
    // A switch ends when the device work it queued (copies, merges, reloads) is done.
    auto switched =
        time_lora_switches(off, r.loras, [] { DDO_CUDA_TRY(cudaDeviceSynchronize()); });
    std::vector<double> again_ms;
    switched.loop_again_equal = same_bits(
        flux::timed_denoise(off, view, out.stages, g.engine.f, r.in, r.steps, again_ms, false),
        latents);
    out.lora_switch = std::move(switched);
  }
  if (r.modes.graph) gpu_graph_loop(off, view, r, g.engine.f, out);
  if (r.modes.calibrate) gpu_calibrate(off, view, g, free_before, out);
  const auto metrics = off.metrics(true);
  std::printf("ddo: %s moved over %d%s steps; %zu GEMM shapes, one cuBLASLt algorithm each\n",
              ddo::format_bytes(metrics.totals.bytes()).c_str(),
              r.modes.graph ? 2 * r.steps : r.steps,
              r.modes.graph       ? " (eager, then graph)"
              : r.modes.calibrate ? " (and calibration's)"
                                  : "",
              g.engine.gemms.shapes());
  return latents;
}

}  // namespace ddo_flux
