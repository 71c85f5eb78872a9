// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::capacity_profile: what a zero-resident calibration run measured, and the resident
/// budget it recommends for the next runs of the same workload (the reference's capacity profiles:
/// `profile_name`, `build_profile`, `profile_vram_headroom_gb`).
///
/// Calibration runs with a zero resident budget, so everything the device held at its peak was
/// the transport's ring, the engine's activations and whatever else the process uses — never
/// resident weights. What stayed free at that peak, less `profile_vram_headroom_gb`, is memory the
/// next run can give to resident weights without ever going over.
///
/// Since format 2 it also records, per execution group, what the overlap-aware residency
/// planner (plan/overlap_planner.hpp) needs: the group's streamed bytes by route, the time its
/// load took, and its compute time on the engine's stream at two token counts (compute scales
/// with tokens; profile/profile_timings.hpp interpolates); format 3 adds the engine's time
/// between groups (lead-ins), format 4 the compute timed back to back (the GPU's sustained
/// clock). It names the device, the transport and the model (a fingerprint of the weight table,
/// profile/model_fingerprint.hpp), so that a profile measured elsewhere is not applied. Files are
/// JSON (profile/profile_store.hpp) of format 4; a profile built in code with an earlier format
/// plans as that format did (format 1: a budget, never timings).

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The profile format this ddo writes and reads (JSON files). Its predecessors (3: no
/// sustained compute times; 2: no lead-in times either; 1: a resident budget only) were TOML files,
/// no longer read; the planner still honours a profile built in code with one.
inline constexpr int capacity_profile_format = 4;

/// @brief What calibration measured for one execution group (nanoseconds, medians over the
/// measured steps). Route bytes: how the group's streamed bytes reached the device.
struct group_profile {
  std::string name;                   ///< the execution group's name
  std::uint64_t pinned_bytes = 0;     ///< copied from page-locked host memory
  std::uint64_t staged_bytes = 0;     ///< pageable memory staged through pinned buffers
  std::uint64_t file_bytes = 0;       ///< read from its file into pinned staging
  std::uint64_t transfer_ns = 0;      ///< one load of the group (copy stream / staging), device time
  std::uint64_t compute_ns_low = 0;   ///< the engine's use of the lease at tokens_low
  std::uint64_t compute_ns_high = 0;  ///< the same at tokens_high
  /// Format 3: the engine's own time on its stream between the previous group's release and
  /// this group's acquire (its work between groups, launch gaps), less any wait for the load;
  /// copies overlap it as they overlap compute. 0 when read from a format 2 profile.
  std::uint64_t lead_in_ns_low = 0;
  std::uint64_t lead_in_ns_high = 0;  ///< the same at tokens_high
  /// Format 4: the group's compute timed again with the copies skipped, so that the engine's
  /// stream ran its groups back to back as a plan that hides its copies runs them: on a
  /// power-limited GPU that is a lower, sustained clock than the streaming pass's
  /// (compute_ns_low/high). The planner plans with it when measured (profile_timings.hpp).
  /// 0: not measured (a format 3 profile, or calibration_options::sustained_pass off).
  std::uint64_t sustained_compute_ns_low = 0;
  std::uint64_t sustained_compute_ns_high = 0;  ///< the same at tokens_high

  /// @brief Whether the sustained compute was measured (at both token counts).
  [[nodiscard]] bool has_sustained_compute() const noexcept {
    return sustained_compute_ns_low > 0 && sustained_compute_ns_high > 0;
  }

  /// @brief Streamed bytes over every route.
  [[nodiscard]] std::uint64_t bytes() const noexcept {
    return pinned_bytes + staged_bytes + file_bytes;
  }
  friend bool operator==(const group_profile&, const group_profile&) = default;
};

/// @brief What one calibration run saw on its device (bytes).
struct calibration_measurement {
  std::uint64_t total_vram_bytes = 0;        ///< the device's memory in total
  std::uint64_t free_vram_before_bytes = 0;  ///< free before the offloader was set up
  std::uint64_t min_free_vram_bytes = 0;     ///< the lowest free memory sampled during the run
  std::uint64_t model_bytes = 0;             ///< weight bytes of the component profiled
  std::string device_name;                   ///< e.g. "NVIDIA H200" (must match to apply)
  // Format 2: what the overlap-aware planner reads (empty groups: a budget-only profile).
  std::string model_fingerprint;             ///< profile/model_fingerprint.hpp
  std::string transport;                     ///< "linear", "vmm", "host_sim"
  std::uint64_t slot_count = 0;              ///< the ring calibrated with
  std::uint64_t prefetch_depth = 0;          ///< as the runtime ran it (≤ slot_count)
  std::uint64_t tokens_low = 0;              ///< token counts the compute was timed at
  std::uint64_t tokens_high = 0;
  std::vector<group_profile> groups;         ///< in execution order
};

/// @brief A stored recommendation for one named workload.
struct capacity_profile {
  std::string name;                               ///< the workload's `profile_name`
  std::uint64_t total_vram_bytes = 0;             ///< device the profile was measured on
  std::uint64_t model_bytes = 0;                  ///< weight bytes it was measured with
  std::uint64_t peak_in_use_bytes = 0;            ///< free before − lowest free during the run
  std::uint64_t headroom_bytes = 0;               ///< profile_vram_headroom_gb at calibration
  std::uint64_t recommended_resident_budget_bytes = 0;  ///< for the next runs
  bool full_pin = true;  ///< calibration pinned every streamed weight; keep doing so
  std::string device_name;
  /// 4 for profiles this ddo writes; 3 for a predecessor's without sustained compute times; 2
  /// without lead-in times either; 1 for one with a resident budget only (the fields below are
  /// then empty).
  int format = capacity_profile_format;
  std::string model_fingerprint;        ///< identity of the weight table profiled
  std::string transport;                ///< the transport calibrated on
  std::uint64_t min_free_vram_bytes = 0;  ///< the free-memory low-water mark of the run
  std::uint64_t slot_count = 0;         ///< ring slots during calibration
  std::uint64_t prefetch_depth = 0;     ///< prefetch depth during calibration
  std::uint64_t tokens_low = 0;         ///< compute was timed at these token counts
  std::uint64_t tokens_high = 0;        ///< (equal: one count, no interpolation)
  std::vector<group_profile> groups;    ///< per execution group, in execution order

  friend bool operator==(const capacity_profile&, const capacity_profile&) = default;
};

/// @brief Checks that @p name can name a profile file: 1–128 characters of letters, digits,
/// '.', '_' and '-', not starting with '.'.
/// @throws config_error (key profile_name) otherwise.
inline void validate_profile_name(std::string_view name) {
  const auto allowed = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  };
  const bool ok = !name.empty() && name.size() <= 128 && name.front() != '.' &&
                  std::all_of(name.begin(), name.end(), allowed);
  if (!ok)
    throw config_error(origin::config, "profile_name",
                       "profile_name '" + std::string(name) +
                           "' is not a valid profile name: use 1-128 letters, digits, '.', '_' "
                           "or '-', not starting with '.'");
}

/// @brief Turns a calibration run's measurement into a profile. The recommendation is the memory
/// that stayed free at the run's peak, less the headroom, never negative.
/// @throws usage_error when the measurement is inconsistent (lowest free above free before, or
/// free before above the total).
[[nodiscard]] inline capacity_profile make_capacity_profile(std::string_view name,
                                                            const calibration_measurement& m,
                                                            double profile_vram_headroom_gb) {
  validate_profile_name(name);
  DDO_EXPECTS(m.min_free_vram_bytes <= m.free_vram_before_bytes,
              "make_capacity_profile: the lowest free memory sampled (" +
                  std::to_string(m.min_free_vram_bytes) + " B) is above the free memory before (" +
                  std::to_string(m.free_vram_before_bytes) + " B)");
  DDO_EXPECTS(m.total_vram_bytes == 0 || m.free_vram_before_bytes <= m.total_vram_bytes,
              "make_capacity_profile: free memory before the run exceeds the device's total");
  capacity_profile p;
  p.name = std::string(name);
  p.total_vram_bytes = m.total_vram_bytes;
  p.model_bytes = m.model_bytes;
  p.peak_in_use_bytes = m.free_vram_before_bytes - m.min_free_vram_bytes;
  p.headroom_bytes = gib_to_bytes(profile_vram_headroom_gb);
  p.recommended_resident_budget_bytes =
      m.min_free_vram_bytes > p.headroom_bytes ? m.min_free_vram_bytes - p.headroom_bytes : 0;
  p.full_pin = true;
  p.device_name = m.device_name;
  p.model_fingerprint = m.model_fingerprint;
  p.transport = m.transport;
  p.min_free_vram_bytes = m.min_free_vram_bytes;
  p.slot_count = m.slot_count;
  p.prefetch_depth = m.prefetch_depth;
  p.tokens_low = m.tokens_low;
  p.tokens_high = m.tokens_high;
  DDO_EXPECTS(m.groups.empty() || (m.tokens_low > 0 && m.tokens_low <= m.tokens_high),
              "make_capacity_profile: group timings need token counts 0 < tokens_low <= "
              "tokens_high, got " + std::to_string(m.tokens_low) + " and " +
                  std::to_string(m.tokens_high));
  p.groups = m.groups;
  return p;
}

}  // namespace v0
}  // namespace ddo
