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

template <selection_choice Selection>
pin_result basic_pin_selector<Selection>::select_pinned(const plan_context& c,
                                                      const residency_result& residency) const {
  const weight_table& table = c.table;
  const dynamic_offload_config& config = c.config;
  const std::size_t n = table.size();
  pin_result r;
  r.where.assign(n, placement::gpu_resident);
  r.reason = residency.reason;

  std::uint64_t streamed_bytes = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (!residency.resident[i]) streamed_bytes += table[i].bytes;

  const std::uint64_t usable = c.usable_ram_bytes();
  const std::uint64_t cap = gib_to_bytes(config.max_pin_weight_budget_gb);
  auto limit = [&](std::uint64_t budget, std::string& detail_text) {
    if (budget > usable) {
      budget = usable;
      detail_text += ", limited to usable RAM " + format_bytes(usable);
    }
    if (cap != 0 && budget > cap) {
      budget = cap;
      detail_text += ", capped by max_pin_weight_budget_gb " + format_bytes(cap);
    }
    return budget;
  };
  const std::string ram_text =
      "usable RAM " + format_bytes(c.available_ram_bytes()) + " available - " +
      format_bytes(gib_to_bytes(config.system_ram_headroom_gb)) + " headroom";

  std::string not_pinned_reason;
  if (c.machine.running_on_wsl && c.machine.disable_pin_on_wsl) {
    r.budget_source = pin_budget_source::wsl;
    r.budget_detail = "running on WSL with DDO_DISABLE_PIN_ON_WSL: pinning disabled";
    not_pinned_reason = "not pinned: WSL rule";
  } else if (!config.pin_cpu_memory) {
    r.budget_source = pin_budget_source::disabled;
    r.budget_detail = "pin_cpu_memory is off";
    not_pinned_reason = "not pinned: pin_cpu_memory off";
  } else if (residency.pin_all_streamed) {
    r.budget_source = pin_budget_source::full_pin;
    r.budget_detail = "every streamed weight (" + format_bytes(streamed_bytes) + ")";
    r.budget_bytes = limit(streamed_bytes, r.budget_detail);
  } else if (config.pin_weight_budget_gb > 0.0) {
    const std::uint64_t asked = gib_to_bytes(config.pin_weight_budget_gb);
    r.budget_source = pin_budget_source::explicit_budget;
    r.budget_detail = "pin_weight_budget_gb = " + format_bytes(asked);
    r.budget_bytes = asked;
    if (asked > usable) {
      if (!config.allow_pin_memory_fallback)
        throw out_of_memory(memory_tier::pinned_host, asked, usable,
                            "pin_weight_budget_gb asks to pin " + format_bytes(asked) +
                                " but only " + format_bytes(usable) + " of RAM is usable (" +
                                ram_text +
                                "); lower pin_weight_budget_gb, lower system_ram_headroom_gb, or "
                                "set allow_pin_memory_fallback");
      r.budget_bytes = usable;
      r.budget_detail +=
          ", clamped to usable RAM " + format_bytes(usable) + " (allow_pin_memory_fallback)";
    }
  } else if (config.pin_weight_budget_ratio > 0.0) {
    const double ratio = std::min(config.pin_weight_budget_ratio, 1.0);
    const auto asked = static_cast<std::uint64_t>(static_cast<long double>(streamed_bytes) * ratio);
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "pin_weight_budget_ratio %.3f x streamed ", ratio);
    r.budget_source = pin_budget_source::ratio;
    r.budget_detail = buffer + format_bytes(streamed_bytes);
    r.budget_bytes = limit(asked, r.budget_detail);
  } else {
    r.budget_source = pin_budget_source::automatic;
    r.budget_detail = "every streamed weight (" + format_bytes(streamed_bytes) + ")";
    r.budget_bytes = limit(streamed_bytes, r.budget_detail);
  }
  r.selection = std::string(selection_label<Selection>(config.pin_weight_selection));
  if (r.budget_source != pin_budget_source::wsl && r.budget_source != pin_budget_source::disabled)
    not_pinned_reason = "not pinned: pin budget (" + r.selection + ") spent";

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
        r.reason[i] = prefix + not_pinned_reason;
      }
    }
  return r;
}

}  // namespace v0
}  // namespace ddo
