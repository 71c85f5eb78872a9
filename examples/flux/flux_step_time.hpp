// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief How ddo-flux times its steps (runner/step_timing.hpp, as ddo-run): a step's time is
/// the interval from its forward's start to the next step's, so the Euler update and whatever
/// runs between forwards belong to a step while the copy stream may load ahead; each forward's
/// own span (its start to the synchronize that reads its velocity) is kept apart. The median is
/// of the steady steps (step 0 is the warm-up: it chooses GEMM algorithms and uploads
/// constants). Example code (examples/flux/).

#include <chrono>
#include <utility>
#include <vector>

#include "runner/step_summary.hpp"
#include "runner/step_timing.hpp"

namespace flux {

/// @brief Milliseconds since @p t0.
[[nodiscard]] inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// @brief The median of @p ms without its first (warm-up) entry; the only entry when there is
/// one.
[[nodiscard]] inline double steady_median(const std::vector<double>& ms) {
  return ddo::runner::summarize_steps(ms, ms.size() > 1 ? 1 : 0).median_ms;
}

/// @brief The steady entries of @p ms (without the warm-up step, as steady_median takes them).
[[nodiscard]] inline std::vector<double> steady_steps(const std::vector<double>& ms) {
  return ddo::runner::summarize_steps(ms, ms.size() > 1 ? 1 : 0).steady_ms;
}

/// @brief @p forward (latents, timestep -> velocity) with its calls marked on @p clock: start
/// before, end after. The caller closes the clock after the loop (step_clock::close).
template <class Forward>
[[nodiscard]] auto clocked(ddo::runner::step_clock& clock, Forward&& forward) {
  return [&clock, forward = std::forward<Forward>(forward)](const auto& x, float t) mutable {
    clock.start();
    auto v = forward(x, t);
    clock.end();
    return v;
  };
}

}  // namespace flux
