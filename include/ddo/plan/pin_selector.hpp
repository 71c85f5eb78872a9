// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::default_pin_selector: which streamed weights get page-locked host memory.
///
/// The streamed weights are the managed ones the residency planner did not keep resident. The
/// pin budget, first rule that applies:
///  1. running on WSL with DDO_DISABLE_PIN_ON_WSL (machine_capacity::disable_pin_on_wsl) → 0
///     ("wsl");
///  2. `pin_cpu_memory` off → 0 ("disabled");
///  3. the full-pin zero-resident rule fired, or a capacity profile is calibrated or applied
///     (residency_result::pin_all_streamed) → every streamed byte ("full_pin");
///  4. `pin_weight_budget_gb` > 0 → that many GiB ("explicit"); above usable RAM it is clamped to
///     usable RAM when `allow_pin_memory_fallback`, else refused (out_of_memory, tier
///     "pinned_host");
///  5. `pin_weight_budget_ratio` > 0 → ratio (clamped to [0, 1]) × streamed bytes ("ratio");
///  6. otherwise every streamed byte ("auto").
/// Rules 3, 5 and 6 are then limited by usable RAM (available RAM − `system_ram_headroom_gb`) and
/// by `max_pin_weight_budget_gb` (0 = uncapped). Candidates are the streamed modules in execution
/// order (a module's streamed tensors together); `pin_weight_selection` picks the winners.
/// Winners are pinned_host; the others are pageable_host, or file when the weight's source is a
/// file and the file route is on: `backend = nvme` (preset nvme_baseline, which `auto` picks
/// for a model larger than available RAM) or file_route set on the selector.

#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/plan/concepts.hpp"
#include "ddo/plan/plan_context.hpp"
#include "ddo/plan/residency_planner.hpp"
#include "ddo/plan/selectors.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The reference's pinning rules (see this header's description).
/// @tparam Selection picks the pin budget's winners: by_config_selection (the default) runs the
/// selector `pin_weight_selection` names; a weight_selector fixes the choice at compile time.
template <selection_choice Selection = by_config_selection>
struct basic_pin_selector {
  using pin_selector_category = pin_selector_tag;
  using selection_type = Selection;
  /// Unpinned weights whose source is a file stream from the file (placement::file) instead of
  /// pageable host memory: the NVMe transport's route. `backend = nvme` turns it on too.
  bool file_route = false;

  /// @throws out_of_memory when an explicit pin budget exceeds usable RAM and
  /// `allow_pin_memory_fallback` is off.
  [[nodiscard]] pin_result select_pinned(const plan_context& context,
                                         const residency_result& residency) const;
};

/// @brief The pin selector with the selection the config names.
using default_pin_selector = basic_pin_selector<>;
static_assert(pin_selector<default_pin_selector>);
static_assert(pin_selector<basic_pin_selector<first_selector>>);

namespace detail {

/// The pin budget's rule (rules 1-6 of this header's description): budget, source, detail, and
/// the reason an unpinned weight gives.
struct pin_budget_choice {
  std::uint64_t bytes = 0;
  pin_budget_source source = pin_budget_source::disabled;
  std::string detail;
  std::string not_pinned_reason;
};

[[nodiscard]] inline pin_budget_choice choose_pin_budget(const plan_context& c,
                                                         const residency_result& residency,
                                                         std::uint64_t streamed_bytes) {
  const dynamic_offload_config& config = c.config;
  const std::uint64_t usable = c.usable_ram_bytes();
  const std::uint64_t cap = gib_to_bytes(config.max_pin_weight_budget_gb);
  pin_budget_choice r;
  // Rules 3, 5 and 6 stop at usable RAM and at max_pin_weight_budget_gb.
  auto limited = [&](std::uint64_t budget) {
    if (budget > usable) {
      budget = usable;
      r.detail += ", limited to usable RAM " + format_bytes(usable);
    }
    if (cap != 0 && budget > cap) {
      budget = cap;
      r.detail += ", capped by max_pin_weight_budget_gb " + format_bytes(cap);
    }
    return budget;
  };
  const std::string every = "every streamed weight (" + format_bytes(streamed_bytes) + ")";
  if (c.machine.running_on_wsl && c.machine.disable_pin_on_wsl) {
    r = {0, pin_budget_source::wsl, "running on WSL with DDO_DISABLE_PIN_ON_WSL: pinning disabled",
         "not pinned: WSL rule"};
  } else if (!config.pin_cpu_memory) {
    r = {0, pin_budget_source::disabled, "pin_cpu_memory is off", "not pinned: pin_cpu_memory off"};
  } else if (residency.pin_all_streamed) {
    r.source = pin_budget_source::full_pin;
    r.detail = every;
    r.bytes = limited(streamed_bytes);
  } else if (config.pin_weight_budget_gb > 0.0) {
    const std::uint64_t asked = gib_to_bytes(config.pin_weight_budget_gb);
    r.source = pin_budget_source::explicit_budget;
    r.detail = "pin_weight_budget_gb = " + format_bytes(asked);
    r.bytes = asked;
    if (asked > usable) {
      if (!config.allow_pin_memory_fallback)
        throw out_of_memory(memory_tier::pinned_host, asked, usable,
                            "pin_weight_budget_gb asks to pin " + format_bytes(asked) +
                                " but only " + format_bytes(usable) +
                                " of RAM is usable (usable RAM " +
                                format_bytes(c.available_ram_bytes()) + " available - " +
                                format_bytes(gib_to_bytes(config.system_ram_headroom_gb)) +
                                " headroom); lower pin_weight_budget_gb, lower "
                                "system_ram_headroom_gb, or set allow_pin_memory_fallback");
      r.bytes = usable;
      r.detail +=
          ", clamped to usable RAM " + format_bytes(usable) + " (allow_pin_memory_fallback)";
    }
  } else if (config.pin_weight_budget_ratio > 0.0) {
    const double ratio = std::min(config.pin_weight_budget_ratio, 1.0);
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "pin_weight_budget_ratio %.3f x streamed ", ratio);
    r.source = pin_budget_source::ratio;
    r.detail = buffer + format_bytes(streamed_bytes);
    r.bytes = limited(static_cast<std::uint64_t>(static_cast<long double>(streamed_bytes) * ratio));
  } else {
    r.source = pin_budget_source::automatic;
    r.detail = every;
    r.bytes = limited(streamed_bytes);
  }
  return r;
}

}  // namespace detail

template <selection_choice Selection>
pin_result basic_pin_selector<Selection>::select_pinned(const plan_context& c,
                                                        const residency_result& residency) const {
  const weight_table& table = c.table;
  const dynamic_offload_config& config = c.config;
  pin_result r;
  r.where.assign(table.size(), placement::gpu_resident);
  r.reason = residency.reason;
  // Rules -> budget -> selection: the streamed weights, the budget, the winners.
  std::uint64_t streamed_bytes = 0;
  for (std::size_t i = 0; i < table.size(); ++i)
    if (!residency.resident[i]) streamed_bytes += table[i].bytes;
  auto budget = detail::choose_pin_budget(c, residency, streamed_bytes);
  r.budget_bytes = budget.bytes;
  r.budget_source = budget.source;
  r.budget_detail = std::move(budget.detail);
  r.selection = std::string(selection_label<Selection>(config.pin_weight_selection));
  if (budget.not_pinned_reason.empty())
    budget.not_pinned_reason = "not pinned: pin budget (" + r.selection + ") spent";

  const bool route_file = file_route || config.backend == offload_backend::nvme;
  auto [candidates, members] = group_by_module(c, [&](std::size_t i) { return !residency.resident[i]; });
  std::vector<char> pinned(candidates.size(), 0);
  if (r.budget_bytes > 0)
    for (std::size_t w :
         run_selection<Selection>(config.pin_weight_selection, candidates, r.budget_bytes).winners)
      pinned[w] = 1;

  const std::string pinned_reason = "pin_budget " + r.selection;
  for (std::size_t m = 0; m < candidates.size(); ++m)
    for (std::size_t i : members[m]) {
      const std::string prefix = r.reason[i].empty() ? std::string() : r.reason[i] + "; ";
      if (pinned[m]) {
        r.where[i] = placement::pinned_host;
        r.reason[i] = prefix + pinned_reason;
      } else {
        const bool from_file = route_file && std::holds_alternative<file_source>(table[i].source);
        r.where[i] = from_file ? placement::file : placement::pageable_host;
        r.reason[i] = prefix + budget.not_pinned_reason;
      }
    }
  return r;
}

}  // namespace v0
}  // namespace ddo
