// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The report of `ddo-run --compare`: one row per variant (everything resident, ddo's plan
/// on each emulated card, a naive copy-then-compute loop from pinned and from pageable memory),
/// each judged against the bound max(C, W / B) measured in the same run, as a Markdown table and
/// as JSON (what tools/plot_bench.py plots). Pure host logic, tested in tests/runner/; the runs
/// themselves are in examples/runner/compare_run.hpp. Example code (examples/runner/).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "ddo/core/format_bytes.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/core/text.hpp"
#include "runner/step_timing.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief One variant's measurements.
struct compare_row {
  std::string variant;      ///< "resident", "ddo", "naive pinned", "naive pageable"
  std::string description;  ///< what it did, in words
  double vram_gib = 0.0;    ///< the emulated card of a ddo row (0: the real device)
  std::vector<double> step_ms;  ///< each timed step: the interval to the next step's start
  std::vector<double> span_ms;  ///< each timed step's span, start to synchronize (shown apart)
  std::uint64_t streamed_bytes = 0;         ///< host→device bytes per step
  std::uint64_t resident_bytes = 0;         ///< weight bytes kept on the device
  std::uint64_t peak_device_bytes = 0;      ///< accounted: context + engine reserve + ddo/loop peak
  std::optional<std::uint64_t> sampled_peak_device_bytes;  ///< cudaMemGetInfo (GPU only)
  std::optional<std::uint64_t> peak_rss_bytes;
  std::string skipped;                      ///< why the variant did not run (empty: it ran)
  std::optional<bool> within_budget;        ///< ddo rows: accounted peak ≤ the card
  std::optional<bool> verified;             ///< the separate verification pass, when run
  // filled by finish_row:
  double ms = 0.0;        ///< median step
  double bound_ms = 0.0;  ///< max(C, W / B)
  double ratio = 0.0;     ///< ms / bound_ms
};

/// @brief The whole comparison.
struct compare_report {
  std::string device;             ///< "NVIDIA H200 (139.8 GB)", "host_sim (no GPU)"
  std::string transport;          ///< "linear", "host_sim"
  std::string model;              ///< the model's key or paths
  std::uint64_t model_bytes = 0;
  std::int64_t tokens = 0;
  int steps = 0;
  double compute_ms = 0.0;        ///< C: one step's compute with nothing to copy
  std::string compute_source;     ///< how C was measured
  double pinned_gbps = 0.0;       ///< B: the best pinned host→device rate of rates
  pinned_rates rates;             ///< every pinned rate measured in this run (B's patterns)
  bool rss_reset = false;         ///< peak RSS reset before each row (else cumulative)
  std::uint64_t context_bytes = 0;
  std::uint64_t engine_reserve_bytes = 0;
  std::string caveat;             ///< what emulation cannot reproduce
  std::vector<compare_row> rows;
};

/// @brief Fills a row's median, bound and ratio from C (ms) and B (GB/s).
inline void finish_row(compare_row& row, double compute_ms, double pinned_gbps) {
  row.ms = median_of(row.step_ms);
  row.bound_ms = bound_ms_of(compute_ms, row.streamed_bytes, pinned_gbps);
  row.ratio = row.bound_ms > 0.0 ? row.ms / row.bound_ms : 0.0;
}

namespace internal {
[[nodiscard]] inline std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}
// Sizes in GiB, as the VRAM column (--vram-gb) states the card: one unit family per header.
[[nodiscard]] inline std::string gb_text(std::uint64_t bytes) {
  return format_size_number(bytes, size_unit::gib);
}
}  // namespace internal

/// @brief The report as a Markdown table with its header lines (what ddo-run prints).
[[nodiscard]] inline std::string format_compare_table(const compare_report& r) {
  using internal::fixed;
  using internal::gb_text;
  std::string out;
  out += "compare: " + r.model + " (" + gb_text(r.model_bytes) + " GiB), " +
         std::to_string(r.tokens) + " tokens, " + std::to_string(r.steps) + " timed steps per " +
         "variant, on " + r.device + "\n";
  out += "bound = max(C, W / B): C = " + fixed(r.compute_ms, 1) + " ms (" + r.compute_source +
         "), B = " + fixed(r.pinned_gbps, 1) + " GB/s pinned host-to-device (the best of: " +
         r.rates.describe() + "), both measured now; ms/step: the median interval between step "
         "starts\n";
  out += "peak device = CUDA context " + gb_text(r.context_bytes) + " GiB + engine reserve " +
         gb_text(r.engine_reserve_bytes) + " GiB + the variant's own device bytes";
  out += r.rss_reset ? "; peak RSS per variant\n" : "; peak RSS cumulative (could not reset it)\n";
  const bool sampled = std::any_of(r.rows.begin(), r.rows.end(), [](const compare_row& row) {
    return row.sampled_peak_device_bytes.has_value();
  });
  out +=
      "\n| variant | VRAM GiB | ms/step | x bound | bound ms | streamed GiB/step | resident GiB "
      "| peak device GiB |";
  if (sampled) out += " sampled GiB |";
  out += " peak RSS GiB | verify |\n|---|---|---|---|---|---|---|---|";
  if (sampled) out += "---|";
  out += "---|---|\n";
  for (const auto& row : r.rows) {
    const bool whole = row.vram_gib == static_cast<double>(static_cast<long long>(row.vram_gib));
    out += "| " + row.variant + " | " +
           (row.vram_gib > 0.0 ? fixed(row.vram_gib, whole ? 0 : 2) : "device") + " | ";
    if (!row.skipped.empty()) {
      out += "skipped: " + row.skipped + " |  |  |  |  |  |";
      if (sampled) out += "  |";
      out += "  |  |\n";
      continue;
    }
    out += fixed(row.ms, 1) + " | " + fixed(row.ratio, 2) + " | " + fixed(row.bound_ms, 1) + " | " +
           gb_text(row.streamed_bytes) + " | " + gb_text(row.resident_bytes) + " | " +
           gb_text(row.peak_device_bytes) +
           (row.within_budget.has_value() ? (*row.within_budget ? " (within)" : " (OVER)") : "") +
           " |";
    if (sampled)
      out += " " + (row.sampled_peak_device_bytes ? gb_text(*row.sampled_peak_device_bytes) : "-") +
             " |";
    out += " " + (row.peak_rss_bytes ? gb_text(*row.peak_rss_bytes) : "-") + " | " +
           (row.verified.has_value() ? (*row.verified ? "ok" : "FAILED") : "-") + " |\n";
  }
  for (const auto& row : r.rows) {
    if (!row.skipped.empty() || row.bound_ms <= 0.0) continue;
    const bound_figures f{row.step_ms, row.span_ms, r.compute_ms, row.streamed_bytes, r.rates};
    const std::string label =
        row.variant + (row.vram_gib > 0.0 ? " " + fixed(row.vram_gib, 2) + " GiB" : "") +
        ": ms / bound";
    if (judge_ratio(row.ms, row.bound_ms).fault)
      out += "\n" + format_ratio(label.c_str(), row.ms, f) + "\n";
  }
  if (!r.caveat.empty()) out += "\nnote: " + r.caveat + "\n";
  return out;
}

/// @brief The report as JSON (tools/plot_bench.py reads it: `"kind": "ddo-run compare"`).
[[nodiscard]] inline std::string compare_json(const compare_report& r) {
  json_writer o;
  o.begin_object(json_layout::lines).member("kind", "ddo-run compare").member("device", r.device);
  o.member("transport", r.transport).member("model", r.model).member("model_bytes", r.model_bytes);
  o.member("tokens", r.tokens).member("steps", r.steps).member("compute_ms", r.compute_ms, 3);
  o.member("compute_source", r.compute_source).member("pinned_gbps", r.pinned_gbps, 3);
  o.key("pinned_rates").begin_array(json_layout::spaced);
  for (const auto& rate : r.rates.samples)
    o.begin_object(json_layout::spaced)
        .member("pattern", rate.pattern)
        .member("gbps", rate.gbps, 3)
        .end_object();
  o.end_array();
  o.member("context_bytes", r.context_bytes).member("engine_reserve_bytes", r.engine_reserve_bytes);
  o.member("peak_rss_per_row", r.rss_reset).member("caveat", r.caveat);
  o.key("rows").begin_array(json_layout::lines);
  for (const auto& row : r.rows) {
    o.begin_object(json_layout::spaced).member("variant", row.variant);
    o.member("description", row.description).member("vram_gib", row.vram_gib, 3);
    if (!row.skipped.empty()) {
      o.member("skipped", row.skipped).end_object();
      continue;
    }
    o.member("ms", row.ms, 3).member("bound_ms", row.bound_ms, 3).member("ratio", row.ratio, 4);
    o.member("measurement_fault", judge_ratio(row.ms, row.bound_ms).fault);
    o.key("step_ms").begin_array(json_layout::spaced);
    for (double ms : row.step_ms) o.value(ms, 3);
    o.end_array().key("span_ms").begin_array(json_layout::spaced);
    for (double ms : row.span_ms) o.value(ms, 3);
    o.end_array().member("streamed_bytes", row.streamed_bytes);
    o.member("resident_bytes", row.resident_bytes).member("peak_device_bytes", row.peak_device_bytes);
    if (row.sampled_peak_device_bytes)
      o.member("sampled_peak_device_bytes", *row.sampled_peak_device_bytes);
    if (row.peak_rss_bytes) o.member("peak_rss_bytes", *row.peak_rss_bytes);
    if (row.within_budget) o.member("within_budget", *row.within_budget);
    if (row.verified) o.member("verified", *row.verified);
    o.end_object();
  }
  o.end_array().end_object();
  return o.take() + "\n";
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
