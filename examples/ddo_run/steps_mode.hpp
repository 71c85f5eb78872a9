// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp): the plain run: the bound measured, the plan, ddo's setup,
/// the steps (eager or --graph), the summary, and --calibrate's profile after the steps. Example
/// code (docs/runner.md).

#include "ddo_run/calibrate_mode.hpp"
#include "ddo_run/report.hpp"
#include "ddo_run/step_loop.hpp"

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
  auto groups =
      ddo::infer_execution_groups(ctx.table, ctx.settings.config.resident_module_patterns);
  const r::compare_inputs in{ctx.table,  ctx.files, ctx.compute, std::move(groups), ctx.tokens,
                             std::min(ctx.steps, 3), ctx.gpu, false, 0, 0};
  r::measured_bound bound;
  bound.compute_ms = r::measure_compute_only<Engine>(in, transport);
  std::uint64_t copy_bytes = ctx.gpu ? 256 * ddo::mib : 16 * ddo::mib;
  if (const auto free = transport.device_memory().free_bytes; free != 0)
    copy_bytes = std::max<std::uint64_t>(ddo::mib, std::min(copy_bytes, free / 4));
  bound.rates = r::measure_pinned_rates(transport, copy_bytes);
  return bound;
}

/// The runtime options of the run (metrics for --ddo-show-profile and --trace, NVTX on a GPU,
/// --verify's poisoned slots, the trace), and --graph's refusals: exit_usage where it cannot run,
/// else 0.
template <class Engine>
int configure_runtime(run_context& ctx, typename Engine::transport_type& transport,
                      trace_adapter& adapter) {
  const auto& opt = ctx.opt;
  ctx.setup.runtime.metrics = ctx.settings.config.show_profile || !opt.trace_path.empty();
  ctx.setup.runtime.nvtx = ctx.gpu;
  // --verify also poisons each slot at release: a use after release in the engine reads 0xCD
  // bytes, which the check after the step reports (DDO_DEBUG_POISON_RELEASED_SLOTS otherwise).
  if (opt.verify) ctx.setup.runtime.poison_released_slots = true;
  if (!opt.trace_path.empty()) ctx.setup.runtime.trace = &adapter;
  if (!opt.graph) return 0;
  if constexpr (!ddo::graph_streaming_transport<typename Engine::transport_type>) {
    std::fprintf(stderr,
                 "ddo-run: --graph runs on the linear route and the legacy VMM route "
                 "(or host_sim's); this run's transport is '%s', which cannot stream "
                 "through a captured graph\n",
                 std::string(transport.name()).c_str());
    return exit_usage;
  }
  if (ctx.setup.runtime.metrics) {
    std::fprintf(stderr,
                 "ddo-run: --graph: metrics timing (show_profile) would need host reads "
                 "of every replay; run without --ddo-show-profile\n");
    return exit_usage;
  }
  return 0;
}

/// What the plan's printout hands to the summary.
struct plan_printout {
  std::string executed_route;         ///< the route and transport that run
  std::optional<double> predicted_ms;  ///< a stored capacity profile's predicted step
};

/// The setup's notes, the machine the plan sees, the plan, and with a stored capacity profile
/// the overlap-aware plan's predicted step; the bound's streamed bytes from the plan.
template <class Prepared>
plan_printout print_plan(const run_context& ctx, const Prepared& prepared,
                         std::optional<ddo::runner::measured_bound>& bound) {
  const auto& setup = prepared.setup;
  for (const auto& n : setup.notes) std::printf("note: %s\n", n.c_str());
  if (!setup.machine.profile_note.empty()) std::printf("%s\n", setup.machine.profile_note.c_str());
  plan_printout out;
  // The VMM route that runs (vmm_fast_runtime: native; vmm_runtime: legacy) is the runtime's
  // route name; a fixed transport without stable addresses runs the linear route (a note says so).
  out.executed_route = std::string(ddo::to_string(setup.component.route)) + " (" +
                       std::string(prepared.transport.name()) + " transport";
  if (ddo::is_vmm_route(setup.runtime.route))
    out.executed_route += ", " + std::string(ddo::to_string(setup.runtime.route));
  out.executed_route += ")";
  std::printf(
      "\nmachine the plan sees: device %s free of %s - ring %zu x %s - activations %s - "
      "ddo reserve %s = %s\n",
      gb(setup.machine.device.free_bytes).c_str(), gb(setup.machine.device.total_bytes).c_str(),
      setup.machine.slots, gb(setup.machine.slot_bytes).c_str(),
      gb(ctx.setup.reserve_device_bytes).c_str(), gb(setup.machine.runtime_reserve_bytes).c_str(),
      gb(setup.machine.capacity.free_vram_bytes).c_str());
  std::printf("\n%s", ddo::format_plan_summary(setup.plan, ctx.table).c_str());
  if (bound) set_streamed_bytes(*bound, ctx, setup.plan);
  const auto& overlap = prepared.profile;
  if (overlap && !overlap->timings.empty()) {
    out.predicted_ms =
        ddo::predict_plan(setup.plan, overlap->timings, ddo::runner::ring_of(setup.runtime))
            .step_ms;
    std::printf(
        "  overlap-aware plan from capacity profile '%s': predicted %.1f ms/step at %lld tokens\n",
        overlap->profile.name.c_str(), *out.predicted_ms, static_cast<long long>(ctx.tokens));
  }
  std::fflush(stdout);
  return out;
}

/// ddo's setup (pinning, uploading the residents) with its progress on stderr, then its time,
/// the ring and ddo's device bytes (--setup-floor: against its floor; the file route's reads).
/// @p progress outlives the offloader it reports for.
template <class Prepared>
auto start_offloader(Prepared& prepared, const run_context& ctx, chrome_trace& trace,
                     ddo::memory_watch& host_memory,
                     const std::optional<ddo::runner::setup_floor>& floor,
                     ddo::runner::setup_progress_printer& progress, file_route_watch& file_reads) {
  auto& setup = prepared.setup;
  std::fprintf(stderr, "ddo-run: setting up the offloader (pinning %s, uploading %s resident)...\n",
               gb(setup.plan.total_bytes(ddo::placement::pinned_host)).c_str(),
               gb(setup.plan.total_bytes(ddo::placement::gpu_resident)).c_str());
  const auto setup_t0 = std::chrono::steady_clock::now();
  setup.runtime.on_setup_progress = progress.callback();
  setup.runtime.parallel_setup = ctx.opt.parallel_setup;
  // ddo-run prints its own summary below (the same totals, with the route and host memory):
  // the library's show_profile summary would repeat it.
  setup.runtime.profile_summary = nullptr;
  // start() moves the plan into the offloader: the file tier is read from it before.
  file_reads.file_tier_bytes = setup.plan.total_bytes(ddo::placement::file);
  auto enabled = prepared.start();
  auto& offloader = *enabled.offloader;
  progress.finish();
  trace.reset_origin();  // the runtime's spans count from the end of its setup too
  host_memory.sample();
  const double setup_s = seconds_since(setup_t0);
  std::printf("\nsetup: %.2f s; ring %zu x %s, ddo device bytes %s\n", setup_s,
              offloader.slot_count(), gb(offloader.slot_bytes()).c_str(),
              gb(offloader.device_bytes()).c_str());
  if (floor) print_setup_floor(*floor, setup_s);
  file_reads.after_setup(offloader.transport());
  return enabled;
}

/// After the steps: the graph's launches, the step summary against the bound, the route, ddo's
/// metrics, host memory, the accounted device peak against the card, --verify's count, the
/// trace, the prediction against the median. Returns whether the peak stayed within the card.
template <class Engine, class Offloader>
bool print_step_report(step_loop<Engine, Offloader>& s, const ddo::runner::step_clock& steps,
                       int warmup, const std::optional<ddo::runner::measured_bound>& bound,
                       const plan_printout& plan, ddo::runner::device_memory_sampler* sampler,
                       ddo::memory_watch& host_memory) {
  const run_context& ctx = s.ctx;
  const auto metrics = s.offloader.metrics(true);
  if (sampler) sampler->stop();
  const std::uint64_t digest = s.engine.output_digest(s.offloader.transport());
  if (s.graph) {
    std::printf("\n");
    ddo::runner::print_graph_launches(s.offloader);
  }
  const auto times = steps.times();
  const auto summary = ddo::runner::summarize_steps(times.interval_ms, warmup);
  std::printf("\n%s",
              ddo::runner::format_step_summary(times, warmup, bound ? &*bound : nullptr).c_str());
  if (ctx.opt.verify && bound)
    std::printf("  (--verify: each step also copies every weight back and compares it, so the "
                "steps are slower than the bound says)\n");
  const std::string_view vmm_route = ddo::vmm_route_name(ctx.settings.config);
  std::printf("  route: requested %s (execution_mode %s%s%s), executed %s\n",
              std::string(ddo::to_string(ctx.requested_route)).c_str(),
              std::string(ddo::enum_name(ctx.settings.config.execution_mode)).c_str(),
              vmm_route.empty() ? "" : ": ", std::string(vmm_route).c_str(),
              plan.executed_route.c_str());
  // Equal digests: bitwise-equal outputs (an eager run against --graph, one route against
  // another, on the same model, tokens and steps; tests/runner/check_graph_digest.sh).
  std::printf("  output: activation digest %016llx after %d steps (warm-up included)\n",
              static_cast<unsigned long long>(digest), warmup + ctx.steps);
  print_run_metrics(ctx, metrics, s.offloader.transport(), sampler, &s.file_reads);
  print_host_memory(host_memory, ctx.table.total_bytes(), !ctx.gpu);
  const bool within_budget = report_budget(
      ctx, ddo::runner::ddo_peak_device_bytes(s.offloader.transport(), metrics.peak_device_bytes),
      sampler);
  if (ctx.opt.verify)
    std::printf("  verify: %s checked against the files, %llu mismatch(es)\n",
                gb(s.verify.verified_bytes).c_str(),
                static_cast<unsigned long long>(s.verify.mismatches));
  if (!ctx.opt.trace_path.empty()) ddo::runner::write_trace(s.trace, ctx.opt.trace_path);
  if (plan.predicted_ms)
    ddo::runner::print_predicted_vs_measured(*plan.predicted_ms, summary.median_ms);
  return within_budget;
}

/// Plans, sets up the offloader over @p transport and runs the steps with @p Engine: the bound
/// and the setup's floor measured first, the plan printed, the steps (step_loop.hpp), the
/// report, --calibrate's profile after them.
template <class Engine>
int run_steps(run_context& ctx, typename Engine::transport_type transport) {
  const auto& opt = ctx.opt;
  // Host memory from here on: the transport exists, so CUDA has started (its context's own host
  // memory is in the baseline); what grows after is planning, ddo's setup and the steps.
  ddo::memory_watch host_memory;
  host_memory.start();
  chrome_trace trace;
  trace_adapter adapter(trace);
  if (const int refused = configure_runtime<Engine>(ctx, transport, adapter)) return refused;
  // Calibration (build_profile): the library's recorder times every group's compute and loads
  // (forwarding spans to the trace). A stored profile with group timings (format 2 or 3): the
  // overlap-aware planner (by_profile_planner), as ddo-plan plans it.
  ddo::calibration_recorder recorder(ctx.setup.runtime.trace);
  if (ctx.settings.config.build_profile)
    ctx.setup.runtime = recorder.runtime_options(ctx.setup.runtime);
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
  // The one call (ddo/setup/prepare_offload.hpp), as ddo-plan and enable_offload take it: the
  // machine the plan sees (device memory minus the ring, the activations and ddo's reserve; a
  // stored capacity profile), the planner by profile, then the component's route:
  // dynamic_offload, the Diffusers group-offload translation, or none.
  auto prepared = ddo::prepare_offload<>(ctx.table, ctx.settings, ctx.setup, std::move(transport));
  if (opt.graph && prepared.setup.runtime.native_vmm.enabled) {
    std::fprintf(stderr,
                 "ddo-run: --graph: the native VMM route (vmm_fast_runtime) does not stream "
                 "through a captured graph; graph streaming runs on the linear route and "
                 "the legacy VMM route (--ddo-execution-mode vmm_runtime)\n");
    return exit_usage;
  }
  const plan_printout plan = print_plan(ctx, prepared, bound);
  const std::uint64_t free_before = prepared.setup.machine.device.free_bytes;
  std::optional<ddo::runner::device_memory_sampler> sampler;
  if (ctx.gpu) sampler.emplace(0);
  ddo::runner::setup_progress_printer setup_progress;
  file_route_watch reads;
  auto enabled = start_offloader(prepared, ctx, trace, host_memory, floor, setup_progress, reads);
  auto& offloader = *enabled.offloader;
  Engine engine(offloader.transport(), ctx.tokens, ctx.compute.width, ctx.compute.type);
  step_verifier verify(ctx.table, opt.verify);
  std::printf("\nsteps: %d warm-up + %d steady, %lld tokens, %zu GEMMs per step (%s)\n",
              opt.warmup, ctx.steps, static_cast<long long>(ctx.tokens), ctx.compute.gemms,
              Engine::compute_name());
  std::fflush(stdout);
  // Each step prints its own line; the bar is for terminals only (a log has the lines).
  progress_bar bar("steps", static_cast<std::uint64_t>(opt.warmup + ctx.steps), "steps",
                   ::isatty(STDERR_FILENO) ? ddo::runner::progress_style::terminal
                                           : ddo::runner::progress_style::quiet);
  step_loop<Engine, std::remove_reference_t<decltype(offloader)>> s{
      ctx, offloader, engine, engine.view(), trace, verify, bar, reads};
  ddo::runner::device_memory_sampler* const sampled = sampler ? &*sampler : nullptr;
  const auto steps = run_step_loop(s, opt.warmup, sampled, host_memory);
  const bool within_budget =
      print_step_report(s, steps, opt.warmup, bound, plan, sampled, host_memory);
  if (ctx.settings.config.build_profile)
    calibrate_after_steps(ctx, offloader, engine, recorder, free_before,
                          ctx.setup.reserve_device_bytes);
  std::fflush(stdout);
  if (verify.mismatches != 0) {
    std::fprintf(stderr,
                 "ddo-run: --verify found %llu weight(s) whose device bytes differ from the file\n",
                 static_cast<unsigned long long>(verify.mismatches));
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
