// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::overlap_residency_planner: a residency planner that keeps resident the execution
/// groups whose copies cannot hide behind compute, from measured per-group times.
///
/// The rules and the budget are the reference's (plan/residency_planner.hpp: skip, kinds, small
/// tensors, always-resident patterns; explicit budget, capacity profile, balanced, full pin,
/// calibration). Only the winners differ: instead of picking by position (`first`, `spread`,
/// `largest`), the planner spends the budget on whole execution groups — any group with managed
/// weights, blocks or not — chosen by choose_overlap_residency (plan/overlap_search.hpp) to
/// minimise the predicted step on the runtime's ring (plan/step_predictor.hpp). Every managed
/// weight of a resident group is resident; the reason names the prediction.
///
/// The times come from `timings` (a capacity profile at the run's token count:
/// profile/profile_timings.hpp), matched to the plan's groups by name. A group's transfer time
/// is scaled by its managed bytes over the bytes it was measured with (a config that manages
/// other weights than the calibration's). With a zero budget (calibration, or nothing free)
/// nothing is resident and no timings are needed.

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/plan/concepts.hpp"
#include "ddo/plan/group_timing.hpp"
#include "ddo/plan/overlap_search.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/plan/plan_context.hpp"
#include "ddo/plan/residency_planner.hpp"
#include "ddo/plan/step_predictor.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {
/// A weight selector that picks nothing: the reference's rules and budget without winners.
struct no_winners_selector {
  using selector_category = weight_selector_tag;
  [[nodiscard]] std::vector<std::size_t> select(std::span<const selection_candidate>,
                                                std::uint64_t) const {
    return {};
  }
};
static_assert(weight_selector<no_winners_selector>);
}  // namespace detail

/// @brief The overlap-aware residency planner (see this header's description).
struct overlap_residency_planner {
  using planner_category = residency_planner_tag;
  /// Measured times per execution group (by name). Empty: only zero-budget plans can be made.
  std::vector<group_timing> timings;
  /// The ring the plan will run on (runtime_options::slot_count, prefetch_depth).
  ring_shape ring;

  /// @throws usage_error when the budget is positive and a managed group has no timing.
  [[nodiscard]] residency_result plan_residency(const plan_context& context) const;

  /// @brief The search's inputs for @p context's groups: managed bytes (of weights the rules
  /// left managed, per @p managed) and times from `timings`.
  [[nodiscard]] std::vector<overlap_candidate> candidates(const plan_context& context,
                                                          std::span<const char> managed) const;
};
static_assert(residency_planner<overlap_residency_planner>);

inline std::vector<overlap_candidate> overlap_residency_planner::candidates(
    const plan_context& c, std::span<const char> managed) const {
  std::unordered_map<std::string_view, const group_timing*> by_name;
  for (const auto& t : timings) by_name.emplace(t.name, &t);
  std::vector<overlap_candidate> out(c.groups.size());
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    const auto& group = c.groups[g];
    std::uint64_t bytes = 0;
    for (std::size_t i : group.weights)
      if (managed[i]) bytes += c.table[i].bytes;
    const auto it = by_name.find(group.name);
    if (it == by_name.end()) {
      if (bytes == 0) continue;  // never streams: its compute is unknown but the same in every plan
      throw usage_error("overlap_residency_planner: no measured times for execution group '" +
                        group.name + "' (the timings have " + std::to_string(timings.size()) +
                        " groups): calibrate this model with build_profile and profile_name");
    }
    const group_timing& t = *it->second;
    out[g].bytes = bytes;
    out[g].compute_ms = t.compute_ms;
    out[g].lead_in_ms = t.lead_in_ms;
    // Scaled to the bytes this plan would stream for it (the same as measured, normally).
    out[g].transfer_ms = t.bytes == 0 || t.bytes == bytes
                             ? t.transfer_ms
                             : t.transfer_ms * static_cast<double>(bytes) / static_cast<double>(t.bytes);
    if (t.bytes == 0 && bytes > 0 && t.transfer_ms == 0.0)
      throw usage_error("overlap_residency_planner: execution group '" + group.name +
                        "' streamed no bytes when measured but streams " + std::to_string(bytes) +
                        " B in this plan: its transfer time is unknown (calibrate with the same "
                        "settings)");
  }
  return out;
}

inline residency_result overlap_residency_planner::plan_residency(const plan_context& c) const {
  residency_result r = basic_residency_planner<detail::no_winners_selector>{}.plan_residency(c);
  r.selection = "overlap";
  if (r.budget_bytes == 0) return r;
  const auto cands = candidates(c, r.managed);
  const auto choice = choose_overlap_residency(cands, r.budget_bytes, ring);
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    if (!choice.resident[g]) continue;
    for (std::size_t i : c.groups[g].weights)
      if (r.managed[i]) {
        r.resident[i] = 1;
        r.reason[i] = choice.reasons[g];
      }
  }
  char buffer[200];
  std::snprintf(buffer, sizeof buffer,
                "; overlap-aware: predicted step %.3f ms (all resident %.3f ms, nothing resident "
                "%.3f ms; copies may run %.2fx slower before it grows)",
                choice.prediction.step_ms, choice.all_resident_ms, choice.none_resident_ms,
                choice.tolerated_slowdown);
  r.budget_detail += buffer;
  return r;
}

/// @brief Search inputs straight from measured timings, as calibration streamed them: each
/// group's measured bytes and times (groups that streamed nothing have bytes 0).
[[nodiscard]] inline std::vector<overlap_candidate> candidates_from_timings(
    std::span<const group_timing> timings) {
  std::vector<overlap_candidate> out;
  out.reserve(timings.size());
  for (const auto& t : timings) out.push_back({t.bytes, t.compute_ms, t.transfer_ms, t.lead_in_ms});
  return out;
}

/// @brief The predictor's view of a finished @p plan (any planner's) from @p timings: a group
/// streams when the plan streams bytes of it, its transfer scaled to those bytes.
/// @throws usage_error naming a plan group that has no timing.
[[nodiscard]] inline std::vector<group_load> plan_loads(const offload_plan& plan,
                                                        std::span<const group_timing> timings) {
  std::unordered_map<std::string_view, const group_timing*> by_name;
  for (const auto& t : timings) by_name.emplace(t.name, &t);
  std::vector<group_load> loads(plan.groups.size());
  for (std::size_t g = 0; g < plan.groups.size(); ++g) {
    const auto& pg = plan.groups[g];
    const auto it = by_name.find(pg.name);
    if (it == by_name.end())
      throw usage_error("predict_plan: no measured times for execution group '" + pg.name +
                        "': the timings are of another model or grouping (calibrate again)");
    const group_timing& t = *it->second;
    const std::uint64_t streamed = pg.streamed_bytes();
    loads[g].compute_ms = t.compute_ms;
    loads[g].lead_in_ms = t.lead_in_ms;
    loads[g].streamed = streamed > 0;
    loads[g].transfer_ms = t.bytes == 0 ? t.transfer_ms
                                        : t.transfer_ms * static_cast<double>(streamed) /
                                              static_cast<double>(t.bytes);
  }
  return loads;
}

/// @brief The predicted step of a finished @p plan (any planner's) from @p timings (plan_loads).
/// @throws usage_error naming a plan group that has no timing.
[[nodiscard]] inline step_prediction predict_plan(const offload_plan& plan,
                                                  std::span<const group_timing> timings,
                                                  ring_shape ring = {}) {
  return predict_step(plan_loads(plan, timings), ring);
}

}  // namespace v0
}  // namespace ddo
