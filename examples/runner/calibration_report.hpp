// SPDX-License-Identifier: Apache-2.0
#pragma once
// What ddo-run and ddo-flux print around a capacity profile: the line after a calibration saved
// one, and a planned run's predicted step against its measured median. One wording for both
// programs (docs/calibration.md quotes it). Example code (examples/runner/).

#include <cstdint>
#include <cstdio>

#include "ddo/core/format_bytes.hpp"
#include "ddo/profile/capacity_profile.hpp"
#include "ddo/profile/profile_store.hpp"
#include "ddo/profile/profile_timings.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// One step of a profile at a token count: the engine's stream time (compute and lead-ins, as
/// the planner plans with it) and every group's load.
struct profile_step {
  double compute_ms = 0.0;
  double copy_ms = 0.0;
};

/// @p profile's step at @p tokens (timings_at: interpolated between its two counts).
[[nodiscard]] inline profile_step profile_step_at(const capacity_profile& profile,
                                                  std::uint64_t tokens) {
  profile_step s;
  for (const auto& g : timings_at(profile, tokens))
    s.compute_ms += g.compute_ms + g.lead_in_ms, s.copy_ms += g.transfer_ms;
  return s;
}

/// Prints that @p profile was saved to @p store, with its step at @p tokens; returns that step.
inline profile_step print_saved_profile(const capacity_profile& profile, const profile_store& store,
                                        std::uint64_t tokens) {
  const profile_step s = profile_step_at(profile, tokens);
  std::printf(
      "  capacity profile '%s' (format %d) saved to %s: %zu groups, compute %.1f ms and "
      "copies %.1f ms per step at %llu tokens; peak in use %s, next runs may keep %s "
      "resident\n",
      profile.name.c_str(), profile.format, store.path_of(profile.name).c_str(),
      profile.groups.size(), s.compute_ms, s.copy_ms, static_cast<unsigned long long>(tokens),
      format_decimal_gb(profile.peak_in_use_bytes).c_str(),
      format_decimal_gb(profile.recommended_resident_budget_bytes).c_str());
  return s;
}

/// Prints a planned run's predicted step against the median it measured (the error in percent
/// of the measured median, signed: positive when the prediction was slower).
inline void print_predicted_vs_measured(double predicted_ms, double measured_ms) {
  std::printf("  predicted %.1f ms/step, measured median %.1f ms (%+.1f%%)\n", predicted_ms,
              measured_ms, 100.0 * (predicted_ms - measured_ms) / measured_ms);
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
