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
#include "ddo/core/atomic_file.hpp"
#include "ddo/config/settings_toml.hpp"
#include "ddo/config/toml_source.hpp"
#include "ddo/memory/system_probe.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/model/synthetic_model.hpp"
#include "ddo/plan/plan_format.hpp"
#include "ddo/plan/planner.hpp"
#include "ddo/profile/profile_lookup.hpp"
#include "ddo/runtime/calibration.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/runtime/setup.hpp"
#include "ddo/runtime/trace.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"
#include "runner/chrome_trace.hpp"
#include "runner/device_memory_sampler.hpp"
#include "runner/interrupt_cleanup.hpp"
#include "runner/model_cache.hpp"
#include "runner/overlap_report.hpp"
#include "runner/progress.hpp"
#include "runner/run_setup.hpp"
#include "runner/synthetic_forward.hpp"
#include "runner/synthetic_options.hpp"

namespace po = boost::program_options;
using ddo::runner::chrome_trace;
using ddo::runner::progress_bar;

namespace {

constexpr int exit_failure = 1;
constexpr int exit_usage = 2;

struct run_options {
  std::vector<std::string> models;
  int steps = 0;              // 0: the default for the device
  std::int64_t tokens = 0;    // 0: the default for the device
  bool verify = false;
  std::string trace_path;
  std::string config_path;
  bool use_environment = true;
  bool force_cpu = false;
  bool print_settings = false;
  double sim_vram_gb = 0.0;   // 0: the rule-resident weights + half the rest (so something streams)
  double ram_gb = 0.0;        // 0: probe available RAM
  std::string cache_dir;
  ddo::synthetic_model_options synthetic;
  bool synthetic_given = false;  // any of --blocks, --hidden, ... given
  std::string profile_name;      // --profile
  bool calibrate = false;        // --calibrate
};

std::string gb(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

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

/// Forwards the runtime's spans into the runner's Chrome trace, on tracks by kind.
class trace_adapter final : public ddo::trace_sink {
 public:
  explicit trace_adapter(chrome_trace& trace) : trace_(trace) {}
  void on_span(const ddo::trace_span& s) override {
    int track = chrome_trace::runtime;
    if (s.kind == ddo::span_kind::copy) track = chrome_trace::copy_stream;
    if (s.kind == ddo::span_kind::stall) track = chrome_trace::compute_stream;
    std::vector<std::pair<std::string, std::string>> args;
    if (s.bytes != 0) args.emplace_back("bytes", std::to_string(s.bytes));
    args.emplace_back("clock", s.device ? "device" : "host");
    trace_.add(std::string(s.name), std::string(ddo::to_string(s.kind)), s.start_us,
               s.end_us - s.start_us, track, std::move(args));
  }

 private:
  chrome_trace& trace_;
};

// --- compute engines: what the runner does with a lease ---------------------------------------

/// GPU: cuBLAS GEMMs on a non-blocking stream of the linear transport.
template <class Transport>
struct gpu_engine_t {
  using transport_type = Transport;
  typename transport_type::stream stream;
  std::unique_ptr<ddo::runner::gpu_synthetic_forward> forward;

  gpu_engine_t(transport_type& t, std::int64_t tokens, std::int64_t width, ddo::dtype type)
      : stream(t.make_stream()) {
    forward = std::make_unique<ddo::runner::gpu_synthetic_forward>(tokens, width, type, stream.get());
  }
  [[nodiscard]] typename transport_type::stream_view view() { return transport_type::view(stream); }
  void linear(transport_type&, const std::byte* w, std::int64_t out, std::int64_t in, ddo::dtype,
              float alpha) {
    forward->linear(w, out, in, alpha);
  }
  [[nodiscard]] static const char* compute_name() { return "cuBLAS GEMM"; }
};
using gpu_engine = gpu_engine_t<ddo::linear_transport>;
/// The same engine on the VMM route (execution_mode vmm_runtime / backend vmm).
using gpu_vmm_engine = gpu_engine_t<ddo::vmm_transport>;

/// No GPU: the CPU stand-in, each product a task on a host_sim stream (the engine's "kernels").
template <class Transport>
struct cpu_engine_t {
  using transport_type = Transport;
  typename transport_type::stream stream;
  std::shared_ptr<ddo::runner::cpu_synthetic_forward> forward;

  cpu_engine_t(transport_type& t, std::int64_t tokens, std::int64_t width, ddo::dtype)
      : stream(t.make_stream()),
        forward(std::make_shared<ddo::runner::cpu_synthetic_forward>(tokens, width)) {}
  [[nodiscard]] typename transport_type::stream_view view() { return transport_type::view(stream); }
  void linear(transport_type& t, const std::byte* w, std::int64_t out, std::int64_t in,
              ddo::dtype type, float alpha) {
    t.enqueue(view(), [f = forward, w, out, in, type, alpha] { f->linear(w, out, in, type, alpha); });
  }
  [[nodiscard]] static const char* compute_name() { return "CPU stand-in"; }
};
using cpu_engine = cpu_engine_t<ddo::host_sim_transport>;
/// The CPU stand-in on host_sim's VMM mode (execution_mode vmm_runtime / backend vmm).
using cpu_vmm_engine = cpu_engine_t<ddo::host_sim_vmm_transport>;

// --- the model as the runner computes it ------------------------------------------------------

/// Per weight: whether it is a GEMM, its [out, in] and scale.
struct model_compute {
  ddo::dtype type = ddo::dtype::bf16;
  std::int64_t width = 1;  // the activation width: the largest dimension of any GEMM
  std::vector<char> is_gemm;
  std::vector<float> alpha;
  std::size_t gemms = 0;
  std::size_t skipped_other_dtype = 0;
};

/// Opens every file of the table once (for --verify and for sampling scales).
std::vector<ddo::file_reader> open_files(const ddo::weight_table& table,
                                         ddo::safetensors_backend backend) {
  std::vector<ddo::file_reader> readers;
  for (const auto& path : table.files()) readers.emplace_back(path, backend);
  return readers;
}

/// The source bytes of weight @p w (from its file or host pointer) into @p out.
void read_source(const ddo::weight_table& table, const std::vector<ddo::file_reader>& files,
                 std::size_t w, std::span<std::byte> out) {
  const auto& info = table[w];
  if (const auto* f = std::get_if<ddo::file_source>(&info.source)) {
    files.at(f->file_index).read(f->offset, out);
  } else {
    const auto& h = std::get<ddo::host_source>(info.source);
    std::memcpy(out.data(), h.data, out.size());
  }
}

/// 2-D weights of the compute dtype are GEMMs ([out, in], as a linear layer stores them); the
/// compute dtype is that of the first 2-D weight of a supported type. Scales keep the activation
/// steady, estimated from the first 64 KiB of each weight.
model_compute describe_compute(const ddo::weight_table& table,
                               const std::vector<ddo::file_reader>& files) {
  model_compute mc;
  mc.is_gemm.assign(table.size(), 0);
  mc.alpha.assign(table.size(), 1.0f);
  bool have_type = false;
  for (std::size_t w = 0; w < table.size(); ++w) {
    const auto& info = table[w];
    if (info.shape.size() != 2 || !ddo::runner::is_supported_compute_dtype(info.type)) continue;
    if (!have_type) {
      mc.type = info.type;
      have_type = true;
    }
    if (info.type != mc.type) {
      ++mc.skipped_other_dtype;
      continue;
    }
    mc.is_gemm[w] = 1;
    ++mc.gemms;
    mc.width = std::max({mc.width, info.shape[0], info.shape[1]});
    const std::size_t sample_bytes =
        static_cast<std::size_t>(std::min<std::uint64_t>(info.bytes, 64 * ddo::kib));
    std::vector<std::byte> sample(sample_bytes - sample_bytes % ddo::size_of(info.type));
    read_source(table, files, w, sample);
    const auto elements = static_cast<std::int64_t>(sample.size() / ddo::size_of(info.type));
    // rms over the sample, scaled as if it were the whole [out, in] weight
    mc.alpha[w] = ddo::runner::variance_preserving_alpha(sample.data(), info.type, 1, elements) *
                  static_cast<float>(std::sqrt(static_cast<double>(elements) /
                                               static_cast<double>(info.shape[1])));
  }
  return mc;
}

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
  std::string requested_route;
  ddo::setup_options setup;  // the engine's reserve (activations), stated RAM, the component
};

/// Plans, sets up the offloader over @p transport and runs the steps with @p Engine.
template <class Engine>
int run_steps(run_context& ctx, typename Engine::transport_type transport) {
  using transport_type = typename Engine::transport_type;
  const auto& opt = ctx.opt;
  const ddo::dynamic_offload_config& config = ctx.settings.config;

  // The one setup path (ddo/runtime/setup.hpp), as ddo-plan and enable_offload take it: the
  // machine the plan sees (device memory minus the ring, the activations and ddo's reserve; a
  // stored capacity profile), then the component's route: dynamic_offload, the Diffusers
  // group-offload translation, or none.
  chrome_trace trace;
  trace_adapter adapter(trace);
  ctx.setup.runtime.metrics = config.show_profile || !opt.trace_path.empty();
  ctx.setup.runtime.nvtx = ctx.gpu;
  if (!opt.trace_path.empty()) ctx.setup.runtime.trace = &adapter;
  // Calibration (build_profile): the library's recorder times every group's compute and loads
  // (forwarding spans to the trace). A stored format 2 profile: the overlap-aware planner, as
  // ddo-plan plans it (runner/overlap_report.hpp).
  ddo::calibration_recorder recorder(ctx.setup.runtime.trace);
  if (config.build_profile) ctx.setup.runtime = recorder.runtime_options(ctx.setup.runtime);
  const auto overlap = ddo::runner::stored_overlap_timings(
      ctx.settings, ctx.table, ctx.gpu ? ddo::query_device_name(0) : std::string(),
      static_cast<std::uint64_t>(ctx.tokens));
  ddo::overlap_residency_planner overlap_planner;
  if (overlap) {
    overlap_planner.timings = overlap->timings;
    overlap_planner.ring =
        ddo::runner::ring_of(ddo::runtime_options_from(config, ctx.setup.runtime));
  }
  std::vector<std::string> notes;
  const auto component = ddo::component_for(ctx.settings, ctx.setup.inputs, &notes);
  auto setup = overlap && !overlap->timings.empty()
                   ? ddo::setup_offload(ctx.table, ctx.settings, component, ctx.setup, transport,
                                        overlap_planner)
                   : ddo::setup_offload(ctx.table, ctx.settings, component, ctx.setup, transport);
  if (overlap && !overlap->note.empty()) notes.push_back(overlap->note);
  notes.insert(notes.end(), setup.notes.begin(), setup.notes.end());
  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
  if (!setup.machine.profile_note.empty()) std::printf("%s\n", setup.machine.profile_note.c_str());
  const std::uint64_t free_before = setup.machine.device.free_bytes;
  const std::uint64_t activations = ctx.setup.reserve_device_bytes;
  const std::string executed_route = std::string(ddo::to_string(setup.component.route)) + " (" +
                                     std::string(transport.name()) + " transport)";
  std::printf("\nmachine the plan sees: device %s free of %s - ring %zu x %s - activations %s - "
              "ddo reserve %s = %s\n",
              gb(setup.machine.device.free_bytes).c_str(), gb(setup.machine.device.total_bytes).c_str(),
              setup.machine.slots, gb(setup.machine.slot_bytes).c_str(), gb(activations).c_str(),
              gb(setup.machine.runtime_reserve_bytes).c_str(),
              gb(setup.machine.capacity.free_vram_bytes).c_str());
  std::printf("\n%s", ddo::format_plan_summary(setup.plan, ctx.table).c_str());
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
  ddo::offloader<transport_type> offloader(ctx.table, std::move(setup), transport);
  trace.reset_origin();  // the runtime's spans count from the end of its setup too
  std::printf("\nsetup: %.2f s; ring %zu x %s, ddo device bytes %s\n", seconds_since(setup_t0),
              offloader.slot_count(), gb(offloader.slot_bytes()).c_str(),
              gb(offloader.device_bytes()).c_str());

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

  std::printf("\nsteps: %d, %lld tokens, %zu GEMMs per step (%s)\n", ctx.steps,
              static_cast<long long>(ctx.tokens), ctx.compute.gemms, Engine::compute_name());
  std::fflush(stdout);
  // Each step prints its own line; the bar is for terminals only (a log has the lines).
  progress_bar bar("steps", static_cast<std::uint64_t>(ctx.steps), "steps",
                   ::isatty(STDERR_FILENO) ? ddo::runner::progress_style::terminal
                                           : ddo::runner::progress_style::quiet);
  std::vector<double> step_ms;
  for (int step = 0; step < ctx.steps; ++step) {
    const std::string step_name = "step " + std::to_string(step);
    nvtx_scope range(ctx.gpu, step_name.c_str());
    offloader.begin_step();
    const auto t0 = std::chrono::steady_clock::now();
    const double t0_us = trace.now_us();
    for (std::size_t g = 0; g < offloader.group_count(); ++g) {
      auto lease = offloader.acquire(g, view);
      const double enqueue_us = trace.now_us();
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::size_t w = lease.weight_index(i);
        if (!ctx.compute.is_gemm[w]) continue;
        const auto& info = ctx.table[w];
        engine.linear(t, lease.data(i), info.shape[0], info.shape[1], info.type,
                      ctx.compute.alpha[w]);
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
    t.synchronize(view);  // per-step time for the printout (the benchmark never syncs)
    const double ms = seconds_since(t0) * 1e3;
    step_ms.push_back(ms);
    if (!opt.trace_path.empty())
      trace.add(step_name, "step", t0_us, trace.now_us() - t0_us, chrome_trace::host);
    if (sampler) sampler->sample();
    bar.interrupt([&] {
      std::printf("  step %d: %.1f ms\n", step, ms);
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
  std::vector<double> sorted = step_ms;
  std::sort(sorted.begin(), sorted.end());
  std::printf("\nsummary: %d steps, median %.1f ms/step (first %.1f ms)\n", ctx.steps,
              sorted[sorted.size() / 2], step_ms.front());
  std::printf("  route: requested %s (execution_mode %s), executed %s\n", ctx.requested_route.c_str(),
              std::string(ddo::enum_name(ctx.settings.config.execution_mode)).c_str(),
              executed_route.c_str());
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
  if (opt.verify)
    std::printf("  verify: %s checked against the files, %llu mismatch(es)\n",
                gb(verified_bytes).c_str(), static_cast<unsigned long long>(mismatches));
  if (!opt.trace_path.empty()) {
    trace.write(opt.trace_path);
    std::printf("  trace: %s (%zu events; open in https://ui.perfetto.dev)\n",
                opt.trace_path.c_str(), trace.size());
  }
  if (predicted_ms)
    std::printf("  predicted %.1f ms/step, measured median %.1f ms (%+.1f%%)\n", *predicted_ms,
                sorted[sorted.size() / 2], 100.0 * (*predicted_ms - sorted[sorted.size() / 2]) / sorted[sorted.size() / 2]);
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
          e.linear(t, lease.data(i), info.shape[0], info.shape[1], info.type, ctx.compute.alpha[w]);
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
    double compute_ms = 0.0, copy_ms = 0.0;
    for (const auto& g : ddo::timings_at(profile, static_cast<std::uint64_t>(ctx.tokens)))
      compute_ms += g.compute_ms, copy_ms += g.transfer_ms;
    std::printf("  capacity profile '%s' (format %d) saved to %s: %zu groups, compute %.1f ms and "
                "copies %.1f ms per step at %lld tokens; peak in use %s, next runs may keep %s "
                "resident\n",
                profile.name.c_str(), profile.format, store.path_of(profile.name).c_str(),
                profile.groups.size(), compute_ms, copy_ms, static_cast<long long>(ctx.tokens),
                gb(profile.peak_in_use_bytes).c_str(),
                gb(profile.recommended_resident_budget_bytes).c_str());
  }
  std::fflush(stdout);
  if (mismatches != 0) {
    std::fprintf(stderr, "ddo-run: --verify found %llu weight(s) whose device bytes differ from the file\n",
                 static_cast<unsigned long long>(mismatches));
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
  std::fflush(stdout);
  std::fprintf(stderr, "ddo-run: %s\n", message.c_str());
  return code;
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
      "steps", po::value<int>()->value_name("N"), "Steps to run (default 4; 3 on a GPU)")(
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
      "sim-vram-gb", po::value<double>(&opt.sim_vram_gb)->value_name("GiB"),
      "host_sim device memory (default: the weights kept resident by rule + half the rest, so that weights stream)")(
      "ram-gb", po::value<double>(&opt.ram_gb)->value_name("GiB"),
      "Available system RAM to plan with, as an engine states it (default: probed; "
      "available_system_ram_gb set explicitly wins)")(
      "profile", po::value<std::string>(&opt.profile_name)->value_name("NAME"),
      "Capacity profile NAME (profile_name): with a stored format 2 profile, plan with the "
      "overlap-aware planner and print predicted vs measured ms/step")(
      "calibrate", po::bool_switch(&opt.calibrate),
      "With --profile: calibrate (build_profile: zero resident, compute timed at a quarter of "
      "--tokens and at --tokens) and save the profile");
  po::options_description synth("synthetic model (as ddo-make-model; cached by these values)");
  synth.add_options()("blocks", po::value<ddo::runner::blocks_option>()->value_name("N"),
                      "Transformer blocks (default 8 on the CPU, 24 on a GPU)")(
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
  all.add(general).add(synth).add(ddo_flags);

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
                 "With no --model, a synthetic DiT-like model is generated once and cached.\n\n"
              << all << '\n';
    return 0;
  }
  opt.use_environment = vm.count("no-environment") == 0;
  if (vm.count("model")) opt.models = vm["model"].as<std::vector<std::string>>();
  if (vm.count("steps")) {
    opt.steps = vm["steps"].as<int>();
    if (opt.steps < 1) return fail("--steps must be at least 1, got " + std::to_string(opt.steps), exit_usage);
  }
  if (vm.count("tokens")) {
    opt.tokens = vm["tokens"].as<std::int64_t>();
    if (opt.tokens < 1 || opt.tokens > (1 << 20))
      return fail("--tokens must be 1..1048576, got " + std::to_string(opt.tokens), exit_usage);
  }
  if (vm.count("sim-vram-gb") && !(opt.sim_vram_gb > 0.0))
    return fail("--sim-vram-gb must be a positive size in GiB", exit_usage);
  if (vm.count("ram-gb") && !(opt.ram_gb > 0.0))
    return fail("--ram-gb must be a positive size in GiB", exit_usage);

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
  // `backend` picks the transport: host_sim runs the CPU stand-in even with a GPU (resolved once
  // here, before the model is known, only to read it).
  const auto early = ddo::resolve_settings(inputs);
  const bool backend_sim = early.config.backend == ddo::offload_backend::host_sim;
  if (ddo::set_explicitly(early, "backend") && !backend_sim &&
      early.config.backend != ddo::offload_backend::linear &&
      early.config.backend != ddo::offload_backend::vmm)
    return fail(ddo::describe(early.provenance.of("backend")) + ": backend = " +
                    std::string(ddo::enum_name(early.config.backend)) +
                    ": this build has no such transport; use linear, vmm or host_sim",
                exit_usage);

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

  auto& synthetic = opt.synthetic;
  // CPU default: big enough that the attention and MLP weights (1024² and 4096×1024 bf16) pass
  // the 1 MiB small-tensor threshold the environment defaults give, so they really stream.
  synthetic.blocks = gpu ? 24 : 8;
  synthetic.hidden = gpu ? 3072 : 1024;
  synthetic.mlp_ratio = 4;
  synthetic.type = ddo::dtype::bf16;
  if (vm.count("blocks")) synthetic.blocks = vm["blocks"].as<ddo::runner::blocks_option>();
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
  for (const char* flag : {"blocks", "hidden", "mlp-ratio", "dtype", "shards", "seed"})
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
    interrupts.watch(cache);
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
  const ddo::dynamic_offload_settings settings = ddo::resolve_settings(inputs);
  if (settings.config.load_safetensors_backend != probe_backend)
    table = ddo::load_safetensors(std::span<const std::string>(paths),
                                  settings.config.load_safetensors_backend);
  std::printf("model: %zu tensors in %zu file(s), %s\n", table.size(), table.files().size(),
              gb(table.total_bytes()).c_str());
  print_settings_summary(settings, opt);
  if (opt.print_settings) {
    std::ostringstream out;
    ddo::write_settings_toml(out, settings);
    std::printf("\n%s", out.str().c_str());
  }

  load_files(table);
  const auto files = open_files(table, settings.config.load_safetensors_backend);
  const model_compute compute = describe_compute(table, files);
  if (compute.gemms == 0)
    return fail("the model has no 2-D weights of a supported dtype (bf16, F16, F32) to multiply",
                exit_usage);
  if (compute.skipped_other_dtype != 0)
    std::printf("model: %zu 2-D weight(s) of a dtype other than %s are streamed but not multiplied\n",
                compute.skipped_other_dtype, std::string(ddo::to_string(compute.type)).c_str());

  std::string requested_route = "dynamic_offload";
  for (const auto& c : settings.components)
    if (c.name == ddo::runner::run_component) requested_route = std::string(ddo::to_string(c.route));

  run_context ctx{opt, settings, table, files, compute, 0, 0, gpu, requested_route, {}};
  ctx.tokens = opt.tokens ? opt.tokens : ddo::runner::default_tokens(gpu);
  ctx.steps = opt.steps ? opt.steps : (gpu ? 3 : 4);
  // The engine's reserve: the runner's two activation buffers (ddo-plan --tokens computes the same).
  const std::uint64_t activations =
      ddo::runner::activation_reserve_bytes(ctx.tokens, ddo::runner::compute_shape_of(table));
  ctx.setup = ddo::runner::run_setup_options(
      inputs, activations,
      opt.ram_gb > 0.0 ? std::optional<std::uint64_t>(ddo::gib_to_bytes(opt.ram_gb)) : std::nullopt);

  if (gpu && settings.config.backend == ddo::offload_backend::vmm)
    return run_steps<gpu_vmm_engine>(ctx, ddo::make_transport<ddo::vmm_transport>(settings, ctx.setup.host_sim));
  if (gpu) return run_steps<gpu_engine>(ctx, ddo::make_transport<ddo::linear_transport>(settings, ctx.setup.host_sim));
  ddo::host_sim_options sim;
  // Default: room for the rule-resident weights and half the rest besides the ring and the reserves, so a plan has to stream.
  sim.device_capacity_bytes = opt.sim_vram_gb > 0.0
                                  ? ddo::gib_to_bytes(opt.sim_vram_gb)
                                  : ddo::runner::default_sim_device_bytes(table, settings, activations);
  std::printf("host_sim: simulated device memory %s%s\n", gb(sim.device_capacity_bytes).c_str(),
              opt.sim_vram_gb > 0.0 ? ""
                                    : " (rule-resident weights + half the rest + the ring and reserves; --sim-vram-gb to change)");
  ctx.setup.host_sim = sim;
  if (settings.config.backend == ddo::offload_backend::vmm)
    return run_steps<cpu_vmm_engine>(ctx, ddo::make_transport<ddo::host_sim_vmm_transport>(settings, ctx.setup.host_sim));
  return run_steps<cpu_engine>(ctx, ddo::make_transport<ddo::host_sim_transport>(settings, ctx.setup.host_sim));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ddo::config_error& error) {
    return fail(error.what(), exit_usage);
  } catch (const ddo::usage_error& error) {
    return fail(error.what(), exit_usage);
  } catch (const ddo::format_error& error) {
    return fail(error.what(), exit_usage);
  } catch (const std::exception& error) {
    return fail(error.what(), exit_failure);
  }
}
