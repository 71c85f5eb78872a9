// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief What a plain `ddo-run` prints after its steps: the warm-up steps apart from the steady
/// ones (the first step pays first-touch costs a steady step does not), the steady steps' true
/// median (the mean of the middle two for an even count), and the median's ratio to the bound
/// max(C, W / B) measured in the same run. Pure host logic, tested in
/// tests/runner/compare_test.cpp. Example code (examples/runner/).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "ddo/core/format_bytes.hpp"
#include "runner/compare.hpp"

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

/// @brief The bound's inputs as measured in this run.
struct measured_bound {
  double compute_ms = 0.0;           ///< C: one step's compute with nothing copied
  std::uint64_t streamed_bytes = 0;  ///< W: weight bytes the plan streams per step
  double pinned_gbps = 0.0;          ///< B: pinned host→device bandwidth
};

/// @brief The summary lines: steady median (min, max), the warm-up steps, and with @p bound the
/// median against max(C, W / B).
[[nodiscard]] inline std::string format_step_summary(const step_summary& s,
                                                     const measured_bound* bound) {
  const auto ms = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return std::string(buf);
  };
  std::string out = "summary: " + std::to_string(s.steady_ms.size()) + " steady step" +
                    (s.steady_ms.size() == 1 ? "" : "s");
  if (s.steady_ms.empty()) {
    out += " (every step was a warm-up step)";
  } else {
    out += ", median " + ms(s.median_ms) + " ms/step (min " + ms(s.min_ms) + ", max " +
           ms(s.max_ms) + ")";
  }
  out += "; warm-up: ";
  if (s.warmup_ms.empty()) out += "none";
  for (std::size_t i = 0; i < s.warmup_ms.size(); ++i)
    out += (i == 0 ? "" : ", ") + ms(s.warmup_ms[i]) + " ms";
  out += "\n";
  if (bound != nullptr) {
    const double copy_ms = copy_ms_at(bound->streamed_bytes, bound->pinned_gbps);
    const double b = bound_ms_of(bound->compute_ms, bound->streamed_bytes, bound->pinned_gbps);
    char buf[96];
    out += "  bound, measured in this run: max(C = " + ms(bound->compute_ms) +
           " ms compute with nothing copied, W / B = " + format_decimal_gb(bound->streamed_bytes) +
           " streamed at " +
           ms(bound->pinned_gbps) + " GB/s pinned = " + ms(copy_ms) + " ms) = " + ms(b) + " ms";
    if (!s.steady_ms.empty() && b > 0.0) {
      std::snprintf(buf, sizeof buf, "%.2f", s.median_ms / b);
      out += "; median / bound = " + std::string(buf) + "x";
    }
    out += "\n";
  }
  return out;
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
