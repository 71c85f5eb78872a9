// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux --resolutions WxH,WxH,... (issue 41): one process, one offloader, the device
/// budget following the engine's activations. The engine's reserve per image size is its own
/// number (the activations it states, per image tokens: a ddo::workload_reserve); between
/// phases ddo::set_device_reserve reads it at the phase's size and moves the running offloader
/// to the plan a fresh setup at that size makes. Per phase: the move (bytes promoted/demoted,
/// bytes read, time), the steady step against the bound max(C, W / B) at that size (C the
/// all-resident step without ddo, B host_sim's pinned copy rate), each phase's latents against
/// that all-resident run's to the bit, and after the run a cached re-setup's time at each size
/// (plan cache and pinned cache: the best an engine could do before). The CPU path on
/// host_sim. Example code (docs/engine-walkthrough.md).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "ddo/core/format_bytes.hpp"
#include "ddo/setup/workload_reserve.hpp"
#include "ddo_flux/cpu_run.hpp"
#include "runner/compare_run.hpp"
#include "runner/step_timing.hpp"

namespace ddo_flux {

/// What the phases run is given besides the CPU run: each phase's resolution and inputs.
struct resolution_phases {
  std::vector<resolution> sizes;
  std::vector<flux::inputs> inputs;  // one per phase, seeded as the single run's
  std::vector<std::uint64_t> activations;  // what the engine states at each phase's size
};

/// One phase's figures.
struct resolution_row {
  resolution size;
  std::size_t image_tokens = 0;
  std::uint64_t reserve = 0, resident = 0;
  std::optional<ddo::budget_move> move;  // none for the first phase (the setup)
  std::vector<float> latents;            // the streamed phase's output
  bool equal = false;                    // bitwise equal to the all-resident run's
  bool within = true;                    // GPU: context + reserve + ddo's peak within the card
  double step_ms = 0.0, compute_ms = 0.0, bound_ms = 0.0, resetup_s = 0.0;
};

/// The engine's reserve per image size, from its own numbers (one point per image-token count).
inline ddo::workload_reserve stated_reserve(const resolution_phases& p) {
  std::vector<ddo::reserve_point> points;
  for (std::size_t i = 0; i < p.sizes.size(); ++i) {
    const auto tokens = static_cast<std::int64_t>(p.inputs[i].image_tokens);
    const bool known = std::any_of(points.begin(), points.end(),
                                   [&](const auto& q) { return q.size == tokens; });
    if (!known) points.push_back({tokens, p.activations[i]});
  }
  return ddo::workload_reserve("image tokens", std::move(points));
}

/// The median of @p ms after the first step of a phase (the step a move's bytes arrive in),
/// or the one step there is.
inline double steady_ms(std::vector<double> ms) {
  if (ms.size() > 1) ms.erase(ms.begin());
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// Every phase streamed through the offloader @p prepared starts (see the file comment).
template <class Prepared>
void run_resolution_steps(Prepared& prepared, const cpu_run& r, const resolution_phases& p,
                          const ddo::setup_options& options, const ddo::workload_reserve& reserve,
                          std::vector<resolution_row>& rows, std::vector<flux::stage>& first) {
  using transport_type = typename Prepared::transport_type;
  auto enabled = prepared.start();
  auto& off = *enabled.offloader;
  auto compute = off.transport().make_stream();
  const auto view = transport_type::view(compute);
  for (std::size_t i = 0; i < p.sizes.size(); ++i) {
    auto& row = rows[i];
    const auto tokens = static_cast<std::int64_t>(row.image_tokens);
    if (i > 0) {
      ddo::set_device_reserve(off, r.settings, options, reserve, tokens);
      row.move = off.metrics().budget_moves.back();
    }
    row.resident = off.plan().total_bytes(ddo::placement::gpu_resident);
    std::printf("phase %zu: %dx%d, %zu image tokens, engine reserve %s, %s resident, ring %zu x "
                "%s\n",
                i, row.size.width, row.size.height, row.image_tokens,
                ddo::format_bytes_exact(row.reserve).c_str(),
                ddo::format_bytes(row.resident).c_str(), off.slot_count(),
                ddo::format_bytes(off.slot_bytes()).c_str());
    std::fflush(stdout);
    const auto stages = flux::plan_stages(r.table, off.plan());
    if (i == 0) first = stages;
    std::vector<double> ms;
    row.latents = flux::denoise(p.inputs[i], r.steps, [&](const flux::inputs& x, float t) {
      const auto t0 = std::chrono::steady_clock::now();
      flux::forward f(r.c, x.image_tokens, x.text_tokens);
      auto v = flux::streamed_forward(off, view, stages, f, x, t);
      ms.push_back(flux::ms_since(t0));
      return v;
    });
    row.step_ms = steady_ms(ms);
  }
}

/// C at each phase: the all-resident step without ddo (the median of the phase's steps after
/// the first, as the streamed one) over @p stages (the streamed run's); its latents against the
/// streamed phase's, to the bit (a move that broke a weight's bytes shows here).
inline void measure_resident_steps(const cpu_run& r, const resolution_phases& p,
                                   const std::vector<flux::stage>& stages,
                                   std::vector<resolution_row>& rows) {
  const flux::host_weights host(r.table);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::vector<double> ms;
    const auto latents = flux::denoise(p.inputs[i], r.steps, [&](const flux::inputs& x, float t) {
      const auto t0 = std::chrono::steady_clock::now();
      flux::forward f(r.c, x.image_tokens, x.text_tokens);
      auto v = flux::resident_forward(host, stages, f, x, t);
      ms.push_back(flux::ms_since(t0));
      return v;
    });
    rows[i].compute_ms = steady_ms(ms);
    rows[i].equal = same_bits(latents, rows[i].latents);
  }
}

/// The phase table; @p bound_note says what C and B were on this path.
inline void print_resolution_table(const std::vector<resolution_row>& rows,
                                   const char* bound_note) {
  std::printf("\nphases (one offloader; the budget follows the activations):\n"
              "| image | reserve | promoted | demoted | read | D2H | move ms | resident | "
              "step ms | bound ms | x bound | cached re-setup ms |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const auto mb = [](std::uint64_t b) { return ddo::format_bytes(b); };
  const auto fixed1 = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return std::string(buf);
  };
  for (const auto& row : rows) {
    const auto* m = row.move ? &*row.move : nullptr;
    const std::string promoted =
        m ? mb(m->bytes_promoted) + " (" + std::to_string(m->weights_promoted) + ")" : "setup";
    const std::string demoted =
        m ? mb(m->bytes_demoted) + " (" + std::to_string(m->weights_demoted) + ")" : "-";
    std::printf("| %dx%d | %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.3f | %.1f |\n",
                row.size.width, row.size.height, mb(row.reserve).c_str(), promoted.c_str(),
                demoted.c_str(), m ? mb(m->bytes_read).c_str() : "-",
                m ? mb(m->bytes_copied_to_host).c_str() : "-",
                m ? fixed1(m->move_ms).c_str() : "-", mb(row.resident).c_str(),
                row.step_ms, row.bound_ms, row.bound_ms > 0 ? row.step_ms / row.bound_ms : 0.0,
                row.resetup_s * 1e3);
  }
  std::printf("  bound: max(C = the all-resident step without ddo, W / B = the streamed bytes "
              "at %s); re-setup: the offloader torn down and set up again at that size with the "
              "plan cache and the pinned-weight cache; read: bytes read from the weights' "
              "sources for the move, D2H: demoted bytes copied back from the device instead\n",
              bound_note);
}

/// Each phase's latents against the all-resident run's, printed; whether all are equal.
inline bool print_phase_checks(const std::vector<resolution_row>& rows) {
  bool all_equal = true;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::printf("check: phase %zu streamed through ddo vs all-resident without ddo: %s\n", i,
                rows[i].equal ? "bitwise equal" : "DIFFERENT");
    all_equal = all_equal && rows[i].equal;
  }
  return all_equal;
}

/// The CPU path's --resolutions run (see the file comment): exit status.
inline int run_cpu_resolutions(const cpu_run& r, const resolution_phases& p) {
  const auto reserve = stated_reserve(p);
  std::vector<resolution_row> rows(p.sizes.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i].size = p.sizes[i];
    rows[i].image_tokens = p.inputs[i].image_tokens;
    rows[i].reserve = reserve.bytes_at(static_cast<std::int64_t>(rows[i].image_tokens));
  }
  ddo::plan_cache plans;
  ddo::pinned_weight_cache pins;
  ddo::setup_options options;
  options.inputs = r.inputs;
  options.host_sim = {.device_capacity_bytes =
                          static_cast<std::uint64_t>(r.vram_gib * double(ddo::gib))};
  options.runtime.metrics = true;  // the moves are read from the metrics
  options.plans = &plans;
  options.pinned_cache = &pins;
  options.reserve_device_bytes = rows[0].reserve;
  std::vector<flux::stage> stages;
  ddo::with_prepared_offload<>(
      r.table, r.settings, options,
      [&](auto& prepared) { run_resolution_steps(prepared, r, p, options, reserve, rows, stages); },
      ddo::routes_of<ddo::simulated_routes::only>{});
  measure_resident_steps(r, p, stages, rows);
  ddo::host_sim_transport sim(options.host_sim);
  const double gbps = ddo::runner::measure_pinned_gbps(sim, 16 * ddo::mib);
  for (auto& row : rows) {
    row.bound_ms =
        ddo::runner::bound_ms_of(row.compute_ms, r.table.total_bytes() - row.resident, gbps);
    auto at = options;
    at.reserve_device_bytes = row.reserve;
    const auto t0 = std::chrono::steady_clock::now();
    ddo::with_prepared_offload<>(
        r.table, r.settings, at, [](auto& prepared) { (void)prepared.start(); },
        ddo::routes_of<ddo::simulated_routes::only>{});
    row.resetup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  print_resolution_table(rows, "host_sim's pinned copy rate");
  return print_phase_checks(rows) ? 0 : ddo::runner::exit_failure;
}

}  // namespace ddo_flux
