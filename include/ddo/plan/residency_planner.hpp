// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::default_residency_planner: the reference's residency rules.
///
/// Per weight, in this order (the first rule that applies decides; "module" is the weight's
/// module name, patterns are regular expressions of core/pattern.hpp's dialect searched in it,
/// compiled once per plan: plan_context::patterns):
///  1. `skip_modules_pattern` matches → not managed, gpu_resident ("skip_modules_pattern 'p'");
///  2. the module kind is not in `target_module_classes` → not managed, gpu_resident;
///  3. bytes ≤ `small_tensor_threshold_bytes` → moved directly, never managed, gpu_resident;
///  4. `always_resident_modules_pattern` matches → gpu_resident; when the full-pin zero-resident
///     rule fired, only patterns other than the built-in defaults
///     (builtin_always_resident_patterns() of config/operational_defaults.hpp) count, so the
///     default leaves are managed (and pinned) like any other weight;
///  5. otherwise managed: a candidate for the resident budget, else streamed.
///
/// The resident budget:
///  - `build_profile` (a zero-resident calibration run for `profile_name`) → 0
///    ("build_profile"), every streamed weight pinned; an explicit budget is ignored, because
///    the calibration must see the device with no resident weights;
///  - `resident_module_budget_gb` > 0 → that many GiB ("explicit"); it also overrides the
///    full-pin rule and a stored profile;
///  - a stored capacity profile for `profile_name` (machine_capacity::profile_resident_budget_bytes)
///    → its recommendation ("profile"), every streamed weight pinned;
///  - else `auto_budget_policy = balanced`:
///    - full-pin zero-resident when `auto_full_pin_min_model_to_vram_ratio` > 0, usable RAM
///      (available RAM − `system_ram_headroom_gb`) ≥ the bytes of every eligible weight (rules 1–3
///      passed), pinning is possible (`pin_cpu_memory`, and not blocked by the WSL rule) and
///      model bytes / total VRAM ≥ the ratio (total VRAM unknown: free VRAM; both unknown: the
///      rule does not fire) → budget 0, always-resident defaults offloaded, everything pinned;
///    - else free VRAM − `auto_vram_headroom_gb` − the bytes rules 1–4 already keep resident,
///      capped by `max_resident_module_budget_gb` (0 = uncapped), never below 0 ("balanced");
///  - else 0 ("none").
/// The candidates for the budget, in execution order: the numbered blocks when
/// `resident_module_patterns` is set (each block's managed bytes; a winning block is resident
/// whole), else the managed modules one by one. `resident_module_selection` picks the winners.

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ddo/config/operational_defaults.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/plan/concepts.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "ddo/plan/plan_context.hpp"
#include "ddo/plan/plan_patterns.hpp"
#include "ddo/plan/selectors.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The reference's residency rules (see this header's description).
/// @tparam Selection picks the budget's winners: by_config_selection (the default) runs the
/// selector `resident_module_selection` names; first_selector, spread_selector, largest_selector
/// (or an engine's weight_selector) fix the choice at compile time.
template <selection_choice Selection = by_config_selection>
struct basic_residency_planner {
  using planner_category = residency_planner_tag;
  using selection_type = Selection;
  /// @throws config_error for an invalid pattern (source "config", key the field name).
  [[nodiscard]] residency_result plan_residency(const plan_context& context) const;
};

/// @brief The residency planner with the selection the config names.
using default_residency_planner = basic_residency_planner<>;
static_assert(residency_planner<default_residency_planner>);
static_assert(residency_planner<basic_residency_planner<first_selector>>);

namespace detail {

[[nodiscard]] inline const pattern* first_match(const std::vector<const pattern*>& ps,
                                                const std::string& module) {
  for (const pattern* p : ps)
    if (p->search(module)) return p;
  return nullptr;
}

[[nodiscard]] inline bool pinning_possible(const plan_context& c) noexcept {
  return c.config.pin_cpu_memory && !(c.machine.running_on_wsl && c.machine.disable_pin_on_wsl);
}

}  // namespace detail

template <selection_choice Selection>
residency_result basic_residency_planner<Selection>::plan_residency(const plan_context& c) const {
  const weight_table& table = c.table;
  const dynamic_offload_config& config = c.config;
  const std::size_t n = table.size();
  residency_result r;
  r.resident.assign(n, 0);
  r.managed.assign(n, 0);
  r.reason.assign(n, std::string());

  // The patterns make_plan compiled for this plan (compiled here for a context built elsewhere).
  std::optional<plan_patterns> own;
  if (c.patterns == nullptr) own = compile_plan_patterns(config);
  const plan_patterns& patterns = c.patterns != nullptr ? *c.patterns : *own;
  const auto builtin = builtin_always_resident_patterns();
  std::vector<const pattern*> skip;
  for (const auto& p : patterns.skip_modules) skip.push_back(&p);
  std::vector<const pattern*> always;
  // Under full pin only the patterns the user added (not the built-in defaults) keep weights.
  std::vector<const pattern*> user_always;
  for (const auto& p : patterns.always_resident_modules) {
    always.push_back(&p);
    if (std::find(builtin.begin(), builtin.end(), p.text()) == builtin.end())
      user_always.push_back(&p);
  }

  // Rules 1-3, and which weights rule 4 would keep.
  std::vector<const pattern*> always_match(n, nullptr);
  std::vector<const pattern*> user_match(n, nullptr);
  std::uint64_t eligible_bytes = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const weight_info& w = table[i];
    if (const auto* p = detail::first_match(skip, w.module_name)) {
      r.resident[i] = 1;
      r.reason[i] = "skip_modules_pattern '" + p->text() + "' (not managed)";
      continue;
    }
    if (std::find(config.target_module_classes.begin(), config.target_module_classes.end(),
                  w.kind) == config.target_module_classes.end()) {
      r.resident[i] = 1;
      r.reason[i] =
          "module kind " + std::string(to_string(w.kind)) + " not in target_module_classes";
      continue;
    }
    if (w.bytes <= config.small_tensor_threshold_bytes) {
      r.resident[i] = 1;
      r.reason[i] = "small_tensor <= " + std::to_string(config.small_tensor_threshold_bytes) + " B";
      continue;
    }
    eligible_bytes += w.bytes;
    always_match[i] = detail::first_match(always, w.module_name);
    user_match[i] = detail::first_match(user_always, w.module_name);
  }

  // The budget, and whether full pin fires.
  const bool explicit_budget = config.resident_module_budget_gb > 0.0;
  const bool balanced = config.auto_budget_policy == budget_policy::balanced;
  if (config.build_profile && config.profile_name.empty())
    throw config_error("config", "build_profile",
                       "build_profile needs a profile_name to save the calibration under");
  const bool calibrating = config.build_profile;
  const bool from_profile = !calibrating && !explicit_budget &&
                            c.machine.profile_resident_budget_bytes.has_value();
  if (!calibrating && !from_profile && !explicit_budget && balanced &&
      config.auto_full_pin_min_model_to_vram_ratio > 0.0 &&
      detail::pinning_possible(c)) {
    const std::uint64_t vram =
        c.machine.total_vram_bytes != 0 ? c.machine.total_vram_bytes : c.machine.free_vram_bytes;
    const std::uint64_t usable = c.usable_ram_bytes();
    if (vram != 0 && usable >= eligible_bytes) {
      const double ratio = static_cast<double>(table.total_bytes()) / static_cast<double>(vram);
      if (ratio >= config.auto_full_pin_min_model_to_vram_ratio) {
        r.full_pin_zero_resident = true;
        char buffer[96];
        std::snprintf(buffer, sizeof buffer, " and model/VRAM %.2f >= %.2f", ratio,
                      config.auto_full_pin_min_model_to_vram_ratio);
        r.budget_detail = "full pin: usable RAM " + format_bytes(usable) + " >= eligible weights " +
                          format_bytes(eligible_bytes) + buffer;
      }
    }
  }

  std::uint64_t rule_resident_bytes = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (r.resident[i]) {
      rule_resident_bytes += table[i].bytes;
      continue;
    }
    const auto* p = r.full_pin_zero_resident ? user_match[i] : always_match[i];
    if (p != nullptr) {
      r.resident[i] = 1;
      r.reason[i] = "always_resident_modules_pattern '" + p->text() + "'";
      rule_resident_bytes += table[i].bytes;
      continue;
    }
    r.managed[i] = 1;
    if (always_match[i] != nullptr)
      r.reason[i] = "full_pin_zero_resident offloads always-resident default";
  }

  r.pin_all_streamed = r.full_pin_zero_resident || calibrating || from_profile;
  if (calibrating) {
    r.budget_bytes = 0;
    r.budget_source = resident_budget_source::build_profile;
    r.budget_detail = "zero-resident calibration for profile '" + config.profile_name + "'" +
                      (explicit_budget ? " (resident_module_budget_gb ignored)" : "");
  } else if (from_profile) {
    r.budget_bytes = *c.machine.profile_resident_budget_bytes;
    r.budget_source = resident_budget_source::profile;
    r.budget_detail = "capacity profile '" + config.profile_name + "' recommends " +
                      format_bytes(r.budget_bytes);
  } else if (explicit_budget) {
    r.budget_bytes = gib_to_bytes(config.resident_module_budget_gb);
    r.budget_source = resident_budget_source::explicit_budget;
    r.budget_detail = "resident_module_budget_gb = " + format_bytes(r.budget_bytes);
  } else if (r.full_pin_zero_resident) {
    r.budget_bytes = 0;
    r.budget_source = resident_budget_source::full_pin_zero_resident;
  } else if (balanced) {
    const std::uint64_t headroom = gib_to_bytes(config.auto_vram_headroom_gb);
    const std::uint64_t free = c.machine.free_vram_bytes;
    const std::uint64_t taken = saturating_add(headroom, rule_resident_bytes);
    std::uint64_t budget = free > taken ? free - taken : 0;
    const std::uint64_t cap = gib_to_bytes(config.max_resident_module_budget_gb);
    if (cap != 0 && budget > cap) budget = cap;
    r.budget_bytes = budget;
    r.budget_source = resident_budget_source::balanced;
    r.budget_detail = "free VRAM " + format_bytes(free) + " - headroom " + format_bytes(headroom) +
                      " - rule-resident " + format_bytes(rule_resident_bytes) + ", cap " +
                      (cap == 0 ? std::string("none") : format_bytes(cap));
  } else {
    r.budget_bytes = 0;
    r.budget_source = resident_budget_source::none;
    r.budget_detail = "auto_budget_policy off and no resident_module_budget_gb";
  }

  r.selection = std::string(selection_label<Selection>(config.resident_module_selection));
  if (r.budget_bytes == 0) return r;

  // Candidates in execution order: blocks or modules, with the managed weights they hold.
  std::vector<selection_candidate> candidates;
  std::vector<std::vector<std::size_t>> members;
  const bool by_block = !config.resident_module_patterns.empty();
  if (by_block) {
    for (const auto& g : c.groups) {
      if (!g.is_block) continue;
      selection_candidate cand;
      std::vector<std::size_t> ws;
      for (std::size_t i : g.weights)
        if (r.managed[i]) {
          cand.bytes += table[i].bytes;
          ws.push_back(i);
        }
      if (ws.empty()) continue;
      candidates.push_back(cand);
      members.push_back(std::move(ws));
    }
  } else {
    auto by_module = group_by_module(c, [&](std::size_t i) { return r.managed[i] != 0; });
    candidates = std::move(by_module.candidates);
    members = std::move(by_module.members);
  }
  const auto outcome =
      run_selection<Selection>(config.resident_module_selection, candidates, r.budget_bytes);
  const std::string why = "resident_budget " + r.selection + (by_block ? " (block)" : " (module)");
  for (std::size_t w : outcome.winners)
    for (std::size_t i : members[w]) {
      r.resident[i] = 1;
      r.reason[i] = why;
    }
  return r;
}

}  // namespace v0
}  // namespace ddo
