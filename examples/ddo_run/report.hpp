// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp): the lines a run prints beside its steps: the settings, a step's metrics,
/// host memory, the setup floor, the card budget; the run's context.
/// Example code (docs/runner.md).

#include "ddo_run/common.hpp"

namespace ddo_run {

// --- printing ----------------------------------------------------------------------------------

inline void print_settings_summary(const ddo::dynamic_offload_settings& s, const run_options& opt) {
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

inline void print_step_metrics(const ddo::step_metrics& m, bool timing) {
  std::printf("    moved %s (pinned %s, staged %s, file %s) in %llu copies, %llu group loads; "
              "%llu/%llu acquires prefetched",
              gb(m.bytes()).c_str(), gb(m.bytes(ddo::transfer_source::pinned)).c_str(),
              gb(m.bytes(ddo::transfer_source::pageable_staged)).c_str(),
              gb(m.bytes(ddo::transfer_source::file)).c_str(),
              static_cast<unsigned long long>(m.copies),
              static_cast<unsigned long long>(m.group_loads),
              static_cast<unsigned long long>(m.hits), static_cast<unsigned long long>(m.acquires));
  if (timing && m.timed)
    std::printf("; copy %.1f ms (%.1f GB/s), stall %.1f ms, overlap %.2f", m.copy_ms,
                *m.achieved_gbps(), m.stall_ms, *m.overlap_ratio());
  else
    std::printf("; copy, stall and overlap not timed");
  if (m.host_wait_ms > 0) std::printf(", host wait %.1f ms", m.host_wait_ms);
  std::printf("\n");
}

/// The host-memory line of the summary (docs/runner.md says how to read it).
inline void print_host_memory(ddo::memory_watch& watch, std::uint64_t weight_bytes, bool simulated_device) {
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
inline void print_setup_floor(const ddo::runner::setup_floor& f, double setup_s) {
  std::printf("setup floor (measured before the setup, same page cache): parallel read of %s into "
              "fresh page-aligned memory %.2f s (%.1f GB/s, %zu threads), registering those bytes "
              "%.2f s (%.1f GB/s)%s; setup / max(read, registration) = %.2fx (goal <= 1.3x)\n",
              gb(f.bytes).c_str(), f.read_s, f.read_gbps(), f.threads, f.register_s,
              f.register_gbps(), f.registered ? "" : " (the transport refused a chunk)",
              f.floor_s() > 0 ? setup_s / f.floor_s() : 0.0);
}

/// The accounted peak against the card, printed; false when it is over (a failed run).
inline bool report_budget(const run_context& ctx, std::uint64_t ddo_peak,
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

/// The file route's counters, where the transport has them (nullopt otherwise).
template <class Transport>
std::optional<ddo::nvme_stats> file_route_stats(const Transport& t) {
  if constexpr (requires { t.file_stats(); })
    return t.file_stats();
  else
    return std::nullopt;
}

/// The file route's reads over a run: its totals count setup's reads too (the resident
/// uploads go through the same slots) and the warm-up's (the ring's first loads), so a steady
/// step's bytes are the difference over the steady steps, printed beside the plan's file tier
/// (O_DIRECT widens each piece to 4096 bytes at both ends).
struct file_route_watch {
  std::uint64_t file_tier_bytes = 0;
  std::optional<ddo::nvme_stats> setup, steady;  // after setup, after the warm-up steps

  /// Prints how the route reads and marks setup's reads (steady too, for a run without warm-up).
  template <class Transport>
  void after_setup(const Transport& t) {
    if constexpr (requires { t.file_io_description(); })
      std::printf("file route: %s\n", t.file_io_description().c_str());
    setup = steady = file_route_stats(t);
  }

  void print(const std::optional<ddo::nvme_stats>& now, int steps) const {
    if (!setup || !steady || !now || steps <= 0) return;
    const double bytes = static_cast<double>(now->bytes_read - steady->bytes_read) / steps;
    const double fills = static_cast<double>(now->slot_fills - steady->slot_fills) / steps;
    const double seconds = (now->read_seconds - steady->read_seconds) / steps;
    const double tier = static_cast<double>(file_tier_bytes);
    std::printf(
        "  file route, a steady step: %s read (the plan's file tier %s, %+.3f%%) in %.0f "
        "slot fill(s), reading %.2f s (%.2f GB/s); setup read %s (resident uploads), the "
        "warm-up %s\n",
        gb(static_cast<std::uint64_t>(bytes)).c_str(), gb(file_tier_bytes).c_str(),
        tier != 0 ? 100.0 * (bytes / tier - 1.0) : 0.0, fills, seconds,
        seconds > 0 ? bytes / seconds / 1e9 : 0.0, gb(setup->bytes_read).c_str(),
        gb(steady->bytes_read - setup->bytes_read).c_str());
  }
};

/// The bound's streamed bytes W and file bytes F of @p plan, with the disk rate stated.
inline void set_streamed_bytes(ddo::runner::measured_bound& bound, const run_context& ctx,
                               const ddo::offload_plan& plan) {
  bound.streamed_bytes = ctx.table.total_bytes() - plan.total_bytes(ddo::placement::gpu_resident);
  bound.file_bytes = plan.total_bytes(ddo::placement::file);
  bound.disk_gbps = ctx.settings.config.disk_read_gb_per_s;
}

/// The metrics lines after the steps: either VMM route's window, with show_profile the totals
/// and the peaks, on the file route its reads.
template <class Transport>
void print_run_metrics(const run_context& ctx, const ddo::offload_metrics& metrics,
                       Transport& transport, const ddo::runner::device_memory_sampler* sampler,
                       const file_route_watch* file_reads = nullptr) {
  const auto& config = ctx.settings.config;
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
  if constexpr (requires { transport.file_stats(); }) {
    const auto fs = transport.file_stats();
    std::printf("  file route: %s read, %s delivered in %llu slot fill(s); reading took %.2f s "
                "(%.2f GB/s)\n",
                gb(fs.bytes_read).c_str(), gb(fs.bytes_delivered).c_str(),
                static_cast<unsigned long long>(fs.slot_fills), fs.read_seconds,
                fs.read_seconds > 0 ? static_cast<double>(fs.bytes_read) / fs.read_seconds / 1e9 : 0.0);
    if (file_reads != nullptr) file_reads->print(fs, ctx.steps);
  }
}

}  // namespace ddo_run
