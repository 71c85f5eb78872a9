// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp): the plain run: the bound measured, the plan, ddo's setup, the steps
/// (eager or --graph), the summary, and --calibrate's profile after the steps.
/// Example code (docs/runner.md).

#include "ddo_run/calibrate_mode.hpp"
#include "ddo_run/report.hpp"

namespace ddo_run {

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
  bound.rates = r::measure_pinned_rates(transport, copy_bytes);
  return bound;
}

/// --verify: every weight of a lease copied back after the step's compute on its stream (the
/// bytes must still be the file's when the GEMMs that read them are done: a prefetch overwriting a
/// live slot would show here) and compared with its file.
struct lease_verifier {
  std::vector<std::byte> device_copy, source_copy;
  std::uint64_t verified_bytes = 0, mismatches = 0;

  explicit lease_verifier(const ddo::weight_table& table) {
    std::uint64_t largest = 0;
    for (const auto& w : table.weights()) largest = std::max(largest, w.bytes);
    device_copy.resize(largest);
    source_copy.resize(largest);
  }
  /// Compares @p lease's weights; @p report(weight, first differing byte, size) on a mismatch.
  template <class T, class Lease, class Report>
  void check(T& t, typename T::stream_view view, const run_context& ctx, const Lease& lease,
             Report&& report) {
    for (std::size_t i = 0; i < lease.size(); ++i) {
      const std::size_t w = lease.weight_index(i);
      const std::size_t n = static_cast<std::size_t>(ctx.table[w].bytes);
      t.copy_to_host(device_copy.data(), lease.data(i), n, view);
      t.synchronize(view);
      read_source(ctx.table, ctx.files, w, std::span(source_copy.data(), n));
      verified_bytes += n;
      if (std::memcmp(device_copy.data(), source_copy.data(), n) == 0) continue;
      std::size_t at = 0;
      while (at < n && device_copy[at] == source_copy[at]) ++at;
      ++mismatches;
      report(w, at, n);
    }
  }
};

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

  std::optional<lease_verifier> verifier;
  if (opt.verify) verifier.emplace(ctx.table);

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
  // A step's time is the interval from its start to the next step's (runner/step_timing.hpp):
  // the sampling and printing between steps belong to an interval, as the copy stream's loads
  // of the next step's groups meanwhile do. Each step's own span is printed beside it.
  ddo::runner::step_clock steps;
  std::unique_ptr<typename Engine::graph_holder> graph;  // --graph: the captured step
  for (int step = 0; step < total_steps; ++step) {
    const std::string step_name = step < warmup ? "warm-up " + std::to_string(step)
                                                : "step " + std::to_string(step - warmup);
    nvtx_scope range(ctx.gpu, step_name.c_str());
    steps.start();
    offloader.begin_step();
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
        if (verifier)
          verifier->check(t, view, ctx, lease, [&](std::size_t w, std::size_t at, std::size_t n) {
            bar.interrupt([&] {
              std::fprintf(stderr,
                           "ddo-run: VERIFY FAILED: step %d, group '%s', weight '%s': device bytes "
                           "differ from the file at byte %zu of %zu\n",
                           step, offloader.group_name(g).c_str(), ctx.table[w].name.c_str(), at, n);
            });
          });
      }
      engine.end_step(t);  // every step starts from the same buffer: graph replays chain alike
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
    t.synchronize(view);  // the step's span for the printout (the benchmark never syncs)
    steps.end();
    const double ms = steps.last_span_ms();
    if (!opt.trace_path.empty())
      trace.add(step_name, "step", t0_us, trace.now_us() - t0_us, chrome_trace::host);
    if (sampler) sampler->sample();
    host_memory.sample_used();  // PSS (~90 ms) is read once, by print_host_memory
    bar.interrupt([&] {
      std::printf("  %s: span %.1f ms\n", step_name.c_str(), ms);
      if (config.show_profile) {
        const auto m = offloader.metrics();
        if (!m.steps.empty()) print_step_metrics(m.steps.back(), m.timing);
      }
      std::fflush(stdout);
    });
    bar.update(static_cast<std::uint64_t>(step + 1));
  }
  steps.close();
  bar.finish();

  const auto metrics = offloader.metrics(true);
  if (sampler) sampler->stop();
  const std::uint64_t digest = engine.output_digest(t);
  if (graph) {
    std::printf("\n");
    ddo::runner::print_graph_launches(offloader);
  }
  const auto times = steps.times();
  const auto summary = ddo::runner::summarize_steps(times.interval_ms, warmup);
  std::printf("\n%s",
              ddo::runner::format_step_summary(times, warmup, bound ? &*bound : nullptr).c_str());
  if (opt.verify && bound)
    std::printf("  (--verify: each step also copies every weight back and compares it, so the "
                "steps are slower than the bound says)\n");
  const std::string_view vmm_route = ddo::vmm_route_name(ctx.settings.config);
  std::printf("  route: requested %s (execution_mode %s%s%s), executed %s\n",
              std::string(ddo::to_string(ctx.requested_route)).c_str(),
              std::string(ddo::enum_name(ctx.settings.config.execution_mode)).c_str(),
              vmm_route.empty() ? "" : ": ", std::string(vmm_route).c_str(),
              executed_route.c_str());
  // Equal digests: bitwise-equal outputs (an eager run against --graph, one route against
  // another, on the same model, tokens and steps; tests/runner/check_graph_digest.sh).
  std::printf("  output: activation digest %016llx after %d steps (warm-up included)\n",
              static_cast<unsigned long long>(digest), total_steps);
  print_run_metrics(ctx, metrics, offloader.transport(), sampler ? &*sampler : nullptr);
  print_host_memory(host_memory, ctx.table.total_bytes(), !ctx.gpu);
  const bool within_budget =
      report_budget(ctx, ddo::runner::ddo_peak_device_bytes(t, metrics.peak_device_bytes),
                    sampler ? &*sampler : nullptr);
  if (opt.verify)
    std::printf("  verify: %s checked against the files, %llu mismatch(es)\n",
                gb(verifier->verified_bytes).c_str(),
                static_cast<unsigned long long>(verifier->mismatches));
  if (!opt.trace_path.empty()) ddo::runner::write_trace(trace, opt.trace_path);
  if (predicted_ms) ddo::runner::print_predicted_vs_measured(*predicted_ms, summary.median_ms);
  if (config.build_profile)
    calibrate_after_steps(ctx, offloader, engine, recorder, free_before, activations);
  std::fflush(stdout);
  if (verifier && verifier->mismatches != 0) {
    std::fprintf(stderr, "ddo-run: --verify found %llu weight(s) whose device bytes differ from the file\n",
                 static_cast<unsigned long long>(verifier->mismatches));
    return exit_failure;
  }
  if (!within_budget) {
    std::fprintf(stderr, "ddo-run: the accounted device peak exceeded the %s card\n",
                 gib_text(ctx.budget.vram_bytes).c_str());
    return exit_failure;
  }
  return 0;
}

}  // namespace ddo_run
