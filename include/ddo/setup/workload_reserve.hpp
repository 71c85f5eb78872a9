// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The engine's device reserve per workload size (issue 41, item 2): workload_reserve is
/// a table of the engine's own numbers — the device bytes its forward takes beyond ddo's at each
/// measured size (tokens, frames, batch) — read at any size within its range (linear between
/// the two nearest sizes, refused outside it); measure_workload_reserve fills it once per size
/// from the engine's forward through a device_peak_probe (host_sim's ledger here, cudaMemGetInfo
/// sampled on a GPU: examples/runner/device_memory_sampler.hpp); set_device_reserve with a
/// table moves a running offloader to the plan a fresh setup at that size makes.

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/runtime/device_peak_probe.hpp"
#include "ddo/setup/device_budget.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One measured size: the engine's device bytes at @p size units of its workload.
struct reserve_point {
  std::int64_t size = 0;
  std::uint64_t bytes = 0;
  friend bool operator==(const reserve_point&, const reserve_point&) = default;
};

/// @brief The engine's device reserve per workload size, from its own numbers (measured or
/// computed). Between two stated sizes the reserve is the straight line between them, rounded
/// up: above the true figure where memory grows faster than the size (attention scores), so
/// state the sizes the engine runs where it grows slower. Outside the stated sizes it refuses
/// (no extrapolation: a reserve guessed low is an OOM in the engine, not in ddo).
class workload_reserve {
 public:
  /// @brief @p unit names the size in messages ("tokens", "frames", "batch"); @p points in any
  /// order. @throws usage_error for no points, a size below 1, or one size stated twice.
  workload_reserve(std::string unit, std::vector<reserve_point> points)
      : unit_(std::move(unit)), points_(std::move(points)) {
    DDO_EXPECTS(!unit_.empty(), "workload_reserve: name the size's unit (tokens, frames, batch)");
    DDO_EXPECTS(!points_.empty(), "workload_reserve (" + unit_ + "): no sizes given; state or "
                                  "measure the reserve at one size at least");
    std::sort(points_.begin(), points_.end(),
              [](const auto& a, const auto& b) { return a.size < b.size; });
    DDO_EXPECTS(points_.front().size >= 1, "workload_reserve (" + unit_ + "): size " +
                                               std::to_string(points_.front().size) +
                                               " is not a size; sizes are 1 or more");
    for (std::size_t i = 1; i < points_.size(); ++i)
      DDO_EXPECTS(points_[i].size != points_[i - 1].size,
                  "workload_reserve (" + unit_ + "): size " + std::to_string(points_[i].size) +
                      " stated twice; give each size once");
  }

  /// @brief The unit the sizes count.
  [[nodiscard]] const std::string& unit() const noexcept { return unit_; }
  /// @brief The stated sizes, smallest first.
  [[nodiscard]] std::span<const reserve_point> points() const noexcept { return points_; }
  /// @brief Whether @p size lies within the stated sizes (bytes_at answers it).
  [[nodiscard]] bool covers(std::int64_t size) const noexcept {
    return size >= points_.front().size && size <= points_.back().size;
  }

  /// @brief The reserve at @p size: a stated size's bytes, else the line between its two
  /// neighbours, rounded up. @throws config_error (origin config, key "reserve.<unit>") naming
  /// the stated range when @p size lies outside it.
  [[nodiscard]] std::uint64_t bytes_at(std::int64_t size) const {
    if (!covers(size))
      throw config_error(origin::config, "reserve." + unit_,
                         "the engine's device reserve is known for " + range_text() + " " +
                             unit_ + ", not for " + std::to_string(size) +
                             ": measure it at that size (measure_workload_reserve) or state it");
    const auto hi = std::lower_bound(points_.begin(), points_.end(), size,
                                     [](const auto& p, std::int64_t s) { return p.size < s; });
    if (hi->size == size) return hi->bytes;
    const auto lo = hi - 1;
    const auto span = static_cast<long double>(hi->size - lo->size);
    const auto at = static_cast<long double>(size - lo->size);
    const long double bytes = static_cast<long double>(lo->bytes) +
                              (static_cast<long double>(hi->bytes) -
                               static_cast<long double>(lo->bytes)) * at / span;
    const auto whole = static_cast<std::uint64_t>(bytes);
    return static_cast<long double>(whole) < bytes ? whole + 1 : whole;
  }

 private:
  [[nodiscard]] std::string range_text() const {
    const auto a = std::to_string(points_.front().size);
    return points_.size() == 1 ? a : a + ".." + std::to_string(points_.back().size);
  }

  std::string unit_;
  std::vector<reserve_point> points_;
};

/// @brief The engine's reserve measured once per size: for each of @p sizes (smallest first,
/// each once), @p probe started, then @p forward(size) — the engine's forward at that size,
/// which allocates what it needs and frees it before it returns (as the engine does when the
/// size changes) — and the probe's peak taken as that size's reserve. Run it before ddo's setup
/// or beside a running offloader: the baseline is what is in use at each start.
/// @throws usage_error for no sizes or a size below 1; what @p forward throws.
template <device_peak_probe Probe, class Forward>
  requires std::invocable<Forward&, std::int64_t>
[[nodiscard]] workload_reserve measure_workload_reserve(std::string unit,
                                                        std::span<const std::int64_t> sizes,
                                                        Probe& probe, Forward&& forward) {
  std::vector<std::int64_t> order(sizes.begin(), sizes.end());
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  DDO_EXPECTS(!order.empty(), "measure_workload_reserve (" + unit + "): no sizes to measure");
  DDO_EXPECTS(order.front() >= 1, "measure_workload_reserve (" + unit + "): size " +
                                      std::to_string(order.front()) + " is not a size");
  std::vector<reserve_point> points;
  points.reserve(order.size());
  for (const std::int64_t size : order) {
    probe.start();
    forward(size);
    points.push_back({size, static_cast<std::uint64_t>(probe.peak_bytes())});
  }
  return workload_reserve(std::move(unit), std::move(points));
}

/// @brief set_device_reserve at workload size @p size: the engine's reserve read from
/// @p reserve (workload_reserve::bytes_at), then the move to the plan a fresh setup with that
/// reserve makes. @throws config_error when @p size lies outside the table (nothing moved), else
/// as set_device_reserve.
template <class Offloader>
bool set_device_reserve(Offloader& off, const dynamic_offload_settings& settings,
                        const setup_options& options, const workload_reserve& reserve,
                        std::int64_t size) {
  return set_device_reserve(off, settings, options, reserve.bytes_at(size));
}

}  // namespace v0
}  // namespace ddo
