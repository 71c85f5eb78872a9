// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The machine a plan sees (machine_for): device free/total from the transport (capped by
/// runtime_options::device_budget_bytes when the engine or a pipeline sets one), minus the slot
/// ring (runtime/device_footprint.hpp: the formula the runtime's budget check uses), minus the
/// engine's reserve (activations, workspaces: setup_options::reserve_device_bytes), minus
/// runtime_device_reserve_bytes (64 MiB); RAM stated by the engine or probed; a stored capacity
/// profile applied. Part of the one setup path (setup/setup.hpp).

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
#include "ddo/setup/options.hpp"
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
  std::uint64_t engine_reserve_bytes = 0;   ///< setup_options::reserve_device_bytes
  std::uint64_t runtime_reserve_bytes = 0;  ///< runtime_device_reserve_bytes (0 when unknown)
  std::string ram_source;  ///< "stated by the engine", "probed", "available_system_ram_gb (...)"
  /// Of capacity.available_ram_bytes, the bytes credited back for this table's weights a shared
  /// weight store holds already (probed RAM only): after planning, only those the plan pins.
  std::uint64_t store_credit_bytes = 0;
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

/// @brief The machine the plan sees (see the file comment).
/// @param groups the execution groups (any may stream: the ring is sized for the largest).
/// @param runtime the runtime options the plan will run with (slot_count, alignment).
/// @param ring whether the route streams at all (route none: no ring).
/// @param kept per weight, 1 for a weight that never streams (the residency rules keep it, or
/// the plan did): the ring holds only what streams, as the runtime's slots do. Empty: every
/// weight may stream.
template <class Transport>
[[nodiscard]] setup_machine machine_for(Transport& transport, const weight_table& table,
                                        std::span<const execution_group> groups,
                                        const dynamic_offload_settings& settings,
                                        const runtime_options& runtime,
                                        const setup_options& options, bool ring = true,
                                        std::span<const char> kept = {}) {
  setup_machine m;
  m.device = transport.device_memory();
  // A budget move plans as a fresh setup would: what the running offloader holds is free then.
  if (m.device.free_bytes != 0 && options.device_held_bytes != 0) {
    m.device.free_bytes = saturating_add(m.device.free_bytes, options.device_held_bytes);
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
    const std::uint64_t limit = saturating_add(runtime.device_budget_bytes,
                                               gib_to_bytes(settings.config.auto_vram_headroom_gb));
    m.device.free_bytes = cap(m.device.free_bytes, limit);
    m.device.total_bytes = cap(m.device.total_bytes, limit);
  }
  std::size_t streaming_groups = 0;
  for (const auto& g : groups) {
    std::vector<std::size_t> streamed;
    for (std::size_t w : g.weights)
      if (kept.empty() || !kept[w]) streamed.push_back(w);
    if (streamed.empty()) continue;
    ++streaming_groups;
    m.slot_bytes = std::max(m.slot_bytes, slot_bytes_for(table, streamed, runtime.alignment));
  }
  m.slots =
      ring ? std::min(runtime.slot_count, kept.empty() ? groups.size() : streaming_groups) : 0;
  m.ring_bytes = ring_bytes_for(m.slot_bytes, m.slots);
  m.engine_reserve_bytes = options.reserve_device_bytes;
  machine_capacity& c = m.capacity;
  c.total_vram_bytes = m.device.total_bytes;
  if (m.device.free_bytes != 0) detail::subtract_reserves(m);
  // A resident cap no source the user controls set was chosen for some card: it follows this one.
  if (const auto& cap = settings.provenance.of(field_id::max_resident_module_budget_gb);
      !set_explicitly(settings, field_id::max_resident_module_budget_gb))
    c.resident_cap_origin = cap.source == origin::preset ? "preset " + cap.key : "the default";
  // 0 asks for detection (the reference's "None"), also when an explicit config struct carries it.
  if (set_explicitly(settings, field_id::available_system_ram_gb) &&
      settings.config.available_system_ram_gb > 0.0) {
    m.ram_source = "available_system_ram_gb (" +
                   describe(settings.provenance.of(field_id::available_system_ram_gb)) + ")";
    c.available_ram_bytes = gib_to_bytes(settings.config.available_system_ram_gb);
  } else if (options.ram_bytes) {
    m.ram_source = "stated by the engine";
    c.available_ram_bytes = *options.ram_bytes;
  } else {
    m.ram_source = "probed";
    c.available_ram_bytes = available_ram_bytes(options.inputs.paths).value_or(0);
    // This table's weights already in a shared weight store are out of MemAvailable and a plan
    // that pins them reuses them: counted once, by the offloader that pinned them. All of them
    // here; setup_offload cuts the credit to those its plan pins (cap_store_credit).
    if (runtime.weight_store && c.available_ram_bytes != 0) {
      m.store_credit_bytes =
          detail::pinning_detail::store_bytes_held(*runtime.weight_store, table, runtime);
      c.available_ram_bytes += m.store_credit_bytes;
      m.ram_source += ", plus " + format_bytes(m.store_credit_bytes) +
                      " of its weights in the shared weight store";
    }
  }
  c.max_group_bytes = options.max_group_bytes;
  c.zero_resident_reason = options.zero_resident_reason;
  // The file route's slots and the VMM window (transport_with_window_sizing).
  if constexpr (transport_with_window_sizing<Transport>)
    detail::size_window(transport, c, table, groups, settings, ring, kept, m.slot_bytes, m.slots);
  c.running_on_wsl = settings.running_on_wsl;
  c.disable_pin_on_wsl = settings.disable_pin_on_wsl;
  // host_sim stands in for any device (ddo-plan --vram-gb plans for a GPU on it): a profile's
  // device name is checked on real devices only; its size is checked everywhere.
  const std::string device_name = transport_device_name(transport);
  m.profile_note = apply_capacity_profile(c, settings.config, settings.profile_dir, &table,
                                          device_name == "host_sim" ? "" : device_name);
  return m;
}

}  // namespace v0
}  // namespace ddo
