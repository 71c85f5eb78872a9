// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::offload_metrics: what the runtime moved and how long the engine waited for it,
/// per step and in total. Device times come from timing events that exist only when metrics are
/// enabled (runtime_options::metrics); byte and copy counts are always kept.
///
/// A step is one pass over the groups: it begins at the first acquire and at every acquire of a
/// group whose index is not above the previous one (the model ran again), or at begin_step().

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/enum_names.hpp"
#include "ddo/runtime/budget_move.hpp"
#include "ddo/runtime/executed_route.hpp"
#include "ddo/runtime/native_vmm_options.hpp"
#include "ddo/transport/vmm_stats.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Where streamed bytes came from.
enum class transfer_source { pinned, pageable_staged, file };
inline constexpr std::size_t transfer_source_count = 3;
template <>
struct enum_names<transfer_source> {
  static constexpr std::array<std::string_view, 3> values = {"pinned", "pageable_staged", "file"};
};
static_assert(enum_names<transfer_source>::values.size() == transfer_source_count,
              "a name for every transfer_source");

/// @brief "pinned", "pageable_staged", "file".
[[nodiscard]] constexpr std::string_view to_string(transfer_source s) noexcept {
  return enum_name(s);
}

/// @brief Counters of one step (or of the whole run, in offload_metrics::totals).
struct step_metrics {
  std::uint64_t step = 0;
  /// Bytes brought to the device, indexed by transfer_source.
  std::array<std::uint64_t, transfer_source_count> bytes_by_source{};
  std::uint64_t copies = 0;       ///< copy calls issued (a group is one, or a few chunks)
  std::uint64_t group_loads = 0;  ///< groups brought into a slot
  std::uint64_t acquires = 0;     ///< acquire() calls
  std::uint64_t hits = 0;         ///< acquires that found the group loaded or loading (prefetched)
  std::uint64_t misses = 0;       ///< acquires that had to start the load themselves
  std::uint64_t deferred_prefetches = 0;  ///< prefetches postponed until a lease was dropped
  /// copy_ms, timed_bytes and stall_ms were measured: the step ran with runtime_options::metrics
  /// on. Without it they stay 0, which means "not timed", never "no stall": read achieved_gbps()
  /// and overlap_ratio(), empty then, and print "not timed" (issue 37).
  bool timed = false;
  double copy_ms = 0.0;           ///< device time of the timed loads (metrics on)
  std::uint64_t timed_bytes = 0;  ///< bytes of the loads whose time is in copy_ms
  double stall_ms = 0.0;          ///< compute streams waiting for loads (metrics on)
  double host_wait_ms = 0.0;      ///< engine thread waiting for the staging thread to issue a load
  /// The engine's streams inside leases, after the wait for the load (runtime_options::
  /// time_compute): the compute a calibration measures.
  double compute_ms = 0.0;

  /// @brief All streamed bytes of the step.
  [[nodiscard]] std::uint64_t bytes() const noexcept {
    return bytes_by_source[0] + bytes_by_source[1] + bytes_by_source[2];
  }
  [[nodiscard]] std::uint64_t bytes(transfer_source s) const noexcept {
    return bytes_by_source[static_cast<std::size_t>(s)];
  }
  /// @brief timed bytes / copy time, in GB/s (1e9 bytes per second); 0 when a timed step copied
  /// nothing; empty when the step was not timed.
  [[nodiscard]] std::optional<double> achieved_gbps() const noexcept {
    if (!timed) return std::nullopt;
    return copy_ms > 0.0 ? static_cast<double>(timed_bytes) / (copy_ms * 1e6) : 0.0;
  }
  /// @brief Share of copy time hidden behind compute: 1 - stall / copy, clamped to [0, 1]; 1 when
  /// a timed step copied nothing; empty when the step was not timed.
  [[nodiscard]] std::optional<double> overlap_ratio() const noexcept {
    if (!timed) return std::nullopt;
    if (copy_ms <= 0.0) return 1.0;
    return std::clamp(1.0 - stall_ms / copy_ms, 0.0, 1.0);
  }

  /// @brief Adds @p o's counters to this one (the step number stays).
  step_metrics& operator+=(const step_metrics& o) noexcept {
    for (std::size_t i = 0; i < transfer_source_count; ++i) bytes_by_source[i] += o.bytes_by_source[i];
    copies += o.copies;
    group_loads += o.group_loads;
    acquires += o.acquires;
    hits += o.hits;
    misses += o.misses;
    deferred_prefetches += o.deferred_prefetches;
    timed = timed || o.timed;
    copy_ms += o.copy_ms;
    timed_bytes += o.timed_bytes;
    stall_ms += o.stall_ms;
    host_wait_ms += o.host_wait_ms;
    compute_ms += o.compute_ms;
    return *this;
  }
};

/// @brief A snapshot of an offloader's metrics (offloader::metrics()).
struct offload_metrics {
  executed_route route = executed_route::dynamic_offload;  ///< the route that ran
  std::string transport;  ///< "linear", "host_sim", ...
  bool timing = false;    ///< copy_ms / stall_ms measured (metrics enabled)
  std::vector<step_metrics> steps;
  step_metrics totals;    ///< sum over steps
  std::uint64_t resident_bytes = 0;      ///< device bytes of resident weights (aligned)
  std::uint64_t slot_bytes = 0;          ///< bytes of one ring slot
  std::uint64_t slot_count = 0;          ///< slots in the ring
  std::uint64_t pinned_bytes = 0;        ///< host bytes page-locked for weights (packed blocks)
  std::uint64_t pin_fallback_bytes = 0;  ///< weights planned pinned but staged (pinning failed)
  std::uint64_t staging_bytes = 0;       ///< pinned staging buffers
  std::uint64_t device_bytes = 0;        ///< ddo's device bytes now (resident + ring)
  std::uint64_t peak_device_bytes = 0;   ///< ddo's accounting; the runner samples cudaMemGetInfo
  std::uint64_t cached_blocks_reused = 0;  ///< pinned blocks taken from the pinned-weight cache
  native_vmm_stats native;  ///< the native VMM route's windows, retained sources, micro-cache
  /// The VMM window's driver calls and their host time (both VMM routes; zero elsewhere):
  /// `vmm.host_ms_per_gb(totals.bytes())` is the map/access/unmap host time per loaded GB.
  vmm_window_stats vmm;
  /// Every device-budget move so far, in order (runtime/budget_move.hpp).
  std::vector<budget_move> budget_moves;
};

}  // namespace v0
}  // namespace ddo
