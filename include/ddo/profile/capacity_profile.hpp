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

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"

namespace ddo {
inline namespace v0 {

/// @brief What one calibration run saw on its device (bytes).
struct calibration_measurement {
  std::uint64_t total_vram_bytes = 0;        ///< the device's memory in total
  std::uint64_t free_vram_before_bytes = 0;  ///< free before the offloader was set up
  std::uint64_t min_free_vram_bytes = 0;     ///< the lowest free memory sampled during the run
  std::uint64_t model_bytes = 0;             ///< weight bytes of the component profiled
  std::string device_name;                   ///< e.g. "NVIDIA H200" (informational)
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
    throw config_error("config", "profile_name",
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
  return p;
}

}  // namespace v0
}  // namespace ddo
