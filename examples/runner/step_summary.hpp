// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief What a plain `ddo-run` prints after its steps: the warm-up steps apart from the steady
/// ones (the first step pays first-touch costs a steady step does not), the steady steps' true
/// median (the mean of the middle two for an even count) of the intervals between step starts
/// (runner/step_timing.hpp; the spans apart), and the median's ratio to the bound max(C, W / B)
/// measured in the same run. Pure host logic, tested in
/// tests/runner/compare_test.cpp. Example code (examples/runner/).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "ddo/core/format_bytes.hpp"
#include "runner/compare.hpp"
#include "runner/step_timing.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief The steps of one run, split into warm-up and steady state.
struct step_summary {
  std::vector<double> warmup_ms;  ///< the first steps, reported apart
  std::vector<double> steady_ms;  ///< the steps the median is taken over
  double median_ms = 0.0;         ///< median of steady_ms (0 for none)
  double min_ms = 0.0;
  double max_ms = 0.0;
};

/// @brief Splits @p step_ms (every step in order) after its first @p warmup steps.
[[nodiscard]] inline step_summary summarize_steps(std::span<const double> step_ms, int warmup) {
  step_summary s;
  const auto cut = static_cast<std::size_t>(
      std::clamp<std::ptrdiff_t>(warmup, 0, static_cast<std::ptrdiff_t>(step_ms.size())));
  s.warmup_ms.assign(step_ms.begin(), step_ms.begin() + static_cast<std::ptrdiff_t>(cut));
  s.steady_ms.assign(step_ms.begin() + static_cast<std::ptrdiff_t>(cut), step_ms.end());
  if (!s.steady_ms.empty()) {
    s.median_ms = median_of(s.steady_ms);
    const auto [lo, hi] = std::minmax_element(s.steady_ms.begin(), s.steady_ms.end());
    s.min_ms = *lo;
    s.max_ms = *hi;
  }
  return s;
}

/// @brief The bound's inputs as measured in this run (B: the best of rates.samples).
struct measured_bound {
  double compute_ms = 0.0;           ///< C: one step's compute with nothing copied
  std::uint64_t streamed_bytes = 0;  ///< W: weight bytes the plan streams per step
  pinned_rates rates;                ///< every pinned host→device rate measured; B the best
  std::uint64_t file_bytes = 0;      ///< F: of W, the bytes read from the files per step
  double disk_gbps = 0.0;            ///< the disk's rate as stated (disk_read_gb_per_s); 0: none
};

namespace step_summary_internal {
[[nodiscard]] inline std::string ms(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}
}  // namespace step_summary_internal

/// @brief The three-tier bound's line for a plan with a file tier: max(@p bus_bound_ms, F / the
/// stated disk rate) and the median against it; without a stated rate, how to state one.
[[nodiscard]] inline std::string format_disk_bound(const measured_bound& bound, double bus_bound_ms,
                                                   const step_summary& s) {
  using step_summary_internal::ms;
  if (bound.file_bytes == 0) return {};
  if (!(bound.disk_gbps > 0.0))
    return "  file tier " + format_decimal_gb(bound.file_bytes) +
           " a step: state the disk's rate (--ddo-disk-read-gb-per-s) for the three-tier bound\n";
  const double disk_ms = static_cast<double>(bound.file_bytes) / (bound.disk_gbps * 1e6);
  const double three = std::max(bus_bound_ms, disk_ms);
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.3fx", s.steady_ms.empty() ? 0.0 : s.median_ms / three);
  return "  three-tier bound: max(" + ms(bus_bound_ms) +
         " ms, F / B_disk = " + format_decimal_gb(bound.file_bytes) + " at " +
         ms(bound.disk_gbps * 1e3) + " MB/s stated = " + ms(disk_ms) + " ms) = " + ms(three) +
         " ms; median / three-tier bound = " +
         (s.steady_ms.empty() ? std::string("-") : std::string(ratio)) + "\n";
}

/// @brief The summary lines of @p t (every step, its first @p warmup reported apart): the steady
/// median of the intervals between step starts (min, max), the warm-up steps, the spans apart,
/// and with @p bound the median against max(C, W / B), B the best rate measured; a ratio below
/// ratio_floor adds a MEASUREMENT FAULT line with the raw figures.
[[nodiscard]] inline std::string format_step_summary(const step_times& t, int warmup,
                                                     const measured_bound* bound) {
  using step_summary_internal::ms;
  const auto s = summarize_steps(t.interval_ms, warmup);
  const auto spans = summarize_steps(t.span_ms, warmup);
  std::string out = "summary: " + std::to_string(s.steady_ms.size()) + " steady step" +
                    (s.steady_ms.size() == 1 ? "" : "s");
  if (s.steady_ms.empty()) {
    out += " (every step was a warm-up step)";
  } else {
    out += ", median " + ms(s.median_ms) + " ms/step between step starts (min " + ms(s.min_ms) +
           ", max " + ms(s.max_ms) + ")";
  }
  out += "; warm-up: ";
  if (s.warmup_ms.empty()) out += "none";
  for (std::size_t i = 0; i < s.warmup_ms.size(); ++i)
    out += (i == 0 ? "" : ", ") + ms(s.warmup_ms[i]) + " ms";
  out += "\n";
  if (!spans.steady_ms.empty())
    out += "  spans (first enqueue to synchronize, not the figure): median " +
           ms(spans.median_ms) + " ms (min " + ms(spans.min_ms) + ", max " + ms(spans.max_ms) +
           ")\n";
  if (bound != nullptr) {
    const double b_gbps = bound->rates.best_gbps();
    const double copy_ms = copy_ms_at(bound->streamed_bytes, b_gbps);
    const double b = bound_ms_of(bound->compute_ms, bound->streamed_bytes, b_gbps);
    out += "  bound, measured in this run: max(C = " + ms(bound->compute_ms) +
           " ms compute with nothing copied, W / B = " + format_decimal_gb(bound->streamed_bytes) +
           " streamed at " + ms(b_gbps) + " GB/s pinned = " + ms(copy_ms) + " ms) = " + ms(b) +
           " ms; B the best of: " + bound->rates.describe();
    if (!s.steady_ms.empty() && b > 0.0) {
      const bound_figures f{s.steady_ms, spans.steady_ms, bound->compute_ms,
                            bound->streamed_bytes, bound->rates};
      out += "\n  " + format_ratio("median / bound", s.median_ms, f);
    }
    out += "\n" + format_disk_bound(*bound, b, s);
  }
  return out;
}

/// @brief Whether @p t's steady median beats @p bound by more than the floor allows.
[[nodiscard]] inline bool measurement_fault(const step_times& t, int warmup,
                                            const measured_bound& bound) {
  const auto s = summarize_steps(t.interval_ms, warmup);
  if (s.steady_ms.empty()) return false;
  return judge_ratio(s.median_ms, bound_ms_of(bound.compute_ms, bound.streamed_bytes,
                                               bound.rates.best_gbps()))
      .fault;
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
