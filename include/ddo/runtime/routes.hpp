// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The component routes other than dynamic_offload, as plans the same runtime executes:
/// - `none`: every weight uploaded once (make_resident_plan), nothing streamed.
/// - `diffusers_group_offload`: the reference's Diffusers group offloading translated to ddo
///   (make_group_offload_plan + group_offload_runtime_options): no residency planning, every
///   weight streamed; block_level moves num_blocks_per_group consecutive numbered blocks as one
///   group (other execution groups stay on their own), leaf_level moves each module (weights sharing a module name) as its own group.
///
/// Translation of Diffusers' knobs (docs/policies.md has the table):
/// - use_stream=true: the copy runs on ddo's copy stream, prefetching one group ahead (a
///   two-slot ring); use_stream=false: the group is copied when acquired, no overlap.
/// - record_stream: Diffusers uses it to tell PyTorch's allocator the weights are in use on
///   the compute stream; ddo's lease release events always give that guarantee, so the flag
///   changes nothing (reported, never unsafe).
/// - low_cpu_mem_usage=true: no pinned copies are kept; weights are staged per use from the
///   engine's pageable memory through the pinned staging buffers (Diffusers re-pins per use).
///   false: weights are packed and page-locked up front when pinning is allowed.

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ddo/config/component_policy.hpp"
#include "ddo/core/error.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/runtime/runtime_options.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Diffusers group-offload parameters (from a resolved_component).
struct group_offload_options {
  group_offload_type offload_type = group_offload_type::block_level;
  std::int64_t num_blocks_per_group = 1;  ///< block_level only; ignored for leaf_level
  bool use_stream = true;
  bool record_stream = true;
  bool low_cpu_mem_usage = false;
};

/// @brief The group-offload parameters of a resolved component route.
[[nodiscard]] inline group_offload_options group_offload_options_from(const resolved_component& c) {
  group_offload_options o;
  o.offload_type = c.offload_type;
  o.num_blocks_per_group = c.num_blocks_per_group;
  o.use_stream = c.offload_stream;
  o.record_stream = c.offload_record_stream;
  o.low_cpu_mem_usage = c.offload_low_cpu_mem_usage;
  return o;
}

namespace detail {
inline void add_to_plan(offload_plan& plan, const weight_table& table, std::string name,
                        const std::vector<std::size_t>& weights, placement where, const char* reason) {
  plan_group pg;
  pg.name = std::move(name);
  const std::size_t g = plan.groups.size();
  for (std::size_t w : weights) {
    pg.weights.push_back(w);
    pg.bytes_by_placement[static_cast<std::size_t>(where)] += table[w].bytes;
    plan.decisions[w] = weight_decision{where, g, reason};
  }
  plan.groups.push_back(std::move(pg));
}
}  // namespace detail

/// @brief Route `none`: every weight resident, one group per execution group.
/// @throws usage_error for invalid groups (see validate_execution_groups).
[[nodiscard]] inline offload_plan make_resident_plan(const weight_table& table,
                                                     std::vector<execution_group> groups) {
  groups = validate_execution_groups(table, std::move(groups));
  offload_plan plan;
  plan.decisions.resize(table.size());
  for (const auto& g : groups)
    detail::add_to_plan(plan, table, g.name, g.weights, placement::gpu_resident, "route none");
  plan.budgets.resident_budget_bytes = plan.total_bytes(placement::gpu_resident);
  plan.budgets.resident_source = resident_budget_source::route_none;
  return plan;
}

/// @brief Route `diffusers_group_offload`: every weight streamed, grouped as Diffusers would.
/// @param blocks the execution groups in order (the blocks block_level merges).
/// @param pin whether weights may be page-locked (settings' effective pin_cpu_memory); with
/// low_cpu_mem_usage or without pinning, weights are staged per use.
/// @throws config_error when num_blocks_per_group < 1 for block_level.
[[nodiscard]] inline offload_plan make_group_offload_plan(const weight_table& table,
                                                          std::vector<execution_group> blocks,
                                                          const group_offload_options& options,
                                                          bool pin) {
  blocks = validate_execution_groups(table, std::move(blocks));
  const placement streamed = (pin && !options.low_cpu_mem_usage) ? placement::pinned_host
                                                                   : placement::pageable_host;
  auto where_of = [&](std::size_t w) {
    return std::holds_alternative<file_source>(table[w].source) && streamed == placement::pageable_host
               ? placement::file
               : streamed;
  };
  offload_plan plan;
  plan.decisions.resize(table.size());
  auto add = [&](std::string name, const std::vector<std::size_t>& weights) {
    plan_group pg;
    pg.name = std::move(name);
    const std::size_t g = plan.groups.size();
    for (std::size_t w : weights) {
      const placement where = where_of(w);
      pg.weights.push_back(w);
      pg.bytes_by_placement[static_cast<std::size_t>(where)] += table[w].bytes;
      plan.decisions[w] = weight_decision{where, g, "group offload " + std::string(to_string(options.offload_type))};
    }
    plan.groups.push_back(std::move(pg));
  };
  if (options.offload_type == group_offload_type::block_level) {
    if (options.num_blocks_per_group < 1)
      throw config_error(
          origin::component, "num_blocks_per_group",
          "num_blocks_per_group must be at least 1 for block_level group offload, got " +
              std::to_string(options.num_blocks_per_group));
    // Consecutive numbered blocks merge num_blocks_per_group at a time; other groups (the
    // modules before, between and after the blocks) stay groups of their own, as in Diffusers.
    const auto per = static_cast<std::size_t>(options.num_blocks_per_group);
    for (std::size_t b = 0; b < blocks.size();) {
      std::size_t end = b + 1;
      if (blocks[b].is_block)
        while (end < blocks.size() && end - b < per && blocks[end].is_block) ++end;
      std::vector<std::size_t> weights;
      std::string name = blocks[b].name;
      for (std::size_t k = b; k < end; ++k)
        weights.insert(weights.end(), blocks[k].weights.begin(), blocks[k].weights.end());
      if (end - b > 1) name += ".." + blocks[end - 1].name;
      add(std::move(name), weights);
      b = end;
    }
  } else {
    // leaf_level: one group per module, in execution order.
    for (const auto& block : blocks) {
      std::vector<std::string> order;
      std::unordered_map<std::string, std::vector<std::size_t>> by_module;
      for (std::size_t w : block.weights) {
        const auto& m = table[w].module_name;
        auto [it, fresh] = by_module.try_emplace(m);
        if (fresh) order.push_back(m);
        it->second.push_back(w);
      }
      for (const auto& m : order) add(m.empty() ? block.name : m, by_module[m]);
    }
  }
  plan.budgets.resident_source = resident_budget_source::route_group_offload;
  plan.budgets.pin_source = streamed == placement::pinned_host ? pin_budget_source::group_offload
                                                               : pin_budget_source::not_pinned;
  plan.budgets.pin_budget_bytes = plan.total_bytes(placement::pinned_host);
  return plan;
}

/// @brief Runtime options of the group-offload route: with a stream, a two-slot ring
/// prefetching one group ahead (Diffusers' overlap, without its host waits); without, one slot
/// loaded on acquire.
[[nodiscard]] inline runtime_options group_offload_runtime_options(const group_offload_options& o,
                                                                   runtime_options base = {}) {
  base.route = executed_route::diffusers_group_offload;
  if (o.use_stream) {
    base.slot_count = 2;
    base.prefetch_depth = 2;
  } else {
    base.slot_count = 1;
    base.prefetch_depth = 0;
  }
  return base;
}

}  // namespace v0
}  // namespace ddo
