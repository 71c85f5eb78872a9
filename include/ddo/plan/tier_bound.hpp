// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The step bound a plan's three tiers aim for: resident bytes cost nothing, pinned and
/// file bytes cross the bus, file bytes cross the disk first, and the file tier's reads overlap
/// the pinned tier's copies, so a step takes at least
/// `max(C, (pinned + pageable + file) / B_bus, file / B_disk)`. The planner fills the card,
/// then RAM less its headroom, then the file (each streamed byte from the fastest tier it fits
/// in), which minimises both transfer terms for the card and RAM it is given; the plan prints
/// the tiers and this bound (C, the compute, is the engine's and not known here).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "ddo/core/format_bytes.hpp"
#include "ddo/plan/machine_capacity.hpp"
#include "ddo/plan/plan.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Pinned host-to-device rate assumed when none is measured or stated (bytes/s): the
/// copy ceiling measured on the project's H100/H200 hosts (docs/physical-limits).
inline constexpr double assumed_bus_bytes_per_s = 55.5e9;
/// @brief Disk rate assumed when none is measured or stated (bytes/s): cold O_DIRECT reads with
/// four readers on the project's GPU host (1.6 GB/s; a consumer NVMe reads 3-7 GB/s). State
/// the machine's with disk_read_gb_per_s (`--ddo-disk-read-gb-per-s`, `DDO_DISK_READ_GB_PER_S`).
inline constexpr double assumed_disk_bytes_per_s = 1.6e9;

/// @brief A plan's tiers and the transfer terms of its step bound.
struct tier_bound {
  std::uint64_t resident_bytes = 0;
  std::uint64_t pinned_bytes = 0;
  std::uint64_t pageable_bytes = 0;
  std::uint64_t file_bytes = 0;
  double bus_bytes_per_s = assumed_bus_bytes_per_s;
  double disk_bytes_per_s = assumed_disk_bytes_per_s;
  bool bus_measured = false;   ///< from machine_capacity (a profile or the engine), not assumed
  bool disk_measured = false;  ///< likewise
  bool disk_stated = false;    ///< disk_read_gb_per_s: the user's figure, over any measurement
  /// Seconds the bus needs for every streamed byte of a step.
  [[nodiscard]] double bus_seconds() const noexcept {
    return static_cast<double>(pinned_bytes + pageable_bytes + file_bytes) / bus_bytes_per_s;
  }
  /// Seconds the disk needs for the file tier of a step.
  [[nodiscard]] double disk_seconds() const noexcept {
    return static_cast<double>(file_bytes) / disk_bytes_per_s;
  }
  /// The bound's transfer part: max of the two (the compute term is the engine's).
  [[nodiscard]] double transfer_seconds() const noexcept {
    return std::max(bus_seconds(), disk_seconds());
  }
};

/// @brief The tiers of @p plan and the rates of @p machine (assumed ones where it has none); a
/// positive @p stated_disk_gb_per_s (disk_read_gb_per_s) is the disk's rate instead of either.
[[nodiscard]] inline tier_bound tier_bound_of(const offload_plan& plan,
                                              const machine_capacity& machine,
                                              double stated_disk_gb_per_s = 0.0) {
  tier_bound t;
  t.resident_bytes = plan.total_bytes(placement::gpu_resident);
  t.pinned_bytes = plan.total_bytes(placement::pinned_host);
  t.pageable_bytes = plan.total_bytes(placement::pageable_host);
  t.file_bytes = plan.total_bytes(placement::file);
  if (machine.bus_bytes_per_s > 0.0) {
    t.bus_bytes_per_s = machine.bus_bytes_per_s;
    t.bus_measured = true;
  }
  if (stated_disk_gb_per_s > 0.0) {
    t.disk_bytes_per_s = stated_disk_gb_per_s * 1e9;
    t.disk_stated = true;
  } else if (machine.disk_bytes_per_s > 0.0) {
    t.disk_bytes_per_s = machine.disk_bytes_per_s;
    t.disk_measured = true;
  }
  return t;
}

/// @brief "resident A | pinned B | pageable C | file D; step bound max(C, 12.3 ms bus at 55.5
/// GB/s assumed, 4.56 s disk at 1.60 GB/s assumed)": the plan's tiers and the bound it aims
/// for. Empty for a plan that streams nothing.
[[nodiscard]] inline std::string describe_tier_bound(const tier_bound& t) {
  if (t.pinned_bytes + t.pageable_bytes + t.file_bytes == 0) return std::string();
  auto seconds = [](double s) {
    char b[32];
    std::snprintf(b, sizeof b, s < 1.0 ? "%.1f ms" : "%.2f s", s < 1.0 ? s * 1e3 : s);
    return std::string(b);
  };
  auto rate = [](double r, const char* source) {
    char b[64];
    std::snprintf(b, sizeof b, "%.2f GB/s %s", r / 1e9, source);
    return std::string(b);
  };
  std::string out = "resident " + format_bytes(t.resident_bytes) + " | pinned " +
                    format_bytes(t.pinned_bytes);
  if (t.pageable_bytes != 0) out += " | pageable " + format_bytes(t.pageable_bytes);
  out += " | file " + format_bytes(t.file_bytes) + "; step bound max(C, " +
         seconds(t.bus_seconds()) + " over the bus at " +
         rate(t.bus_bytes_per_s, t.bus_measured ? "measured" : "assumed");
  if (t.file_bytes != 0)
    out += ", " + seconds(t.disk_seconds()) + " from the disk at " +
           rate(t.disk_bytes_per_s, t.disk_stated     ? "stated (disk_read_gb_per_s)"
                                    : t.disk_measured ? "measured"
                                                      : "assumed") +
           ", overlapped";
  return out + ")";
}

}  // namespace v0
}  // namespace ddo
