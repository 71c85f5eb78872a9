// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The route of a transport with stable addresses (the VMM transports,
/// transport_with_stable_addresses): its window's slots from the device memory the plan saw,
/// the legacy route's staging buffers or the native route's settings, and the weights it maps.
/// The one setup path (setup/setup.hpp) calls it for those transports only.
///
/// The window holds as many slots as its budget allows, up to one per streamed group
/// (transport/detail/vmm_window.hpp). vmm_staging_buffer_gb is one of the legacy route's two
/// pinned staging buffers (--ddo-vmm-total-staging-gb splits the total over two): it must fit the
/// largest group. The native route (vmm_fast_runtime) stages through its registered windows
/// instead (runtime/native_vmm_options.hpp) and may own the whole component
/// (component_ownership.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/pattern.hpp"
#include "ddo/core/units.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/runtime/component_ownership.hpp"
#include "ddo/runtime/native_vmm_options.hpp"
#include "ddo/runtime/runtime_options.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The device memory the plan saw, as the window's sizing reads it (setup_machine).
struct window_room {
  std::uint64_t free_vram_bytes = 0;  ///< machine_capacity::free_vram_bytes (0: unknown)
  std::uint64_t slot_bytes = 0;       ///< one ring slot the plan reserved
  std::uint64_t ring_bytes = 0;       ///< the ring the plan reserved
  /// The legacy route's staging buffer as setup left it (grown from a preset's size to the
  /// largest group that may stream); 0: vmm_staging_buffer_gb as set.
  std::uint64_t staging_bytes = 0;
};

/// @brief Sets @p runtime (slot_count, staging, route, native options, mapped weights) for a
/// stable-address transport running @p plan; notes what it decided in @p notes. May rewrite
/// @p plan (vmm_component_tensor_ownership).
inline void configure_stable_address_route(runtime_options& runtime,
                                           std::vector<std::string>& notes, offload_plan& plan,
                                           const weight_table& table,
                                           const dynamic_offload_config& config,
                                           const window_room& room) {
  runtime.slot_count = std::max<std::size_t>(plan.groups.size(), 1);
  // ... but no more slots than the device memory the plan saw holds (its ring's share plus
  // what the plan left free), in whole 2 MiB pages: the window's physical memory is device
  // memory like the ring it replaces.
  std::uint64_t free = room.free_vram_bytes;
  // Under a device budget (an engine's cap, a pipeline phase's share) machine_for adds the
  // balanced rule's VRAM headroom to the card the plan sees, for the engine's memory on the
  // real card: the window's physical memory must stay inside the budget itself.
  if (runtime.device_budget_bytes != 0 && free > 1) {
    const std::uint64_t headroom = gib_to_bytes(config.auto_vram_headroom_gb);
    free = free > headroom ? free - headroom : 1;
  }
  const std::uint64_t slot = round_up(room.slot_bytes, 2 * mib);
  if (free > 1 && slot != 0) {
    const std::uint64_t resident = plan.total_bytes(placement::gpu_resident);
    const std::uint64_t holds =
        free + room.ring_bytes > resident ? free + room.ring_bytes - resident : 0;
    runtime.slot_count =
        std::min<std::size_t>(runtime.slot_count, std::max<std::uint64_t>(1, holds / slot));
  }
  if (native_vmm_selected(config)) {
    runtime.native_vmm = native_vmm_options_from(config);
    runtime.route = executed_route::vmm_fast_runtime;
    if (runtime.native_vmm.component_tensor_ownership) {
      const auto owned =
          apply_component_ownership(plan, table, runtime.native_vmm.component_buffer_limit_bytes);
      notes.push_back("vmm_component_tensor_ownership: " + std::to_string(owned.once_copied) +
                      " tensor(s) copied once (" + format_bytes(owned.once_copied_bytes) +
                      " of the " + format_bytes(runtime.native_vmm.component_buffer_limit_bytes) +
                      " limit), " + std::to_string(owned.mapped) + " mapped and streamed (" +
                      format_bytes(owned.mapped_bytes) + ")");
    }
  } else {
    const std::uint64_t staging = room.staging_bytes != 0
                                      ? room.staging_bytes
                                      : gib_to_bytes(config.vmm_staging_buffer_gb);
    if (staging > 0) runtime.staging_buffer_bytes = staging;
    if (config.execution_mode == exec_mode::vmm_runtime)
      runtime.route = executed_route::vmm_runtime;
  }
  // vmm_module_pattern selects the attachment units among the weights the route covers
  // (searched in each weight's module name, as the other module patterns); the rest keep
  // their planned placement. ".*" (the default) selects them all.
  if (!runtime.native_vmm.component_tensor_ownership &&
      config.vmm_module_pattern != ".*") {
    const pattern units(config.vmm_module_pattern);
    runtime.vmm_covered.assign(table.size(), 0);
    std::size_t coverable = 0, selected = 0;
    for (std::size_t w = 0; w < table.size(); ++w) {
      if (!vmm_covered_weight(table[w])) continue;
      ++coverable;
      if (units.search(table[w].module_name)) {
        runtime.vmm_covered[w] = 1;
        ++selected;
      }
    }
    notes.push_back("vmm_module_pattern '" + config.vmm_module_pattern +
                    "': " + std::to_string(selected) + " of " + std::to_string(coverable) +
                    " dense BF16/FP16 linear weights mapped at stable addresses; the others keep "
                    "their planned placement");
  }
}

}  // namespace v0
}  // namespace ddo
