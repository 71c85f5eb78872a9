// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::offload_plan: where every weight lives and why, per execution group.
///
/// Produced by the planners (plan/planner.hpp), consumed by the runtime. The runtime reads only
/// what is declared here: placements, groups in execution order, and the budgets.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/enum_names.hpp"
#include "ddo/core/memory_tier.hpp"
#include "ddo/plan/budget_source.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Where a weight lives between uses.
/// gpu_resident: uploaded once at setup, never streamed (always-resident, small tensors, budget
/// winners, modules not eligible for the dynamic runtime). The others are streamed per use from
/// page-locked host memory, pageable host memory (staged through pinned buffers) or its file.
enum class placement { gpu_resident, pinned_host, pageable_host, file };

inline constexpr std::size_t placement_count = 4;

template <>
struct enum_names<placement> {
  static constexpr std::array<std::string_view, 4> values = {"gpu_resident", "pinned_host",
                                                             "pageable_host", "file"};
};
static_assert(enum_names<placement>::values.size() == placement_count,
              "a name for every placement");

[[nodiscard]] constexpr std::string_view to_string(placement p) noexcept {
  return enum_name(p);
}

/// @brief The memory tier a placement keeps a weight in between uses (gpu_resident: device).
[[nodiscard]] constexpr memory_tier tier_of(placement p) noexcept {
  switch (p) {
    case placement::gpu_resident: return memory_tier::device;
    case placement::pinned_host: return memory_tier::pinned_host;
    case placement::pageable_host: return memory_tier::pageable_host;
    case placement::file: return memory_tier::file;
  }
  return memory_tier::device;
}

/// @brief How a budget picked its winners (plan_budgets::resident_selection, pin_selection):
/// one of the config's selections (first, spread, largest: the config's field or one an engine
/// compiled in), custom (an engine's own weight selector), overlap (the overlap-aware planner,
/// plan/overlap_planner.hpp), none (route plans, which select nothing).
enum class plan_selection { none, first, spread, largest, custom, overlap };

/// @brief The names plans print (plan_format, ddo-plan's JSON): none prints as "", as before
/// the enum, so plan files stay byte-identical.
template <>
struct enum_names<plan_selection> {
  static constexpr std::array<std::string_view, 6> values = {"",       "first",  "spread",
                                                             "largest", "custom", "overlap"};
};

/// @brief The plan's name of the config's selection @p s.
[[nodiscard]] constexpr plan_selection plan_selection_of(selection s) noexcept {
  switch (s) {
    case selection::first: return plan_selection::first;
    case selection::spread: return plan_selection::spread;
    case selection::largest: return plan_selection::largest;
  }
  return plan_selection::none;
}

/// @brief The decision for one weight (index i of the weight table is decisions[i]).
struct weight_decision {
  placement where = placement::gpu_resident;
  std::size_t group = 0;  ///< index into offload_plan::groups
  /// Which rule or selector put it there, e.g. "always_resident_pattern '.*norm.*'",
  /// "small_tensor <= 1048576 B", "resident_budget spread", "pin_budget spread", "not pinned".
  std::string reason;
};

/// @brief One execution group: the weights used together, in execution order.
struct plan_group {
  std::string name;                  ///< e.g. "transformer_blocks.3" or "<before>"
  std::vector<std::size_t> weights;  ///< weight-table indices, in table order
  std::array<std::uint64_t, placement_count> bytes_by_placement{};  ///< indexed by placement
  [[nodiscard]] std::uint64_t bytes(placement p) const noexcept {
    return bytes_by_placement[static_cast<std::size_t>(p)];
  }
  /// Bytes that must be on the device while the group runs but are not resident.
  [[nodiscard]] std::uint64_t streamed_bytes() const noexcept {
    return bytes(placement::pinned_host) + bytes(placement::pageable_host) + bytes(placement::file);
  }
};

/// @brief The budgets a plan was made under (bytes), and where each came from.
struct plan_budgets {
  std::uint64_t resident_budget_bytes = 0;  ///< device bytes allowed for resident weights
  /// The rule that set resident_budget_bytes.
  resident_budget_source resident_source = resident_budget_source::none;
  std::uint64_t pin_budget_bytes = 0;       ///< host bytes allowed to be page-locked
  pin_budget_source pin_source = pin_budget_source::disabled;  ///< the rule that set pin_budget_bytes
  std::uint64_t free_vram_bytes = 0;  ///< as seen or stated at planning time
  std::uint64_t available_ram_bytes = 0;  ///< usable system RAM at planning time
  bool full_pin_zero_resident = false;    ///< the reference's full-pin zero-resident rule fired
  std::string resident_budget_detail;     ///< how the resident budget was computed
  std::string pin_budget_detail;          ///< how the pin budget was computed
  std::uint64_t total_vram_bytes = 0;     ///< as seen or stated at planning time
  std::uint64_t usable_ram_bytes = 0;     ///< available RAM minus system_ram_headroom_gb
  std::uint64_t max_group_bytes = 0;      ///< the transport's slot/staging limit (0 = none)
  /// How the resident budget picked its winners (none for route plans, which select nothing).
  plan_selection resident_selection = plan_selection::none;
  plan_selection pin_selection = plan_selection::none;  ///< how the pin budget picked
  /// Which planner planned, when it was chosen at run time (by_profile_planner): the capacity
  /// profile whose group timings the overlap-aware planner used, or why none applied; empty
  /// for a planner fixed at compile time.
  std::string planner_detail;
  /// Bytes the rules keep resident whatever the budget (skip patterns, kinds outside
  /// target_module_classes, small tensors, always-resident patterns), after demotion.
  std::uint64_t rule_resident_bytes = 0;
  /// Bytes the built-in always-resident patterns matched but the planner streams because they
  /// did not fit beside the headroom (demoted); 0 when nothing was demoted.
  std::uint64_t demoted_bytes = 0;
  std::size_t demoted_weights = 0;  ///< how many weights demoted_bytes counts
  /// What the rules keep and why, per rule, and what was demoted ("small tensors 12 MiB, ...").
  std::string rule_resident_detail;
  /// How max_group_bytes came about when the setup path grew a preset's size to fit the largest
  /// streamed group ("preset nvme_baseline's 640 MiB grown to ..."); empty otherwise.
  std::string max_group_detail;
  /// The plan's tiers and the step bound they aim for (plan/tier_bound.hpp: resident, pinned,
  /// pageable and file bytes; `max(C, streamed / B_bus, file / B_disk)`); empty when nothing
  /// streams.
  std::string tier_bound_detail;
};

/// @brief The complete plan of one model component.
struct offload_plan {
  std::vector<weight_decision> decisions;  ///< one per weight-table entry
  std::vector<plan_group> groups;          ///< in execution order
  plan_budgets budgets;

  [[nodiscard]] std::uint64_t total_bytes(placement p) const noexcept {
    std::uint64_t total = 0;
    for (const auto& g : groups) total += g.bytes(p);
    return total;
  }
  /// Largest per-group streamed bytes: what one slot of the transport ring must hold.
  [[nodiscard]] std::uint64_t largest_streamed_group_bytes() const noexcept {
    std::uint64_t largest = 0;
    for (const auto& g : groups)
      largest = largest < g.streamed_bytes() ? g.streamed_bytes() : largest;
    return largest;
  }
};

}  // namespace v0
}  // namespace ddo
