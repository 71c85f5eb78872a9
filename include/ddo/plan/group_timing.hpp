// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::group_timing: the measured times of one execution group that the overlap-aware
/// residency planner plans with (from a capacity profile at a token count:
/// profile/profile_timings.hpp, or made by hand in tests and by engines with their own timings).

#include <cstdint>
#include <string>

namespace ddo {
inline namespace v0 {

/// @brief One execution group's times (milliseconds) for the bytes it streamed when measured.
struct group_timing {
  std::string name;           ///< the execution group's name
  std::uint64_t bytes = 0;    ///< streamed bytes the transfer time was measured for
  double compute_ms = 0.0;    ///< the engine's compute for the group on its stream
  double transfer_ms = 0.0;   ///< one load of those bytes
  double lead_in_ms = 0.0;    ///< the engine's own stream time before the group's compute

  friend bool operator==(const group_timing&, const group_timing&) = default;
};

}  // namespace v0
}  // namespace ddo
