// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The weight registry's budget from the settings (issue 42): the page-locked bytes the
/// whole process may hold for every model's host copies. `pinned_weight_cache_budget_gb` (ddo's
/// field) states it; 0 takes the reference's `system_ram_headroom_gb`, "RAM held back from auto
/// pinning decisions": the process's pinned bytes, all models together, stay below the
/// available RAM less that headroom. `pin_weight_budget_gb` is one plan's pinned bytes (one
/// model's), not the process's: it does not set the registry's budget.
///
/// Every setup that uses the process's registry (process_weight_registry) sets its budget from
/// its settings, so the budget follows the machine: less MemAvailable at the next setup evicts
/// the least recently used unused models. An engine's own registry keeps the budget the engine
/// gave it.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/units.hpp"
#include "ddo/memory/weight_registry.hpp"
#include "ddo/setup/machine_inputs.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The registry budget @p config gives on a machine with @p available_ram_bytes of RAM
/// (the engine's stated RAM, else MemAvailable with what the registry pins counted in):
/// `pinned_weight_cache_budget_gb` when set, else that RAM less `system_ram_headroom_gb` (0 when
/// the headroom takes it all).
[[nodiscard]] inline std::uint64_t registry_budget_bytes(const dynamic_offload_config& config,
                                                         std::uint64_t available_ram_bytes) {
  if (config.pinned_weight_cache_budget_gb > 0.0)
    return gib_to_bytes(config.pinned_weight_cache_budget_gb);
  const std::uint64_t headroom = gib_to_bytes(std::max(0.0, config.system_ram_headroom_gb));
  return available_ram_bytes > headroom ? available_ram_bytes - headroom : 0;
}

namespace detail {

/// Sets @p registry's budget from @p config and the setup's RAM @p ram (see the file comment);
/// a note says the budget, or why it stays: the RAM is unknown, or what the models in use or
/// kept hold is above it (registry_full's models to release named; the setup goes on, and its
/// own admission refuses it if it does not fit).
inline void apply_registry_budget(const dynamic_offload_config& config, const machine_ram& ram,
                                  weight_registry& registry, std::vector<std::string>& notes) {
  const std::uint64_t held = registry.pinned_bytes();
  // A probe's MemAvailable lacks what the registry pins (and the credit for this table's
  // pieces it holds, counted in again here): the registry's own bytes are its to budget.
  const std::uint64_t available =
      ram.source == ram_source::probed && ram.bytes != 0
          ? ram.bytes - std::min(ram.bytes, ram.store_credit_bytes) + held
          : ram.bytes;
  const bool stated = config.pinned_weight_cache_budget_gb > 0.0;
  if (!stated && available == 0) {
    notes.push_back("weight registry budget: the RAM is unknown; kept at " +
                    format_bytes(registry.budget()));
    return;
  }
  const std::uint64_t budget = registry_budget_bytes(config, available);
  const std::string why = stated ? "pinned_weight_cache_budget_gb"
                                 : "available RAM " + format_bytes(available) + " less " +
                                       "system_ram_headroom_gb";
  try {
    registry.set_budget(budget);
    notes.push_back("weight registry budget " + format_bytes(budget) + " (" + why + "), " +
                    format_bytes(registry.pinned_bytes()) + " pinned");
  } catch (const registry_full& e) {
    std::string names;
    for (const auto& m : e.models_to_release()) names += (names.empty() ? "" : ", ") + m;
    notes.push_back("weight registry budget kept at " + format_bytes(registry.budget()) + ": " +
                    why + " gives " + format_bytes(budget) + ", below what the models in use " +
                    "or kept hold (" + format_bytes(held) + "); release " + names);
  }
}

}  // namespace detail

}  // namespace v0
}  // namespace ddo
