// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief make_plan_context: the context a planning run reads (plan/plan_context.hpp), built
/// from the groups. Apart from plan_context's type so that the policy concepts, and with them
/// ddo::offloader's policy list, do not bring group inference into every engine TU.

#include <cstddef>
#include <span>

#include "ddo/model/execution_groups.hpp"
#include "ddo/plan/plan_context.hpp"
#include "ddo/plan/plan_patterns.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The context planning runs in: @p groups of @p table (in execution order) with each
/// weight's group, the weights in execution order and each one's position in that order.
/// @p patterns: the config's patterns compiled once (nullptr: a planner compiles its own).
[[nodiscard]] inline plan_context make_plan_context(const weight_table& table,
                                                    const dynamic_offload_config& config,
                                                    const machine_capacity& machine,
                                                    std::span<const execution_group> groups,
                                                    const plan_patterns* patterns = nullptr) {
  plan_context context{table, config, machine, groups, group_of_weights(table, groups),
                       {},    {},     patterns};
  context.position.assign(table.size(), 0);
  context.execution_order.reserve(table.size());
  for (const auto& g : groups)
    for (std::size_t i : g.weights) {
      context.position[i] = context.execution_order.size();
      context.execution_order.push_back(i);
    }
  return context;
}

}  // namespace v0
}  // namespace ddo
