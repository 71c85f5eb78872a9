// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief How ddo-flux times its steps: wall time per step on the host (the step ends with a
/// synchronize), and the median of the steady steps (step 0 is the warm-up: it chooses GEMM
/// algorithms and uploads constants). Example code (examples/flux/).

#include <chrono>
#include <vector>

#include "runner/step_summary.hpp"

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

}  // namespace flux
