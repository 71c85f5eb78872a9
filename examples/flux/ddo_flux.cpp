// SPDX-License-Identifier: Apache-2.0
// ddo-flux: FLUX.1's transformer (diffusers' FluxTransformer2DModel) as an engine on ddo — the
// denoising loop of FluxPipeline over seeded inputs, the weights streamed by ddo per block.
//
//   ddo-flux --model PATH... [--steps N] [--width PX --height PX] [--text-tokens N]
//            [--guidance G] [--seed S] [--axes A,B,C] [--vram-gb GiB] [--check] [--graph]
//            [--output FILE] [--trace FILE.json] [--ddo-FLAG VALUE]...
//   ddo-flux --model PATH... --capacity-profile NAME [--calibrate | --smallest-card
//            [--max-slowdown X] [--card-step-gb GiB]] [--json FILE] ...
//   ddo-flux --make-model FILE [--config dev|tiny] [--dtype f32|bf16] [--seed S]
//
// The text encoders (CLIP, T5) and the VAE are not part of it: the inputs are what a pipeline
// hands the transformer — packed latents (2x2 patches of 16 channels), 512 T5 tokens, CLIP's
// pooled vector, position ids, timestep and guidance — generated from --seed. The latents after
// the last step are written to --output (little-endian: "DDOFLUX1", uint32 1, uint32 count,
// float32 values, image tokens x 64).
//
// With a GPU (and built with nvcc: DDO_FLUX_GPU) the engine runs the GPU forward
// (examples/flux/flux_gpu.hpp: cuBLASLt bf16 GEMMs with float accumulation, the kernels of
// flux_kernels.cu) on ddo's CUDA transports, on an emulated card of --vram-gb; without one (or
// with --cpu, or backend host_sim) the CPU float path (flux_cpu.hpp) on ddo's host_sim
// transport, where host memory stands in for the device and the compute stream's thread runs
// each stage. The route is the settings' (--ddo-backend, --ddo-execution-mode, presets, DDO_*):
// linear (pinned or pageable sources), the file route (nvme_baseline), or VMM (legacy or native).
// --check runs the same loop with every weight resident without ddo (in host memory, or copied
// once to the GPU) and fails unless the two outputs are equal to the bit. --graph captures the
// first step's forward and replays it for every step, through offloader.launch_graph when the
// ring is smaller than the streamed groups (docs/cuda-graphs.md); on the GPU it runs after the
// eager loop on the same offloader and must give its latents to the bit. --trace FILE.json
// writes a Chrome trace of the streamed run (flux_trace.hpp): ddo's loads, stalls, per-group
// compute and leases on their tracks and each step's host phases.
// On the GPU, --capacity-profile NAME --calibrate builds a capacity profile on this forward
// (flux_calibration.hpp: ddo::calibrate, each group timed at a quarter of the image tokens and
// at all of them);
// --capacity-profile NAME alone plans with it (the overlap-aware planner) and prints the
// predicted step against the measured median; --smallest-card finds by measurement the smallest
// emulated card within --max-slowdown of the all-resident step for the overlap planner and the
// spread and first rules (flux_gpu_runs.hpp, flux_card_sweep.hpp). --profile is not that: it
// times one resident step's GEMMs and attention (docs/calibration.md, "ddo-flux: calibrating
// the FLUX.1 engine").
// The stages, the lookup by name and the acquire/run/release loop are shared
// (docs/engine-walkthrough.md).

#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "ddo/cli/dynamic_offload_arguments.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/core/atomic_file.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/runtime/transport_setup.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/host_sim_vmm.hpp"
#include "ddo/transport/nvme.hpp"
#include "flux/flux_engine.hpp"
#include "flux/flux_init.hpp"
#include "flux/flux_modes.hpp"
#include "flux/flux_step_time.hpp"
#include "flux/flux_trace.hpp"
#include "runner/graph_launches.hpp"
#include "runner/program_main.hpp"
#include "runner/synthetic_options.hpp"
#include "runner/vram_budget.hpp"
#if defined(DDO_FLUX_GPU)
#include "ddo/platform/cuda_device.hpp"
#include "ddo/runtime/calibration.hpp"
#include "flux/flux_gpu.hpp"
#include "flux/flux_gpu_runs.hpp"
#include "runner/calibration_report.hpp"
#include "runner/compare_run.hpp"
#endif

namespace po = boost::program_options;

namespace {

using ddo::runner::exit_failure;
using ddo::runner::exit_usage;

/// --graph's refusal on the native VMM route (both paths).
constexpr const char* native_vmm_graph =
    "--graph: the native VMM route (vmm_fast_runtime) does not stream through a captured graph; "
    "graph streaming runs on the linear route and the legacy VMM route (--ddo-execution-mode "
    "vmm_runtime)";

int fail(const std::string& message, int status) {
  return ddo::runner::report_failure("ddo-flux", message, status);
}

using flux::ms_since;

std::array<int, 3> parse_axes(const std::string& text) {
  std::array<int, 3> axes{};
  std::stringstream in(text);
  std::string part;
  std::size_t n = 0;
  while (std::getline(in, part, ',')) {
    if (n == 3) break;
    try {
      std::size_t used = 0;
      axes[n] = std::stoi(part, &used);
      if (used != part.size()) throw std::invalid_argument(part);
    } catch (const std::exception&) {
      throw ddo::usage_error("--axes = \"" + text + "\": \"" + part + "\" is not a whole number");
    }
    ++n;
  }
  if (n != 3 || std::getline(in, part, ','))
    throw ddo::usage_error("--axes = \"" + text + "\": three numbers are expected (e.g. 16,56,56)");
  return axes;
}

flux::config named_config(const std::string& name) {
  if (name == "dev") return flux::config{};
  if (name == "tiny") return flux::tiny_config();
  throw ddo::usage_error("--config '" + name + "' is not one of dev, tiny");
}

/// Whether two runs' latents are bitwise equal (the --check and --graph verdicts).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void write_latents(const std::string& path, const std::vector<float>& latents) {
  std::string bytes = "DDOFLUX1";
  const auto put = [&](const void* p, std::size_t n) {
    bytes.append(static_cast<const char*>(p), n);
  };
  const std::uint32_t arrays = 1, count = static_cast<std::uint32_t>(latents.size());
  put(&arrays, 4);
  put(&count, 4);
  put(latents.data(), latents.size() * 4);
  ddo::write_file_atomically(path, bytes);
}

#if defined(DDO_FLUX_GPU)
using flux::steady_median;
using flux::steady_steps;
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
};

/// --calibrate: the smaller image the profile's low token count is timed at (half the rows and
/// columns of patches: a quarter of the image tokens, as ddo-run's quarter of --tokens).
flux::inputs low_inputs(const gpu_run& r) {
  return flux::seeded_inputs(r.c, std::max<std::size_t>(1, r.rows / 2),
                             std::max<std::size_t>(1, r.cols / 2), r.in.text_tokens, r.in.guidance,
                             r.seed);
}

/// What --profile's lines need from the run.
struct profile_inputs {
  double resident_median = 0.0, streamed_median = 0.0;
  std::uint64_t streamed_bytes = 0;
  ddo::runner::pinned_rates rates;                 ///< B: the best of them
  std::vector<double> streamed_ms, streamed_spans;  ///< the steady steps, for a fault's figures
};

/// --profile: one more resident step with every GEMM and attention call timed by events, the
/// bound, printed and added to @p o.
void print_profile(flux::gpu::device_forward& f, const flux::gpu::gemm_runner& gemms,
                   const flux::gpu::device_weights& weights, const std::vector<flux::stage>& stages,
                   const flux::inputs& in, cudaStream_t stream, ddo::json_writer& o,
                   const profile_inputs& m) {
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

/// The GPU forward on ddo's CUDA transport the settings choose, on an emulated card of
/// --vram-gb: ddo's transport is capped at the card minus the CUDA context (measured at start),
/// and the plan leaves free the engine's reserve, measured as the device memory the forward's
/// buffers and the cuBLASLt workspace took (cudaMemGetInfo before and after creating them).
/// The plan is prepare_offload's: with --capacity-profile, the overlap-aware planner's over the
/// stored profile (its predicted step printed against the measured median), with --calibrate
/// the zero-resident calibration plan, after whose steps ddo::calibrate times the forward at a
/// quarter of the image tokens and at all of them and the profile is saved.
int run_gpu(const gpu_run& r, const ddo::cuda_device_probe& probe) {
  // A calibration saves its profile after a minute of setup and steps: an unwritable directory
  // is said now.
  if (r.modes.calibrate)
    ddo::check_output_directory(ddo::profile_store(r.settings.profile_dir).directory(),
                                "profile directory");
  const auto memory = ddo::query_device_memory(0);
  const std::uint64_t context = memory.total_bytes - memory.free_bytes;
  flux::gpu::gemm_runner gemms;
  flux::gpu::device_forward f(r.c, r.in.image_tokens, r.in.text_tokens, gemms);
  // --calibrate: the forward of the low token count, its buffers in the engine's reserve too.
  std::optional<flux::inputs> in_low;
  std::optional<flux::gpu::device_forward> f_low;
  if (r.modes.calibrate) {
    in_low = low_inputs(r);
    f_low.emplace(r.c, in_low->image_tokens, in_low->text_tokens, gemms);
  }
  const auto after = ddo::query_device_memory(0);
  const std::uint64_t reserve = memory.free_bytes - after.free_bytes;
  const ddo::runner::vram_budget card{static_cast<std::uint64_t>(r.vram_gib * double(ddo::gib)),
                                      context, reserve};
  const std::uint64_t limit = card.ddo_limit_bytes(ddo::runtime_device_reserve_bytes);
  std::printf(
      "device: %s; emulating a %s card: ddo's transport capped at %s (the card minus the %s CUDA "
      "context); engine reserve measured %s (activations %s + cuBLASLt workspace %s)\n",
      probe.name.c_str(), ddo::format_bytes(card.vram_bytes).c_str(),
      ddo::format_bytes(limit).c_str(), ddo::format_bytes(context).c_str(),
      ddo::format_bytes(reserve).c_str(),
      ddo::format_bytes(f.device_bytes() + (f_low ? f_low->device_bytes() : 0)).c_str(),
      ddo::format_bytes(gemms.device_bytes()).c_str());
  ddo::setup_options options;
  options.inputs = r.inputs;
  options.reserve_device_bytes = reserve;
  options.tokens = r.in.image_tokens;  // a stored profile's timings at this run's image tokens
  if (r.modes.smallest_card)
    return flux::smallest_card_run({r.table, r.inputs, options, r.modes, r.in, r.steps, probe.name,
                                    context, reserve, card.vram_bytes, r.json},
                                   f);
  // --trace: the runtime's spans into the trace; under --calibrate through the recorder, which
  // times every group's compute and loads and forwards each span.
  std::optional<flux::run_trace> trace;
  if (!r.trace.empty()) {
    trace.emplace();
    options.runtime = trace->runtime_options(options.runtime);
  }
  ddo::calibration_recorder recorder(trace ? &trace->sink() : nullptr);
  if (r.modes.calibrate) options.runtime = recorder.runtime_options(options.runtime);
  // B of the bound, measured before ddo's setup on an uncapped linear transport (the pinned
  // host-to-device rate the streamed bytes cannot beat).
  ddo::runner::pinned_rates pinned_rates;
  if (r.modes.profile) {
    auto probe_transport = ddo::make_transport<ddo::linear_transport>(r.settings);
    pinned_rates = ddo::runner::measure_pinned_rates(probe_transport, 512ull << 20);
  }
  std::uint64_t streamed_bytes = 0;
  std::vector<flux::stage> stages;
  std::vector<double> streamed_ms, streamed_spans, graph_ms;  // intervals; spans apart
  std::vector<float> graph_latents;  // --graph: the captured loop's
  bool graph_differs = false;
  std::optional<double> predicted_ms;          // --capacity-profile: the plan's predicted step
  std::optional<ddo::capacity_profile> saved;  // --calibrate: the profile saved
  std::optional<ddo::runner::profile_step> saved_step;
  const auto run_on = [&](auto transport) {
    using transport_type = decltype(transport);
    auto prepared = ddo::prepare_offload<>(r.table, r.settings, options, std::move(transport));
    auto& setup = prepared.setup;
    if (r.modes.graph && setup.runtime.native_vmm.enabled) throw ddo::usage_error(native_vmm_graph);
    const std::uint64_t resident = setup.plan.total_bytes(ddo::placement::gpu_resident);
    streamed_bytes = r.table.total_bytes() - resident;
    std::printf("ddo: preset %s, %s transport, route %s: %s resident, %s streamed per step\n",
                r.settings.effective_preset.c_str(), std::string(prepared.transport.name()).c_str(),
                std::string(ddo::to_string(setup.runtime.route)).c_str(),
                ddo::format_bytes(resident).c_str(),
                ddo::format_bytes(r.table.total_bytes() - resident).c_str());
    if (!r.modes.capacity_profile.empty() && !r.modes.calibrate) {
      const auto& timings = flux::require_profile_timings(
          prepared.profile, r.modes.capacity_profile, r.settings.profile_dir);
      if (!timings.note.empty()) std::printf("%s\n", timings.note.c_str());
      predicted_ms =
          ddo::predict_plan(setup.plan, timings.timings, ddo::runner::ring_of(setup.runtime))
              .step_ms;
      std::printf(
          "  overlap-aware plan from capacity profile '%s' (resident budget %s: %s): "
          "predicted %.1f ms/step at %zu image tokens\n",
          r.modes.capacity_profile.c_str(),
          ddo::format_bytes(setup.plan.budgets.resident_budget_bytes).c_str(),
          setup.plan.budgets.resident_budget_detail.c_str(), *predicted_ms, r.in.image_tokens);
    }
    const std::uint64_t free_before = setup.machine.device.free_bytes;
    auto enabled = prepared.start();
    if (trace) trace->setup_finished();
    auto& off = *enabled.offloader;
    auto compute = off.transport().make_stream();
    const auto view = transport_type::view(compute);
    f.bind(view.handle);
    stages = flux::plan_stages(r.table, off.plan());
    auto out = flux::timed_denoise(off, view, stages, f, r.in, r.steps, streamed_ms, true,
                                   trace ? &*trace : nullptr, &streamed_spans);
    if (r.modes.graph) {
      // The same loop again on the same offloader and forward, its first step captured and
      // replayed for the rest. After the eager loop, which chose every GEMM shape's algorithm,
      // raised the attention kernel's shared memory and uploaded the constant inputs: work a
      // capture must not contain. The step's latents and timestep are staged on the device
      // before each launch (graph_forward).
      if constexpr (ddo::graph_streaming_transport<transport_type>) {
        flux::step_buffers buffers{r.in, 0.f, {}};
        flux::gpu::cuda_capture capture;
        std::optional<flux::gpu::captured_graph> captured;
        ddo::runner::step_clock clock;
        graph_latents = flux::denoise(r.in, r.steps, [&](const flux::inputs& x, float t) {
          clock.start();
          buffers.in.latents = x.latents;
          buffers.timestep = t;
          auto v = flux::graph_forward(off, view, stages, f, buffers, capture, captured);
          clock.end();
          std::printf("  graph step %zu: span %.2f ms (%s)\n", clock.started() - 1,
                      clock.last_span_ms(),
                      clock.started() == 1 ? "captured, instantiated, launched" : "replayed");
          return v;
        });
        clock.close();
        graph_ms = clock.times().interval_ms;
        ddo::runner::print_graph_launches(off);
      } else {
        throw ddo::usage_error("--graph: the " + std::string(off.transport().name()) +
                               " transport cannot stream through a captured graph");
      }
    }
    if (r.modes.calibrate) {
      // Through the library (flux::calibrate_forward: ddo::calibrate), on this offloader's
      // calibration plan: one forward of the first step's timestep per run_step, at a quarter of
      // the image tokens (the smaller forward) and at all of them; each forward's stages acquire,
      // run and release every group, then the stream is synchronized.
      f_low->bind(view.handle);
      ddo::calibration_options calibration;
      // Free on the card as the engine sees it: the capped transport's count less the engine's
      // reserve (allocated outside ddo), so the profile's peak in use counts the activations.
      calibration.free_vram_before = free_before;
      calibration.free_vram = [&] {
        const std::uint64_t free = off.transport().device_memory().free_bytes;
        return free > reserve ? free - reserve : 0;
      };
      std::fprintf(stderr, "ddo-flux: calibrating (compute at %zu and %zu image tokens)...\n",
                   in_low->image_tokens, r.in.image_tokens);
      saved = flux::calibrate_forward(
          off, recorder, r.settings.config, view, stages, f, r.in, *f_low, *in_low,
          flux::pipeline_timestep(flux::sigmas(r.steps, r.in.image_tokens)[0]), calibration);
      const ddo::profile_store store(r.settings.profile_dir);
      store.save(*saved);
      saved_step = ddo::runner::print_saved_profile(*saved, store, r.in.image_tokens);
    }
    const auto metrics = off.metrics(true);
    std::printf("ddo: %s moved over %d%s steps; %zu GEMM shapes, one cuBLASLt algorithm each\n",
                ddo::format_bytes(metrics.totals.bytes()).c_str(),
                r.modes.graph ? 2 * r.steps : r.steps,
                r.modes.graph       ? " (eager, then graph)"
                : r.modes.calibrate ? " (and calibration's)"
                                    : "",
                gemms.shapes());
    return out;
  };
  const std::vector<float> latents = flux::on_card_transport(r.settings, limit, run_on);
  if (!r.output.empty()) {
    write_latents(r.output, latents);
    std::printf("latents: %s (%zu x %d float32)\n", r.output.c_str(), r.in.image_tokens,
                r.c.in_channels);
  }
  if (trace) trace->write(r.trace);
  const double streamed_median = steady_median(streamed_ms);
  std::printf("streamed: median %.2f ms/step between step starts over %zu steady steps (step 0 "
              "is the warm-up); the forwards' spans: median %.2f ms\n",
              streamed_median, streamed_ms.size() > 1 ? streamed_ms.size() - 1 : 1,
              steady_median(streamed_spans));
  if (predicted_ms) {
    ddo::runner::print_predicted_vs_measured(*predicted_ms, streamed_median);
    std::printf("  predicted / measured = %.3f\n", *predicted_ms / streamed_median);
  }
  if (r.modes.graph) {
    // Step 0 of the graph loop captured and instantiated the step: its replays are the figure.
    const double graph_median = steady_median(graph_ms);
    const bool equal = same_bits(graph_latents, latents);
    std::printf(
        "graph: median %.2f ms/step over %zu replays (step 0, captured: %.2f ms); eager "
        "median %.2f ms/step; graph / eager = %.3fx\n",
        graph_median, graph_ms.size() > 1 ? graph_ms.size() - 1 : 1, graph_ms.front(),
        streamed_median, graph_median / streamed_median);
    std::printf("check: the graph's latents vs the eager loop's (GPU): %s\n",
                equal ? "bitwise equal" : "DIFFERENT");
    graph_differs = !equal;
  }
  ddo::json_writer o;  // --json: the figures of whatever ran
  o.begin_object(ddo::json_layout::lines).member("device", probe.name);
  o.member("image_tokens", r.in.image_tokens).member("text_tokens", r.in.text_tokens);
  o.member("card_gib", r.vram_gib, 3).member("streamed_bytes_per_step", streamed_bytes);
  o.member("streamed_ms", streamed_median, 3);
  if (predicted_ms) {
    o.member("capacity_profile", r.modes.capacity_profile).member("predicted_ms", *predicted_ms, 3);
    o.member("predicted_over_measured", *predicted_ms / streamed_median, 4);
  }
  if (saved) {
    o.member("capacity_profile", saved->name)
        .member("profile_path",
                ddo::profile_store(r.settings.profile_dir).path_of(saved->name).string());
    o.member("calibrated_tokens_low", saved->tokens_low)
        .member("calibrated_tokens_high", saved->tokens_high);
    o.member("profile_compute_ms", saved_step->compute_ms, 3)
        .member("profile_copy_ms", saved_step->copy_ms, 3);
  }
  if (r.modes.graph) {
    o.member("graph_ms", steady_median(graph_ms), 3)
        .member("graph_capture_ms", graph_ms.front(), 3);
    o.member("graph_bitwise_equal", !graph_differs);
  }
  bool resident_differs = false;
  if (r.modes.check || r.modes.profile) {
    // All resident on the device without ddo, the same forward (so the same GEMM algorithms,
    // workspace and buffers), its own stream.
    const flux::host_weights host(r.table);
    const flux::gpu::device_weights weights(host.refs());
    cudaStream_t stream = nullptr;
    DDO_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    f.bind(stream);
    ddo::runner::step_clock clock;
    const auto resident_latents =
        flux::denoise(r.in, r.steps, flux::clocked(clock, [&](const flux::inputs& x, float t) {
                        return flux::resident_forward(weights, stages, f, x, t);
                      }));
    clock.close();
    const double resident_median = steady_median(clock.times().interval_ms);
    std::printf("resident: median %.2f ms/step (all %zu weights on the device, no ddo)\n",
                resident_median, r.table.size());
    if (r.modes.profile)
      print_profile(f, gemms, weights, stages, r.in, stream, o,
                    {resident_median, streamed_median, streamed_bytes, pinned_rates,
                     steady_steps(streamed_ms), steady_steps(streamed_spans)});
    DDO_CUDA_TRY(cudaStreamDestroy(stream));
    if (r.modes.check) {
      const bool equal = same_bits(resident_latents, latents);
      std::printf("check: streamed through ddo vs all-resident without ddo (GPU): %s\n",
                  equal ? "bitwise equal" : "DIFFERENT");
      resident_differs = !equal;
    }
  }
  if (!r.json.empty()) {
    o.member("steps", r.steps).end_object();
    ddo::write_file_atomically(r.json, o.take() + "\n");
  }
  return resident_differs || graph_differs ? exit_failure : 0;
}
#endif

int run(int argc, char** argv) {
  std::vector<std::string> models;
  std::string make_model, config_name = "dev", dtype_name = "bf16", axes_text = "16,56,56", output,
                          trace_path;
  // Counts through one checked conversion (ddo/cli/bounded_integer.hpp): "-1" or a value past
  // the range is refused by the parser with the option's name and range, never wrapped.
  using flux_steps_option = ddo::bounded_integer<int, 1, 1000>;
  using pixels_option = ddo::bounded_integer<int, 16, 16384>;
  using text_tokens_option = ddo::bounded_integer<int, 1, 4096>;
  flux_steps_option steps_arg{28};
  pixels_option width_arg{1024}, height_arg{1024};
  text_tokens_option text_tokens_arg{512};
  double guidance = 3.5, vram_gib = 12.0;
  ddo::runner::seed_option seed_arg{0};
  bool force_cpu = false;
  flux::run_modes modes;
  std::string json;
  po::options_description general("ddo-flux options");
  general.add_options()("help,h", "Print this help and exit")(
      "model", po::value(&models)->multitoken()->value_name("PATH..."),
      "FLUX.1 transformer weights by their diffusers names: safetensors files or an .index.json")(
      "steps", po::value(&steps_arg)->value_name("N"), "Euler steps (default 28, FluxPipeline's)")(
      "width", po::value(&width_arg)->value_name("PX"),
      "Image width in pixels, a multiple of 16 (default 1024)")(
      "height", po::value(&height_arg)->value_name("PX"),
      "Image height in pixels, a multiple of 16 (default 1024)")(
      "text-tokens", po::value(&text_tokens_arg)->value_name("N"), "T5 tokens (default 512)")(
      "guidance", po::value(&guidance)->value_name("G"), "Guidance scale (default 3.5)")(
      "seed", po::value(&seed_arg)->value_name("S"),
      "Seed of the inputs (and of --make-model's weights)")(
      "axes", po::value(&axes_text)->value_name("A,B,C"),
      "RoPE axes (axes_dims_rope), summing to the head size (default 16,56,56)")(
      "vram-gb", po::value(&vram_gib)->value_name("GiB"),
      "The card ddo plans for (default 12): host_sim's device memory, or on a GPU an emulated "
      "card (ddo's transport capped at it minus the CUDA context)")(
      "cpu", po::bool_switch(&force_cpu), "Run the CPU path on host_sim even where a GPU is")(
      "profile", po::bool_switch(&modes.profile),
      "GPU: also time the all-resident steps, one step's GEMMs and attention (events), and the "
      "pinned bandwidth; print the streamed step's ratio to max(resident, bytes / bandwidth)")(
      "json", po::value(&json)->value_name("FILE"),
      "--profile, --capacity-profile or --smallest-card: write the figures to FILE")(
      "capacity-profile", po::value(&modes.capacity_profile)->value_name("NAME"),
      "GPU: plan with the stored capacity profile NAME (the overlap-aware planner; profile_name) "
      "and print its predicted step against the measured median. Not --profile, the timing "
      "switch")(
      "calibrate", po::bool_switch(&modes.calibrate),
      "With --capacity-profile: calibrate on this run's forward (build_profile: nothing resident, "
      "each group timed at a quarter of the image tokens and at all of them) and save the "
      "profile")(
      "smallest-card", po::bool_switch(&modes.smallest_card),
      "With --capacity-profile: find by measurement the smallest emulated card within "
      "--max-slowdown of the all-resident step, for the overlap planner and the spread and "
      "first rules (a fresh offloader per card, bisected over --card-step-gb)")(
      "max-slowdown", po::value(&modes.max_slowdown)->value_name("X"),
      "--smallest-card: the allowed step over the all-resident step (default 1.02)")(
      "card-step-gb", po::value(&modes.card_step_gib)->value_name("GiB"),
      "--smallest-card: the cards' spacing (default 0.5)")(
      "check", po::bool_switch(&modes.check),
      "Also run every step all-resident without ddo and fail unless the outputs are bitwise equal")(
      "output", po::value(&output)->value_name("FILE"), "Write the final latents here")(
      "trace", po::value(&trace_path)->value_name("FILE.json"),
      "Write a Chrome trace (Perfetto) of the streamed run: ddo's loads, stalls, each group's "
      "compute and leases, and each step's host phases (stage enqueueing, synchronize, velocity "
      "read, Euler update). Not with --graph or --smallest-card")(
      "graph", po::bool_switch(&modes.graph),
      "Capture the first step's forward and replay it for every step: through "
      "offloader.launch_graph when the ring (or the legacy VMM window) is smaller than the "
      "streamed groups, else directly. On the GPU after the eager loop, on the same offloader: "
      "prints both step times and fails unless the latents are bitwise equal. Not on the native "
      "VMM route (vmm_fast_runtime)")(
      "make-model", po::value(&make_model)->value_name("FILE"),
      "Write seeded weights (the tests' generator) to FILE.safetensors and exit")(
      "config", po::value(&config_name)->value_name("dev|tiny"),
      "--make-model: FLUX.1-dev's sizes or the tests' tiny model (default dev)")(
      "dtype", po::value(&dtype_name)->value_name("f32|bf16"),
      "--make-model: weight dtype (default bf16)")("no-environment", "Ignore every DDO_* variable");
  po::options_description ddo_flags("ddo settings (each also a DDO_* variable)");
  ddo::add_dynamic_offload_arguments(ddo_flags);
  po::options_description all;
  all.add(general).add(ddo_flags);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional({}).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return fail(ddo::describe_cli_error(e, all), exit_usage);
  }
  const int steps = steps_arg, width = width_arg, height = height_arg;
  const int text_tokens = text_tokens_arg;
  const std::uint64_t seed = seed_arg;
  if (vm.count("help")) {
    std::cout << "Usage: ddo-flux --model PATH... [--steps N] [--width PX --height PX] [--check]\n"
                 "                [--trace FILE.json]\n"
                 "       ddo-flux --model PATH... --capacity-profile NAME [--calibrate | "
                 "--smallest-card]\n"
                 "       ddo-flux --make-model FILE [--config dev|tiny] [--dtype f32|bf16]\n"
                 "FLUX.1's transformer on ddo (the GPU forward on a GPU, else the CPU float path\n"
                 "on host_sim; text encoders and VAE not included: seeded inputs stand in).\n\n"
              << all << '\n';
    return 0;
  }
  if (!make_model.empty()) {
    const auto c = named_config(config_name);
    ddo::dtype type = ddo::dtype::bf16;
    if (dtype_name == "f32")
      type = ddo::dtype::f32;
    else if (dtype_name != "bf16")
      return fail("--dtype '" + dtype_name + "' is not one of f32, bf16", exit_usage);
    flux::write_seeded_model(c, make_model, type, seed);
    std::printf(
        "wrote %s: %s FLUX.1 transformer (%d double + %d single blocks, %d x %d), seed %llu\n",
        make_model.c_str(), config_name.c_str(), c.double_blocks, c.single_blocks, c.heads,
        c.head_dim, static_cast<unsigned long long>(seed));
    return 0;
  }
  if (models.empty()) return fail("--model is required (or --make-model to write one)", exit_usage);
  modes.max_slowdown_given = vm.count("max-slowdown") != 0;
  modes.card_step_given = vm.count("card-step-gb") != 0;
  modes.output = !output.empty();
  modes.json = !json.empty();
  modes.trace = !trace_path.empty();
  flux::check_run_modes(modes);
  // An unwritable trace path is said now, not after the run.
  if (modes.trace) ddo::check_output_path(trace_path, "trace file");
  for (auto [v, name] : {std::pair{width, "--width"}, std::pair{height, "--height"}})
    if (v % 16 != 0)
      return fail(
          std::string(name) + " must be a multiple of 16 in 16..16384, got " + std::to_string(v),
          exit_usage);
  if (!(vram_gib > 0.0) || vram_gib > 65536.0)
    return fail("--vram-gb must be greater than 0 and at most 65536", exit_usage);

  const auto axes = parse_axes(axes_text);
  const ddo::weight_table table = ddo::load_safetensors(models);
  const flux::config c = flux::config_of(table, axes);
  const auto rows = static_cast<std::size_t>(height / 16),
             cols = static_cast<std::size_t>(width / 16);
  const flux::inputs in = flux::seeded_inputs(c, rows, cols, static_cast<std::size_t>(text_tokens),
                                              static_cast<float>(guidance), seed);
  std::printf(
      "model: %d double + %d single blocks, %d heads x %d, %s of weights; %zu image + %zu "
      "text tokens, %d steps\n",
      c.double_blocks, c.single_blocks, c.heads, c.head_dim,
      ddo::format_bytes(table.total_bytes()).c_str(), in.image_tokens, in.text_tokens, steps);

  // The engine states its activations to ddo: the joint sequence, q/k/v, the widest temporary
  // (the single block's [attention | MLP] rows) and the modulation vectors, in float.
  const std::size_t n = in.image_tokens + in.text_tokens, h = static_cast<std::size_t>(c.hidden());
  const std::uint64_t activations =
      4ull * (n * h * 6 + n * (h + static_cast<std::size_t>(c.mlp())) + 12 * h);

  ddo::resolve_inputs inputs;
  inputs.use_environment = vm.count("no-environment") == 0;
  inputs.cli = ddo::cli_config_layer(vm);
  inputs.component = "transformer";
  inputs.model_bytes = table.total_bytes();
  // --capacity-profile plans with the stored profile (profile_name), --calibrate builds it
  // (build_profile); --smallest-card sets them per card and rule (flux_card_sweep.hpp).
  if (!modes.capacity_profile.empty() && !modes.smallest_card)
    inputs.overrides.emplace_back(ddo::field_id::profile_name, modes.capacity_profile);
  if (modes.calibrate) inputs.overrides.emplace_back(ddo::field_id::build_profile, true);
  const auto settings = ddo::resolve_settings(inputs);
#if defined(DDO_FLUX_GPU)
  if (!force_cpu && settings.config.backend != ddo::offload_backend::host_sim) {
    const auto probe = ddo::probe_cuda_device(0);
    if (probe.available)
      return run_gpu({table, settings, inputs, c, in, steps, vram_gib, modes, output, json, rows,
                      cols, seed, trace_path},
                     probe);
    std::printf("no GPU (%s): the CPU path on host_sim\n", probe.reason.c_str());
  }
#else
  (void)force_cpu;
#endif
  if (modes.needs_gpu()) return fail(flux::gpu_only_modes, exit_usage);
  const bool check = modes.check, graph = modes.graph;
  ddo::setup_options options;
  options.inputs = inputs;
  options.reserve_device_bytes = activations;
  const ddo::host_sim_options sim{.device_capacity_bytes =
                                      static_cast<std::uint64_t>(vram_gib * double(ddo::gib))};
  options.host_sim = sim;
  std::optional<flux::run_trace> trace;  // --trace
  if (modes.trace) {
    trace.emplace();
    options.runtime = trace->runtime_options(options.runtime);
  }
  flux::host_phases* const phases = trace ? &*trace : nullptr;
  // host_sim stands in for the device on every route (simulated_routes::only), as in ddo-run
  // without a GPU: backend nvme
  // is the file route (over host_sim's VMM mode with execution_mode vmm_runtime), backend vmm
  // host_sim's VMM mode (the legacy or native VMM route by execution_mode), else the linear route.
  std::vector<flux::stage> stages;
  // The one call (ddo/setup/prepare_offload.hpp): the transport, the planner, the plan.
  const auto run_on = [&](auto& prepared) {
    using transport_type = typename std::decay_t<decltype(prepared)>::transport_type;
    const auto& setup = prepared.setup;
    const std::uint64_t resident = setup.plan.total_bytes(ddo::placement::gpu_resident);
    std::printf(
        "ddo: %s card (host_sim), preset %s, %s transport, route %s: %s resident, %s streamed per "
        "step; activations stated %s\n",
        ddo::format_bytes(sim.device_capacity_bytes).c_str(), settings.effective_preset.c_str(),
        std::string(prepared.transport.name()).c_str(),
        std::string(ddo::to_string(setup.runtime.route)).c_str(),
        ddo::format_bytes(resident).c_str(),
        ddo::format_bytes(table.total_bytes() - resident).c_str(),
        ddo::format_bytes(activations).c_str());
    if (graph && setup.runtime.native_vmm.enabled) throw ddo::usage_error(native_vmm_graph);
    if constexpr (!ddo::graph_streaming_transport<transport_type>) {
      if (graph)
        throw ddo::usage_error(
            "--graph runs on the linear route and the legacy VMM route; this "
            "run's transport is '" +
            std::string(prepared.transport.name()) +
            "', which cannot stream through a captured graph");
    }
    auto enabled = prepared.start();
    if (trace) trace->setup_finished();
    auto& off = *enabled.offloader;
    auto compute = off.transport().make_stream();
    const auto view = transport_type::view(compute);
    stages = flux::plan_stages(table, off.plan());
    const auto s = flux::sigmas(steps, in.image_tokens);
    std::vector<double> step_ms;
    // --graph: the captured stage tasks hold the forward and the step's buffers by reference, so
    // both live across the steps (eager: a forward per step, as before).
    std::optional<flux::forward> graph_f;
    std::optional<flux::step_buffers> buffers;
    if (graph) {
      graph_f.emplace(c, in.image_tokens, in.text_tokens);
      buffers.emplace(flux::step_buffers{in, 0.f, {}});
    }
    flux::transport_capture<transport_type> capture{off.transport()};
    std::optional<typename transport_type::graph> captured;
    auto out = flux::denoise(
        in, steps,
        [&](const flux::inputs& x, float t) {
          const auto t0 = std::chrono::steady_clock::now();
          std::vector<float> v;
          if constexpr (ddo::graph_streaming_transport<transport_type>) {
            if (graph) {
              buffers->in.latents = x.latents;
              buffers->timestep = t;
              v = flux::graph_forward(off, view, stages, *graph_f, *buffers, capture, captured);
            }
          }
          if (!graph) {
            flux::forward f(c, x.image_tokens, x.text_tokens);
            v = flux::streamed_forward(off, view, stages, f, x, t, phases);
          }
          step_ms.push_back(ms_since(t0));
          std::printf("  step %zu: sigma %.4f, %.1f ms\n", step_ms.size() - 1,
                      static_cast<double>(s[step_ms.size() - 1]), step_ms.back());
          return v;
        },
        nullptr, phases);
    const auto metrics = off.metrics(true);
    std::printf("ddo: %s moved over %d steps\n", ddo::format_bytes(metrics.totals.bytes()).c_str(),
                steps);
    if (graph) ddo::runner::print_graph_launches(off);
    return out;
  };
  const std::vector<float> latents = ddo::with_prepared_offload<>(
      table, settings, options, run_on, ddo::routes_of<ddo::simulated_routes::only>{});
  if (!output.empty()) {
    write_latents(output, latents);
    std::printf("latents: %s (%zu x %d float32)\n", output.c_str(), in.image_tokens, c.in_channels);
  }
  if (trace) trace->write(trace_path);
  if (check) {
    const flux::host_weights host(table);
    const auto resident_latents = flux::denoise(in, steps, [&](const flux::inputs& x, float t) {
      flux::forward f(c, x.image_tokens, x.text_tokens);
      return flux::resident_forward(host, stages, f, x, t);
    });
    const bool equal = same_bits(resident_latents, latents);
    std::printf("check: streamed through ddo vs all-resident without ddo: %s\n",
                equal ? "bitwise equal" : "DIFFERENT");
    if (!equal) return exit_failure;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ddo::runner::run_program("ddo-flux", run, argc, argv);
}
