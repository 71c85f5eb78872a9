// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief What the planning policies see (plan_context) and what they return (residency_result,
/// pin_result, selection_candidate).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ddo/config/config_provenance.hpp"
#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/field_id.hpp"
#include "ddo/core/units.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/machine_capacity.hpp"
#include "ddo/plan/plan.hpp"

namespace ddo {
inline namespace v0 {

// Declared, not included: the policy concepts (plan/concepts.hpp), which ddo::offloader's
// policy list checks, need the context's type only; group inference and the compiled patterns
// come with make_plan_context (plan/make_plan_context.hpp), in the TUs that plan.
struct execution_group;  // model/execution_groups.hpp
struct plan_patterns;    // plan/plan_patterns.hpp

/// @brief One thing a budget can be spent on (a module or a block), in execution order.
struct selection_candidate {
  std::uint64_t bytes = 0;
};

/// @brief The inputs of one planning run. Built by make_plan; policies only read it.
struct plan_context {
  const weight_table& table;
  const dynamic_offload_config& config;
  const machine_capacity& machine;
  std::span<const execution_group> groups;   ///< in execution order
  std::vector<std::size_t> group_of;         ///< per weight: index into groups
  std::vector<std::size_t> execution_order;  ///< weight indices, group by group
  std::vector<std::size_t> position;         ///< per weight: its index in execution_order
  /// The config's patterns, compiled once by make_plan (nullptr: a planner compiles its own).
  const plan_patterns* patterns = nullptr;

  /// @brief Available system RAM: the machine's when the engine stated it
  /// (machine_capacity::available_ram_stated), else `available_system_ram_gb` when positive
  /// (explicit, or detected by resolution), else the machine's measured RAM.
  [[nodiscard]] std::uint64_t available_ram_bytes() const noexcept;
  /// @brief available_ram_bytes() minus `system_ram_headroom_gb`, never below 0.
  [[nodiscard]] std::uint64_t usable_ram_bytes() const noexcept;
};

/// @brief Records in @p machine the RAM an engine states for its machine, @p stated_bytes, so
/// that the plan uses it over an `available_system_ram_gb` that resolution only detected on this
/// host (provenance origin::detected). An `available_system_ram_gb` set explicitly (code, TOML,
/// DDO_AVAILABLE_SYSTEM_RAM_GB, a flag or a component policy, per @p provenance) still wins:
/// then the machine records that value instead.
/// @return true when the stated RAM was taken, false when the explicit setting won.
bool state_available_ram(machine_capacity& machine, std::uint64_t stated_bytes,
                         const dynamic_offload_config& config, const config_provenance& provenance);

/// @brief Budget candidates made of whole modules: the weights for which @p take(i) holds, in
/// execution order, grouped by module (a module's tensors win or lose together).
struct module_candidates {
  std::vector<selection_candidate> candidates;    ///< bytes per module, in execution order
  std::vector<std::vector<std::size_t>> members;  ///< per candidate: its weight indices
};

template <class Predicate>
[[nodiscard]] module_candidates group_by_module(const plan_context& c, Predicate take) {
  module_candidates out;
  std::unordered_map<std::string, std::size_t> index_of_module;
  for (std::size_t i : c.execution_order) {
    if (!take(i)) continue;
    auto [it, inserted] = index_of_module.emplace(c.table[i].module_name, out.candidates.size());
    if (inserted) {
      out.candidates.push_back({});
      out.members.emplace_back();
    }
    out.candidates[it->second].bytes += c.table[i].bytes;
    out.members[it->second].push_back(i);
  }
  return out;
}

/// @brief The residency planner's answer.
struct residency_result {
  std::vector<char> resident;  ///< per weight: 1 = gpu_resident for the whole run
  std::vector<char> managed;   ///< per weight: 1 = dynamically managed (streamed unless resident)
  std::vector<std::string> reason;  ///< per weight: the rule or selector that decided
  std::uint64_t budget_bytes = 0;   ///< the resident module budget
  resident_budget_source budget_source = resident_budget_source::none;  ///< the rule that decided
  std::string budget_detail;  ///< how the budget was computed, for the summary
  /// The selection that picked the winners ("first", "spread", "largest", "custom"); empty:
  /// the config's `resident_module_selection`.
  std::string selection;
  /// Which planner planned and why, when the planner was chosen at run time (by_profile_planner:
  /// the capacity profile whose timings it used, or why none applied); empty otherwise.
  std::string planner_detail;
  bool full_pin_zero_resident = false;
  std::uint64_t rule_resident_bytes = 0;  ///< see plan_budgets::rule_resident_bytes
  std::uint64_t demoted_bytes = 0;        ///< see plan_budgets::demoted_bytes
  std::size_t demoted_weights = 0;        ///< see plan_budgets::demoted_weights
  std::string rule_resident_detail;       ///< see plan_budgets::rule_resident_detail
  /// Budget bytes spent on groups outside the blocks larger than any block (kept first).
  std::uint64_t outsized_bytes = 0;
  /// Budget bytes spent on single weights of streamed groups, after the whole groups
  /// (residency_planner.hpp, fill_with_weights).
  std::uint64_t filled_bytes = 0;
  /// Pin every streamed weight (full pin): set with full_pin_zero_resident, and for capacity
  /// profiles (calibration and stored recommendations), which keep full CPU pinning.
  bool pin_all_streamed = false;
};

/// @brief The pin selector's answer.
struct pin_result {
  std::vector<placement> where;     ///< per weight
  std::vector<std::string> reason;  ///< per weight (kept from residency for resident weights)
  std::uint64_t budget_bytes = 0;   ///< pinned host bytes allowed
  pin_budget_source budget_source = pin_budget_source::disabled;  ///< the rule that decided
  std::string budget_detail;
  /// The selection that picked the winners; empty: the config's `pin_weight_selection`.
  std::string selection;
};

inline std::uint64_t plan_context::available_ram_bytes() const noexcept {
  if (machine.available_ram_stated) return machine.available_ram_bytes;
  return config.available_system_ram_gb > 0.0 ? gib_to_bytes(config.available_system_ram_gb)
                                              : machine.available_ram_bytes;
}

inline bool state_available_ram(machine_capacity& machine, std::uint64_t stated_bytes,
                                const dynamic_offload_config& config,
                                const config_provenance& provenance) {
  const bool explicit_ram =
      provenance.given(field_id::available_system_ram_gb) && config.available_system_ram_gb > 0.0;
  machine.available_ram_bytes =
      explicit_ram ? gib_to_bytes(config.available_system_ram_gb) : stated_bytes;
  machine.available_ram_stated = true;
  return !explicit_ram;
}

inline std::uint64_t plan_context::usable_ram_bytes() const noexcept {
  const std::uint64_t available = available_ram_bytes();
  const std::uint64_t headroom = gib_to_bytes(config.system_ram_headroom_gb);
  return available > headroom ? available - headroom : 0;
}

}  // namespace v0
}  // namespace ddo
