// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The FLUX.1 engine calibrating ddo's overlap-aware planner (ddo-flux --calibrate):
/// ddo::calibrate with run_step(tokens) = one forward of the real model at the two token counts
/// (image tokens: a forward per count, the smaller for an image of half the patch rows and
/// columns), and the lookup of a stored profile's timings a planned run predicts with. Over any
/// forward and transport: ddo-flux runs it on the GPU forward, the CI test on host_sim's CPU
/// forward (tests/runner/flux_test.cpp). Example code (examples/flux/).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/error.hpp"
#include "ddo/profile/profile_lookup.hpp"
#include "ddo/profile/profile_store.hpp"
#include "ddo/runtime/calibration.hpp"
#include "flux/flux_engine.hpp"

namespace flux {

/// @brief Calibrates @p off (set up with @p recorder's runtime_options on a build_profile plan)
/// on the forward: each run_step is one forward of the stages at @p timestep, through
/// enqueue_forward (acquire, run, release per stage), then a synchronize of @p view —
/// @p high on @p in_high at in_high.image_tokens, @p low on @p in_low at in_low's. The token
/// counts of @p options are set from the inputs.
/// @throws what ddo::calibrate throws (usage_error for an offloader not set up for it).
template <class Offloader, class Forward>
[[nodiscard]] ddo::capacity_profile calibrate_forward(
    Offloader& off, ddo::calibration_recorder& recorder, const ddo::dynamic_offload_config& config,
    typename Offloader::stream_view view, const std::vector<stage>& stages, Forward& high,
    const inputs& in_high, Forward& low, const inputs& in_low, float timestep,
    ddo::calibration_options options) {
  options.tokens_low = in_low.image_tokens;
  options.tokens_high = in_high.image_tokens;
  const auto run_at = [&](std::uint64_t tokens) {
    const bool at_high = tokens == in_high.image_tokens;
    std::vector<float> velocity;  // host_sim's stage tasks write it: synchronized below
    enqueue_forward(off, view, stages, at_high ? high : low, at_high ? in_high : in_low, timestep,
                    velocity);
    off.transport().synchronize(view);
  };
  return ddo::calibrate(off, recorder, config, run_at, options);
}

/// @brief The group timings of the stored profile @p name (@p found: prepare_offload's lookup,
/// or find_group_timings'), to predict with.
/// @throws ddo::usage_error when none is stored under @p profile_dir or its timings do not apply
/// here (its note says why), with the command that calibrates it.
inline const ddo::stored_group_timings& require_profile_timings(
    const std::optional<ddo::stored_group_timings>& found, const std::string& name,
    const std::string& profile_dir) {
  if (found && !found->timings.empty()) return *found;
  throw ddo::usage_error("--capacity-profile " + name + ": " +
                         (found ? found->note
                                : "no capacity profile '" + name + "' in " +
                                      ddo::profile_store(profile_dir).directory().string()) +
                         "; calibrate first: ddo-flux --model ... --capacity-profile " + name +
                         " --calibrate (the same --width, --height, card and route)");
}

}  // namespace flux
