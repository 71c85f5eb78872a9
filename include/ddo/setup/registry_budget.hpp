// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The weight registry's budget from the settings (issue 42): the page-locked bytes the
/// whole process may hold for every model's host copies. The reference's
/// `system_ram_headroom_gb` is "RAM held back from auto pinning decisions": the process's
/// pinned bytes, all models together, stay below the available RAM less that headroom.
/// `pin_weight_budget_gb` is one plan's pinned bytes (one model's), not the process's: it does
/// not set the registry's budget.

#include <algorithm>
#include <cstdint>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/units.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The registry budget @p config gives on a machine with @p available_ram_bytes of RAM
/// (the engine's stated RAM, else MemAvailable): that RAM less `system_ram_headroom_gb`, 0 when
/// the headroom takes it all.
[[nodiscard]] inline std::uint64_t registry_budget_bytes(const dynamic_offload_config& config,
                                                         std::uint64_t available_ram_bytes) {
  const std::uint64_t headroom = gib_to_bytes(std::max(0.0, config.system_ram_headroom_gb));
  return available_ram_bytes > headroom ? available_ram_bytes - headroom : 0;
}

}  // namespace v0
}  // namespace ddo
