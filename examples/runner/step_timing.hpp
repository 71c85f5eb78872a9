// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief How every figure of ddo-run, ddo-flux and the benchmarks is read against its bound
/// (issue 37 item 1), in one place:
/// - a step's time is the interval between its start and the next step's start: whatever a
///   program does between steps (sampling, printing, an Euler update) belongs to some interval,
///   while the copy stream may already load the next step's groups. The span from a step's first
///   enqueue to its synchronize is shown apart, never used for the ratio (it flatters: the
///   copies that ran between spans are in no span);
/// - the bound's bandwidth B is the best pinned host-to-device rate measured in the same run by
///   any copy pattern (back-to-back batches, long single copies, a hand-written ring): a bound
///   made of a slower pattern than the one the run reached is no bound;
/// - a ratio below ratio_floor is not a result but a measurement fault: printed with the raw
///   figures it came from, never clamped.
/// Pure host logic, tested in tests/runner/step_timing_test.cpp. Example code (examples/runner/).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>


namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief The median of @p values (0 for none).
[[nodiscard]] inline double median_of(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/// @brief W / B in ms: @p streamed_bytes at @p pinned_gbps (0 when B is unknown).
[[nodiscard]] inline double copy_ms_at(std::uint64_t streamed_bytes, double pinned_gbps) {
  return pinned_gbps > 0.0 ? static_cast<double>(streamed_bytes) / (pinned_gbps * 1e9) * 1e3 : 0.0;
}

/// @brief The bound max(C, W / B) in ms: a step cannot beat its compute nor its copies.
[[nodiscard]] inline double bound_ms_of(double compute_ms, std::uint64_t streamed_bytes,
                                        double pinned_gbps) {
  return std::max(compute_ms, copy_ms_at(streamed_bytes, pinned_gbps));
}

/// @brief Below this a step beat its bound: the bound or the step was mismeasured.
inline constexpr double ratio_floor = 0.98;

/// @brief One run's steps: interval_ms[i] from step i's start to step i+1's (the last to the
/// mark taken where a step after it would start), span_ms[i] from step i's start to its end.
struct step_times {
  std::vector<double> interval_ms;
  std::vector<double> span_ms;
};

/// @brief Step times from @p start_ms (every step's start, then one closing mark: n + 1 values)
/// and @p end_ms (every step's end: n values), all on one clock.
/// @throws std::invalid_argument when the counts do not match or the marks go backwards.
[[nodiscard]] inline step_times step_times_from(std::span<const double> start_ms,
                                                std::span<const double> end_ms) {
  if (start_ms.size() != end_ms.size() + 1)
    throw std::invalid_argument("step times: " + std::to_string(start_ms.size()) +
                                " start marks for " + std::to_string(end_ms.size()) +
                                " steps; expected one more start (the closing mark)");
  step_times t;
  for (std::size_t i = 0; i < end_ms.size(); ++i) {
    if (end_ms[i] < start_ms[i] || start_ms[i + 1] < end_ms[i])
      throw std::invalid_argument("step times: step " + std::to_string(i) +
                                  "'s marks go backwards (start, end, next start out of order)");
    t.interval_ms.push_back(start_ms[i + 1] - start_ms[i]);
    t.span_ms.push_back(end_ms[i] - start_ms[i]);
  }
  return t;
}

/// @brief Takes the marks of step_times_from on the host's steady clock: start() at each step's
/// first enqueue, end() after its synchronize, close() where the step after the last would start
/// (after the same between-step work the other steps had).
class step_clock {
 public:
  using clock = std::chrono::steady_clock;
  void start() { starts_.push_back(ms_now()); }
  void end() { ends_.push_back(ms_now()); }
  void close() { starts_.push_back(ms_now()); }
  [[nodiscard]] std::size_t started() const noexcept { return ends_.size(); }
  /// @brief The last step's span (after end()).
  [[nodiscard]] double last_span_ms() const {
    return ends_.empty() ? 0.0 : ends_.back() - starts_[ends_.size() - 1];
  }
  /// @brief The times of every step (after close()).
  [[nodiscard]] step_times times() const { return step_times_from(starts_, ends_); }

 private:
  [[nodiscard]] double ms_now() const {
    return std::chrono::duration<double, std::milli>(clock::now() - origin_).count();
  }
  clock::time_point origin_ = clock::now();
  std::vector<double> starts_, ends_;
};

/// @brief One pinned host-to-device rate and the copy pattern that reached it.
struct bandwidth_sample {
  std::string pattern;  ///< "batches of 5 x 256 MiB", "hand-written ring", ...
  double gbps = 0.0;    ///< GB/s (1e9 bytes per second)
};

/// @brief Every pinned rate measured in one run; B is the best of them.
struct pinned_rates {
  std::vector<bandwidth_sample> samples;

  void add(std::string pattern, double gbps) { samples.push_back({std::move(pattern), gbps}); }
  /// @brief B: the best rate measured (0 when none was).
  [[nodiscard]] double best_gbps() const noexcept {
    double best = 0.0;
    for (const auto& s : samples) best = std::max(best, s.gbps);
    return best;
  }
  /// @brief "batches of 5 x 256 MiB 55.3, single 256 MiB copies 56.1 (best) GB/s".
  [[nodiscard]] std::string describe() const {
    const double best = best_gbps();
    std::string out;
    for (const auto& s : samples) {
      char buf[48];
      std::snprintf(buf, sizeof buf, " %.2f", s.gbps);
      out += (out.empty() ? "" : ", ") + s.pattern + buf +
             (s.gbps == best && best > 0.0 ? " (best)" : "");
    }
    return (out.empty() ? std::string("none measured") : out) + " GB/s";
  }
};

/// @brief A ratio of a step to its bound, and whether it is a measurement fault.
struct ratio_verdict {
  double ratio = 0.0;  ///< step / bound, as measured (never clamped); 0 when no bound
  bool fault = false;  ///< ratio < ratio_floor
};

[[nodiscard]] inline ratio_verdict judge_ratio(double step_ms, double bound_ms) noexcept {
  ratio_verdict v;
  if (bound_ms <= 0.0 || step_ms <= 0.0) return v;
  v.ratio = step_ms / bound_ms;
  v.fault = v.ratio < ratio_floor;
  return v;
}

namespace step_timing_internal {
[[nodiscard]] inline std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}
[[nodiscard]] inline std::string list(std::span<const double> ms) {
  // Appended piece by piece: g++ 12 at -O3 warns (-Wrestrict, a false positive) on
  // `const char* + std::string&&` here.
  std::string out = "[";
  for (double v : ms) {
    if (out.size() > 1) out += ' ';
    out += fixed(v, 2);
  }
  out += ']';
  return out;
}
}  // namespace step_timing_internal

/// @brief What a ratio line reports: the steady steps' times, C, W and the rates B came from.
struct bound_figures {
  std::vector<double> interval_ms;  ///< the steady steps' intervals (what the median is of)
  std::vector<double> span_ms;      ///< the same steps' spans (shown apart)
  double compute_ms = 0.0;          ///< C
  std::uint64_t streamed_bytes = 0; ///< W
  pinned_rates rates;               ///< B = rates.best_gbps()
};

/// @brief The bound max(C, W / B) of @p f, B the best rate measured.
[[nodiscard]] inline double bound_ms_of(const bound_figures& f) {
  return bound_ms_of(f.compute_ms, f.streamed_bytes, f.rates.best_gbps());
}

/// @brief "median / bound = 1.01x", or for a ratio below the floor the same ratio followed by a
/// MEASUREMENT FAULT line with every raw figure it came from (the caller prints it as is).
[[nodiscard]] inline std::string format_ratio(const char* label, double step_ms,
                                              const bound_figures& f) {
  using step_timing_internal::fixed;
  using step_timing_internal::list;
  const double bound = bound_ms_of(f);
  const auto v = judge_ratio(step_ms, bound);
  std::string out = std::string(label) + " = " + fixed(v.ratio, 3) + "x";
  if (!v.fault) return out;
  out += "\n  MEASUREMENT FAULT: " + fixed(v.ratio, 3) + "x is below " + fixed(ratio_floor, 2) +
         "x: a step cannot beat its bound, so the bound or the step was mismeasured (not a "
         "result; raw figures: step intervals " + list(f.interval_ms) + " ms, spans " +
         list(f.span_ms) + " ms, C = " + fixed(f.compute_ms, 3) + " ms, W = " +
         std::to_string(f.streamed_bytes) + " bytes, pinned rates: " + f.rates.describe() + ")";
  return out;
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
