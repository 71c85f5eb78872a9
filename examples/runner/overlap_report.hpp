// SPDX-License-Identifier: Apache-2.0
#pragma once
// The overlap-aware planner's reports in ddo-plan and ddo-run: checking that a named capacity
// profile exists, printing the predicted step with the reason for every group, and the
// smallest budget within a slowdown of all-resident. Kept apart from the programs' own option
// handling.

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/core/error.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "ddo/plan/overlap_planner.hpp"
#include "ddo/plan/overlap_search.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/plan/selectors.hpp"
#include "ddo/profile/model_fingerprint.hpp"
#include "ddo/profile/profile_lookup.hpp"
#include "ddo/profile/profile_store.hpp"
#include "ddo/profile/profile_timings.hpp"
#include "ddo/runtime/runtime_options.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// A stored profile's timings for this run, or why there are none (ddo::stored_group_timings:
/// the one call looks it up, setup/prepare_offload.hpp).
using overlap_timings = stored_group_timings;

/// @p text quoted for a POSIX shell where it needs to be (it's as 'it'\''s').
inline std::string shell_word(const std::string& text) {
  const bool plain = !text.empty() && text.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
                                          "OPQRSTUVWXYZ0123456789_-./=:,+@%") == std::string::npos;
  if (plain) return text;
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// The command that stores profile @p name for @p models (ddo-run's synthetic model when
/// empty): advice a user can paste, run by tests/reliability/check_tools.sh.
inline std::string calibrate_command(const std::string& name,
                                     const std::vector<std::string>& models) {
  std::string command = "ddo-run";
  for (const auto& m : models) command += " --model " + shell_word(m);
  return command + " --profile " + shell_word(name) + " --calibrate";
}

/// Checks that profile @p name (ddo-plan --profile) is stored with group timings for the one
/// call to plan with.
/// @throws usage_error when there is no such profile (with the command that calibrates it for
/// @p models) or it has no timings (format 1).
inline void require_group_timings(const dynamic_offload_settings& settings, const std::string& name,
                                  const weight_table& table, const std::string& device_name,
                                  std::uint64_t tokens,
                                  const std::vector<std::string>& models = {}) {
  if (!find_group_timings(settings.profile_dir, name, table, device_name, tokens))
    throw usage_error("no capacity profile '" + name + "' in " +
                      profile_store(settings.profile_dir).directory().string() +
                      ": calibrate first: " + calibrate_command(name, models));
}

/// The ring a plan runs on, as the runtime will run it.
inline ring_shape ring_of(const runtime_options& r) { return {r.slot_count, r.prefetch_depth}; }

/// Prints the predicted step of @p plan and the reason for each group's placement.
inline void print_overlap_prediction(const offload_plan& plan, const overlap_timings& t,
                                     ring_shape ring) {
  const auto cands = candidates_from_timings(t.timings);
  std::vector<char> resident(cands.size(), 0);
  std::unordered_map<std::string_view, std::size_t> index;
  for (std::size_t g = 0; g < t.timings.size(); ++g) index.emplace(t.timings[g].name, g);
  for (const auto& pg : plan.groups) {
    const auto it = index.find(pg.name);
    if (it == index.end())
      throw usage_error("capacity profile '" + t.profile.name + "' has no group '" + pg.name +
                        "' (calibrated with other groups: calibrate again)");
    resident[it->second] = pg.streamed_bytes() == 0 ? 1 : 0;
  }
  const auto c = explain_residency(cands, resident, plan.budgets.resident_budget_bytes, ring);
  const auto& p = c.prediction;
  std::printf("\noverlap-aware prediction (capacity profile '%s', %s, %s transport; compute at %llu "
              "tokens, calibrated at %llu and %llu):\n",
              t.profile.name.c_str(), t.profile.device_name.c_str(), t.profile.transport.c_str(),
              static_cast<unsigned long long>(t.tokens),
              static_cast<unsigned long long>(t.profile.tokens_low),
              static_cast<unsigned long long>(t.profile.tokens_high));
  std::printf("  predicted step %.3f ms = compute %.3f ms + stall %.3f ms; %zu loads, %.3f ms of "
              "copies; all resident %.3f ms (x%.3f), nothing resident %.3f ms\n",
              p.step_ms, p.compute_ms, p.stall_ms, p.loads, p.transfer_ms, c.all_resident_ms,
              c.all_resident_ms > 0 ? p.step_ms / c.all_resident_ms : 1.0, c.none_resident_ms);
  double back_to_back = 0.0, streaming = 0.0;
  for (const auto& g : t.timings) {
    back_to_back += g.compute_ms;
    streaming += g.streaming_compute_ms;
  }
  if (streaming > 0.0)
    std::printf("  compute as timed back to back, %.3f ms per step (the GPU's sustained clock; "
                "%.3f ms while streaming, x%.3f: docs/calibration.md)\n",
                back_to_back, streaming, back_to_back / streaming);
  std::printf("  copies may run %.2fx slower than calibrated before the step grows%s\n",
              c.tolerated_slowdown,
              c.tolerated_slowdown >= max_tolerated_copy_slowdown ? " (or more)" : "");
  std::printf("  ring %zu slot(s), prefetch %s; resident %s of budget %s\n", ring.slots,
              ring.prefetch_depth > 64 ? "as far as the ring allows"
                                       : std::to_string(ring.prefetch_depth).c_str(),
              format_bytes(c.resident_bytes).c_str(), format_bytes(c.budget_bytes).c_str());
  std::printf("  %-28s %10s %9s %9s %9s  %s\n", "group", "bytes", "compute", "copy", "stall", "why");
  for (std::size_t g = 0; g < cands.size(); ++g)
    std::printf("  %-28s %10s %7.3fms %7.3fms %7.3fms  %s\n", t.timings[g].name.c_str(),
                format_bytes(cands[g].bytes).c_str(), cands[g].compute_ms, cands[g].transfer_ms,
                p.groups[g].stall_ms, c.reasons[g].c_str());
}

/// The smallest resident budget whose predicted step is within a slowdown of all-resident, for
/// the overlap-aware planner and for the first / spread / largest selections.
struct smallest_budgets {
  budget_for_slowdown overlap;  ///< the overlap-aware planner's (budget, its choice)
  std::uint64_t first = 0, spread = 0, largest = 0;
  /// The overlap-aware choice's predicted step over all-resident (1 when that is 0).
  [[nodiscard]] double overlap_ratio() const {
    const double all = overlap.choice.all_resident_ms;
    return all > 0 ? overlap.choice.prediction.step_ms / all : 1.0;
  }
};

/// smallest_budgets of @p t's groups on @p ring within @p slowdown (ddo-plan --max-slowdown,
/// ddo-flux --smallest-card).
[[nodiscard]] inline smallest_budgets predicted_smallest_budgets(const overlap_timings& t,
                                                                 ring_shape ring, double slowdown) {
  const auto cands = candidates_from_timings(t.timings);
  return {smallest_budget_within(cands, slowdown, ring),
          smallest_selection_budget_within<first_selector>(cands, slowdown, ring),
          smallest_selection_budget_within<spread_selector>(cands, slowdown, ring),
          smallest_selection_budget_within<largest_selector>(cands, slowdown, ring)};
}

/// Prints the smallest resident budget whose predicted step is within @p slowdown of
/// all-resident, for the overlap-aware planner and for first / spread / largest.
inline void print_max_slowdown(const overlap_timings& t, ring_shape ring, double slowdown) {
  const auto best = predicted_smallest_budgets(t, ring, slowdown);
  std::printf("\nsmallest resident budget predicted within %.3fx all-resident (%.3f ms):\n",
              slowdown, best.overlap.choice.all_resident_ms);
  std::printf("  overlap-aware: %s (predicted %.3f ms, x%.4f)\n",
              format_bytes(best.overlap.budget_bytes).c_str(),
              best.overlap.choice.prediction.step_ms, best.overlap_ratio());
  std::printf("  first: %s, spread: %s, largest: %s\n", format_bytes(best.first).c_str(),
              format_bytes(best.spread).c_str(), format_bytes(best.largest).c_str());
  if (best.overlap.budget_bytes > 0)
    std::printf("  (use it: --ddo-resident-module-budget-gb %.3f)\n",
                static_cast<double>(best.overlap.budget_bytes) / static_cast<double>(gib) + 0.0005);
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
