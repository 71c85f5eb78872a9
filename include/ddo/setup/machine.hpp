// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The machine a plan sees (machine_for): device free/total from the transport (capped by
/// runtime_options::device_budget_bytes when the engine or a pipeline sets one), minus the slot
/// ring (runtime/device_footprint.hpp: the formula the runtime's budget check uses), minus the
/// engine's reserve (activations, workspaces: engine_facts::reserve_device_bytes), minus
/// runtime_device_reserve_bytes (64 MiB); the RAM resolved once (setup/machine_inputs.hpp); a
/// stored capacity profile applied. Part of the one setup path (setup/setup.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/core/units.hpp"
#include "ddo/memory/shared_weight_store.hpp"
#include "ddo/memory/system_probe.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/profile/profile_lookup.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/device_footprint.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/runtime/transport_setup.hpp"
#include "ddo/setup/machine_inputs.hpp"
#include "ddo/setup/options.hpp"
#include "ddo/setup/streamed_groups.hpp"
#include "ddo/setup/window_sizing.hpp"
#include "ddo/transport/concepts.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The machine as the plan sees it, and how it was derived.
struct setup_machine {
  machine_capacity capacity;     ///< what make_plan gets
  device_memory_info device;     ///< free/total as the transport reported it (0: unknown),
                                 ///< capped by runtime_options::device_budget_bytes
  std::uint64_t slot_bytes = 0;  ///< one ring slot: the largest group, aligned
  std::size_t slots = 0;         ///< slots the plan leaves room for
  std::uint64_t ring_bytes = 0;  ///< ring_bytes_for(slot_bytes, slots)
  /// The transport maps each slot in whole 2 MiB pages (stable addresses: the VMM routes'
  /// window, stable_address_route.hpp), more than a slot below the groups' sizes counts: setup
  /// tries no trimmed rings there (a 509 KB trimmed slot took a 2 MiB page past a pipeline
  /// phase's share).
  bool whole_page_slots = false;
  std::uint64_t engine_reserve_bytes = 0;   ///< setup_options::reserve_device_bytes
  std::uint64_t runtime_reserve_bytes = 0;  ///< runtime_device_reserve_bytes (0 when unknown)
  /// The RAM the plan counts on (capacity.available_ram_bytes) and its source (ram_source; the
  /// shared weight store's credit: after planning, only what the plan pins); describe() says it.
  machine_ram ram;
  std::string profile_note;  ///< what the capacity-profile lookup did (empty: no profile_name)
};

namespace detail {
/// What the plan sees free of @p m's card: free less the ring and the reserves. 0 means
/// "unknown" to the planner (checks off), so a card they fill shows one byte, with by how much
/// they pass it and what they are, for a refusal to name (plan/device_room.hpp).
inline void subtract_reserves(setup_machine& m) {
  m.runtime_reserve_bytes = runtime_device_reserve_bytes;
  const std::uint64_t reserve = m.ring_bytes + m.engine_reserve_bytes + m.runtime_reserve_bytes;
  machine_capacity& c = m.capacity;
  c.free_vram_bytes = m.device.free_bytes > reserve ? m.device.free_bytes - reserve : 1;
  c.device_shortfall_bytes = m.device.free_bytes > reserve ? 0 : reserve - m.device.free_bytes + 1;
  c.free_vram_detail = "card " + format_bytes(m.device.free_bytes) + " free of " +
                       format_bytes(m.device.total_bytes) + ": ring " + std::to_string(m.slots) +
                       " x " + format_bytes(m.slot_bytes) + ", engine reserve " +
                       format_bytes(m.engine_reserve_bytes) + ", ddo reserve " +
                       format_bytes(m.runtime_reserve_bytes);
}
}  // namespace detail

/// @brief A ring slot set from outside: setup's trimmed rings (issue 38), where every group
/// streams at most the slot (those above it in part, the rest of them resident), so the ring
/// has slots of that size for @p streaming_groups groups, not only for the groups kept out of
/// it whole.
struct ring_floor {
  std::uint64_t slot_bytes = 0;       ///< 0: the ring follows what streams (kept)
  std::size_t streaming_groups = 0;  ///< the groups that stream any bytes
};

/// @brief The machine the plan sees (see the file comment).
/// @param groups the execution groups (any may stream: the ring is sized for the largest).
/// @param config the config the plan is made with (window sizing's rules, the capacity profile).
/// @param in what else it reads, worked out once per setup (machine_inputs_for: the RAM too).
/// @param runtime the runtime options the plan will run with (slot_count, alignment, a device
/// budget).
/// @param ring whether the route streams at all (route none: no ring).
/// @param kept per weight, 1 for a weight that never streams (the residency rules keep it, or
/// the plan did): the ring holds only what streams, as the runtime's slots do. Empty: every
/// weight may stream.
/// @param floor a slot set from outside (ring_floor), at least what @p kept streams.
template <class Transport>
[[nodiscard]] setup_machine machine_for(Transport& transport, const weight_table& table,
                                        std::span<const execution_group> groups,
                                        const dynamic_offload_config& config,
                                        const machine_inputs& in, const runtime_options& runtime,
                                        bool ring = true, std::span<const char> kept = {},
                                        ring_floor floor = {}) {
  setup_machine m;
  m.device = transport.device_memory();
  // A budget move plans as a fresh setup would: what the running offloader holds is free then.
  if (m.device.free_bytes != 0 && in.device_held_bytes != 0) {
    m.device.free_bytes = saturating_add(m.device.free_bytes, in.device_held_bytes);
    if (m.device.total_bytes != 0)
      m.device.free_bytes = std::min(m.device.free_bytes, m.device.total_bytes);
  }
  // A device budget (the engine's cap, or a pipeline phase's share of the shared budget) caps
  // the card the plan sees, so ddo's resident weights and ring stay inside it. The balanced
  // rule's VRAM headroom protects the engine's memory on the real card, not inside ddo's budget:
  // the free bytes seen are capped at budget + headroom, so the rule leaves the budget to ddo.
  if (runtime.device_budget_bytes != 0) {
    auto cap = [](std::uint64_t reported, std::uint64_t limit) {
      return reported == 0 ? limit : std::min(reported, limit);
    };
    const std::uint64_t limit =
        saturating_add(runtime.device_budget_bytes, gib_to_bytes(config.auto_vram_headroom_gb));
    m.device.free_bytes = cap(m.device.free_bytes, limit);
    m.device.total_bytes = cap(m.device.total_bytes, limit);
  }
  const auto streamed = streamed_per_group(table, groups, runtime.alignment,
                                           [&](std::size_t w) { return kept.empty() || !kept[w]; });
  m.slot_bytes = std::max(streamed.slot_bytes, round_up(floor.slot_bytes, runtime.alignment));
  const std::size_t streaming = floor.slot_bytes != 0 ? floor.streaming_groups
                                : kept.empty()        ? groups.size()
                                                      : streamed.streaming_groups;
  m.slots = ring ? std::min(runtime.slot_count, streaming) : 0;
  m.ring_bytes = ring_bytes_for(m.slot_bytes, m.slots);
  m.whole_page_slots = transport_with_stable_addresses<Transport>;
  m.engine_reserve_bytes = in.engine_reserve_bytes;
  machine_capacity& c = m.capacity;
  c.total_vram_bytes = m.device.total_bytes;
  if (m.device.free_bytes != 0) detail::subtract_reserves(m);
  c.resident_cap_origin = in.resident_cap_origin;
  // The RAM was resolved once (machine_inputs_for): the plan uses it over the config's figure.
  m.ram = in.ram;
  c.available_ram_bytes = m.ram.bytes;
  c.available_ram_stated = true;
  c.max_group_bytes = in.max_group_bytes;
  c.zero_resident_reason = in.zero_resident_reason;
  // The file route's slots and the VMM window (transport_with_window_sizing).
  if constexpr (transport_with_window_sizing<Transport>)
    detail::size_window(transport, c, table, groups, config, in.window, ring, kept, m.slot_bytes,
                        m.slots, in.patterns);
  c.running_on_wsl = in.running_on_wsl;
  c.disable_pin_on_wsl = in.disable_pin_on_wsl;
  // A simulated device (ddo-plan --vram-gb plans for a GPU on host_sim) stands in for any
  // device: a profile's device name is checked on real devices only; its size everywhere.
  std::string device_name;
  if constexpr (!transport_with_simulated_device<Transport>)
    device_name = transport_device_name(transport);
  m.profile_note = apply_capacity_profile(c, config, in.profile_dir, &table, device_name);
  return m;
}

}  // namespace v0
}  // namespace ddo
