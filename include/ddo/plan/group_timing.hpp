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
  /// The engine's compute for the group on its stream, back to back (the GPU's sustained
  /// clock; as measured while streaming when only that was measured).
  double compute_ms = 0.0;
  double transfer_ms = 0.0;   ///< one load of those bytes
  double lead_in_ms = 0.0;    ///< the engine's own stream time before the group's compute
  /// The same compute measured while streaming with nothing resident (a faster clock on a
  /// power-limited GPU, where the stream idled between groups); 0: not measured. Reported, not
  /// planned with: the predictor runs every plan at compute_ms (docs/calibration.md says why).
  double streaming_compute_ms = 0.0;

  friend bool operator==(const group_timing&, const group_timing&) = default;
};

}  // namespace v0
}  // namespace ddo
