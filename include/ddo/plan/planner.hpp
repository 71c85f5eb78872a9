// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::make_plan: the entry point that turns a weight table, a config and the machine's
/// capacities into an offload_plan, composing a residency planner and a pin selector.
///
/// Steps: validate the config fields planning reads; build the execution groups (inferred from
/// `resident_module_patterns`, or the engine's); run the residency planner, then the pin
/// selector; assemble per-weight decisions and per-group bytes; check the plan against the
/// machine:
///  - every group's streamed bytes ≤ machine.max_group_bytes (when not 0), else out_of_memory
///    (tier "transport_slot") naming the group and both sizes;
///  - resident bytes ≤ free VRAM (when free VRAM is known), else out_of_memory (tier "device");
///  - pinned bytes ≤ the pin budget (a policy that broke its budget is a bug: usage_error).

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/concepts.hpp"
#include "ddo/plan/device_room.hpp"
#include "ddo/plan/machine_capacity.hpp"
#include "ddo/plan/pin_selector.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/plan/make_plan_context.hpp"
#include "ddo/plan/plan_context.hpp"
#include "ddo/plan/plan_patterns.hpp"
#include "ddo/plan/residency_planner.hpp"
#include "ddo/plan/tier_bound.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Plans with execution groups given by the engine (validated with
/// validate_execution_groups).
/// @tparam Planner a ddo::residency_planner (plan/concepts.hpp)
/// @tparam PinSelector a ddo::pin_selector (plan/concepts.hpp)
/// @throws config_error for invalid settings, out_of_memory for budgets the machine cannot
/// meet, usage_error for invalid groups.
template <class Planner = default_residency_planner, class PinSelector = default_pin_selector>
[[nodiscard]] offload_plan make_plan(const weight_table& table, std::vector<execution_group> groups,
                                     const dynamic_offload_config& config,
                                     const machine_capacity& machine, Planner planner = {},
                                     PinSelector pin_selector_policy = {});

/// @brief Plans with execution groups inferred from `config.resident_module_patterns` (see
/// model/execution_groups.hpp).
template <class Planner = default_residency_planner, class PinSelector = default_pin_selector>
[[nodiscard]] offload_plan make_plan(const weight_table& table,
                                     const dynamic_offload_config& config,
                                     const machine_capacity& machine, Planner planner = {},
                                     PinSelector pin_selector_policy = {});

namespace detail {
/// The plan's selection from a planner's answer (residency_result / pin_result::selection, text
/// an engine's planner may set): empty is the config's @p configured; a name the plan knows is
/// that selection; any other name is an engine's own selection, reported as custom.
[[nodiscard]] inline plan_selection selection_named(std::string_view answer,
                                                    selection configured) noexcept {
  if (answer.empty()) return plan_selection_of(configured);
  const auto known = parse_enum<plan_selection>(answer);
  return known ? *known : plan_selection::custom;
}

inline void check_plan_number(double value, const char* field) {
  // __builtin_isnan, not std::isnan: <cmath> alone costs every TU including the umbrella 4%.
  if (__builtin_isnan(value) || value < 0.0)
    throw config_error(
        origin::config, field,
        std::string(field) + " must be a non-negative number, got " + std::to_string(value));
  // Sizes in GiB past 2^34 have no byte count in 64 bits: refused rather than saturated, so
  // that a typo (1e20) is reported, not planned around.
  const std::string_view name(field);
  if (name.ends_with("_gb") && value > max_representable_gib)
    throw config_error(origin::config, field,
                       std::string(field) + " = " + std::to_string(value) +
                           " GiB is larger than any machine (at most 17179869184 GiB, 2^64 "
                           "bytes); give a size in GiB");
}

inline void check_planning_config(const dynamic_offload_config& c) {
  check_plan_number(c.resident_module_budget_gb, "resident_module_budget_gb");
  check_plan_number(c.max_resident_module_budget_gb, "max_resident_module_budget_gb");
  check_plan_number(c.auto_vram_headroom_gb, "auto_vram_headroom_gb");
  check_plan_number(c.auto_full_pin_min_model_to_vram_ratio,
                    "auto_full_pin_min_model_to_vram_ratio");
  check_plan_number(c.max_pin_weight_budget_gb, "max_pin_weight_budget_gb");
  check_plan_number(c.available_system_ram_gb, "available_system_ram_gb");
  check_plan_number(c.system_ram_headroom_gb, "system_ram_headroom_gb");
  check_plan_number(c.pin_weight_budget_gb, "pin_weight_budget_gb");
  // The reference clamps the ratio into [0, 1]; NaN has no clamp.
  if (__builtin_isnan(c.pin_weight_budget_ratio))
    throw config_error(origin::config, "pin_weight_budget_ratio", "pin_weight_budget_ratio is NaN");
}

/// Checks @p plan against @p machine: each group's streamed bytes fit the transport's slot or
/// staging, and the resident bytes fit the free device memory (0: unknown, not checked).
/// @throws out_of_memory naming the tier, the group or the budget, and what to change.
inline void check_plan_fits(const offload_plan& plan, const machine_capacity& machine) {
  const plan_budgets& b = plan.budgets;
  if (machine.max_group_bytes != 0)
    for (const auto& g : plan.groups)
      if (g.streamed_bytes() > machine.max_group_bytes)
        throw out_of_memory(
            memory_tier::transport_slot, g.streamed_bytes(), machine.max_group_bytes,
            "execution group '" + g.name + "' streams " + std::to_string(g.streamed_bytes()) +
                " bytes (" + format_bytes(g.streamed_bytes()) +
                ") but the transport's slot/staging holds " +
                std::to_string(machine.max_group_bytes) + " bytes (" +
                format_bytes(machine.max_group_bytes) + ")" +
                (b.max_group_detail.empty() ? std::string() : " (" + b.max_group_detail + ")") +
                "; enlarge the slots/staging (e.g. vmm_staging_buffer_gb), or split the group");
  const std::uint64_t resident = plan.total_bytes(placement::gpu_resident);
  if (machine.free_vram_bytes != 0 && resident > machine.free_vram_bytes)
    throw out_of_memory(
        memory_tier::device, resident, machine.free_vram_bytes,
        "the plan keeps " + format_bytes(resident) + " resident on the GPU but " +
            device_room_text(machine) + " (" + b.rule_resident_detail + "; resident budget " +
            format_bytes(b.resident_budget_bytes) + ", " +
            std::string(to_string(b.resident_source)) + ": " + b.resident_budget_detail +
            "); lower resident_module_budget_gb" + smallest_card_text(machine, resident));
}

/// make_plan with the config's patterns compiled once (see plan/plan_patterns.hpp).
template <class Planner, class PinSelector>
offload_plan make_plan_compiled(const weight_table& table, std::vector<execution_group> groups,
                                const dynamic_offload_config& config,
                                const machine_capacity& machine, const plan_patterns& patterns,
                                Planner planner, PinSelector pin_selector_policy);

}  // namespace detail

template <class Planner, class PinSelector>
offload_plan make_plan(const weight_table& table, std::vector<execution_group> groups,
                       const dynamic_offload_config& config, const machine_capacity& machine,
                       Planner planner, PinSelector pin_selector_policy) {
  const plan_patterns patterns = compile_plan_patterns(config);
  return detail::make_plan_compiled(table, std::move(groups), config, machine, patterns,
                                    std::move(planner), std::move(pin_selector_policy));
}

template <class Planner, class PinSelector>
offload_plan make_plan(const weight_table& table, const dynamic_offload_config& config,
                       const machine_capacity& machine, Planner planner,
                       PinSelector pin_selector_policy) {
  const plan_patterns patterns = compile_plan_patterns(config);
  return detail::make_plan_compiled(
      table, infer_execution_groups(table, std::span<const pattern>(patterns.resident_modules)),
      config, machine, patterns, std::move(planner), std::move(pin_selector_policy));
}

template <class Planner, class PinSelector>
offload_plan detail::make_plan_compiled(const weight_table& table,
                                        std::vector<execution_group> groups,
                                        const dynamic_offload_config& config,
                                        const machine_capacity& machine,
                                        const plan_patterns& patterns, Planner planner,
                                        PinSelector pin_selector_policy) {
  static_assert(
      residency_planner<Planner>,
      "make_plan: Planner must model ddo::residency_planner (a member `using planner_category = "
      "ddo::residency_planner_tag;` and plan_residency(const plan_context&) returning "
      "residency_result); see ddo/plan/concepts.hpp");
  static_assert(pin_selector<PinSelector>,
                "make_plan: PinSelector must model ddo::pin_selector (a member `using "
                "pin_selector_category = "
                "ddo::pin_selector_tag;` and select_pinned(const plan_context&, const "
                "residency_result&) returning pin_result); see ddo/plan/concepts.hpp");
  detail::check_planning_config(config);
  groups = validate_execution_groups(table, std::move(groups));

  const plan_context context = make_plan_context(table, config, machine, groups, &patterns);
  const auto check_entries = [&](const char* policy, std::size_t entries, std::size_t reasons) {
    DDO_EXPECTS(entries == table.size() && reasons == table.size(),
                "make_plan: the " + std::string(policy) + " returned entries for " +
                    std::to_string(entries) + " weights, the table has " +
                    std::to_string(table.size()));
  };
  const residency_result residency = planner.plan_residency(context);
  check_entries("residency planner", residency.resident.size(), residency.reason.size());
  const pin_result pins = pin_selector_policy.select_pinned(context, residency);
  check_entries("pin selector", pins.where.size(), pins.reason.size());

  offload_plan plan;
  plan.decisions.resize(table.size());
  plan.groups.reserve(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    plan_group pg{groups[g].name, groups[g].weights};
    for (std::size_t i : pg.weights) {
      placement where = pins.where[i];
      DDO_EXPECTS((where == placement::gpu_resident) == (residency.resident[i] != 0),
                  "make_plan: the pin selector changed the residency of '" + table[i].name + "'");
      plan.decisions[i] = weight_decision{where, g, pins.reason[i]};
      pg.bytes_by_placement[static_cast<std::size_t>(where)] += table[i].bytes;
    }
    plan.groups.push_back(std::move(pg));
  }

  plan_budgets& b = plan.budgets;
  b.resident_budget_bytes = residency.budget_bytes;
  b.resident_source = residency.budget_source;
  b.resident_budget_detail = residency.budget_detail;
  b.pin_budget_bytes = pins.budget_bytes;
  b.pin_source = pins.budget_source;
  b.pin_budget_detail = pins.budget_detail;
  b.free_vram_bytes = machine.free_vram_bytes;
  b.total_vram_bytes = machine.total_vram_bytes;
  b.available_ram_bytes = context.available_ram_bytes();
  b.usable_ram_bytes = context.usable_ram_bytes();
  b.max_group_bytes = machine.max_group_bytes;
  b.max_group_detail = machine.max_group_detail;
  b.full_pin_zero_resident = residency.full_pin_zero_resident;
  b.rule_resident_bytes = residency.rule_resident_bytes;
  b.demoted_bytes = residency.demoted_bytes;
  b.demoted_weights = residency.demoted_weights;
  b.rule_resident_detail = residency.rule_resident_detail;
  b.resident_selection =
      detail::selection_named(residency.selection, config.resident_module_selection);
  b.planner_detail = residency.planner_detail;
  b.pin_selection = detail::selection_named(pins.selection, config.pin_weight_selection);

  b.tier_bound_detail =
      describe_tier_bound(tier_bound_of(plan, machine, config.disk_read_gb_per_s));
  detail::check_plan_fits(plan, machine);
  const std::uint64_t pinned = plan.total_bytes(placement::pinned_host);
  DDO_EXPECTS(pinned <= b.pin_budget_bytes,
              "make_plan: the pin selector pinned " + std::to_string(pinned) +
                  " bytes over its budget of " + std::to_string(b.pin_budget_bytes));
  return plan;
}

}  // namespace v0
}  // namespace ddo
