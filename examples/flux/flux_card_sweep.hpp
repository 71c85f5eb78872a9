// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux --smallest-card: per residency rule (the overlap-aware planner with the stored
/// capacity profile, and the spread and first selections), the smallest emulated card on which
/// the streamed step's median stays within --max-slowdown of the all-resident step measured in
/// the same run, bisected over cards --card-step-gb apart (runner/smallest_card.hpp). Each card
/// runs with every byte it leaves as the resident budget (resident_module_budget_gb: the card
/// less what it holds besides resident weights — the CUDA context, the engine's reserve, the
/// ring, ddo's reserve, the rules' resident weights — measured once), so the rules differ only in
/// which groups win it. Beside each: the smallest budget the profile predicts for the same rule
/// (runner/overlap_report.hpp) and the card it implies. How a card is measured is the caller's
/// (ddo-flux's GPU forward); this is the host-side part. Example code (examples/flux/).

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "ddo/config/field_override.hpp"
#include "ddo/config/field_value.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/core/units.hpp"
#include "ddo/plan/overlap_search.hpp"
#include "runner/overlap_report.hpp"
#include "runner/smallest_card.hpp"

namespace flux {

/// @brief A rule of the sweep and the budget the profile predicts it needs.
struct card_rule {
  std::string name;  ///< "overlap", "spread" or "first"
  std::uint64_t predicted_budget_bytes = 0;
};

/// @brief What every card of the sweep shares.
struct card_sweep_inputs {
  std::uint64_t fixed_bytes = 0;       ///< what a card holds besides the resident budget
  std::uint64_t streamable_bytes = 0;  ///< the weights a budget can make resident
  std::uint64_t step_bytes = 0;        ///< the grid's step (--card-step-gb)
  double resident_ms = 0.0;            ///< the all-resident step, without ddo
  double max_slowdown = 1.02;
};

/// @brief One rule's answer.
struct card_sweep_row {
  std::string rule;
  ddo::runner::card_search search;
  std::uint64_t predicted_budget_bytes = 0;
  std::uint64_t predicted_card_bytes = 0;  ///< fixed + the predicted budget, on the grid
};

/// @brief What a plan on one card says about every card: what it holds besides the resident
/// budget, what a budget can make resident, the ring.
struct card_reference {
  std::uint64_t fixed_bytes = 0;
  std::uint64_t streamable_bytes = 0;
  ddo::ring_shape ring;
};

/// @brief card_reference from @p prepared, a plan (ddo::prepare_offload, not started) on a
/// card of @p card_bytes with no resident budget beyond the rules (card_overrides(rule, 0)):
/// the card less the room the plan saw for resident weights (the free memory after the CUDA
/// context, the engine's reserve, the ring and ddo's reserve, less the rules' residents). That
/// part does not depend on the card, so a card C holds C - fixed_bytes of resident budget.
/// @throws ddo::usage_error when the card leaves no room (the planner's "nothing free" is one
/// byte: the fixed part cannot be measured there).
template <class Prepared>
[[nodiscard]] card_reference card_reference_of(const Prepared& prepared, std::uint64_t card_bytes) {
  const auto& setup = prepared.setup;
  const std::uint64_t kept = setup.plan.total_bytes(ddo::placement::gpu_resident);
  const std::uint64_t free = setup.machine.capacity.free_vram_bytes;
  if (free <= kept || free - kept >= card_bytes)
    throw ddo::usage_error(
        "--smallest-card measures what a card holds besides resident weights on the --vram-gb "
        "card, and " +
        ddo::format_bytes(card_bytes) + " leaves no room beside the ring (" +
        ddo::format_bytes(setup.machine.ring_bytes) +
        "), the engine's reserve and the rules' resident weights: give a larger --vram-gb");
  return {card_bytes - (free - kept), prepared.table->total_bytes() - kept,
          ddo::runner::ring_of(setup.runtime)};
}

/// @brief The settings a card runs @p rule with at resident budget @p budget_bytes (overrides
/// of the run's resolve_inputs): the budget explicit, to the byte (a byte count over 2^30 is
/// exact in a double, and gib_to_bytes gives it back; 0: none, auto_budget_policy off), the
/// selection for spread and first, the profile for overlap.
[[nodiscard]] inline std::vector<ddo::field_override> card_overrides(
    const std::string& rule, std::uint64_t budget_bytes, const std::string& profile) {
  std::vector<ddo::field_override> o;
  if (budget_bytes > 0)
    o.emplace_back(ddo::field_id::resident_module_budget_gb,
                   static_cast<double>(budget_bytes) / static_cast<double>(ddo::gib));
  else
    o.emplace_back(ddo::field_id::auto_budget_policy, ddo::budget_policy::off);
  if (rule == "overlap")
    o.emplace_back(ddo::field_id::profile_name, profile);
  else
    o.emplace_back(ddo::field_id::resident_module_selection, rule);
  return o;
}

/// @brief One card's step: measured (the streamed step's median) and as the capacity profile
/// predicts the card's plan (ddo::predict_plan; 0 when not predicted).
struct card_step {
  double measured_ms = 0.0;
  double predicted_ms = 0.0;
};

/// @brief Runs the sweep: for each of @p rules, @p run(rule, card_bytes, budget_bytes) measures
/// the step on that card (a card_step); the search bisects cards from fixed_bytes to
/// fixed_bytes + streamable_bytes, rounded up to the step.
template <class Run>
[[nodiscard]] std::vector<card_sweep_row> sweep_cards(const card_sweep_inputs& in,
                                                      const std::vector<card_rule>& rules,
                                                      Run&& run) {
  DDO_EXPECTS(in.resident_ms > 0.0, "sweep_cards: the all-resident step must be measured");
  const auto grid = ddo::runner::make_card_grid(
      in.fixed_bytes, in.fixed_bytes + in.streamable_bytes, in.step_bytes);
  std::vector<card_sweep_row> rows;
  for (const auto& rule : rules) {
    card_sweep_row row{rule.name, {}, rule.predicted_budget_bytes, {}};
    row.predicted_card_bytes =
        ddo::runner::make_card_grid(in.fixed_bytes + rule.predicted_budget_bytes,
                                    in.fixed_bytes + rule.predicted_budget_bytes, in.step_bytes)
            .first;
    row.search = ddo::runner::smallest_card_within(grid, [&](std::uint64_t card) {
      ddo::runner::card_trial t;
      t.card_bytes = card;
      const card_step step =
          run(rule.name, card, card > in.fixed_bytes ? card - in.fixed_bytes : 0);
      t.step_ms = step.measured_ms;
      t.predicted_ms = step.predicted_ms;
      t.ratio = t.step_ms / in.resident_ms;
      t.within = t.ratio <= in.max_slowdown;
      return t;
    });
    rows.push_back(std::move(row));
  }
  return rows;
}

/// @brief The sweep's table.
inline void print_card_sweep(const std::vector<card_sweep_row>& rows, const card_sweep_inputs& in) {
  std::printf(
      "\nsmallest card within %.3fx the all-resident step (%.2f ms), by measurement "
      "(cards %s apart; a card holds %s besides the resident budget):\n",
      in.max_slowdown, in.resident_ms, ddo::format_bytes(in.step_bytes).c_str(),
      ddo::format_bytes(in.fixed_bytes).c_str());
  std::printf("  %-8s %13s %16s %9s  %s\n", "rule", "smallest card", "step / resident", "trials",
              "predicted smallest budget (card)");
  for (const auto& r : rows)
    std::printf("  %-8s %13s %15.3fx %9zu  %s (%s)\n", r.rule.c_str(),
                r.search.smallest_bytes != 0 ? ddo::format_bytes(r.search.smallest_bytes).c_str() : "none",
                r.search.at.ratio, r.search.trials.size(),
                ddo::format_bytes(r.predicted_budget_bytes).c_str(),
                ddo::format_bytes(r.predicted_card_bytes).c_str());
}

/// @brief The sweep as the member "smallest_card" of an open JSON object.
inline void write_card_sweep_json(ddo::json_writer& o, const std::vector<card_sweep_row>& rows,
                                  const card_sweep_inputs& in) {
  o.key("smallest_card").begin_object(ddo::json_layout::lines);
  o.member("max_slowdown", in.max_slowdown, 4).member("resident_ms", in.resident_ms, 3);
  o.member("fixed_bytes", in.fixed_bytes).member("card_step_bytes", in.step_bytes);
  o.key("rules").begin_array(ddo::json_layout::lines);
  for (const auto& r : rows) {
    o.begin_object();
    o.member("rule", r.rule).member("smallest_card_bytes", r.search.smallest_bytes);
    o.member("step_ms", r.search.at.step_ms, 3).member("step_over_resident", r.search.at.ratio, 4);
    o.member("predicted_budget_bytes", r.predicted_budget_bytes)
        .member("predicted_card_bytes", r.predicted_card_bytes);
    o.key("trials").begin_array();
    for (const auto& t : r.search.trials)
      o.begin_object()
          .member("card_bytes", t.card_bytes)
          .member("step_ms", t.step_ms, 3)
          .member("predicted_ms", t.predicted_ms, 3)
          .member("step_over_resident", t.ratio, 4)
          .end_object();
    o.end_array().end_object();
  }
  o.end_array().end_object();
}

}  // namespace flux
