// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp): --compare: resident, ddo per card and the naive loops, one table.
/// Example code (docs/runner.md).

#include "ddo_run/report.hpp"

namespace ddo_run {

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
  report.rates = r::measure_pinned_rates(base, ctx.gpu ? 256 * ddo::mib : 64 * ddo::mib);
  report.pinned_gbps = report.rates.best_gbps();

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

}  // namespace ddo_run
