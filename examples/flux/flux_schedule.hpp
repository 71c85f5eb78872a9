// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief FLUX.1-dev's sigma schedule, as its pipeline and FlowMatchEulerDiscreteScheduler
/// compute it (scheduler config: dynamic shifting, base/max image sequence 256/4096, base/max
/// shift 0.5/1.15, 1000 training timesteps): sigmas linspace(1, 1/N, N), mu linear in the image
/// token count, each sigma shifted to e^mu / (e^mu + 1/sigma - 1) in float, a final 0. The Euler
/// step is x += (sigma_next - sigma) v. Example code (examples/flux/).

#include <cmath>
#include <cstddef>
#include <vector>

#include "ddo/core/error.hpp"

namespace flux {

/// @brief mu of the dynamic shift (pipeline_flux.py's calculate_shift with FLUX.1-dev's values).
[[nodiscard]] inline double shift_mu(std::size_t image_tokens) {
  constexpr double base_len = 256, max_len = 4096, base_shift = 0.5, max_shift = 1.15;
  const double m = (max_shift - base_shift) / (max_len - base_len);
  const double b = base_shift - m * base_len;
  return static_cast<double>(image_tokens) * m + b;
}

/// @brief The N + 1 sigmas of an N-step run (the last 0).
[[nodiscard]] inline std::vector<float> sigmas(int steps, std::size_t image_tokens) {
  if (steps < 1)
    throw ddo::usage_error("flux: steps must be at least 1, got " + std::to_string(steps));
  std::vector<float> s(static_cast<std::size_t>(steps) + 1, 0.f);
  const double start = 1.0, stop = 1.0 / steps;
  const double step = steps > 1 ? (stop - start) / (steps - 1) : 0.0;
  const auto e = static_cast<float>(std::exp(shift_mu(image_tokens)));
  for (int i = 0; i < steps; ++i) {
    // numpy's linspace (the last point exactly the stop), rounded to float as the scheduler does
    const auto sigma = static_cast<float>(i == steps - 1 ? stop : start + i * step);
    s[static_cast<std::size_t>(i)] = e / (e + (1.f / sigma - 1.f));
  }
  return s;
}

/// @brief The timestep the pipeline hands the transformer for @p sigma: the scheduler's
/// sigma x 1000, divided by 1000 again (in float, as the pipeline does).
[[nodiscard]] inline float pipeline_timestep(float sigma) {
  return sigma * 1000.f / 1000.f;
}

/// @brief x += (next - sigma) v.
inline void euler_step(std::vector<float>& x, const std::vector<float>& v, float sigma,
                       float next) {
  DDO_EXPECTS(x.size() == v.size(), "flux: latents and velocity differ in size");
  const float dt = next - sigma;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = x[i] + dt * v[i];
}

}  // namespace flux
