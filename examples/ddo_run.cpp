// SPDX-License-Identifier: Apache-2.0
// ddo-run: runs denoising-like steps of a synthetic transformer forward over a safetensors model
// whose weights ddo streams to the device.
//
// With no arguments it generates (once, cached) a synthetic DiT-like model, resolves settings
// (preset auto < --config FILE.toml < DDO_* environment < --ddo-* flags), plans where every weight
// lives, and runs steps: on a GPU through the linear transport with one cuBLAS GEMM per linear
// weight; without one on the host_sim transport with a CPU stand-in for the compute, saying so.
// See docs/runner.md.
//
// Exit status: 0 ok; 1 a run-time failure (also a --verify mismatch); 2 invalid input.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <boost/program_options.hpp>

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define DDO_RUN_HAS_NVTX 1
#else
#define DDO_RUN_HAS_NVTX 0
#endif

#include "ddo/cli/dynamic_offload_arguments.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/config/settings_toml.hpp"
#include "ddo/config/toml_source.hpp"
#include "ddo/core/atomic_file.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/text.hpp"
#include "ddo/memory/process_memory.hpp"
#include "ddo/memory/system_probe.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/model/synthetic_model.hpp"
#include "ddo/plan/plan_format.hpp"
#include "ddo/plan/planner.hpp"
#include "ddo/platform/cuda_driver.hpp"
#include "ddo/profile/profile_lookup.hpp"
#include "ddo/runtime/calibration.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"
#include "ddo/transport/nvme.hpp"
#include "runner/calibration_report.hpp"
#include "runner/chrome_trace.hpp"
#include "runner/compare.hpp"
#include "runner/graph_launches.hpp"
#include "runner/compare_run.hpp"
#include "runner/device_memory_sampler.hpp"
#include "runner/devices_run.hpp"
#include "runner/interrupt_cleanup.hpp"
#include "runner/model_cache.hpp"
#include "runner/overlap_report.hpp"
#include "runner/pipeline_run.hpp"
#include "runner/program_main.hpp"
#include "runner/progress.hpp"
#include "runner/run_model.hpp"
#include "runner/run_setup.hpp"
#include "runner/setup_floor.hpp"
#include "runner/setup_progress_printer.hpp"
#include "runner/step_summary.hpp"
#include "runner/synthetic_forward.hpp"
#include "runner/synthetic_options.hpp"
#include "runner/trace_adapter.hpp"
#include "runner/vram_budget.hpp"

namespace po = boost::program_options;
using ddo::runner::chrome_trace;
using ddo::runner::trace_adapter;
using ddo::runner::cpu_engine;
using ddo::runner::cpu_vmm_engine;
using ddo::runner::cpu_nvme_engine;
using ddo::runner::cpu_nvme_vmm_engine;
using ddo::runner::describe_compute;
using ddo::runner::gpu_engine;
using ddo::runner::gpu_vmm_engine;
using ddo::runner::gpu_nvme_engine;
using ddo::runner::gpu_nvme_vmm_engine;
using ddo::runner::model_compute;
using ddo::runner::open_files;
using ddo::runner::progress_bar;
using ddo::runner::read_source;

static_assert(ddo::runner::cublas_workspace_bytes == ddo::runner::gpu_workspace_reserve_bytes,
              "ddo-plan's reserve must be the GPU engine's workspace");

namespace {

using ddo::runner::exit_failure;
using ddo::runner::exit_usage;

struct run_options {
  std::vector<std::string> models;
  int steps = 0;              // 0: the default for the device
  int warmup = 1;             // --warmup: untimed-for-the-median steps before the steady ones
  bool bound = true;          // --no-bound: skip measuring C and B (scripts that check the plan)
  bool setup_floor = false;   // --setup-floor: measure the setup's floor before the setup
  bool parallel_setup = false;  // --parallel-setup: runtime_options::parallel_setup
  std::int64_t tokens = 0;    // 0: the default for the device
  bool verify = false;
  std::string trace_path;
  std::string config_path;
  bool use_environment = true;
  bool force_cpu = false;
  bool print_settings = false;
  std::vector<double> vram_gib;  // empty: the default card (GPU 12 GiB; host_sim: see run_setup.hpp)
  bool vram_device = false;      // --vram-gb device: the whole real device, no emulation
  double ram_gb = 0.0;           // 0: probe available RAM
  bool compare = false;
  std::string json_path;         // --json: the compare report
  std::string cache_dir;
  ddo::synthetic_model_options synthetic;
  bool synthetic_given = false;  // any of --blocks, --hidden, ... given
  std::string profile_name;      // --profile
  bool calibrate = false;        // --calibrate
  bool pipeline = false;         // --pipeline: text encoder -> transformer steps -> VAE
  int images = 0;                // --images (pipeline; 0: the default)
  int devices = 1;               // --devices: offloaders sharing one weight store
  bool shard_layers = false;     // --shard layers: each device its range of the groups
  bool graph = false;            // --graph: capture the first step, replay it for the rest
};

// Short names for ddo's byte formatter (core/format_bytes.hpp), used on nearly every line printed.
std::string gb(std::uint64_t bytes) { return ddo::format_decimal_gb(bytes); }
std::string gib_text(std::uint64_t bytes) { return ddo::format_size(bytes, ddo::size_unit::gib); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// NVTX range for the runner's own phases (steps), so Nsight Systems shows them beside ddo's.
class nvtx_scope {
 public:
  nvtx_scope(bool on, const char* name) : on_(on && DDO_RUN_HAS_NVTX) {
#if DDO_RUN_HAS_NVTX
    if (on_) nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  nvtx_scope(const nvtx_scope&) = delete;
  nvtx_scope& operator=(const nvtx_scope&) = delete;
  ~nvtx_scope() {
#if DDO_RUN_HAS_NVTX
    if (on_) nvtxRangePop();
#endif
  }

 private:
  bool on_;
};

/// Reads every model file once, front to back, with a progress bar: the loading phase. It also
/// brings the files into the page cache, so ddo's packing at setup reads memory, not the disk.
void load_files(const ddo::weight_table& table) {
  std::uint64_t total = 0;
  for (const auto& path : table.files()) total += std::filesystem::file_size(path);
  progress_bar bar("loading model files", total);
  std::vector<std::byte> buffer(16 * ddo::mib);
  std::uint64_t done = 0;
  for (const auto& path : table.files()) {
    const ddo::file_reader reader(path, ddo::safetensors_backend::pread);
    const std::uint64_t size = std::filesystem::file_size(path);
    for (std::uint64_t off = 0; off < size; off += buffer.size()) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - off));
      reader.read(off, std::span(buffer.data(), n));
      done += n;
      bar.update(done);
    }
  }
  bar.finish();
}

// --- printing ----------------------------------------------------------------------------------

void print_settings_summary(const ddo::dynamic_offload_settings& s, const run_options& opt) {
  const auto& c = s.config;
  std::printf("settings:\n");
  std::printf("  preset: requested %s, effective %s%s%s\n", s.requested_preset.c_str(),
              s.effective_preset.c_str(), s.preset_reason.empty() ? "" : " — ",
              s.preset_reason.c_str());
  std::printf("  sources: defaults < preset < %s%s--ddo-* flags\n",
              opt.config_path.empty() ? "" : ("TOML " + opt.config_path + " < ").c_str(),
              opt.use_environment ? "DDO_* environment < " : "");
  std::printf("  execution_mode %s, strategy %s, enabled %s\n",
              std::string(ddo::enum_name(c.execution_mode)).c_str(),
              std::string(ddo::enum_name(c.linear_runtime_strategy)).c_str(),
              s.enabled ? "yes" : "no");
  std::printf("  pinning: requested %s, effective %s (WSL %s, disable_pin_on_wsl %s), %d worker(s)\n",
              s.requested_pin_cpu_memory ? "on" : "off", s.effective_pin_cpu_memory ? "on" : "off",
              s.running_on_wsl ? "yes" : "no", s.disable_pin_on_wsl ? "yes" : "no",
              c.pin_cpu_workers);
  std::printf("  budgets: resident_module_budget_gb %g, auto_budget_policy %s, "
              "max_resident_module_budget_gb %g, pin_weight_budget_gb %g, ratio %g\n",
              c.resident_module_budget_gb, std::string(ddo::enum_name(c.auto_budget_policy)).c_str(),
              c.max_resident_module_budget_gb, c.pin_weight_budget_gb, c.pin_weight_budget_ratio);
  for (const auto& comp : s.components)
    std::printf("  component %s: route %s\n", comp.name.c_str(),
                std::string(ddo::to_string(comp.route)).c_str());
  for (const auto& w : s.warnings) std::printf("  warning: %s\n", w.c_str());
}

void print_step_metrics(const ddo::step_metrics& m, bool timing) {
  std::printf("    moved %s (pinned %s, staged %s, file %s) in %llu copies, %llu group loads; "
              "%llu/%llu acquires prefetched",
              gb(m.bytes()).c_str(), gb(m.bytes(ddo::transfer_source::pinned)).c_str(),
              gb(m.bytes(ddo::transfer_source::pageable_staged)).c_str(),
              gb(m.bytes(ddo::transfer_source::file)).c_str(),
              static_cast<unsigned long long>(m.copies),
              static_cast<unsigned long long>(m.group_loads),
              static_cast<unsigned long long>(m.hits), static_cast<unsigned long long>(m.acquires));
  if (timing)
    std::printf("; copy %.1f ms (%.1f GB/s), stall %.1f ms, overlap %.2f", m.copy_ms,
                m.achieved_gbps(), m.stall_ms, m.overlap_ratio());
  if (m.host_wait_ms > 0) std::printf(", host wait %.1f ms", m.host_wait_ms);
  std::printf("\n");
}

/// The host-memory line of the summary (docs/runner.md says how to read it).
void print_host_memory(ddo::memory_watch& watch, std::uint64_t weight_bytes, bool simulated_device) {
  const auto& now = watch.sample();
  const double w = weight_bytes > 0 ? static_cast<double>(weight_bytes) : 1.0;
  auto ratio = [&](std::uint64_t b) { return static_cast<double>(b) / w; };
  std::printf("  host memory, weights %s: peak RSS %s (%.2fx; file pages now %s)", gb(weight_bytes).c_str(),
              gb(now.peak_rss_bytes).c_str(), ratio(now.peak_rss_bytes), gb(now.rss_file_bytes).c_str());
  if (now.has_pss) std::printf(", PSS %s (%.2fx)", gb(now.pss_bytes).c_str(), ratio(now.pss_bytes));
  std::printf(", MemTotal-MemAvailable +%s (%.2fx) since CUDA started (RSS then %s)%s\n",
              gb(watch.used_growth_bytes()).c_str(), ratio(watch.used_growth_bytes()),
              gb(watch.at_start().rss_bytes).c_str(),
              simulated_device ? "; on host_sim the simulated device memory is host memory and counts too" : "");
}

// --- the run -----------------------------------------------------------------------------------

struct run_context {
  const run_options& opt;
  const ddo::dynamic_offload_settings& settings;
  const ddo::weight_table& table;
  const std::vector<ddo::file_reader>& files;
  const model_compute& compute;
  std::int64_t tokens;
  int steps;
  bool gpu;
  ddo::component_route requested_route;
  ddo::setup_options setup;  // the engine's reserve (activations), stated RAM, the component
  ddo::runner::vram_budget budget;  // the card: context + engine reserve + ddo's bytes ≤ it
  bool emulated = false;            // budget.vram_bytes is an emulated card (else the real one)
  std::vector<ddo::runner::vram_budget> sweep;  // --compare: one ddo row per card
  std::string device_name;
  std::string model_name;
};

/// The setup against its floor (runner/setup_floor.hpp), measured in this run.
void print_setup_floor(const ddo::runner::setup_floor& f, double setup_s) {
  std::printf("setup floor (measured before the setup, same page cache): parallel read of %s into "
              "fresh page-aligned memory %.2f s (%.1f GB/s, %zu threads), registering those bytes "
              "%.2f s (%.1f GB/s)%s; setup / max(read, registration) = %.2fx (goal <= 1.3x)\n",
              gb(f.bytes).c_str(), f.read_s, f.read_gbps(), f.threads, f.register_s,
              f.register_gbps(), f.registered ? "" : " (the transport refused a chunk)",
              f.floor_s() > 0 ? setup_s / f.floor_s() : 0.0);
}

/// The accounted peak against the card, printed; false when it is over (a failed run).
bool report_budget(const run_context& ctx, std::uint64_t ddo_peak,
                   const ddo::runner::device_memory_sampler* sampler) {
  const auto check = ddo::runner::check_accounted_peak(ctx.budget, ddo_peak);
  std::printf("  device budget: %s %s card: CUDA context %s + engine reserve %s + ddo's peak %s = "
              "%s accounted: %s\n",
              ctx.emulated ? "emulated" : "real", gib_text(ctx.budget.vram_bytes).c_str(),
              gb(ctx.budget.context_bytes).c_str(), gb(ctx.budget.engine_reserve_bytes).c_str(),
              gb(ddo_peak).c_str(), gb(check.accounted_peak_bytes).c_str(),
              check.within() ? "within" : "OVER the card");
  if (sampler != nullptr) {
    // Everything in use on the device, every allocation of every process: what the accounting
    // cannot see (allocation rounding, cuBLAS's handle state) shows here.
    const std::uint64_t used = sampler->peak_used();
    std::printf("  device memory in use, sampled every 2 ms: peak %s%s\n", gb(used).c_str(),
                !ctx.emulated ? ""
                : used <= ctx.budget.vram_bytes
                    ? " (within the emulated card)"
                    : (" (" + gb(used - ctx.budget.vram_bytes) +
                       " over the emulated card: memory ddo and the engine's reserve do not "
                       "account for)").c_str());
  }
  if (ctx.emulated) std::printf("  note: %s\n", ddo::runner::emulation_caveat);
  return check.within();
}

/// C (the median of up to three steps of the engine's compute, every GEMM reading one device
/// buffer, nothing copied, after one warm-up step) and B (pinned host-to-device bandwidth) on
/// @p transport, each buffer small enough to leave the emulated card's room to ddo.
template <class Engine>
ddo::runner::measured_bound measure_bound(const run_context& ctx,
                                          typename Engine::transport_type& transport) {
  namespace r = ddo::runner;
  std::fprintf(stderr, "ddo-run: measuring the bound: compute with nothing copied, pinned "
                       "bandwidth...\n");
  const r::compare_inputs in{ctx.table, ctx.files, ctx.compute,
                             ddo::infer_execution_groups(ctx.table,
                                                         ctx.settings.config.resident_module_patterns),
                             ctx.tokens, std::min(ctx.steps, 3), ctx.gpu, false, 0, 0};
  r::measured_bound bound;
  bound.compute_ms = r::measure_compute_only<Engine>(in, transport);
  std::uint64_t copy_bytes = ctx.gpu ? 256 * ddo::mib : 16 * ddo::mib;
  if (const auto free = transport.device_memory().free_bytes; free != 0)
    copy_bytes = std::max<std::uint64_t>(ddo::mib, std::min(copy_bytes, free / 4));
  bound.pinned_gbps = r::measure_pinned_gbps(transport, copy_bytes);
  return bound;
}

/// Plans, sets up the offloader over @p transport and runs the steps with @p Engine.
template <class Engine>
int run_steps(run_context& ctx, typename Engine::transport_type transport) {
  const auto& opt = ctx.opt;
  const ddo::dynamic_offload_config& config = ctx.settings.config;

  // The one call (ddo/setup/prepare_offload.hpp), as ddo-plan and enable_offload take it: the
  // machine the plan sees (device memory minus the ring, the activations and ddo's reserve; a
  // stored capacity profile), the planner by profile, then the component's route:
  // dynamic_offload, the Diffusers group-offload translation, or none.
  // Host memory from here on: the transport exists, so CUDA has started (its context's own host
  // memory is in the baseline); what grows after is planning, ddo's setup and the steps.
  ddo::memory_watch host_memory;
  host_memory.start();
  chrome_trace trace;
  trace_adapter adapter(trace);
  ctx.setup.runtime.metrics = config.show_profile || !opt.trace_path.empty();
  ctx.setup.runtime.nvtx = ctx.gpu;
  // --verify also poisons each slot at release: a use after release in the engine reads 0xCD
  // bytes, which the check after the step reports (DDO_DEBUG_POISON_RELEASED_SLOTS otherwise).
  if (opt.verify) ctx.setup.runtime.poison_released_slots = true;
  if (!opt.trace_path.empty()) ctx.setup.runtime.trace = &adapter;
  if (opt.graph) {
    if constexpr (!ddo::graph_streaming_transport<typename Engine::transport_type>) {
      std::fprintf(stderr, "ddo-run: --graph runs on the linear route and the legacy VMM route "
                           "(or host_sim's); this run's transport is '%s', which cannot stream "
                           "through a captured graph\n",
                   std::string(transport.name()).c_str());
      return exit_usage;
    }
    if (ctx.setup.runtime.metrics) {
      std::fprintf(stderr, "ddo-run: --graph: metrics timing (show_profile) would need host reads "
                           "of every replay; run without --ddo-show-profile\n");
      return exit_usage;
    }
  }
  // Calibration (build_profile): the library's recorder times every group's compute and loads
  // (forwarding spans to the trace). A stored profile with group timings (format 2 or 3): the
  // overlap-aware planner (by_profile_planner), as ddo-plan plans it.
  ddo::calibration_recorder recorder(ctx.setup.runtime.trace);
  if (config.build_profile) ctx.setup.runtime = recorder.runtime_options(ctx.setup.runtime);
  // The bound's C and B, measured now on this transport, before ddo's setup takes its memory
  // (the same measurements as --compare's, runner/compare_run.hpp).
  std::optional<ddo::runner::measured_bound> bound;
  if (opt.bound) bound = measure_bound<Engine>(ctx, transport);
  // The setup's floor, on the same transport and page cache, just before the setup (which reads
  // the same files): as many reader threads as the machine has, up to 16.
  std::optional<ddo::runner::setup_floor> floor;
  if (opt.setup_floor) {
    std::fprintf(stderr, "ddo-run: measuring the setup's floor (parallel read, registration)...\n");
    floor = ddo::runner::measure_setup_floor(
        ctx.table, transport, std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  }
  auto prepared = ddo::prepare_offload<>(ctx.table, ctx.settings, ctx.setup, std::move(transport));
  auto& setup = prepared.setup;
  const auto& overlap = prepared.profile;
  if (opt.graph && setup.runtime.native_vmm.enabled) {
    std::fprintf(stderr, "ddo-run: --graph: the native VMM route (vmm_fast_runtime) does not stream "
                         "through a captured graph; graph streaming runs on the linear route and "
                         "the legacy VMM route (--ddo-execution-mode vmm_runtime)\n");
    return exit_usage;
  }
  for (const auto& n : setup.notes) std::printf("note: %s\n", n.c_str());
  if (!setup.machine.profile_note.empty()) std::printf("%s\n", setup.machine.profile_note.c_str());
  const std::uint64_t free_before = setup.machine.device.free_bytes;
  const std::uint64_t activations = ctx.setup.reserve_device_bytes;
  // The VMM route that runs (vmm_fast_runtime: native; vmm_runtime: legacy) is the runtime's
  // route name; a fixed transport without stable addresses runs the linear route (a note says so).
  std::string executed_route = std::string(ddo::to_string(setup.component.route)) + " (" +
                               std::string(prepared.transport.name()) + " transport";
  if (ddo::is_vmm_route(setup.runtime.route))
    executed_route += ", " + std::string(ddo::to_string(setup.runtime.route));
  executed_route += ")";
  std::printf("\nmachine the plan sees: device %s free of %s - ring %zu x %s - activations %s - "
              "ddo reserve %s = %s\n",
              gb(setup.machine.device.free_bytes).c_str(), gb(setup.machine.device.total_bytes).c_str(),
              setup.machine.slots, gb(setup.machine.slot_bytes).c_str(), gb(activations).c_str(),
              gb(setup.machine.runtime_reserve_bytes).c_str(),
              gb(setup.machine.capacity.free_vram_bytes).c_str());
  std::printf("\n%s", ddo::format_plan_summary(setup.plan, ctx.table).c_str());
  if (bound)
    bound->streamed_bytes =
        ctx.table.total_bytes() - setup.plan.total_bytes(ddo::placement::gpu_resident);
  std::optional<double> predicted_ms;
  if (overlap && !overlap->timings.empty()) {
    predicted_ms = ddo::predict_plan(setup.plan, overlap->timings, ddo::runner::ring_of(setup.runtime)).step_ms;
    std::printf("  overlap-aware plan from capacity profile '%s': predicted %.1f ms/step at %lld tokens\n",
                overlap->profile.name.c_str(), *predicted_ms, static_cast<long long>(ctx.tokens));
  }
  std::fflush(stdout);

  std::optional<ddo::runner::device_memory_sampler> sampler;
  if (ctx.gpu) sampler.emplace(0);

  std::fprintf(stderr, "ddo-run: setting up the offloader (pinning %s, uploading %s resident)...\n",
               gb(setup.plan.total_bytes(ddo::placement::pinned_host)).c_str(),
               gb(setup.plan.total_bytes(ddo::placement::gpu_resident)).c_str());
  const auto setup_t0 = std::chrono::steady_clock::now();
  ddo::runner::setup_progress_printer setup_progress;
  setup.runtime.on_setup_progress = setup_progress.callback();
  setup.runtime.parallel_setup = opt.parallel_setup;
  // ddo-run prints its own summary below (the same totals, with the route and host memory):
  // the library's show_profile summary would repeat it.
  setup.runtime.profile_summary = nullptr;
  auto enabled = prepared.start();
  auto& offloader = *enabled.offloader;
  setup_progress.finish();
  trace.reset_origin();  // the runtime's spans count from the end of its setup too
  host_memory.sample();
  const double setup_s = seconds_since(setup_t0);
  std::printf("\nsetup: %.2f s; ring %zu x %s, ddo device bytes %s\n", setup_s,
              offloader.slot_count(), gb(offloader.slot_bytes()).c_str(),
              gb(offloader.device_bytes()).c_str());
  if (floor) print_setup_floor(*floor, setup_s);
  if constexpr (requires { offloader.transport().file_io_description(); })
    std::printf("file route: %s\n", offloader.transport().file_io_description().c_str());

  Engine engine(offloader.transport(), ctx.tokens, ctx.compute.width, ctx.compute.type);
  auto view = engine.view();
  auto& t = offloader.transport();

  std::vector<std::byte> device_copy, source_copy;
  if (opt.verify) {
    std::uint64_t largest = 0;
    for (const auto& w : ctx.table.weights()) largest = std::max(largest, w.bytes);
    device_copy.resize(largest);
    source_copy.resize(largest);
  }
  std::uint64_t verified_bytes = 0, mismatches = 0;

  const int warmup = opt.warmup;
  const int total_steps = warmup + ctx.steps;
  std::printf("\nsteps: %d warm-up + %d steady, %lld tokens, %zu GEMMs per step (%s)\n", warmup,
              ctx.steps, static_cast<long long>(ctx.tokens), ctx.compute.gemms,
              Engine::compute_name());
  std::fflush(stdout);
  // Each step prints its own line; the bar is for terminals only (a log has the lines).
  progress_bar bar("steps", static_cast<std::uint64_t>(total_steps), "steps",
                   ::isatty(STDERR_FILENO) ? ddo::runner::progress_style::terminal
                                           : ddo::runner::progress_style::quiet);
  std::vector<double> step_ms;
  std::unique_ptr<typename Engine::graph_holder> graph;  // --graph: the captured step
  for (int step = 0; step < total_steps; ++step) {
    const std::string step_name = step < warmup ? "warm-up " + std::to_string(step)
                                                : "step " + std::to_string(step - warmup);
    nvtx_scope range(ctx.gpu, step_name.c_str());
    offloader.begin_step();
    const auto t0 = std::chrono::steady_clock::now();
    const double t0_us = trace.now_us();
    const auto enqueue_step = [&] {
      for (std::size_t g = 0; g < offloader.group_count(); ++g) {
        auto lease = offloader.acquire(g, view);
        const double enqueue_us = trace.now_us();
        for (std::size_t i = 0; i < lease.size(); ++i) {
          const std::size_t w = lease.weight_index(i);
          if (!ctx.compute.is_gemm[w]) continue;
          const auto& info = ctx.table[w];
          engine.linear(t, lease.data(i), info.shape[0], info.shape[1], info.type,
                        ctx.compute.alpha[w], ctx.compute.rows[w]);
        }
        if (!opt.trace_path.empty())
          trace.add("enqueue " + offloader.group_name(g), "compute", enqueue_us,
                    trace.now_us() - enqueue_us, chrome_trace::host);
        if (opt.verify) {
          // After the compute on the same stream: the bytes must still be the file's when the
          // GEMMs that read them are done (a prefetch overwriting a live slot would show here).
          for (std::size_t i = 0; i < lease.size(); ++i) {
            const std::size_t w = lease.weight_index(i);
            const std::size_t n = static_cast<std::size_t>(ctx.table[w].bytes);
            t.copy_to_host(device_copy.data(), lease.data(i), n, view);
            t.synchronize(view);
            read_source(ctx.table, ctx.files, w, std::span(source_copy.data(), n));
            verified_bytes += n;
            if (std::memcmp(device_copy.data(), source_copy.data(), n) != 0) {
              std::size_t at = 0;
              while (at < n && device_copy[at] == source_copy[at]) ++at;
              ++mismatches;
              bar.interrupt([&] {
                std::fprintf(stderr,
                             "ddo-run: VERIFY FAILED: step %d, group '%s', weight '%s': device bytes "
                             "differ from the file at byte %zu of %zu\n",
                             step, offloader.group_name(g).c_str(), ctx.table[w].name.c_str(), at, n);
              });
            }
          }
        }
      }
    };
    if constexpr (ddo::graph_streaming_transport<typename Engine::transport_type>) {
      if (opt.graph) {
        // --graph: the first step captured (acquires, GEMMs, lease drops), every step launched;
        // through ddo when the capture entered graph streaming (ddo enqueues the step's loads).
        if (!graph) {
          engine.begin_capture(t);
          enqueue_step();
          graph = engine.end_capture(t);
        }
        if (offloader.graph_mode())
          offloader.launch_graph(Engine::exec_of(*graph), view);
        else
          engine.launch(t, *graph);
      } else {
        enqueue_step();
      }
    } else {
      enqueue_step();
    }
    t.synchronize(view);  // per-step time for the printout (the benchmark never syncs)
    const double ms = seconds_since(t0) * 1e3;
    step_ms.push_back(ms);
    if (!opt.trace_path.empty())
      trace.add(step_name, "step", t0_us, trace.now_us() - t0_us, chrome_trace::host);
    if (sampler) sampler->sample();
    host_memory.sample();
    bar.interrupt([&] {
      std::printf("  %s: %.1f ms\n", step_name.c_str(), ms);
      if (config.show_profile) {
        const auto m = offloader.metrics();
        if (!m.steps.empty()) print_step_metrics(m.steps.back(), m.timing);
      }
      std::fflush(stdout);
    });
    bar.update(static_cast<std::uint64_t>(step + 1));
  }
  bar.finish();

  const auto metrics = offloader.metrics(true);
  if (sampler) sampler->stop();
  if (graph) {
    std::printf("\n");
    ddo::runner::print_graph_launches(offloader);
  }
  const auto summary = ddo::runner::summarize_steps(step_ms, warmup);
  std::printf("\n%s", ddo::runner::format_step_summary(summary, bound ? &*bound : nullptr).c_str());
  if (opt.verify && bound)
    std::printf("  (--verify: each step also copies every weight back and compares it, so the "
                "steps are slower than the bound says)\n");
  const std::string_view vmm_route = ddo::vmm_route_name(ctx.settings.config);
  std::printf("  route: requested %s (execution_mode %s%s%s), executed %s\n",
              std::string(ddo::to_string(ctx.requested_route)).c_str(),
              std::string(ddo::enum_name(ctx.settings.config.execution_mode)).c_str(),
              vmm_route.empty() ? "" : ": ", std::string(vmm_route).c_str(),
              executed_route.c_str());
  if (metrics.native.enabled)
    std::printf("  native VMM: %zu registered windows x %s (of the %zu vmm_staging_buffer_gb allows); "
                "retained sources %s (%s registered), %s read once, %s copied straight, %s via windows; "
                "micro-cache %llu hits, %llu misses\n",
                metrics.native.windows, gb(metrics.native.window_bytes).c_str(), metrics.native.windows_allowed,
                gb(metrics.native.retained_capacity).c_str(), gb(metrics.native.retained_registered).c_str(),
                gb(metrics.native.retained_bytes).c_str(), gb(metrics.native.retained_direct_bytes).c_str(),
                gb(metrics.native.window_bytes_staged).c_str(),
                static_cast<unsigned long long>(metrics.native.micro_cache_hits),
                static_cast<unsigned long long>(metrics.native.micro_cache_misses));
  if (metrics.vmm.slots > 0)
    std::printf("  VMM window: %zu slots, %llu handles x %s (%s mapped budget part); %llu binds, "
                "map/access/unmap host time %.1f ms = %.3f ms per GB loaded\n",
                metrics.vmm.slots, static_cast<unsigned long long>(metrics.vmm.handle_count),
                gb(metrics.vmm.handle_bytes).c_str(), gb(metrics.vmm.physical_bytes()).c_str(),
                static_cast<unsigned long long>(metrics.vmm.binds), metrics.vmm.host_ms(),
                metrics.vmm.host_ms_per_gb(metrics.totals.bytes()));
  if (config.show_profile) {
    std::printf("  totals:\n");
    print_step_metrics(metrics.totals, metrics.timing);
    std::printf("  resident %s, pinned %s (fallback to staging %s), staging buffers %s\n",
                gb(metrics.resident_bytes).c_str(), gb(metrics.pinned_bytes).c_str(),
                gb(metrics.pin_fallback_bytes).c_str(), gb(metrics.staging_bytes).c_str());
    std::printf("  peak device bytes: ddo's accounting %s", gb(metrics.peak_device_bytes).c_str());
    if (sampler)
      std::printf(", cudaMemGetInfo sampled %s (with activations and cuBLAS)",
                  gb(sampler->peak_above_baseline()).c_str());
    std::printf("\n");
  }
  if constexpr (requires { offloader.transport().file_stats(); }) {
    const auto fs = offloader.transport().file_stats();
    std::printf("  file route: %s read, %s delivered in %llu slot fill(s); reading took %.2f s "
                "(%.2f GB/s)\n",
                gb(fs.bytes_read).c_str(), gb(fs.bytes_delivered).c_str(),
                static_cast<unsigned long long>(fs.slot_fills), fs.read_seconds,
                fs.read_seconds > 0 ? static_cast<double>(fs.bytes_read) / fs.read_seconds / 1e9 : 0.0);
  }
  print_host_memory(host_memory, ctx.table.total_bytes(), !ctx.gpu);
  const bool within_budget =
      report_budget(ctx, ddo::runner::ddo_peak_device_bytes(t, metrics.peak_device_bytes),
                    sampler ? &*sampler : nullptr);
  if (opt.verify)
    std::printf("  verify: %s checked against the files, %llu mismatch(es)\n",
                gb(verified_bytes).c_str(), static_cast<unsigned long long>(mismatches));
  if (!opt.trace_path.empty()) ddo::runner::write_trace(trace, opt.trace_path);
  if (predicted_ms) ddo::runner::print_predicted_vs_measured(*predicted_ms, summary.median_ms);
  if (config.build_profile) {
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
  std::fflush(stdout);
  if (mismatches != 0) {
    std::fprintf(stderr, "ddo-run: --verify found %llu weight(s) whose device bytes differ from the file\n",
                 static_cast<unsigned long long>(mismatches));
    return exit_failure;
  }
  if (!within_budget) {
    std::fprintf(stderr, "ddo-run: the accounted device peak exceeded the %s card\n",
                 gib_text(ctx.budget.vram_bytes).c_str());
    return exit_failure;
  }
  return 0;
}

// --- --devices ---------------------------------------------------------------------------------

int fail(const std::string& message, int code);

/// --devices N (runner/devices_run.hpp): the linear transport on N GPUs where the host has them,
/// else N transports on the execution device, each capped at the card (emulated cards sharing
/// one link); without a GPU N host_sim devices of one simulated host.
int run_devices(run_context& ctx, bool gpu, std::uint64_t card_limit) {
  const auto& opt = ctx.opt;
  const auto backend = ctx.settings.config.backend;
  if (backend == ddo::offload_backend::vmm || backend == ddo::offload_backend::nvme)
    return fail(std::string("--devices runs the linear transport (host_sim without a GPU); "
                            "backend ") + std::string(ddo::enum_name(backend)) + " runs one device",
                exit_usage);
  const auto n = static_cast<std::size_t>(opt.devices);
  ddo::runner::devices_inputs in{ctx.settings, ctx.table,    ctx.files,  ctx.compute,
                                 ctx.tokens,   ctx.steps,    opt.warmup, opt.verify,
                                 opt.shard_layers, opt.bound,  ctx.setup,  ctx.budget};
  ddo::memory_watch host_memory;
  if (gpu) {
    const int gpus = ddo::query_cuda_availability().device_count;
    const bool real = gpus >= opt.devices;
    std::printf("devices: %zu %s\n", n,
                real ? "GPUs, one offloader each"
                     : "emulated cards on the one GPU (separate budgets and streams, one link)");
    std::vector<ddo::linear_transport> transports;
    for (std::size_t d = 0; d < n; ++d) {
      ddo::linear_options o;
      o.device = real ? static_cast<int>(d) : ddo::parse_execution_device(ctx.settings).index;
      o.device_limit_bytes = card_limit;
      transports.emplace_back(o);
    }
    host_memory.start();  // CUDA has started on every device used
    return ddo::runner::run_devices<gpu_engine>(in, std::move(transports), host_memory, false);
  }
  std::printf("devices: %zu simulated devices of one host (host_sim)\n", n);
  ddo::host_sim_options sim = ctx.setup.host_sim;
  sim.host = std::make_shared<ddo::host_sim_host>();
  std::vector<ddo::host_sim_transport> transports;
  for (std::size_t d = 0; d < n; ++d)
    transports.push_back(ddo::make_transport<ddo::host_sim_transport>(ctx.settings, sim));
  host_memory.start();
  return ddo::runner::run_devices<cpu_engine>(in, std::move(transports), host_memory, true);
}

// --- --compare ---------------------------------------------------------------------------------

/// --compare: the same model, engine, tokens and steps as (a) everything resident (when it fits
/// the real device), (b) ddo's plan on each emulated card of ctx.sweep, (c) the naive
/// copy-then-compute loop from pageable and from pinned memory; one table, ratios to the bound
/// measured now (runner/compare.hpp, runner/compare_run.hpp). @p base is an uncapped transport
/// (B, the resident row, the naive loops); @p make_emulated makes ddo's transport for one card.
template <class Engine, class MakeTransport>
int run_compare(run_context& ctx, typename Engine::transport_type base, MakeTransport&& make_emulated) {
  namespace r = ddo::runner;
  const auto& opt = ctx.opt;
  r::compare_inputs in{ctx.table,
                       ctx.files,
                       ctx.compute,
                       ddo::infer_execution_groups(ctx.table, ctx.settings.config.resident_module_patterns),
                       ctx.tokens,
                       ctx.steps,
                       ctx.gpu,
                       opt.verify,
                       ctx.budget.context_bytes,
                       ctx.budget.engine_reserve_bytes};
  r::compare_report report;
  report.device = ctx.device_name;
  report.transport = std::string(base.name());
  report.model = ctx.model_name;
  report.model_bytes = ctx.table.total_bytes();
  report.tokens = ctx.tokens;
  report.steps = ctx.steps;
  report.context_bytes = ctx.budget.context_bytes;
  report.engine_reserve_bytes = ctx.budget.engine_reserve_bytes;
  report.caveat = r::emulation_caveat;
  report.rss_reset = r::reset_peak_rss();

  std::fprintf(stderr, "ddo-run: --compare: measuring pinned host-to-device bandwidth...\n");
  report.pinned_gbps = r::measure_pinned_gbps(base, ctx.gpu ? 256 * ddo::mib : 64 * ddo::mib);

  r::compare_row resident;
  resident.variant = "resident";
  if (!ctx.gpu) {
    // host_sim's device is host memory: the real limit is the RAM beside the model's own pages.
    const auto ram = ddo::available_ram_bytes();
    if (ram && *ram < 2 * ctx.table.total_bytes())
      resident.skipped = "host_sim: " + gb(*ram) + " of RAM available cannot hold the model twice";
  }
  if (resident.skipped.empty()) {
    std::fprintf(stderr, "ddo-run: --compare: everything resident...\n");
    resident = r::run_resident<Engine>(in, base);
  }
  if (resident.skipped.empty()) {
    report.compute_ms = r::median_of(resident.step_ms);
    report.compute_source = "the resident row";
  } else {
    std::fprintf(stderr, "ddo-run: --compare: compute only (every GEMM reading one buffer)...\n");
    report.compute_ms = r::measure_compute_only<Engine>(in, base);
    report.compute_source = "compute only: every GEMM reads one device buffer, nothing copied";
  }
  report.rows.push_back(std::move(resident));

  for (const auto& budget : ctx.sweep) {
    std::fprintf(stderr, "ddo-run: --compare: ddo's plan on %s card of %s...\n",
                 ctx.emulated ? "an emulated" : "the real", gib_text(budget.vram_bytes).c_str());
    ddo::setup_options options = ctx.setup;
    options.host_sim.device_capacity_bytes =
        budget.ddo_limit_bytes(ddo::runtime_device_reserve_bytes);
    r::setup_progress_printer progress;
    options.runtime.on_setup_progress = progress.callback();
    auto row = r::run_ddo<Engine>(in, make_emulated(budget, options.host_sim), ctx.settings,
                                  options, budget);
    progress.finish();
    if (!ctx.emulated) row.vram_gib = 0.0;
    report.rows.push_back(std::move(row));
  }

  {
    std::fprintf(stderr, "ddo-run: --compare: naive copy-then-compute loops...\n");
    // One host copy for both rows: pageable first, then the same pages registered.
    r::host_model_copy host(in);
    report.rows.push_back(r::run_naive<Engine>(in, base, host, false));
    if (base.register_host(host.data(), host.bytes())) {
      try {
        report.rows.push_back(r::run_naive<Engine>(in, base, host, true));
      } catch (...) {
        base.unregister_host(host.data());
        throw;
      }
      base.unregister_host(host.data());
    } else {
      r::compare_row pinned;
      pinned.variant = "naive pinned";
      pinned.skipped = "page-locking the host copy was refused";
      report.rows.push_back(std::move(pinned));
    }
  }

  bool ok = true;
  for (auto& row : report.rows) {
    if (row.skipped.empty()) r::finish_row(row, report.compute_ms, report.pinned_gbps);
    if (row.within_budget && !*row.within_budget) ok = false;
    if (row.verified && !*row.verified) ok = false;
  }
  std::printf("\n%s", r::format_compare_table(report).c_str());
  std::string json_path = opt.json_path;
  if (json_path.empty() && ctx.sweep.size() > 1) json_path = "ddo-run-compare.json";
  if (!json_path.empty()) {
    ddo::write_file_atomically(json_path, r::compare_json(report));
    std::printf("compare: JSON written to %s%s\n", json_path.c_str(),
                ctx.sweep.size() > 1 ? " (plot: tools/plot_bench.py FILE.json -o FILE.png)" : "");
  }
  if (!ok) {
    std::fprintf(stderr, "ddo-run: --compare: a ddo row went over its card or failed its "
                         "verification pass (see the table)\n");
    return exit_failure;
  }
  return 0;
}

// --- arguments ---------------------------------------------------------------------------------

std::optional<ddo::dtype> parse_model_dtype(const std::string& text) {
  if (text == "bf16" || text == "BF16") return ddo::dtype::bf16;
  if (text == "fp16" || text == "f16" || text == "F16") return ddo::dtype::f16;
  if (text == "fp32" || text == "f32" || text == "F32") return ddo::dtype::f32;
  return std::nullopt;
}

int fail(const std::string& message, int code) {
  return ddo::runner::report_failure("ddo-run", message, code);
}

int run(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // keep stdout and stderr lines in order in logs
  // Before any thread starts: SIGINT/SIGTERM remove this run's temporaries (model cache, trace).
  ddo::runner::interrupt_cleanup interrupts("ddo-run");
  run_options opt;
  po::options_description general("ddo-run options");
  general.add_options()("help,h", "Print this help and exit")(
      "model", po::value<std::vector<std::string>>()->multitoken()->value_name("PATH..."),
      "Run these safetensors files (or .index.json) instead of the synthetic model; 2-D weights "
      "are linear layers [out, in]")(
      "steps", po::value<int>()->value_name("N"),
      "Steady steps to run and take the median of (default 3), after the warm-up steps")(
      "warmup", po::value<int>(&opt.warmup)->value_name("N"),
      "Warm-up steps before the steady ones, reported apart (default 1; 0..100)")(
      "no-bound",
      "Do not measure the bound max(C, W / B) before the steps (C costs up to four steps of "
      "compute; for scripts that check the plan, not the speed)")(
      "setup-floor", po::bool_switch(&opt.setup_floor),
      "Before the setup, measure its floor (a parallel read of the model files into fresh "
      "page-aligned memory; registering those bytes) and print setup / max(read, registration)")(
      "parallel-setup", po::bool_switch(&opt.parallel_setup),
      "Pack and page-lock the streamed groups beside the residents' upload at setup "
      "(runtime_options::parallel_setup; off by default)")(
      "tokens", po::value<std::int64_t>()->value_name("T"),
      "Activation rows per GEMM (default 4096 on a GPU, 8 on the CPU stand-in)")(
      "verify", po::bool_switch(&opt.verify),
      "Each step, copy every acquired weight back from the device and compare it with the file")(
      "trace", po::value<std::string>(&opt.trace_path)->value_name("FILE.json"),
      "Write a Chrome trace (Perfetto) of copies, stalls, leases and steps")(
      "config", po::value<std::string>(&opt.config_path)->value_name("FILE"),
      "TOML file of settings (keys are the config field names)")(
      "no-environment", "Ignore every DDO_* variable")(
      "print-settings", po::bool_switch(&opt.print_settings),
      "Print the full resolved settings as TOML (with where each value came from)")(
      "cpu", po::bool_switch(&opt.force_cpu), "Use host_sim and the CPU stand-in even with a GPU")(
      "vram-gb", po::value<std::string>()->value_name("GiB[,GiB...]|device"),
      "The card to emulate: the plan and ddo's device bytes, the engine's reserve and the CUDA "
      "context are held to it (default on a GPU 12, a consumer card; on host_sim the weights "
      "kept resident by rule + half the rest + the ring and reserves). Several sizes sweep them "
      "with --compare; 'device': the whole real device")(
      "ram-gb", po::value<std::string>()->value_name("GiB"),
      "Available system RAM to plan with, as an engine states it: shapes the plan and the pin "
      "budget, not the kernel's page cache (default: probed; available_system_ram_gb set "
      "explicitly wins)")(
      "compare", po::bool_switch(&opt.compare),
      "Run the model all resident, with ddo's plan, and as a naive copy-then-compute loop from "
      "pinned and pageable memory; print one table (ratios to the bound measured now)")(
      "json", po::value<std::string>(&opt.json_path)->value_name("FILE.json"),
      "--compare: write the table as JSON (a sweep writes ddo-run-compare.json by default)")(
      "profile", po::value<std::string>(&opt.profile_name)->value_name("NAME"),
      "Capacity profile NAME (profile_name): with a stored profile of group timings, plan with the "
      "overlap-aware planner and print predicted vs measured ms/step")(
      "calibrate", po::bool_switch(&opt.calibrate),
      "With --profile: calibrate (build_profile: zero resident, compute timed at a quarter of "
      "--tokens and at --tokens) and save the profile")(
      "pipeline", po::bool_switch(&opt.pipeline),
      "Run a synthetic text encoder -> transformer steps (--steps) -> VAE pipeline per image "
      "under one shared device budget (phases) and, in the same run, with that budget split "
      "by weight bytes; --hidden and --blocks (transformer blocks) size it")(
      "images", po::value<int>(&opt.images)->value_name("N"),
      "--pipeline: images to run (default 3 on a GPU, 2 on host_sim), after one warm-up image; "
      "its budgets are the settings pipeline_device_budget_gb / pipeline_pinned_budget_gb "
      "(--ddo-pipeline-device-budget-gb, DDO_PIPELINE_DEVICE_BUDGET_GB, TOML; default 40% of "
      "the weights + 64 MiB and every weight)")(
      "devices", po::value<int>(&opt.devices)->value_name("N"),
      "Run N devices at once, one offloader each (its own transport, card budget, ring, copy "
      "stream, plan and thread), all reading one shared host copy of the weights: N GPUs where "
      "the host has them, else N emulated cards (--vram-gb each) on the one GPU, sharing its "
      "link (host_sim without a GPU); reported per device and in total")(
      "graph", po::bool_switch(&opt.graph),
      "Capture the first step as a CUDA graph (host_sim: its graph model) and replay it for "
      "every step: through offloader.launch_graph when the ring (or the VMM window) is smaller "
      "than the streamed groups (graph streaming: the linear route with streamed groups pinned, "
      "or the legacy VMM route, execution_mode vmm_runtime; not the native VMM route), directly "
      "when every group stays loaded")(
      "shard", po::value<std::string>()->value_name("none|layers"),
      "With --devices: none (default) runs the whole model on each device (data parallel); "
      "layers gives each device its consecutive range of the execution groups (pipeline "
      "parallel)");
  po::options_description deprecated("deprecated");
  deprecated.add_options()("sim-vram-gb", po::value<std::string>()->value_name("GiB"),
                           "deprecated: --vram-gb (which now applies to a GPU too)");
  po::options_description synth("synthetic model (as ddo-make-model; cached by these values)");
  synth.add_options()("shape", po::value<std::string>()->value_name("dit|flux"),
                      "dit: one kind of block; flux: FLUX.1's double- and single-stream blocks "
                      "(default flux on a GPU, dit on the CPU)")(
      "blocks", po::value<ddo::runner::blocks_option>()->value_name("N"),
      "Transformer blocks; flux: double-stream blocks (default: dit 8 on the CPU; flux 19 on a "
      "GPU, 2 on the CPU)")(
      "single-blocks", po::value<ddo::runner::blocks_option>()->value_name("M"),
      "flux: single-stream blocks (default twice --blocks)")(
      "hidden", po::value<ddo::runner::hidden_option>()->value_name("H"),
      "Hidden size (default 1024 on the CPU, 3072 on a GPU)")(
      "mlp-ratio", po::value<ddo::runner::mlp_ratio_option>()->value_name("R"), "MLP width / hidden (default 4)")(
      "dtype", po::value<std::string>()->value_name("bf16|fp16|fp32"), "Weight dtype (default bf16)")(
      "shards", po::value<ddo::runner::shards_option>()->value_name("K"), "Files to split the model over (default 1)")(
      "seed", po::value<ddo::runner::seed_option>()->value_name("S"), "Random seed of the weights (default 0)")(
      "cache-dir", po::value<std::string>(&opt.cache_dir)->value_name("DIR"),
      "Where generated models are kept (default: beside ddo-run, else $TMPDIR)");
  po::options_description ddo_flags("ddo settings (each also a DDO_* variable)");
  ddo::add_dynamic_offload_arguments(ddo_flags);
  po::options_description all;
  all.add(general).add(synth).add(ddo_flags).add(deprecated);

  po::variables_map vm;
  try {
    const po::positional_options_description no_positionals;
    po::store(po::command_line_parser(argc, argv).options(all).positional(no_positionals).run(), vm);
    po::notify(vm);
  } catch (const po::error& error) {
    return fail(ddo::describe_cli_error(error, all), exit_usage);
  }
  if (vm.count("help")) {
    std::cout << "Usage: ddo-run [--model PATH...] [--steps N] [--tokens T] [--verify] "
                 "[--trace FILE.json]\n"
                 "               [--config FILE] [--ddo-FLAG VALUE]...\n"
                 "Runs steps of a synthetic transformer forward while ddo streams the weights.\n"
                 "With no --model, a synthetic model is generated once and cached (on a GPU\n"
                 "Flux-sized, run on an emulated 12 GiB card; --compare for the cost table).\n\n"
              << po::options_description().add(general).add(synth).add(ddo_flags) << '\n';
    return 0;
  }
  opt.use_environment = vm.count("no-environment") == 0;
  opt.bound = vm.count("no-bound") == 0;
  if (vm.count("model")) opt.models = vm["model"].as<std::vector<std::string>>();
  if (vm.count("steps")) {
    opt.steps = vm["steps"].as<int>();
    if (opt.steps < 1) return fail("--steps must be at least 1, got " + std::to_string(opt.steps), exit_usage);
  }
  if (opt.warmup < 0 || opt.warmup > 100)
    return fail("--warmup must be 0..100, got " + std::to_string(opt.warmup), exit_usage);
  if (vm.count("warmup") && (opt.compare || opt.pipeline))
    return fail("--warmup applies to the plain run (--compare and --pipeline each warm up once "
                "on their own)", exit_usage);
  if (vm.count("tokens")) {
    opt.tokens = vm["tokens"].as<std::int64_t>();
    if (opt.tokens < 1 || opt.tokens > (1 << 20))
      return fail("--tokens must be 1..1048576, got " + std::to_string(opt.tokens), exit_usage);
  }
  if (vm.count("sim-vram-gb") && vm.count("vram-gb"))
    return fail("give --vram-gb only (--sim-vram-gb is its deprecated spelling)", exit_usage);
  if (vm.count("sim-vram-gb") || vm.count("vram-gb")) {
    const bool old = vm.count("sim-vram-gb") != 0;
    const auto text = vm[old ? "sim-vram-gb" : "vram-gb"].as<std::string>();
    if (old)
      std::fprintf(stderr, "ddo-run: --sim-vram-gb is deprecated: use --vram-gb (the same size, "
                           "now also on a GPU)\n");
    if (!old && text == "device")
      opt.vram_device = true;
    else
      opt.vram_gib = ddo::runner::parse_size_list_gib(text, old ? "--sim-vram-gb" : "--vram-gb");
    if (old && opt.vram_gib.size() > 1)
      return fail("--sim-vram-gb takes one size; a sweep is --compare --vram-gb 4,8,...", exit_usage);
  }
  if (opt.vram_gib.size() > 1 && !opt.compare)
    return fail("--vram-gb " + vm["vram-gb"].as<std::string>() +
                    ": several sizes are a sweep, which needs --compare",
                exit_usage);
  if (vm.count("ram-gb"))
    opt.ram_gb = ddo::runner::parse_size_gib(vm["ram-gb"].as<std::string>(), "--ram-gb");
  if (opt.compare && !opt.trace_path.empty())
    return fail("--compare does not write a trace (--trace runs one plan)", exit_usage);
  if (!opt.json_path.empty() && !opt.compare)
    return fail("--json writes the --compare table; give --compare too", exit_usage);
  if (!opt.json_path.empty()) ddo::check_output_path(opt.json_path, "--json file");
  if (opt.devices < 1 || opt.devices > 64)
    return fail("--devices must be 1..64, got " + std::to_string(opt.devices), exit_usage);
  if (vm.count("shard")) {
    const auto shard = vm["shard"].as<std::string>();
    if (shard != "none" && shard != "layers")
      return fail("--shard = \"" + shard + "\": expected none or layers", exit_usage);
    opt.shard_layers = shard == "layers";
  }
  if (opt.devices > 1 && (opt.compare || opt.pipeline || opt.calibrate || !opt.trace_path.empty()))
    return fail("--devices runs the plain steps: --compare, --pipeline, --calibrate and --trace "
                "run one device",
                exit_usage);

  if (opt.graph && (opt.verify || opt.compare || opt.pipeline || opt.calibrate || opt.devices > 1 ||
                    !opt.trace_path.empty()))
    return fail("--graph replays one captured step: --verify (host reads inside the step), "
                "--trace (timing events), --compare, --pipeline, --calibrate and --devices run "
                "without it",
                exit_usage);

  // Settings: preset auto < --config < DDO_* < --ddo-* flags; the component is the transformer.
  ddo::resolve_inputs inputs;
  if (!opt.config_path.empty()) inputs.toml = ddo::read_toml_config(opt.config_path);
  inputs.use_environment = opt.use_environment;
  inputs.cli = ddo::cli_config_layer(vm);
  inputs.component = ddo::runner::run_component;
  if (opt.calibrate && opt.profile_name.empty())
    return fail("--calibrate needs --profile NAME (the name the profile is saved under)", exit_usage);
  if (!opt.profile_name.empty()) inputs.overrides.emplace_back("profile_name", opt.profile_name);
  if (opt.calibrate) inputs.overrides.emplace_back("build_profile", true);
  // ddo-run's --ddo-* flags are the reference's CLI helper: its 4 GiB VMM budget where no source
  // sets one (so `--ddo-execution-mode vmm_runtime` alone runs); on an emulated card smaller
  // than that (--vram-gb), what the card holds. Said so below when the VMM route uses it.
  double helper_vmm_budget_gb = ddo::cli_default_vmm_resident_weight_budget_gb;
  for (double card : opt.vram_gib) helper_vmm_budget_gb = std::min(helper_vmm_budget_gb, card);
  ddo::add_cli_helper_defaults(inputs, helper_vmm_budget_gb);
  // Preset auto may choose a VMM route: only where device 0 has VMM (not known without a GPU).
  if (!opt.force_cpu) inputs.vmm_supported = ddo::probe_vmm_supported(0);
  // `backend` picks the transport: host_sim runs the CPU stand-in even with a GPU (resolved once
  // here, before the model is known, only to read it).
  const auto early = ddo::resolve_settings(inputs);
  const bool backend_sim = early.config.backend == ddo::offload_backend::host_sim;
  if (ddo::set_explicitly(early, ddo::field_id::backend) && !backend_sim &&
      early.config.backend != ddo::offload_backend::linear &&
      early.config.backend != ddo::offload_backend::vmm &&
      early.config.backend != ddo::offload_backend::nvme)
    return fail(ddo::describe(early.provenance.of(ddo::field_id::backend)) +
                    ": backend = " + std::string(ddo::enum_name(early.config.backend)) +
                    ": this build has no such transport; use linear, vmm, nvme or host_sim",
                exit_usage);

  // Every output is checked now, not after the work: a calibration runs for minutes on a GPU
  // before it saves its profile.
  if (opt.calibrate)
    ddo::check_output_directory(ddo::profile_store(early.profile_dir).directory(),
                                "profile directory");
  // An unwritable trace path is reported now, not after the whole run.
  if (!opt.trace_path.empty()) {
    ddo::check_output_path(opt.trace_path, "trace file");
    interrupts.watch(std::filesystem::absolute(opt.trace_path).parent_path());
  }

  // The device decides the defaults.
  const auto gpu_probe = ddo::runner::probe_gpu(0);
  const bool gpu = gpu_probe.available && !opt.force_cpu && !backend_sim;
  if (gpu) {
    std::printf("ddo-run: GPU 0: %s (%s): linear transport, cuBLAS compute\n",
                gpu_probe.name.c_str(), gb(gpu_probe.total_bytes).c_str());
  } else if (opt.force_cpu || backend_sim) {
    std::printf("ddo-run: %s: host_sim transport with the CPU stand-in compute\n",
                opt.force_cpu ? "--cpu" : "backend host_sim");
  } else {
    std::printf("ddo-run: %s — running on the host_sim transport (host memory stands in for the "
                "GPU, threads for its copy engine) with a CPU stand-in for the compute\n",
                gpu_probe.reason.c_str());
  }

  // The CUDA context, measured now that CUDA has started and before anything is allocated: the
  // part of the card that is neither ddo's nor the engine's.
  std::uint64_t context_bytes = 0;
  if (gpu) {
    const auto memory = ddo::query_device_memory(0);
    context_bytes = memory.total_bytes - memory.free_bytes;
  }

  if (opt.pipeline) {
    for (const char* flag : {"compare", "model", "trace", "vram-gb", "sim-vram-gb", "calibrate", "profile",
                             "json", "shape", "single-blocks", "mlp-ratio", "dtype", "shards"})
      if (vm.count(flag) && !vm[flag].defaulted())
        return fail(std::string("--pipeline runs its own synthetic pipeline: --") + flag +
                        " does not apply (it takes --steps, --tokens, --images, --hidden, --blocks, "
                        "--verify, --ram-gb and the ddo settings, --ddo-pipeline-device-budget-gb "
                        "and --ddo-pipeline-pinned-budget-gb among them)",
                    exit_usage);
    ddo::runner::pipeline_run_options p;
    p.gpu = gpu;
    p.verify = opt.verify;
    p.images = vm.count("images") ? opt.images : (gpu ? 3 : 2);
    if (p.images < 1) return fail("--images must be at least 1, got " + std::to_string(p.images), exit_usage);
    p.shape.hidden = vm.count("hidden") ? static_cast<std::uint32_t>(vm["hidden"].as<ddo::runner::hidden_option>())
                                        : (gpu ? 3072u : 256u);
    p.shape.transformer_blocks = vm.count("blocks")
                                     ? static_cast<std::uint32_t>(vm["blocks"].as<ddo::runner::blocks_option>())
                                     : (gpu ? 24u : 6u);
    p.shape.text_encoder_blocks = std::max(1u, p.shape.transformer_blocks / 2);
    p.shape.vae_blocks = std::max(1u, p.shape.transformer_blocks / 6);
    p.shape.tokens = opt.tokens ? opt.tokens : (gpu ? 4608 : 4);
    p.shape.text_tokens = std::min<std::int64_t>(512, p.shape.tokens);
    p.shape.steps = opt.steps ? opt.steps : 4;
    inputs.component.clear();  // each component of the pipeline resolves its own
    // The budget decides residency, not the balanced rule's default cap; the small weights of
    // host_sim sizes still stream. Explicit settings (TOML, DDO_*, --ddo-*) win over both.
    inputs.overrides.emplace_back("max_resident_module_budget_gb", 0.0);
    inputs.overrides.emplace_back("small_tensor_threshold_bytes", std::int64_t{16384});
    p.setup.inputs = inputs;
    if (opt.ram_gb > 0.0) p.setup.ram_bytes = ddo::gib_to_bytes(opt.ram_gb);
    if (gpu)
      return ddo::runner::run_pipeline_mode<ddo::runner::gpu_engine>(
          p, [] { return ddo::linear_transport(ddo::linear_options{}); });
    return ddo::runner::run_pipeline_mode<ddo::runner::cpu_engine>(
        p, [] { return ddo::host_sim_transport(ddo::host_sim_options{}); });
  }

  auto& synthetic = opt.synthetic;
  // CPU default: big enough that the attention and MLP weights (1024² and 4096×1024 bf16) pass
  // the 1 MiB small-tensor threshold the environment defaults give, so they really stream.
  // GPU default: FLUX.1-sized (≈ 23.8 GB), so that a consumer card has to stream it.
  std::string shape = gpu ? "flux" : "dit";
  if (vm.count("shape")) shape = vm["shape"].as<std::string>();
  if (shape == "flux") {
    synthetic = gpu ? ddo::flux_model_options() : ddo::flux_model_options(2, 4, 1024);
  } else if (shape == "dit") {
    synthetic.blocks = gpu ? 24 : 8;
    synthetic.hidden = gpu ? 3072 : 1024;
    if (vm.count("single-blocks"))
      return fail("--single-blocks needs --shape flux (the dit shape has one kind of block)",
                  exit_usage);
  } else {
    return fail("--shape = \"" + shape + "\": expected dit or flux", exit_usage);
  }
  synthetic.mlp_ratio = 4;
  synthetic.type = ddo::dtype::bf16;
  if (vm.count("blocks")) {
    synthetic.blocks = vm["blocks"].as<ddo::runner::blocks_option>();
    if (shape == "flux") synthetic.single_blocks = 2 * synthetic.blocks;
  }
  if (vm.count("single-blocks"))
    synthetic.single_blocks = vm["single-blocks"].as<ddo::runner::blocks_option>();
  if (vm.count("hidden")) synthetic.hidden = vm["hidden"].as<ddo::runner::hidden_option>();
  if (vm.count("mlp-ratio")) synthetic.mlp_ratio = vm["mlp-ratio"].as<ddo::runner::mlp_ratio_option>();
  if (vm.count("shards")) synthetic.shards = vm["shards"].as<ddo::runner::shards_option>();
  if (vm.count("seed")) synthetic.seed = vm["seed"].as<ddo::runner::seed_option>();
  if (vm.count("dtype")) {
    const auto type = parse_model_dtype(vm["dtype"].as<std::string>());
    if (!type)
      return fail("--dtype = \"" + vm["dtype"].as<std::string>() + "\": expected bf16, fp16 or fp32",
                  exit_usage);
    synthetic.type = *type;
  }
  for (const char* flag :
       {"shape", "blocks", "single-blocks", "hidden", "mlp-ratio", "dtype", "shards", "seed"})
    if (vm.count(flag)) opt.synthetic_given = true;
  if (opt.synthetic_given && !opt.models.empty())
    return fail("--model runs your files; the synthetic-model flags (--blocks, --hidden, ...) "
                "cannot be combined with it",
                exit_usage);

  // The model.
  std::vector<std::string> paths = opt.models;
  if (paths.empty()) {
    const std::filesystem::path cache =
        opt.cache_dir.empty() ? ddo::runner::default_model_cache_dir() : std::filesystem::path(opt.cache_dir);
    bool generated = false;
    ddo::check_output_directory(cache, "model cache directory");
    interrupts.watch(cache);
    if (gpu && !opt.synthetic_given &&
        !std::filesystem::exists(ddo::runner::cached_model_entry(synthetic, cache))) {
      // The default Flux-sized model, made smaller when this machine cannot hold it (said so).
      std::error_code ec;
      std::filesystem::path probe = cache;
      while (!probe.empty() && !std::filesystem::exists(probe, ec)) probe = probe.parent_path();
      const auto space = std::filesystem::space(probe.empty() ? "." : probe, ec);
      std::string why;
      synthetic = ddo::runner::fit_flux_model(synthetic, ec ? 0 : space.available,
                                              ddo::available_ram_bytes().value_or(0), &why);
      if (!why.empty()) std::printf("model: %s\n", why.c_str());
    }
    const auto entry = ddo::runner::cached_model_entry(synthetic, cache);
    if (!std::filesystem::exists(entry)) {
      std::fprintf(stderr, "ddo-run: generating the synthetic model %s (%s) into %s ...\n",
                   ddo::runner::synthetic_model_key(synthetic).c_str(),
                   gb([&] {
                     std::uint64_t b = 0;
                     for (const auto& s : ddo::synthetic_model_specs(synthetic)) b += s.bytes();
                     return b;
                   }()).c_str(),
                   cache.string().c_str());
    }
    const auto t0 = std::chrono::steady_clock::now();
    paths.push_back(ddo::runner::ensure_synthetic_model(synthetic, cache, &generated));
    std::printf("model: synthetic %s, %s %s\n", ddo::runner::synthetic_model_key(synthetic).c_str(),
                generated ? "generated in" : "cached at",
                generated ? (std::to_string(seconds_since(t0)).substr(0, 4) + " s").c_str()
                          : paths.back().c_str());
  }

  const auto probe_backend = ddo::safetensors_backend::library_default;
  ddo::weight_table table = ddo::load_safetensors(std::span<const std::string>(paths), probe_backend);
  inputs.model_bytes = table.total_bytes();
  if (opt.ram_gb > 0.0) inputs.stated_ram_bytes = ddo::gib_to_bytes(opt.ram_gb);  // decides auto
  const ddo::dynamic_offload_settings settings = ddo::resolve_settings(inputs);
  if (settings.config.load_safetensors_backend != probe_backend)
    table = ddo::load_safetensors(std::span<const std::string>(paths),
                                  settings.config.load_safetensors_backend);
  std::printf("model: %zu tensors in %zu file(s), %s\n", table.size(), table.files().size(),
              gb(table.total_bytes()).c_str());
  print_settings_summary(settings, opt);
  if (settings.config.execution_mode == ddo::exec_mode::vmm_runtime &&
      settings.provenance.of(ddo::field_id::vmm_resident_weight_budget_gb).source ==
          ddo::origin::config)
    std::printf(
        "settings: vmm_resident_weight_budget_gb %s: %s (no TOML key, "
        "DDO_VMM_RESIDENT_WEIGHT_BUDGET_GB or flag sets it)\n",
        gib_text(ddo::gib_to_bytes(helper_vmm_budget_gb)).c_str(),
        helper_vmm_budget_gb < ddo::cli_default_vmm_resident_weight_budget_gb
            ? "what the emulated card holds (below the CLI helper's default 4 GiB)"
            : "the CLI helper's default");
  if (opt.print_settings) {
    std::ostringstream out;
    ddo::write_settings_toml(out, settings);
    std::printf("\n%s", out.str().c_str());
  }

  // The file route reads the files while it streams (O_DIRECT where allowed): warming the page
  // cache first would measure the cache, and a model larger than RAM does not fit in it.
  const bool file_route = settings.config.backend == ddo::offload_backend::nvme;
  if (!file_route) load_files(table);
  const auto files = open_files(table);
  const std::int64_t tokens = opt.tokens ? opt.tokens : ddo::runner::default_tokens(gpu);
  const model_compute compute = describe_compute(table, files, tokens);
  if (compute.gemms == 0)
    return fail("the model has no 2-D weights of a supported dtype (bf16, F16, F32) to multiply",
                exit_usage);
  if (compute.skipped_other_dtype != 0)
    std::printf("model: %zu 2-D weight(s) of a dtype other than %s are streamed but not multiplied\n",
                compute.skipped_other_dtype, std::string(ddo::to_string(compute.type)).c_str());

  ddo::component_route requested_route = ddo::component_route::dynamic_offload;
  for (const auto& c : settings.components)
    if (c.name == ddo::runner::run_component) requested_route = c.route;

  run_context ctx{opt,   settings, table, files, compute, tokens, 0,  gpu, requested_route,
                  {},    {},       false, {},    {},      {}};
  ctx.steps = opt.steps ? opt.steps : 3;
  ctx.device_name = gpu ? gpu_probe.name + " (" + gb(gpu_probe.total_bytes) + ")"
                        : std::string("host_sim (no GPU: host memory and a CPU stand-in)");
  if (opt.models.empty()) {
    ctx.model_name = "synthetic " + ddo::runner::synthetic_model_key(synthetic);
  } else {
    for (const auto& m : opt.models) ctx.model_name += (ctx.model_name.empty() ? "" : " ") + m;
  }
  // The engine's reserve: the runner's two activation buffers and, on a GPU, its cuBLAS
  // workspace (ddo-plan --tokens computes the same).
  const std::uint64_t reserve =
      ddo::runner::engine_reserve_bytes(tokens, ddo::runner::compute_shape_of(table), gpu);
  ctx.setup = ddo::runner::run_setup_options(
      inputs, reserve,
      opt.ram_gb > 0.0 ? std::optional<std::uint64_t>(ddo::gib_to_bytes(opt.ram_gb)) : std::nullopt);

  // The card(s): --vram-gb, else on a GPU a 12 GiB consumer card, on host_sim a device that
  // holds the rule-resident weights, half the rest, the ring and the reserves (so weights stream).
  ctx.emulated = !opt.vram_device;
  std::vector<std::uint64_t> cards;
  for (double v : opt.vram_gib) cards.push_back(ddo::gib_to_bytes(v));
  if (opt.vram_device) {
    cards.push_back(gpu ? gpu_probe.total_bytes
                        : ddo::runner::default_sim_device_bytes(table, settings, reserve));
  } else if (cards.empty()) {
    cards.push_back(gpu ? ddo::gib_to_bytes(ddo::runner::default_gpu_vram_gib)
                        : ddo::runner::default_sim_device_bytes(table, settings, reserve));
  }
  for (std::uint64_t card : cards) {
    ddo::runner::vram_budget b{card, context_bytes, reserve};
    (void)b.ddo_limit_bytes(ddo::runtime_device_reserve_bytes);  // refuses a card too small, now
    ctx.sweep.push_back(b);
  }
  ctx.budget = ctx.sweep.front();
  if (gpu && opt.vram_device)
    std::printf("device: the whole %s (no emulation)\n", gb(gpu_probe.total_bytes).c_str());
  else if (gpu)
    std::printf("device: emulating a %s card%s on the %s: ddo's transport capped at the card "
                "minus the CUDA context (%s measured at start)%s\n",
                gib_text(ctx.budget.vram_bytes).c_str(), opt.vram_gib.empty() ? " (the default)" : "",
                gpu_probe.name.c_str(), gb(context_bytes).c_str(),
                ctx.sweep.size() > 1 ? "; --compare sweeps every size given" : "");
  else
    std::printf("host_sim: simulated device memory %s%s\n", gib_text(ctx.budget.vram_bytes).c_str(),
                opt.vram_gib.empty() ? " (rule-resident weights + half the rest + the ring and "
                                       "reserves; --vram-gb to change)"
                                     : "");
  if (ctx.emulated) std::printf("note: %s\n", ddo::runner::emulation_caveat);

  const bool vmm = settings.config.backend == ddo::offload_backend::vmm;
  if (opt.compare && (vmm || file_route))
    return fail(
        std::string("--compare runs ddo's linear transport (host_sim without a GPU); backend ") +
            (vmm ? "vmm" : "nvme") + " is not compared",
        exit_usage);
  // ddo's transport on one card: capped at the card minus the context (0: uncapped, the device).
  auto gpu_limit = [&](const ddo::runner::vram_budget& b) -> std::uint64_t {
    return ctx.emulated ? b.ddo_limit_bytes(ddo::runtime_device_reserve_bytes) : 0;
  };
  // --compare: the linear transport on the device execution_device names, uncapped for the
  // bound and the baselines, capped per card for ddo's rows (make_transport, as with_transport
  // makes it).
  if (gpu && opt.compare)
    return run_compare<gpu_engine>(
        ctx, ddo::make_transport<ddo::linear_transport>(settings),
        [&](const ddo::runner::vram_budget& b, const ddo::host_sim_options&) {
          return ddo::make_transport<ddo::linear_transport>(settings, {}, gpu_limit(b));
        });
  if (!gpu)
    ctx.setup.host_sim.device_capacity_bytes =
        ctx.budget.ddo_limit_bytes(ddo::runtime_device_reserve_bytes);
  if (opt.devices > 1) return run_devices(ctx, gpu, gpu_limit(ctx.budget));
  ctx.setup.simulate_device = !gpu;
  ctx.setup.device_limit_bytes = gpu ? gpu_limit(ctx.budget) : 0;
  if (!gpu && opt.compare) {
    // The uncapped stand-in for the real device: room for the whole model and the reserve.
    ddo::host_sim_options base = ctx.setup.host_sim;
    base.device_capacity_bytes = table.total_bytes() + reserve + ddo::gib;
    return run_compare<cpu_engine>(ctx, ddo::make_transport<ddo::host_sim_transport>(settings, base),
                                   [&](const ddo::runner::vram_budget&, const ddo::host_sim_options& sim) {
                                     return ddo::make_transport<ddo::host_sim_transport>(settings, sim);
                                   });
  }
  // The transport `backend` chooses (ddo::with_transport, the one switch of the one call):
  // on a GPU capped at the card, without one host_sim standing in for it on every route.
  return ddo::with_transport(settings, ctx.setup, [&](auto transport) {
    return run_steps<ddo::runner::engine_for<decltype(transport)>>(ctx, std::move(transport));
  });
}

}  // namespace

int main(int argc, char** argv) { return ddo::runner::run_program("ddo-run", run, argc, argv); }
