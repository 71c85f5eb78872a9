// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The dynamic_offload route's planning: the plan cache's plan when it still fits, else
/// planned with the ring reserved for what the plan streams, re-planned while the ring or the
/// shared weight store's credit changes (plan_dynamic_offload), and the slot and ring a plan
/// needs (streamed_slot_bytes, streamed_ring_bytes). Part of the one setup path
/// (setup/setup.hpp).

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "ddo/config/component_policy.hpp"
#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/memory_tier.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "ddo/plan/make_plan_context.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/plan/plan_context.hpp"
#include "ddo/plan/plan_patterns.hpp"
#include "ddo/plan/planner.hpp"
#include "ddo/plan/residency_planner.hpp"
#include "ddo/plan/smallest_cover.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/device_footprint.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/setup/machine.hpp"
#include "ddo/setup/machine_inputs.hpp"
#include "ddo/setup/options.hpp"
#include "ddo/setup/plan_cache.hpp"
#include "ddo/setup/streamed_groups.hpp"

namespace ddo {
inline namespace v0 {

/// @brief What setup_offload decided: everything needed to construct the offloader.
struct offload_setup {
  offload_plan plan;
  runtime_options runtime;
  setup_machine machine;
  resolved_component component;    ///< the route executed (never auto_select)
  std::vector<std::string> notes;  ///< decisions a user should know
  bool plan_from_cache = false;    ///< the plan came from setup_options::plans
};

namespace detail {

/// The plan cache's name of the policies: their types, and the planner's state when it has one
/// that changes the plan (by_profile_planner: the profile's timings, or none).
template <class Planner>
std::string policy_names(const Planner& planner, const std::type_info& pins) {
  std::string names = std::string(typeid(Planner).name()) + '+' + pins.name();
  if constexpr (requires {
                  { planner.cache_key() } -> std::convertible_to<std::string>;
                })
    names += '+' + planner.cache_key();
  return names;
}

}  // namespace detail

/// @brief Per weight, 1 when the residency rules keep it resident whatever the budget (before
/// demotion): what setup leaves out of the ring it reserves. @p patterns: @p config's, compiled
/// (and matched, match_weights) once for the setup.
[[nodiscard]] inline std::vector<char> rule_kept_weights(const weight_table& table,
                                                         std::span<const execution_group> groups,
                                                         const dynamic_offload_config& config,
                                                         const plan_patterns& patterns) {
  const machine_capacity unknown;
  const rule_residency rules =
      residency_rules(make_plan_context(table, config, unknown, groups, &patterns));
  std::vector<char> kept(table.size(), 0);
  for (std::size_t w = 0; w < table.size(); ++w) kept[w] = rules.kept(w) ? 1 : 0;
  return kept;
}

/// @brief rule_kept_weights with @p config's patterns compiled for this call.
[[nodiscard]] inline std::vector<char> rule_kept_weights(const weight_table& table,
                                                         std::span<const execution_group> groups,
                                                         const dynamic_offload_config& config) {
  return rule_kept_weights(table, groups, config, compile_plan_patterns(config));
}

/// @brief What @p plan streams per group (streamed_per_group over its streamed weights).
[[nodiscard]] inline streamed_group_sizes plan_streamed_groups(const offload_plan& plan,
                                                               const weight_table& table,
                                                               std::uint64_t alignment) {
  return streamed_per_group(table, plan.groups, alignment, [&](std::size_t w) {
    return plan.decisions[w].where != placement::gpu_resident;
  });
}

/// @brief The largest ring slot @p plan needs: its streamed weights per group, aligned as the
/// runtime lays them out.
[[nodiscard]] inline std::uint64_t streamed_slot_bytes(const offload_plan& plan,
                                                       const weight_table& table,
                                                       std::uint64_t alignment) {
  return plan_streamed_groups(plan, table, alignment).slot_bytes;
}

/// @brief The ring @p plan needs: its largest streamed slot times the slots the runtime makes
/// (runtime_options::slot_count, at most one per streamed group).
[[nodiscard]] inline std::uint64_t streamed_ring_bytes(const offload_plan& plan,
                                                       const weight_table& table,
                                                       const runtime_options& runtime) {
  const auto s = plan_streamed_groups(plan, table, runtime.alignment);
  return ring_bytes_for(s.slot_bytes, std::min(runtime.slot_count, s.streaming_groups));
}

namespace detail {

/// Groups outside the blocks that stream more than any block, considered for residency before
/// the ring is sized (issue 38): the plan with them kept out of the ring, which is then the
/// blocks' size, when it keeps them resident; none when there are none or it cannot.
template <class Planner, class PinSelector, class Machine>
std::optional<std::pair<setup_machine, offload_plan>> plan_outsized_first(
    const offload_setup& r, const weight_table& table, const std::vector<execution_group>& groups,
    const dynamic_offload_config& config, const plan_patterns& patterns,
    const std::vector<char>& rule_kept, const Planner& planner, const PinSelector& pins,
    Machine& machine) {
  const auto outsized = outsized_group_weights(make_plan_context(
      table, config, r.machine.capacity, std::span<const execution_group>(groups), &patterns));
  if (std::find(outsized.begin(), outsized.end(), 1) == outsized.end()) return std::nullopt;
  std::vector<char> kept(table.size(), 0);
  for (std::size_t w = 0; w < table.size(); ++w) kept[w] = rule_kept[w] | outsized[w];
  try {
    auto m = machine(kept);
    auto plan = make_plan_compiled(table, groups, config, m.capacity, patterns, planner, pins);
    if (streamed_ring_bytes(plan, table, r.runtime) <= m.ring_bytes)
      return std::pair{std::move(m), std::move(plan)};
  } catch (const out_of_memory&) {  // the smaller ring leaves no room for them
  }
  return std::nullopt;
}

/// Takes @p first (plan_outsized_first's) over @p r's plan when that keeps less resident, or is
/// empty (refused).
inline void take_if_more_resident(offload_setup& r,
                                  std::optional<std::pair<setup_machine, offload_plan>>& first) {
  if (!first || (!r.plan.decisions.empty() && first->second.total_bytes(placement::gpu_resident) <=
                                                  r.plan.total_bytes(placement::gpu_resident)))
    return;
  r.machine = std::move(first->first);
  r.plan = std::move(first->second);
}

/// The smallest ring a slot of @p level bytes makes: @p slot_count slots, fewer when fewer of
/// the groups' streamable sizes (@p bytes) are at most @p level (the groups above it stay
/// resident). A lower bound: the runtime's slot is the aligned size.
inline std::uint64_t ring_at_level(std::span<const std::uint64_t> bytes, std::uint64_t level,
                                   std::size_t slot_count) {
  const auto streaming = static_cast<std::size_t>(std::count_if(
      bytes.begin(), bytes.end(), [&](std::uint64_t b) { return b != 0 && b <= level; }));
  return ring_bytes_for(level, std::min(slot_count, streaming));
}

/// Slots below the groups' sizes (issue 38): every group trimmed to the slot, the part above
/// it resident. The least slot at which the groups' excess above it and @p slot_count slots of
/// it fit @p card: below the (slot_count+1)-th largest group the excess falls faster than the
/// ring grows, so a binary search finds it; then a few sizes above it, since the planner's
/// headroom and the residency rules take room this estimate does not count (the oracle's
/// property test, seed 4028: 2.24 GiB blocks on a 12.25 GiB card streamed whole, 26x the plan
/// that trims each to 557 MiB). None where at most slot_count groups stream.
inline std::vector<std::uint64_t> trimmed_levels(std::span<const std::uint64_t> bytes,
                                                 std::size_t slot_count, std::uint64_t card) {
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t b : bytes)
    if (b != 0) sizes.push_back(b);
  if (sizes.size() <= slot_count) return {};
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  const auto need = [&](std::uint64_t level) {
    std::uint64_t excess = 0;
    for (std::uint64_t b : sizes) excess += b > level ? b - level : 0;
    return excess + ring_bytes_for(level, slot_count);
  };
  std::uint64_t lo = 1, hi = sizes[slot_count];
  if (need(hi) > card) return {};
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (need(mid) <= card)
      hi = mid;
    else
      lo = mid + 1;
  }
  // Rounded up: the least level is exactly what fits, one below it does not. Up to the largest
  // group, not only to the (slot_count+1)-th: above it the excess falls no more, but the room
  // the estimate does not count is there (seed 9136: 2.12 GiB fitted by 156 B beside 135 MiB
  // the rules keep, and every larger level kept the two largest groups whole and passed the
  // card, where the oracle trims them to a 3.77 GiB slot).
  std::vector<std::uint64_t> levels;
  for (const std::uint64_t percent : {100u, 115u, 135u, 160u, 200u})
    if (const std::uint64_t level = (lo * percent + 99) / 100; level < sizes.front())
      levels.push_back(level);
  if (sizes[slot_count] > lo) levels.push_back(sizes[slot_count]);  // need's least there
  return levels;
}

/// The slot the planner is given at a trimmed ring slot of @p slot bytes (plan_smaller_ring): less
/// @p pad, the alignment a group's weights may add to what it streams, at most half the slot.
[[nodiscard]] inline std::uint64_t trimmed_planner_slot(std::uint64_t slot,
                                                        std::uint64_t pad) noexcept {
  return slot - std::min(slot / 2, pad);
}

/// The groups' streamable weights as whole weights (issue 38): a weight does not split, so a group
/// trimmed to a slot keeps whole weights resident, as the planner picks them (weights_above_slot:
/// the least set of whole weights that covers what streams above the slot,
/// plan/smallest_cover.hpp), and a byte-wise level may fit none of a group's weights' sums (seed
/// 6975 of the oracle's property test: f32 blocks of 2.95 GiB, each with a 1.97 GiB weight, where
/// the byte-wise levels were 150-300 MB: every plan there demoted a whole 1.97 GiB weight past the
/// slot and was dropped, and 1.97 GiB slots kept 10.34 GiB resident where the oracle keeps each
/// block's largest weight and streams the rest through 1008 MiB slots, 14.28 GiB).
struct whole_weights {
  std::vector<std::vector<std::uint64_t>> shapes;  ///< per streaming group, largest first
  std::vector<std::uint64_t> totals;               ///< per shape, its bytes
  std::uint64_t pad = 0;  ///< what plan_smaller_ring takes off a level for the alignment
  std::size_t slots = 0;  ///< the ring's slots where every group streams
  std::uint64_t alignment = 0;

  /// @p kept: the weights the rules keep (out of every group).
  whole_weights(const weight_table& table, std::span<const execution_group> groups,
                std::span<const char> kept, std::uint64_t alignment, std::size_t slot_count) {
    std::size_t most_weights = 0;
    for (const auto& g : groups) {
      std::vector<std::uint64_t> sizes;
      for (std::size_t w : g.weights)
        if (kept.empty() || !kept[w]) sizes.push_back(table[w].bytes);
      most_weights = std::max(most_weights, g.weights.size());
      if (sizes.empty()) continue;
      std::sort(sizes.begin(), sizes.end(), std::greater<>());
      totals.push_back(std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0}));
      shapes.push_back(std::move(sizes));
    }
    pad = alignment * most_weights;
    slots = std::min(slot_count, shapes.size());
    this->alignment = alignment;
  }

  /// What the groups keep resident, and the ring, at a trimmed slot of @p level.
  [[nodiscard]] std::uint64_t need(std::uint64_t level) const {
    // At the machine's slot, the level aligned.
    const std::uint64_t slot = trimmed_planner_slot(round_up(level, alignment), pad);
    std::uint64_t resident = 0;
    for (const auto& sizes : shapes) resident += smallest_cover(sizes, slot).kept_bytes;
    return resident + ring_bytes_for(level, slots);
  }

  /// The slot a trimmed @p level streams at: each group streams what is left once the weights
  /// the planner keeps for it are out (weights_above_slot's choice), the largest of those, plus
  /// the alignment its weights may add (plan_smaller_ring plans with the level less that). Where
  /// weights are coarse the plan streams less than the level, and a ring of the level spends
  /// the difference three times over: blocks of 3.92, 1.31 and 0.65 GiB weights trimmed to a
  /// 2.21 GiB level stream 1.96 GiB each, and the ring of the level left the budget 44 MiB short
  /// of the blocks' excess, so they streamed whole (the oracle's property test, seed 5183: 2.69x
  /// the oracle's plan at 1.96 GiB slots). 0: nothing streams.
  [[nodiscard]] std::uint64_t snapped(std::uint64_t level) const {
    const std::uint64_t at = trimmed_planner_slot(level, pad);
    std::uint64_t slot = 0;
    for (std::size_t g = 0; g < shapes.size(); ++g)
      slot = std::max(slot, totals[g] - smallest_cover(shapes[g], at).kept_bytes);
    return slot == 0 ? 0 : slot + pad;
  }

  /// The levels at which a group streams all but its one to three largest weights, the two
  /// least whose need fits @p room.
  [[nodiscard]] std::vector<std::uint64_t> levels(std::uint64_t room) const {
    std::vector<std::uint64_t> all;
    for (std::size_t g = 0; g < shapes.size(); ++g) {
      const auto& sizes = shapes[g];
      std::uint64_t rest = totals[g];
      for (std::size_t j = 0; j < std::min<std::size_t>(3, sizes.size() - 1); ++j)
        all.push_back((rest -= sizes[j]) + pad);
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    std::vector<std::uint64_t> fit;
    for (std::uint64_t level : all)
      if (fit.size() < 2 && need(level) <= room) fit.push_back(level);
    return fit;
  }
};

/// One smaller ring of plan_smaller_rings: the groups above @p level kept out of the ring, what
/// streams above its slot resident first; @p trimmed: a level below some group's size that is
/// no group's, where every group streams (ring_floor), each at most the slot less the
/// alignment its weights may add. Empty when refused or when the plan passes its ring.
template <class Planner, class PinSelector, class Machine>
std::optional<std::pair<setup_machine, offload_plan>> plan_smaller_ring(
    const offload_setup& r, const weight_table& table, const std::vector<execution_group>& groups,
    const dynamic_offload_config& config, const plan_patterns& patterns,
    const std::vector<char>& rule_kept, std::span<const std::uint64_t> bytes, std::uint64_t level,
    bool trimmed, const Planner& planner, const PinSelector& pins, Machine& machine) {
  std::vector<char> kept = rule_kept;
  std::size_t streaming = 0, most_weights = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    streaming += bytes[g] != 0;
    most_weights = std::max(most_weights, groups[g].weights.size());
    if (bytes[g] > level)
      for (std::size_t w : groups[g].weights) kept[w] = 1;
  }
  try {
    auto m = machine(kept, trimmed ? ring_floor{level, streaming} : ring_floor{});
    const std::uint64_t pad = r.runtime.alignment * most_weights;
    m.capacity.ring_slot_bytes = trimmed ? trimmed_planner_slot(m.slot_bytes, pad) : m.slot_bytes;
    auto plan = make_plan_compiled(table, groups, config, m.capacity, patterns, planner, pins);
    if (streamed_ring_bytes(plan, table, r.runtime) <= m.ring_bytes)
      return std::pair{std::move(m), std::move(plan)};
  } catch (const out_of_memory&) {  // that ring leaves no room for what it keeps out
  }
  return std::nullopt;
}

/// Smaller rings than the largest streamed group needs (issue 38): blocks of unequal sizes (a
/// flat model's double blocks six times its single blocks, a UNet's stages of unequal widths,
/// mixed dtypes) size every slot by the largest, where keeping the groups above a smaller slot
/// resident frees the ring's other slots for the budget; and blocks larger than the card's share
/// of them stream whole where trimming every one to a smaller slot keeps more resident. The
/// candidates are the groups' distinct streamable sizes, as the oracle's whole-unit slots are,
/// and the trimmed levels below them (trimmed_levels): for each, the groups above it are kept
/// out of the ring and what streams above the slot resident first (plan_smaller_ring,
/// keep_outsized_first), and the planner's plan is taken when it fits its ring and keeps more
/// resident than the best so far (or @p r's plan is empty: refused on the largest ring). Judged
/// by the planner (its headroom refuses some sizes an estimate admits), but planned only where
/// two bounds allow, so that setup's planning stays a few planner calls: a size whose groups'
/// excess and ring alone pass the card beside the reserves cannot plan (skipped), and smallest
/// first, the search ends at the first size whose ring leaves no more of the card than the best
/// plan keeps resident (a larger ring leaves less). Also after the plan for a card about the
/// model's size (all resident but for what the activations and headroom leave out): what that
/// plan streams sizes its ring too.
template <class Planner, class PinSelector, class Machine>
void plan_smaller_rings(offload_setup& r, const weight_table& table,
                        const std::vector<execution_group>& groups,
                        const dynamic_offload_config& config, const plan_patterns& patterns,
                        const std::vector<char>& rule_kept, const Planner& planner,
                        const PinSelector& pins, Machine& machine) {
  const std::uint64_t free = r.machine.device.free_bytes;
  const std::uint64_t reserves = r.machine.engine_reserve_bytes + runtime_device_reserve_bytes;
  if (free <= reserves) return;  // an unknown card (0: no ring is too large), or a full one
  const std::uint64_t card = free - reserves;
  const auto bytes = streamable_group_bytes(make_plan_context(
      table, config, r.machine.capacity, std::span<const execution_group>(groups), &patterns));
  const std::size_t k = r.runtime.slot_count;
  std::vector<std::pair<std::uint64_t, bool>> levels;  // (level, trimmed)
  for (std::uint64_t b : bytes)
    if (b != 0) levels.emplace_back(b, false);
  // The trimmed levels fill what the plan in hand could keep with no ring (its budget and its
  // ring: the balanced rule's headroom and the rules' weights are out of it), not the card.
  const std::uint64_t room =
      r.plan.decisions.empty()
          ? card
          : std::min(card, r.plan.budgets.resident_budget_bytes + r.machine.ring_bytes);
  const bool trim = !r.machine.whole_page_slots;  // not on the VMM routes (setup_machine)
  const whole_weights weights(table, groups, rule_kept, r.runtime.alignment, k);
  if (trim)
    for (std::uint64_t level : trimmed_levels(bytes, k, room))
      if (const std::uint64_t at = weights.snapped(level); at != 0) levels.emplace_back(at, true);
  // The largest weight of the groups that may stream (a built-in pattern's too: it may be
  // demoted): no slot below it streams it, so a level there is where every group's other weights
  // are trimmed to it (seed 9136: a 3.77 GiB weight in groups of 4.96 and 4.16 GiB beside
  // 2.2-2.4 GiB blocks, the oracle's slot).
  // The slot it plans with is the level less the alignment the group's weights may add
  // (plan_smaller_ring): that much above the weight.
  if (trim) {
    std::uint64_t largest_weight = 0, most_weights = 0;
    for (std::size_t g = 0; g < groups.size(); ++g)
      if (bytes[g] != 0) {
        most_weights = std::max<std::uint64_t>(most_weights, groups[g].weights.size());
        for (std::size_t w : groups[g].weights)
          largest_weight = std::max(largest_weight, table[w].bytes);
      }
    const std::uint64_t most = *std::max_element(bytes.begin(), bytes.end());
    if (const std::uint64_t level = largest_weight + r.runtime.alignment * most_weights;
        level < most)
      levels.emplace_back(level, true);
    // And the levels whole weights make.
    for (std::uint64_t level : weights.levels(room))
      if (level < most) levels.emplace_back(level, true);
  }
  // A trimmed level equal to a group's size first: it may keep what the whole groups above it
  // would pass the card with (trimmed_levels), and the level is tried once.
  std::sort(levels.begin(), levels.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  });
  levels.erase(std::unique(levels.begin(), levels.end(),
                           [](const auto& a, const auto& b) { return a.first == b.first; }),
               levels.end());
  const auto streaming = static_cast<std::size_t>(
      std::count_if(bytes.begin(), bytes.end(), [](std::uint64_t b) { return b != 0; }));
  for (const auto& [level, trimmed] : levels) {
    const std::uint64_t ring = trimmed ? ring_bytes_for(level, std::min(k, streaming))
                                       : ring_at_level(bytes, level, k);
    const std::uint64_t best = r.plan.decisions.empty()
                                   ? 0
                                   : r.plan.total_bytes(placement::gpu_resident);
    if (ring >= card || (!r.plan.decisions.empty() && card - ring <= best)) break;
    std::uint64_t above = 0;  // what the groups above it keep (the planner keeps their excess)
    for (std::uint64_t b : bytes) above += b > level ? b - level : 0;
    if (above > card - ring) continue;  // the groups above it cannot stay resident
    // Nor where the whole weights the planner keeps above a trimmed slot do not fit beside it.
    if (trimmed && weights.need(level) > room) continue;
    auto smaller = plan_smaller_ring(r, table, groups, config, patterns, rule_kept, bytes, level,
                                     trimmed, planner, pins, machine);
    take_if_more_resident(r, smaller);
  }
}

/// Reserves the ring again for what @p r's plan streams while that differs from the ring it was
/// planned with (demoted weights stream too; the budget kept the largest groups). A smaller ring
/// is taken only when the plan made with it still fits it; a larger one always, and again while
/// the plan made with it streams more still (the larger ring leaves less room, so more is
/// demoted: seed 3328 of the oracle's property test kept a 3.81 GiB head out of a ring of
/// 3.46 GiB slots, and the ring it needed passed the card). A plan left streaming more than its
/// ring, or refused on the grown one, is dropped (the plan empty): setup tries the smaller rings
/// next, and @p refused holds why. @p replan(plan) gives the machine reserved for @p plan's
/// streamed weights and the plan made on it (throws out_of_memory when refused).
template <class Replan>
void fit_ring_to_plan(offload_setup& r, const weight_table& table, Replan replan,
                      std::exception_ptr& refused) {
  // Each larger ring shrinks the resident set, so the slot grows to the largest group within
  // as many rounds as there are group sizes; a few are what has been seen.
  for (int round = 0; round < 4 && !r.plan.decisions.empty(); ++round) {
    const std::uint64_t streamed = streamed_slot_bytes(r.plan, table, r.runtime.alignment);
    // The slot alone does not say the ring fits: a plan that streams a group the rules kept
    // needs more slots of the same size than the machine reserved.
    if (streamed == 0 || (streamed == r.machine.slot_bytes &&
                          streamed_ring_bytes(r.plan, table, r.runtime) <= r.machine.ring_bytes))
      break;
    // Whether the plan needs more ring than was reserved: by a larger slot, or by more slots
    // of a smaller one (a plan streaming two 539 MiB groups where the machine reserved one
    // 710 MiB slot: seed 2853567463 of the layouts property test). Only then must the ring
    // grow; otherwise the replan only tries to shrink it, and the plan in hand stands.
    const bool grows = streamed_ring_bytes(r.plan, table, r.runtime) > r.machine.ring_bytes;
    try {
      auto [m, plan] = replan(r.plan);
      const bool fits = streamed_ring_bytes(plan, table, r.runtime) <= m.ring_bytes;
      if (!fits && !grows) break;  // a smaller ring only with a plan that fits it
      r.machine = std::move(m);
      r.plan = std::move(plan);
      if (fits) break;
    } catch (const out_of_memory&) {  // the ring it needs leaves no room
      if (!grows) break;
      refused = std::current_exception();
      r.plan = {};
    }
  }
  if (r.plan.decisions.empty()) return;
  const std::uint64_t ring = streamed_ring_bytes(r.plan, table, r.runtime);
  if (ring <= r.machine.ring_bytes) return;
  refused = std::make_exception_ptr(out_of_memory(
      memory_tier::device, ring, r.machine.ring_bytes,
      "the plan streams groups of up to " +
          format_bytes(streamed_slot_bytes(r.plan, table, r.runtime.alignment)) +
          " a slot: their ring of " + format_bytes(ring) + " passes the " +
          format_bytes(r.machine.ring_bytes) + " the card leaves for it beside the resident " +
          "weights and the reserves (" + r.machine.capacity.free_vram_detail + ")"));
  r.plan = {};
}

/// The plan of a model the card does not hold whole (plan_streaming): planned on @p r's machine
/// (the ring of the largest group the rules leave streaming), the ring reserved again for what
/// it streams (fit_ring_to_plan), the outsized groups kept first where that keeps more resident,
/// then the smaller rings. Throws the refusal met when none of them plans.
template <class Planner, class PinSelector, class Machine, class ReserveFor>
void plan_ring_and_residency(offload_setup& r, const weight_table& table,
                             const std::vector<execution_group>& groups,
                             const dynamic_offload_config& config, const plan_patterns& patterns,
                             const std::vector<char>& rule_kept, const Planner& planner,
                             const PinSelector& pins, Machine& machine, ReserveFor reserve_for) {
  auto first =
      plan_outsized_first(r, table, groups, config, patterns, rule_kept, planner, pins, machine);
  std::exception_ptr refused;
  try {
    r.plan = make_plan_compiled(table, groups, config, r.machine.capacity, patterns, planner, pins);
  } catch (const out_of_memory&) {
    refused = std::current_exception();
    r.plan = {};
  }
  fit_ring_to_plan(
      r, table,
      [&](const offload_plan& plan) {
        auto m = reserve_for(plan);
        auto next = make_plan_compiled(table, groups, config, m.capacity, patterns, planner, pins);
        return std::pair{std::move(m), std::move(next)};
      },
      refused);
  take_if_more_resident(r, first);
  plan_smaller_rings(r, table, groups, config, patterns, rule_kept, planner, pins, machine);
  if (r.plan.decisions.empty()) std::rethrow_exception(refused);
}

/// Whether a cached plan is reused on @p machine: while its resident bytes fit what is free now,
/// and its pinned bytes the RAM now with the headroom it planned with, and the RAM did not grow
/// by more than 1/8 (a probed RAM is not in the key: it moves between calls). Notes why not.
inline bool cached_plan_fits(const offload_plan& hit, const setup_machine& machine,
                             std::vector<std::string>& notes) {
  const std::uint64_t free = machine.capacity.free_vram_bytes;
  const std::uint64_t ram = machine.capacity.available_ram_bytes;
  const auto& b = hit.budgets;
  const std::uint64_t headroom =
      b.available_ram_bytes > b.usable_ram_bytes ? b.available_ram_bytes - b.usable_ram_bytes : 0;
  if (free != 0 && hit.total_bytes(placement::gpu_resident) > free) {
    notes.push_back("cached plan keeps more resident than is free now: planned again");
    return false;
  }
  if (ram != 0 && b.available_ram_bytes > ram &&
      hit.total_bytes(placement::pinned_host) + headroom > ram) {
    notes.push_back("cached plan pins more than the RAM available now: planned again");
    return false;
  }
  // Much more RAM now (another model released, a process ended): the plan may pin more.
  if (ram != 0 && b.available_ram_bytes != 0 &&
      ram > b.available_ram_bytes + b.available_ram_bytes / 8) {
    notes.push_back("the RAM available grew by more than 1/8 since the cached plan: planned again");
    return false;
  }
  return true;
}

/// The dynamic route's planning (setup_offload): the plan cache's plan when it still fits, else
/// planned with the ring reserved for what the plan streams. @p machine gives the machine for
/// the weights a plan keeps (machine_for with setup_offload's arguments).
template <class Planner, class PinSelector, class Machine>
void plan_streaming(offload_setup& r, const weight_table& table,
                    const std::vector<execution_group>& groups,
                    const dynamic_offload_config& config, const plan_patterns& patterns,
                    const plan_cache* plans, const Planner& planner, const PinSelector& pins,
                    Machine& machine, std::string& key) {
  const std::vector<char> rule_kept = rule_kept_weights(table, groups, config, patterns);
  std::vector<char> kept = rule_kept;
  r.machine = machine(kept);
  if (plans != nullptr) {
    const machine_ram& ram = r.machine.ram;
    const std::pair<std::string_view, std::uint64_t> budgets[] = {
        {"total_vram", r.machine.device.total_bytes},
        {"ring", r.machine.ring_bytes},
        {"engine_reserve", r.machine.engine_reserve_bytes},
        {"runtime_reserve", r.machine.runtime_reserve_bytes},
        {"ram", ram.source == ram_source::probed ? 0 : ram.bytes},
        {"profile", r.machine.capacity.profile_resident_budget_bytes.value_or(~0ull)},
        {"wsl", (r.machine.capacity.running_on_wsl ? 1u : 0u)},
        {"max_group", r.machine.capacity.max_group_bytes},
        {"zero_resident", r.machine.capacity.zero_resident_reason.empty() ? 0u : 1u},
        {"resident_limit", r.machine.capacity.resident_limit_bytes.value_or(~0ull)},
    };
    key =
        plan_cache_key(table, groups, config, policy_names(planner, typeid(PinSelector)), budgets);
    if (auto hit = plans->find(key); hit && cached_plan_fits(*hit, r.machine, r.notes)) {
      r.plan = std::move(*hit);
      r.plan_from_cache = true;
    }
  }
  // The ring (what streams) is reserved first from what the rules do not keep; again from the
  // plan's own streamed weights when they differ (demoted weights stream too; the budget kept
  // the largest groups), planning once more and taking a smaller ring only when the new plan
  // still fits it. A model the card holds whole (no ring at all) is planned that way first.
  auto reserve_for = [&](const offload_plan& plan) {
    for (std::size_t w = 0; w < table.size(); ++w)
      kept[w] = plan.decisions[w].where == placement::gpu_resident ? 1 : 0;
    return machine(kept);
  };
  if (r.plan_from_cache) {
    r.machine = reserve_for(r.plan);
    return;
  }
  if (table.total_bytes() <= r.machine.device.free_bytes) {
    offload_plan everything;  // no ring: what is resident when nothing has to stream
    everything.decisions.assign(table.size(), weight_decision{});
    auto m = reserve_for(everything);
    auto plan = make_plan_compiled(table, groups, config, m.capacity, patterns, planner, pins);
    m = reserve_for(plan);  // the ring of what that plan streams
    plan = make_plan_compiled(table, groups, config, m.capacity, patterns, planner, pins);
    if (streamed_ring_bytes(plan, table, r.runtime) <= m.ring_bytes) {
      r.machine = std::move(m);
      r.plan = std::move(plan);
      plan_smaller_rings(r, table, groups, config, patterns, rule_kept, planner, pins, machine);
      return;
    }
    kept = rule_kept;
  }
  plan_ring_and_residency(r, table, groups, config, patterns, rule_kept, planner, pins, machine,
                          reserve_for);
}

/// The dynamic_offload route's machine and plan (setup_offload) with the machine stage's inputs
/// @p in, through @p plans when the engine gave a plan cache and `cache_plan` is on. The shared
/// weight store's credit to the probed RAM (machine_inputs::ram) is every byte of this table it
/// holds; a plan that pins other weights would count those bytes as free RAM. So while the plan
/// pins fewer of them than it was credited, it is made again with the credit cut to those it
/// pins: each round credits less, and the third credits nothing (always right: then the plan's
/// new pinned bytes fit the RAM probed).
template <class Planner, class PinSelector, class Transport>
void plan_dynamic_offload(offload_setup& r, Transport& transport, const weight_table& table,
                          const std::vector<execution_group>& groups,
                          const dynamic_offload_config& config, machine_inputs in,
                          plan_cache* plans, const Planner& planner, const PinSelector& pins) {
  r.runtime.route = executed_route::dynamic_offload;
  if (!config.cache_plan) plans = nullptr;
  std::string key;
  // The patterns compiled and every weight's module name searched once for the whole setup:
  // it plans many times (the rings fitted, the smaller rings), and each plan's residency rules,
  // and each machine's window sizing, read the matches.
  plan_patterns patterns = compile_plan_patterns(config);
  match_rule_patterns(patterns, make_plan_context(table, config, machine_capacity{}, groups));
  in.patterns = &patterns;
  auto machine = [&](std::span<const char> kept, ring_floor floor = {}) {
    return machine_for(transport, table, groups, config, in, r.runtime, true, kept, floor);
  };
  for (int round = 0;; ++round) {
    r.plan_from_cache = false;
    plan_streaming(r, table, groups, config, patterns, plans, planner, pins, machine, key);
    if (r.machine.ram.store_credit_bytes == 0) break;
    const std::uint64_t taken = pinning_detail::shared_bytes_held(table, r.runtime, &r.plan);
    if (taken >= r.machine.ram.store_credit_bytes) break;
    cap_store_credit(in.ram, round < 1 ? taken : 0);
  }
  if (plans != nullptr && !r.plan_from_cache) plans->insert(std::move(key), r.plan);
}

}  // namespace detail

}  // namespace v0
}  // namespace ddo
