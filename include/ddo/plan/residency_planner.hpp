// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::default_residency_planner: the reference's residency rules, then the budget, then
/// the selection.
///
/// 1. **Rules**, per weight, in this order (the first rule that applies decides; "module" is the
///    weight's module name, patterns are regular expressions of core/pattern.hpp's dialect
///    searched in it, compiled once per plan: plan_context::patterns):
///    1. `skip_modules_pattern` matches → not managed, gpu_resident ("skip_modules_pattern 'p'");
///    2. the module kind is not in `target_module_classes` → not managed, gpu_resident;
///    3. bytes ≤ `small_tensor_threshold_bytes` → moved directly, never managed, gpu_resident;
///    4. `always_resident_modules_pattern` matches → gpu_resident, with two departures from the
///       reference's words (docs/configuration.md, "Where ddo differs from the reference"): a
///       built-in default pattern (builtin_always_resident_patterns(),
///       config/operational_defaults.hpp) applies only outside the execution blocks — the
///       patterns are for the small modules every step touches, and a weight inside a block
///       (FLUX's `single_transformer_blocks.N.proj_out`) streams with its block — and what the
///       built-in patterns keep is a preference inside the budget (step 2), never a reason to
///       refuse. A pattern the user gave applies everywhere and is honoured, or refused naming
///       the pattern and the bytes;
///    5. otherwise managed: a candidate for the resident budget, else streamed.
/// 2. **Budget**, first source that applies:
///  - `build_profile` (a zero-resident calibration run for `profile_name`) → 0
///    ("build_profile"), every streamed weight pinned; an explicit budget is ignored, because
///    the calibration must see the device with no resident weights;
///  - `resident_module_budget_gb` > 0 → that many GiB ("explicit"); it also overrides the
///    full-pin rule, a stored profile and the setup path's zero-resident request;
///  - the setup path's zero-resident request (machine_capacity::zero_resident_reason) → 0
///    ("zero_resident");
///  - a stored capacity profile for `profile_name`
///  (machine_capacity::profile_resident_budget_bytes)
///    → its recommendation ("profile"), every streamed weight pinned;
///  - else `auto_budget_policy = balanced`:
///    - full-pin zero-resident when `auto_full_pin_min_model_to_vram_ratio` > 0, usable RAM
///      (available RAM − `system_ram_headroom_gb`) ≥ the bytes of every eligible weight (rules 1–3
///      passed), pinning is possible (`pin_cpu_memory`, and not blocked by the WSL rule) and
///      model bytes / total VRAM ≥ the ratio (total VRAM unknown: free VRAM; both unknown: the
///      rule does not fire) → budget 0, built-in always-resident defaults offloaded, everything
///      pinned;
///    - else free VRAM − `auto_vram_headroom_gb` − the bytes the rules keep resident, capped by
///      `max_resident_module_budget_gb` (0 = uncapped), never below 0 ("balanced");
///  - else 0 ("none").
///  **Demotion**: with free VRAM known, the room for rule-resident weights is free VRAM (less the
///  headroom under the balanced rule), and no more than machine_capacity::resident_limit_bytes.
///  When the rules keep more than the room, the weights the built-in patterns keep are streamed
///  instead, largest first, until the rest fits (under setup's smaller ring slot, also until
///  the rules and what the managed weights stream above the slot fit: demote_for_slot); the
///  plan reports how many and how many bytes
///  (plan_budgets::demoted_bytes) and each one's reason says so. Weights rules 1–3 keep, or a
///  user's pattern, are not demoted: more of them than free VRAM is refused (out_of_memory,
///  tier device) naming the rule or pattern and the bytes. Every budget is then limited to
///  resident_limit_bytes less the rule-resident bytes, so no budget exceeds free VRAM or wraps.
/// 3. **Selection**, in execution order: the numbered blocks when `resident_module_patterns` is
///    set (each block's managed bytes; a winning block is resident whole), else the managed
///    modules one by one. `resident_module_selection` picks the winners. With blocks and the
///    balanced budget, a group outside them whose managed bytes exceed every block's is kept
///    resident first while the budget holds it: streamed, it would size every ring slot. What
///    the whole groups leave of the balanced budget keeps single weights of the streamed groups,
///    largest first (a group partly resident streams the rest; its slot shrinks).

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ddo/config/operational_defaults.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/plan/concepts.hpp"
#include "ddo/plan/device_room.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "ddo/plan/plan_context.hpp"
#include "ddo/plan/plan_patterns.hpp"
#include "ddo/plan/selectors.hpp"
#include "ddo/plan/smallest_cover.hpp"

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

/// @brief Which rule kept a weight resident, or that none did (plan/residency_planner.hpp).
enum class residency_rule : std::uint8_t {
  managed,          ///< no rule: a budget candidate, else streamed
  skip_pattern,     ///< rule 1, `skip_modules_pattern`
  kind,             ///< rule 2, kind outside `target_module_classes`
  small_tensor,     ///< rule 3, `small_tensor_threshold_bytes`
  builtin_pattern,  ///< rule 4, a built-in always-resident pattern (outside the blocks)
  user_pattern,     ///< rule 4, an always-resident pattern the user gave
  demoted,          ///< a built-in pattern matched but it did not fit: streamed
};

/// @brief What the rules decide before any budget (step 1 of plan/residency_planner.hpp).
struct rule_residency {
  std::vector<residency_rule> rule;     ///< per weight
  std::vector<const pattern*> matched;  ///< per weight: the pattern of rules 1 and 4, or null
  std::vector<char> in_block;           ///< per weight: inside an execution block
  std::uint64_t eligible_bytes = 0;     ///< weights that passed rules 1–3
  /// Bytes kept per rule (indexed by residency_rule; managed and demoted count what they hold).
  std::array<std::uint64_t, 7> bytes{};
  [[nodiscard]] std::uint64_t bytes_of(residency_rule r) const noexcept {
    return bytes[static_cast<std::size_t>(r)];
  }
  /// Bytes the rules keep resident.
  [[nodiscard]] std::uint64_t kept_bytes() const noexcept {
    return bytes_of(residency_rule::skip_pattern) + bytes_of(residency_rule::kind) +
           bytes_of(residency_rule::small_tensor) + bytes_of(residency_rule::builtin_pattern) +
           bytes_of(residency_rule::user_pattern);
  }
  [[nodiscard]] bool kept(std::size_t i) const noexcept {
    return rule[i] != residency_rule::managed && rule[i] != residency_rule::demoted;
  }
  void move(std::size_t i, residency_rule to, std::uint64_t weight_bytes) noexcept {
    bytes[static_cast<std::size_t>(rule[i])] -= weight_bytes;
    bytes[static_cast<std::size_t>(to)] += weight_bytes;
    rule[i] = to;
  }
};

/// @brief Step 1 alone: what the rules keep resident for @p context's table, groups and config
/// (no budget, no demotion). Setup sizes the ring from what they do not keep; an engine asks it
/// what "nothing resident beyond the rules" costs.
/// @throws config_error for an invalid pattern.
[[nodiscard]] inline rule_residency residency_rules(const plan_context& context);

/// @brief Searches, once, what the residency rules search for @p context's weights (each
/// weight's first match of the lists its rules reach) into @p patterns (plan_patterns::matches),
/// so that every later planning context of the same table reads them: setup plans one table
/// many times (the rings fitted to each plan, the smaller rings, each machine's window sizing).
/// @p patterns must be @p context.config's (compile_plan_patterns); @p context.table must
/// outlive their use with it, unchanged. A list a weight's rules did not reach (another config
/// or grouping may) is searched when asked.
inline void match_rule_patterns(plan_patterns& patterns, const plan_context& context);

/// @brief Per weight, 1 for the weights that may stream (managed, or kept only by a built-in
/// pattern) of the groups outside the blocks that stream more than any block (a Llama's 1 GiB
/// embedding and head beside 416 MiB layers; Wan's fp32 time_projection beside fp8 blocks).
/// The balanced budget keeps such a group resident first while it holds it; setup asks this
/// before it sizes the ring, which a streamed outsized group would size (issue 38). All zero
/// without blocks.
/// @throws config_error for an invalid pattern.
[[nodiscard]] inline std::vector<char> outsized_group_weights(const plan_context& context);

/// @brief Per group, the bytes of its weights that may stream (managed, or kept only by a
/// built-in pattern): what setup sizes a ring slot by.
/// @throws config_error for an invalid pattern.
[[nodiscard]] inline std::vector<std::uint64_t> streamable_group_bytes(const plan_context& context);

namespace detail {

[[nodiscard]] inline bool pinning_possible(const plan_context& c) noexcept {
  return c.config.pin_cpu_memory && !(c.machine.running_on_wsl && c.machine.disable_pin_on_wsl);
}

/// Rules 1-5 for every weight; @p first(i, list) is the first pattern of @p list matching weight
/// i's module name, or nullptr. The lists are searched lazily, in the rules' order: a rule that
/// decides leaves the later lists unsearched (most weights are small tensors or in a block, and
/// the built-in patterns are the costly ones to search).
template <class First>
[[nodiscard]] rule_residency apply_rules_with(const plan_context& c, First first) {
  const weight_table& table = c.table;
  const auto& config = c.config;
  const std::size_t n = table.size();
  rule_residency r;
  r.rule.assign(n, residency_rule::managed);
  r.matched.assign(n, nullptr);
  r.in_block.assign(n, 0);
  for (const auto& g : c.groups)
    if (g.is_block)
      for (std::size_t i : g.weights) r.in_block[i] = 1;
  for (std::size_t i = 0; i < n; ++i) {
    const weight_info& w = table[i];
    residency_rule rule = residency_rule::managed;
    if ((r.matched[i] = first(i, rule_patterns::skip)) != nullptr)
      rule = residency_rule::skip_pattern;
    else if (std::find(config.target_module_classes.begin(), config.target_module_classes.end(),
                       w.kind) == config.target_module_classes.end())
      rule = residency_rule::kind;
    else if (w.bytes <= config.small_tensor_threshold_bytes)
      rule = residency_rule::small_tensor;
    else if ((r.matched[i] = first(i, rule_patterns::user_always)) != nullptr)
      rule = residency_rule::user_pattern;
    else if (!r.in_block[i] && (r.matched[i] = first(i, rule_patterns::builtin_always)))
      rule = residency_rule::builtin_pattern;
    if (rule != residency_rule::skip_pattern && rule != residency_rule::kind &&
        rule != residency_rule::small_tensor)
      r.eligible_bytes += w.bytes;
    r.rule[i] = rule;
    r.bytes[static_cast<std::size_t>(rule)] += w.bytes;
  }
  return r;
}

/// The rules with @p patterns: each weight's matches read where match_rule_patterns searched
/// them for this table, searched otherwise (the same first match either way).
[[nodiscard]] inline rule_residency apply_residency_rules(const plan_context& c,
                                                          const plan_patterns& patterns) {
  const weight_pattern_matches* matched = matches_of(patterns, c.table);
  return apply_rules_with(c, [&](std::size_t i, rule_patterns list) {
    std::int32_t k = matched != nullptr ? matched[i].of(list) : weight_pattern_matches::unsearched;
    if (k == weight_pattern_matches::unsearched)
      k = first_matching_pattern(patterns, list, c.table[i].module_name);
    return pattern_at(patterns, list, k);
  });
}

/// The full-pin zero-resident rule: fires, and why (see the header's description).
[[nodiscard]] inline std::optional<std::string> full_pin_fires(const plan_context& c,
                                                               const rule_residency& rules) {
  const auto& config = c.config;
  if (config.auto_full_pin_min_model_to_vram_ratio <= 0.0 || !pinning_possible(c))
    return std::nullopt;
  const std::uint64_t vram =
      c.machine.total_vram_bytes != 0 ? c.machine.total_vram_bytes : c.machine.free_vram_bytes;
  const std::uint64_t usable = c.usable_ram_bytes();
  if (vram == 0 || usable < rules.eligible_bytes) return std::nullopt;
  const double ratio = static_cast<double>(c.table.total_bytes()) / static_cast<double>(vram);
  if (ratio < config.auto_full_pin_min_model_to_vram_ratio) return std::nullopt;
  char buffer[96];
  std::snprintf(buffer, sizeof buffer, " and model/VRAM %.2f >= %.2f", ratio,
                config.auto_full_pin_min_model_to_vram_ratio);
  return "full pin: usable RAM " + format_bytes(usable) + " >= eligible weights " +
         format_bytes(rules.eligible_bytes) + buffer;
}

/// Step 2's source: which rule sets the budget (its bytes are computed after demotion).
inline void choose_budget_source(const plan_context& c, const rule_residency& rules,
                                 residency_result& r) {
  const auto& config = c.config;
  if (config.build_profile && config.profile_name.empty())
    throw config_error(origin::config, "build_profile",
                       "build_profile needs a profile_name to save the calibration under");
  const bool given = config.resident_module_budget_gb > 0.0;
  using enum resident_budget_source;
  if (config.build_profile) {
    r.budget_source = build_profile;
    r.budget_detail = "zero-resident calibration for profile '" + config.profile_name + "'" +
                      (given ? " (resident_module_budget_gb ignored)" : "");
  } else if (given) {
    r.budget_source = explicit_budget;
    r.budget_bytes = gib_to_bytes(config.resident_module_budget_gb);
    r.budget_detail = "resident_module_budget_gb = " + format_bytes(r.budget_bytes);
  } else if (!c.machine.zero_resident_reason.empty()) {
    r.budget_source = zero_resident;
    r.budget_detail = c.machine.zero_resident_reason;
  } else if (c.machine.profile_resident_budget_bytes) {
    r.budget_source = profile;
    r.budget_bytes = *c.machine.profile_resident_budget_bytes;
    r.budget_detail =
        "capacity profile '" + config.profile_name + "' recommends " + format_bytes(r.budget_bytes);
  } else if (config.auto_budget_policy != budget_policy::balanced) {
    r.budget_source = none;
    r.budget_detail = "auto_budget_policy off and no resident_module_budget_gb";
  } else if (auto why = full_pin_fires(c, rules)) {
    r.budget_source = full_pin_zero_resident;
    r.full_pin_zero_resident = true;
    r.budget_detail = std::move(*why);
  } else {
    r.budget_source = balanced;
  }
  r.pin_all_streamed =
      r.full_pin_zero_resident || r.budget_source == build_profile || r.budget_source == profile;
}

/// Demotes the weights @p order lists (largest first) until the rules' bytes fit @p room. With
/// a ring slot set (setup's smaller rings, machine_capacity::ring_slot_bytes), first those whose
/// group still fits the slot once they stream: a demoted weight that grew its group past the
/// slot would need the larger ring the search is avoiding (the oracle's property test, seed
/// 3328: a 3.46 GiB head demoted beside 1.91 GiB slots, where demoting the 355 MiB of other
/// built-in weights of its group kept it resident and the plan fitting).
/// @p within_slot only: none that would grow its group past the slot (demote_for_slot).
inline void demote_in_order(const plan_context& c, rule_residency& rules, std::uint64_t room,
                            const std::vector<std::size_t>& order, bool within_slot = false) {
  const std::uint64_t slot = c.machine.ring_slot_bytes;
  std::vector<std::size_t> group_of(c.table.size(), c.groups.size());
  std::vector<std::uint64_t> streams(c.groups.size() + 1, 0);
  for (std::size_t g = 0; g < c.groups.size(); ++g)
    for (std::size_t i : c.groups[g].weights) {
      group_of[i] = g;
      if (!rules.kept(i)) streams[g] += c.table[i].bytes;
    }
  for (int pass = slot != 0 ? 0 : 1; pass < (within_slot ? 1 : 2); ++pass)
    for (std::size_t i : order) {
      if (rules.kept_bytes() <= room) return;
      const std::uint64_t bytes = c.table[i].bytes;
      const std::size_t g = group_of[i];
      if (rules.rule[i] != residency_rule::builtin_pattern ||
          (pass == 0 && (g == c.groups.size() || streams[g] + bytes > slot)))
        continue;
      rules.move(i, residency_rule::demoted, bytes);
      streams[g] += bytes;
    }
}

/// The weights the built-in patterns keep, largest first, then in execution order.
inline std::vector<std::size_t> builtin_kept_in_order(const plan_context& c,
                                                      const rule_residency& rules) {
  std::vector<std::size_t> order;
  for (std::size_t i : c.execution_order)
    if (rules.rule[i] == residency_rule::builtin_pattern) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return c.table[a].bytes != c.table[b].bytes ? c.table[a].bytes > c.table[b].bytes
                                                : c.position[a] < c.position[b];
  });
  return order;
}

/// With setup's smaller ring slot set (machine_capacity::ring_slot_bytes), what the managed
/// weights stream above it must stay resident (keep_outsized_first), or a group streams past
/// the slot and the plan passes its ring: the built-in patterns' weights, a preference, are
/// demoted for it where their group still fits the slot once they stream (the oracle's
/// property test, seed 5183: two 1.74 GiB groups the patterns kept left the budget 1 GiB short
/// of trimming three 5.88 GiB blocks to 1.96 GiB slots, and the plan streamed them whole beside
/// 2.40 GiB resident, 2.69x the oracle's). @p room: what the rules and the budget share.
inline void demote_for_slot(const plan_context& c, rule_residency& rules, std::uint64_t room) {
  const std::uint64_t slot = c.machine.ring_slot_bytes;
  if (slot == 0) return;
  std::uint64_t above = 0;
  for (const auto& g : c.groups) {
    std::uint64_t streams = 0;
    for (std::size_t i : g.weights)
      if (rules.rule[i] == residency_rule::managed) streams += c.table[i].bytes;
    above += streams > slot ? streams - slot : 0;
  }
  if (above == 0 || saturating_add(rules.kept_bytes(), above) <= room) return;
  demote_in_order(c, rules, room > above ? room - above : 0, builtin_kept_in_order(c, rules), true);
}

/// Demotes what the built-in patterns keep until the rules' bytes fit @p room (largest first,
/// then execution order; see demote_in_order); refuses when what cannot be demoted exceeds free
/// VRAM.
inline void demote_to_fit(const plan_context& c, rule_residency& rules, std::uint64_t room) {
  const weight_table& table = c.table;
  if (rules.kept_bytes() > room) demote_in_order(c, rules, room, builtin_kept_in_order(c, rules));
  const std::uint64_t free = c.machine.free_vram_bytes;
  const std::uint64_t hard = rules.kept_bytes();
  if (free == 0 || hard <= free) return;
  // What is left cannot stream: name the rule, or the user's pattern, that keeps the most.
  std::string cause;
  std::uint64_t most = 0;
  std::unordered_map<const pattern*, std::uint64_t> by_pattern;
  for (std::size_t i = 0; i < table.size(); ++i)
    if (rules.rule[i] == residency_rule::user_pattern)
      by_pattern[rules.matched[i]] += table[i].bytes;
  for (const auto& [p, bytes] : by_pattern)
    if (bytes > most) {
      most = bytes;
      cause = "always_resident_modules_pattern '" + p->text() + "' (yours) keeps " +
              format_bytes(bytes);
    }
  const std::pair<residency_rule, const char*> rules_by_name[] = {
      {residency_rule::skip_pattern, "skip_modules_pattern keeps "},
      {residency_rule::kind, "kinds outside target_module_classes keep "},
      {residency_rule::small_tensor, "small tensors (small_tensor_threshold_bytes) keep "}};
  for (const auto& [rule, words] : rules_by_name)
    if (rules.bytes_of(rule) > most) {
      most = rules.bytes_of(rule);
      cause = words + format_bytes(most);
    }
  throw out_of_memory(memory_tier::device, hard, free,
                      "the residency rules keep " + format_bytes(hard) +
                          " resident, which cannot stream, but " + device_room_text(c.machine) +
                          ": " + cause + "; narrow that setting or use a larger device" +
                          smallest_card_text(c.machine, hard));
}

[[nodiscard]] inline std::string rule_reason(const rule_residency& rules, std::size_t i,
                                             const weight_info& w,
                                             const dynamic_offload_config& config) {
  switch (rules.rule[i]) {
    case residency_rule::skip_pattern:
      return "skip_modules_pattern '" + rules.matched[i]->text() + "' (not managed)";
    case residency_rule::kind:
      return "module kind " + std::string(to_string(w.kind)) + " not in target_module_classes";
    case residency_rule::small_tensor:
      return "small_tensor <= " + std::to_string(config.small_tensor_threshold_bytes) + " B";
    case residency_rule::builtin_pattern:
    case residency_rule::user_pattern:
      return "always_resident_modules_pattern '" + rules.matched[i]->text() + "'";
    case residency_rule::demoted:
      return "always_resident_modules_pattern '" + rules.matched[i]->text() +
             "' demoted: the rule-resident weights did not fit";
    case residency_rule::managed:
      break;
  }
  return std::string();
}

/// The plan's account of the rules: bytes per rule and what was demoted.
[[nodiscard]] inline std::string rules_detail(const rule_residency& rules, std::size_t demoted) {
  std::string out = "kept by the rules " + format_bytes(rules.kept_bytes()) + ":";
  const std::pair<residency_rule, const char*> names[] = {
      {residency_rule::skip_pattern, " skip patterns "},
      {residency_rule::kind, " kinds "},
      {residency_rule::small_tensor, " small tensors "},
      {residency_rule::builtin_pattern, " built-in always-resident "},
      {residency_rule::user_pattern, " your always-resident "}};
  for (const auto& [rule, words] : names)
    if (rules.bytes_of(rule) != 0) out += words + format_bytes(rules.bytes_of(rule)) + ",";
  out.pop_back();
  if (demoted != 0)
    out += "; demoted (streamed) " + std::to_string(demoted) +
           " built-in always-resident weight(s), " +
           format_bytes(rules.bytes_of(residency_rule::demoted));
  return out;
}

/// Step 2's bytes: demotion, the balanced budget, and the limit every budget obeys.
inline void size_budget(const plan_context& c, rule_residency& rules, residency_result& r) {
  const auto& config = c.config;
  const bool balanced = r.budget_source == resident_budget_source::balanced;
  const std::uint64_t headroom = gib_to_bytes(config.auto_vram_headroom_gb);
  const std::uint64_t free = c.machine.free_vram_bytes;
  if (r.full_pin_zero_resident)  // the reference offloads the built-in defaults under full pin
    for (std::size_t i = 0; i < rules.rule.size(); ++i)
      if (rules.rule[i] == residency_rule::builtin_pattern)
        rules.move(i, residency_rule::managed, c.table[i].bytes);
  std::uint64_t room = free == 0 ? ~std::uint64_t{0}
                                 : (balanced && free > headroom ? free - headroom
                                    : balanced                  ? 0
                                                                : free);
  if (c.machine.resident_limit_bytes) room = std::min(room, *c.machine.resident_limit_bytes);
  demote_to_fit(c, rules, room);
  if (balanced) demote_for_slot(c, rules, room);
  const std::uint64_t kept = rules.kept_bytes();
  if (balanced) {
    const std::uint64_t cap = gib_to_bytes(config.max_resident_module_budget_gb);
    const std::uint64_t taken = saturating_add(headroom, kept);
    r.budget_bytes = free > taken ? free - taken : 0;
    // A cap the user did not set was chosen for some card: it follows this one (the headroom
    // already keeps the engine's room), and the detail says so.
    const bool follows = cap != 0 && !c.machine.resident_cap_origin.empty();
    if (cap != 0 && !follows && r.budget_bytes > cap) r.budget_bytes = cap;
    r.budget_detail = "free VRAM " + format_bytes(free) + " - headroom " + format_bytes(headroom) +
                      " - rule-resident " + format_bytes(kept) + ", cap " +
                      (cap == 0   ? std::string("none")
                       : !follows ? format_bytes(cap)
                                  : "none (max_resident_module_budget_gb " + format_bytes(cap) +
                                        " from " + c.machine.resident_cap_origin +
                                        " follows the card)");
  }
  // A profile's recommendation was measured on another free-memory state: no more than is free.
  if (r.budget_source == resident_budget_source::profile && free != 0) {
    const std::uint64_t left = free > kept ? free - kept : 0;
    if (r.budget_bytes > left) {
      r.budget_bytes = left;
      r.budget_detail +=
          ", limited to the " + format_bytes(left) + " free beside the rule-resident weights";
    }
  }
  if (c.machine.resident_limit_bytes) {
    const std::uint64_t limit = *c.machine.resident_limit_bytes;
    const std::uint64_t left = limit > kept ? limit - kept : 0;
    if (r.budget_bytes > left) {
      r.budget_bytes = left;
      r.budget_detail +=
          ", limited to " + format_bytes(left) + " by " + c.machine.resident_limit_reason;
    } else {  // named even where it does not bind: it may follow the card (issue 38)
      r.budget_detail += ", within " + format_bytes(left) + " (" +
                         c.machine.resident_limit_reason + ")";
    }
  }
}

/// Managed bytes of group @p g that are not resident yet (all its managed bytes before the
/// selection).
inline std::uint64_t streamed_bytes_of(const plan_context& c, const residency_result& r,
                                       std::size_t g) {
  std::uint64_t bytes = 0;
  for (std::size_t i : c.groups[g].weights)
    if (r.managed[i] && !r.resident[i]) bytes += c.table[i].bytes;
  return bytes;
}

/// Keeps group @p g's managed weights resident, each with @p reason.
inline void keep_group(const plan_context& c, residency_result& r, std::size_t g,
                       const std::string& reason) {
  for (std::size_t i : c.groups[g].weights)
    if (r.managed[i] && !r.resident[i]) {
      r.resident[i] = 1;
      r.reason[i] = reason;
    }
}

/// The managed weights of group @p g to keep so that what it streams fits @p slot, fewest bytes
/// kept (smallest_cover: the least set of whole weights that covers what streams above the
/// slot). Largest first alone kept a 3.77 GiB weight for 0.77 GiB above the slot, which the
/// budget did not hold (the oracle's property test, seed 9136: refused where 1.28 GiB of two
/// smaller weights fitted); the smallest single weight that covers the excess kept one large
/// weight where smaller ones did with fewer bytes (seed 2027: the oracle's 1.96 GiB slot skipped).
inline std::vector<std::size_t> weights_above_slot(const plan_context& c, const residency_result& r,
                                                   std::size_t g, std::uint64_t slot) {
  std::vector<std::size_t> order;
  for (std::size_t i : c.groups[g].weights)
    if (r.managed[i] && !r.resident[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return c.table[a].bytes > c.table[b].bytes;
  });
  std::vector<std::uint64_t> sizes;
  for (std::size_t i : order) sizes.push_back(c.table[i].bytes);
  std::vector<std::size_t> keep;
  for (std::size_t k : smallest_cover(sizes, slot).kept) keep.push_back(order[k]);
  return keep;
}

/// Keeps resident, first, each group outside the blocks whose managed bytes exceed every
/// block's (whole), and of each group above setup's smaller ring slot
/// (machine_capacity::ring_slot_bytes) what streams above the slot, while the budget holds it
/// (see plan_residency). Only the part above the slot: a group kept whole spends the budget on
/// bytes the ring could carry, and where the groups above the slot add up to more than the
/// budget, the one left streaming sized the ring again (the oracle's property test, seed 3066:
/// a UNet about the card's size fell back to 517 MiB slots and read 1.08 GiB from the file).
inline void keep_outsized_first(const plan_context& c, residency_result& r) {
  std::uint64_t largest_block = 0;
  std::vector<std::uint64_t> managed_of(c.groups.size(), 0);
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    managed_of[g] = streamed_bytes_of(c, r, g);
    if (c.groups[g].is_block) largest_block = std::max(largest_block, managed_of[g]);
  }
  const std::uint64_t slot = c.machine.ring_slot_bytes;
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    const bool above_slot = slot != 0 && managed_of[g] > slot;
    const bool outsized =
        !c.groups[g].is_block && largest_block != 0 && managed_of[g] > largest_block;
    if (!above_slot && !outsized) continue;
    const std::uint64_t left = r.budget_bytes - r.outsized_bytes;
    // An outsized group the budget cannot hold whole still keeps what streams above the slot:
    // skipped, it streamed whole and sized the ring past the card (the oracle's property test,
    // seed 9136: a 4.96 GiB bundled group beside 3 slots of 2.12 GiB, refused).
    if (!outsized || (above_slot && managed_of[g] > left)) {
      const auto keep = weights_above_slot(c, r, g, slot);
      std::uint64_t bytes = 0;
      for (std::size_t i : keep) bytes += c.table[i].bytes;
      if (bytes > left) continue;
      r.outsized_bytes += bytes;
      for (std::size_t i : keep) {
        r.resident[i] = 1;
        r.reason[i] = "resident_budget: group '" + c.groups[g].name +
                      "' streams more than the ring's slot of " + format_bytes(slot);
      }
      continue;
    }
    if (managed_of[g] > left) continue;
    r.outsized_bytes += managed_of[g];
    keep_group(c, r, g,
               "resident_budget: group '" + c.groups[g].name +
                   "' streams more than any block (it would size every ring slot)");
  }
}

/// What the block selection left of the budget keeps the managed weights outside the blocks
/// (embeddings, heads, a VAE's convolutions, a bundled encoder's stems): streamed, they cost the
/// bus the same bytes a block does, so a budget that holds them keeps them (a small model on a
/// large card is all resident). Largest group first, each whole or not at all.
inline void keep_outside_blocks(const plan_context& c, residency_result& r, std::uint64_t left) {
  std::vector<std::pair<std::uint64_t, std::size_t>> groups;  // streamed bytes, group
  for (std::size_t g = 0; g < c.groups.size(); ++g)
    if (const std::uint64_t bytes = streamed_bytes_of(c, r, g); !c.groups[g].is_block && bytes != 0)
      groups.emplace_back(bytes, g);
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [bytes, g] : groups) {
    if (bytes > left) continue;
    left -= bytes;
    keep_group(c, r, g,
               "resident_budget: group '" + c.groups[g].name +
                   "' outside the blocks, in what the blocks left of the budget");
  }
}

/// What the whole groups left of the automatic budget keeps single managed weights of the
/// streamed groups, largest first (each byte kept saves the bus the same time, so the largest
/// that fit keep the most; execution order among equals, so that equal blocks give up the same
/// weight each). A budget below one block otherwise keeps nothing of the blocks (issue 38: four
/// blocks of 2.80 GiB beside a budget of 2.75 GiB), and a weight kept out of every streamed
/// group shrinks the ring's slot, which setup then reserves again smaller (fit_ring_to_plan).
/// The runtime streams a group's other weights and skips its resident ones (lay_out_slot).
inline void fill_with_weights(const plan_context& c, residency_result& r) {
  std::uint64_t spent = 0;
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < c.table.size(); ++i) {
    if (!r.managed[i]) continue;
    if (r.resident[i])
      spent += c.table[i].bytes;
    else
      order.push_back(i);
  }
  if (spent >= r.budget_bytes) return;
  std::uint64_t left = r.budget_bytes - spent;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return c.table[a].bytes != c.table[b].bytes ? c.table[a].bytes > c.table[b].bytes
                                                : c.position[a] < c.position[b];
  });
  for (std::size_t i : order) {
    if (c.table[i].bytes > left) continue;
    left -= c.table[i].bytes;
    r.resident[i] = 1;
    r.filled_bytes += c.table[i].bytes;
    r.reason[i] = "resident_budget: a weight of a streamed group, in what the whole groups left";
  }
}

}  // namespace detail

inline rule_residency residency_rules(const plan_context& c) {
  std::optional<plan_patterns> own;
  if (c.patterns == nullptr) own = compile_plan_patterns(c.config);
  return detail::apply_residency_rules(c, c.patterns != nullptr ? *c.patterns : *own);
}

inline void match_rule_patterns(plan_patterns& patterns, const plan_context& c) {
  const weight_table& table = c.table;
  patterns.matches.assign(table.size(), weight_pattern_matches{});
  patterns.matched_table = nullptr;  // filled first: the rules below search
  (void)detail::apply_rules_with(c, [&](std::size_t i, rule_patterns list) {
    // A module's weights (weight, bias) are adjacent in most tables: its name searched once.
    std::int32_t k = i > 0 && table[i - 1].module_name == table[i].module_name
                         ? patterns.matches[i - 1].of(list)
                         : weight_pattern_matches::unsearched;
    if (k == weight_pattern_matches::unsearched)
      k = first_matching_pattern(patterns, list, table[i].module_name);
    patterns.matches[i].set(list, k);
    return pattern_at(patterns, list, k);
  });
  patterns.matched_table = &table;
}

inline std::vector<char> outsized_group_weights(const plan_context& c) {
  const rule_residency rules = residency_rules(c);
  auto may_stream = [&](std::size_t w) {
    return rules.rule[w] == residency_rule::managed ||
           rules.rule[w] == residency_rule::builtin_pattern;
  };
  std::vector<std::uint64_t> bytes(c.groups.size(), 0);
  std::uint64_t largest_block = 0;
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    for (std::size_t w : c.groups[g].weights) bytes[g] += may_stream(w) ? c.table[w].bytes : 0;
    if (c.groups[g].is_block) largest_block = std::max(largest_block, bytes[g]);
  }
  std::vector<char> out(c.table.size(), 0);
  for (std::size_t g = 0; g < c.groups.size(); ++g)
    if (largest_block != 0 && !c.groups[g].is_block && bytes[g] > largest_block)
      for (std::size_t w : c.groups[g].weights) out[w] = may_stream(w) ? 1 : 0;
  return out;
}

inline std::vector<std::uint64_t> streamable_group_bytes(const plan_context& c) {
  const rule_residency rules = residency_rules(c);
  std::vector<std::uint64_t> bytes(c.groups.size(), 0);
  for (std::size_t g = 0; g < c.groups.size(); ++g)
    for (std::size_t w : c.groups[g].weights)
      if (rules.rule[w] == residency_rule::managed ||
          rules.rule[w] == residency_rule::builtin_pattern)
        bytes[g] += c.table[w].bytes;
  return bytes;
}

template <selection_choice Selection>
residency_result basic_residency_planner<Selection>::plan_residency(const plan_context& c) const {
  const weight_table& table = c.table;
  const std::size_t n = table.size();
  rule_residency rules = residency_rules(c);
  residency_result r;
  detail::choose_budget_source(c, rules, r);
  detail::size_budget(c, rules, r);

  r.resident.assign(n, 0);
  r.managed.assign(n, 0);
  r.reason.assign(n, std::string());
  for (std::size_t i = 0; i < n; ++i) {
    r.resident[i] = rules.kept(i) ? 1 : 0;
    r.managed[i] = rules.kept(i) ? 0 : 1;
    r.reason[i] = detail::rule_reason(rules, i, table[i], c.config);
    if (r.full_pin_zero_resident && r.managed[i] && rules.matched[i] != nullptr)
      r.reason[i] = "full_pin_zero_resident offloads always-resident default";
    if (rules.rule[i] == residency_rule::demoted) ++r.demoted_weights;
  }
  r.rule_resident_bytes = rules.kept_bytes();
  r.demoted_bytes = rules.bytes_of(residency_rule::demoted);
  r.rule_resident_detail = detail::rules_detail(rules, r.demoted_weights);

  r.selection = std::string(selection_label<Selection>(c.config.resident_module_selection));
  if (r.budget_bytes == 0) return r;

  // Step 3. Candidates in execution order: blocks or modules, with the managed weights they hold.
  const bool by_block = !c.config.resident_module_patterns.empty();
  module_candidates cands;
  // A group outside the blocks that streams more than any block would size every ring slot
  // (Wan's time_projection, 601 MiB in fp32 beside 335 MiB fp8 blocks): it stays resident
  // first, while the automatic budget holds it (an explicit one is spent as the reference says).
  if (r.budget_source == resident_budget_source::balanced) detail::keep_outsized_first(c, r);
  if (by_block) {
    for (const auto& g : c.groups) {
      if (!g.is_block) continue;
      selection_candidate cand;
      std::vector<std::size_t> ws;
      for (std::size_t i : g.weights)
        if (r.managed[i] && !r.resident[i]) {
          cand.bytes += table[i].bytes;
          ws.push_back(i);
        }
      if (ws.empty()) continue;
      cands.candidates.push_back(cand);
      cands.members.push_back(std::move(ws));
    }
  } else {
    cands = group_by_module(c, [&](std::size_t i) { return r.managed[i] && !r.resident[i]; });
  }
  const auto outcome = run_selection<Selection>(
      c.config.resident_module_selection, cands.candidates, r.budget_bytes - r.outsized_bytes);
  const std::string why = "resident_budget " + r.selection + (by_block ? " (block)" : " (module)");
  std::uint64_t spent = r.outsized_bytes;
  for (std::size_t w : outcome.winners) {
    spent += cands.candidates[w].bytes;
    for (std::size_t i : cands.members[w]) {
      r.resident[i] = 1;
      r.reason[i] = why;
    }
  }
  if (by_block && spent < r.budget_bytes) detail::keep_outside_blocks(c, r, r.budget_bytes - spent);
  if (r.budget_source == resident_budget_source::balanced) detail::fill_with_weights(c, r);
  return r;
}

}  // namespace v0
}  // namespace ddo
