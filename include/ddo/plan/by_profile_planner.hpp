// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::by_profile_planner: the residency planner chosen at run time. With the group
/// timings of a stored capacity profile that matches the model and device, the overlap-aware
/// planner plans (plan/overlap_planner.hpp); without, the fallback planner (the config's
/// selection by default). The plan records which one planned and why
/// (plan_budgets::planner_detail). The one setup call (setup/prepare_offload.hpp) makes it
/// from the settings; default-constructed it is the fallback.

#include <optional>
#include <string>

#include "ddo/plan/concepts.hpp"
#include "ddo/plan/overlap_planner.hpp"
#include "ddo/plan/plan_context.hpp"
#include "ddo/plan/residency_planner.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The overlap-aware planner when `overlap` is set, else @p Fallback (see the file
/// comment).
template <class Fallback = default_residency_planner>
struct by_profile_planner {
  using planner_category = residency_planner_tag;
  /// Set when a stored profile's group timings apply (their ring: the runtime's).
  std::optional<overlap_residency_planner> overlap;
  /// Why this planner: the profile and token count, or why no profile applied.
  std::string reason;
  Fallback fallback;

  [[nodiscard]] residency_result plan_residency(const plan_context& context) const {
    residency_result r =
        overlap ? overlap->plan_residency(context) : fallback.plan_residency(context);
    r.planner_detail = reason;
    return r;
  }
  /// What distinguishes two plans of this type (the plan cache's key, setup/plan_cache.hpp).
  [[nodiscard]] std::string cache_key() const {
    return overlap ? "overlap:" + reason + ":" + std::to_string(overlap->ring.slots) + ":" +
                         std::to_string(overlap->ring.prefetch_depth)
                   : "fallback";
  }
};
static_assert(residency_planner<by_profile_planner<>>);

/// @brief The planner of an offloader whose engine names none (runtime/policy_set.hpp).
using default_offload_planner = by_profile_planner<default_residency_planner>;

}  // namespace v0
}  // namespace ddo
