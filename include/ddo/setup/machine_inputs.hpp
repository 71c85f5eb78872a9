// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The machine stage's inputs (machine_inputs): what machine_for reads besides the
/// transport, the table, the groups and the plan's config, worked out once per setup from the
/// settings' provenance and the engine facts (machine_inputs_for). The RAM among them is resolved
/// here once (machine_ram, with its source a ram_source): the plan's config keeps its resolved
/// value and the machine says which figure the plan uses. This is the seam between setup and the
/// planner: make_plan gets the table, the groups, the config and machine_for's capacity. Part of
/// the one setup path (setup/setup.hpp).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/provenance.hpp"
#include "ddo/core/enum_names.hpp"
#include "ddo/core/units.hpp"
#include "ddo/memory/shared_weight_store.hpp"
#include "ddo/memory/system_probe.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/runtime/transport_setup.hpp"
#include "ddo/setup/options.hpp"

namespace ddo {
inline namespace v0 {

struct plan_patterns;  // plan/plan_patterns.hpp: only a pointer here (machine_inputs::patterns)

/// @brief Where the RAM a plan counts on came from, in the order that decides it: an
/// `available_system_ram_gb` a source the user controls set (> 0), the engine's statement
/// (engine_facts::ram_bytes), or a probe of this host at setup.
enum class ram_source : std::uint8_t { setting, engine, probed };

template <>
struct enum_names<ram_source> {
  static constexpr std::array<std::string_view, 3> values{"setting", "engine", "probed"};
};

/// @brief The RAM of a setup: one value, resolved once (ram_for).
struct machine_ram {
  /// What the plan counts on (0: unknown, the automatic pin budget is 0); with the store credit.
  std::uint64_t bytes = 0;
  ram_source source = ram_source::probed;
  /// ram_source::setting: where `available_system_ram_gb` was set (provenance's describe()).
  std::string setting_origin;
  /// ram_source::probed: of `bytes`, those credited back for this table's weights a shared
  /// weight store holds already (out of MemAvailable, reused by a plan that pins them).
  std::uint64_t store_credit_bytes = 0;
  bool store_credited = false;  ///< a shared weight store was asked (probed RAM known)
  /// The credit was cut to the weights the plan pins (cap_store_credit).
  bool credit_cut = false;
};

/// @brief How @p ram came about, for the setup details and ddo-plan ("probed, plus 1.00 GiB of
/// its weights in the shared weight store").
[[nodiscard]] inline std::string describe(const machine_ram& ram) {
  switch (ram.source) {
    case ram_source::setting:
      return "available_system_ram_gb (" + ram.setting_origin + ")";
    case ram_source::engine:
      return "stated by the engine";
    case ram_source::probed:
      break;
  }
  std::string text = "probed";
  if (ram.store_credited)
    text += ", plus " + format_bytes(ram.store_credit_bytes) +
            " of its weights in the shared weight store" +
            (ram.credit_cut ? " (those the plan pins)" : "");
  return text;
}

/// @brief Cuts @p ram's shared-weight-store credit to @p cap bytes (those a plan pins).
inline void cap_store_credit(machine_ram& ram, std::uint64_t cap) {
  if (ram.store_credit_bytes <= cap) return;
  ram.bytes -= ram.store_credit_bytes - cap;
  ram.store_credit_bytes = cap;
  ram.credit_cut = true;
}

/// @brief The RAM of a setup: @p setting_gb when a source the user controls set it above 0
/// (@p setting_origin names it), else @p stated (the engine's), else probed through @p paths,
/// plus the bytes of @p table a shared weight store or weight registry (runtime_options) holds.
[[nodiscard]] inline machine_ram ram_for(std::optional<double> setting_gb,
                                         std::string setting_origin,
                                         std::optional<std::uint64_t> stated,
                                         const system_paths& paths, const weight_table& table,
                                         const runtime_options& runtime) {
  machine_ram ram;
  // 0 asks for detection (the reference's "None"), also when an explicit config carries it.
  if (setting_gb && *setting_gb > 0.0) {
    ram.source = ram_source::setting;
    ram.setting_origin = std::move(setting_origin);
    ram.bytes = gib_to_bytes(*setting_gb);
  } else if (stated) {
    ram.source = ram_source::engine;
    ram.bytes = *stated;
  } else {
    ram.bytes = available_ram_bytes(paths).value_or(0);
    // This table's weights already in a shared weight store are out of MemAvailable and a plan
    // that pins them reuses them: counted once, by the offloader that pinned them. All of them
    // here; the plan stage cuts the credit to those its plan pins (cap_store_credit).
    if (runtime.shared_host_copies() && ram.bytes != 0) {
      ram.store_credit_bytes = detail::pinning_detail::shared_bytes_held(table, runtime);
      ram.bytes += ram.store_credit_bytes;
      ram.store_credited = true;
    }
  }
  return ram;
}

/// @brief What size_window reads of the settings besides the config's values: whether the
/// staging size and the mapped budget were set by a source the user controls, and where.
struct window_provenance {
  bool staging_stated = false;  ///< vmm_staging_buffer_gb set explicitly
  std::string staging_origin;   ///< describe() of vmm_staging_buffer_gb's origin
  bool budget_given = false;    ///< vmm_resident_weight_budget_gb set explicitly
  std::string budget_origin;    ///< describe() of vmm_resident_weight_budget_gb's origin
};

/// @brief Everything machine_for reads besides the transport, table, groups, the plan's config
/// and the runtime options: the engine facts it needs and what the settings' provenance says.
struct machine_inputs {
  machine_ram ram;                         ///< resolved once (ram_for)
  std::uint64_t engine_reserve_bytes = 0;  ///< engine_facts::reserve_device_bytes
  std::uint64_t device_held_bytes = 0;     ///< engine_facts::device_held_bytes (a budget move)
  std::uint64_t max_group_bytes = 0;       ///< engine_facts::max_group_bytes
  std::string zero_resident_reason;        ///< engine_facts::zero_resident_reason
  /// Not empty: max_resident_module_budget_gb came from no source the user controls
  /// ("the default", "preset low_ram_safe"; machine_capacity::resident_cap_origin).
  std::string resident_cap_origin;
  bool running_on_wsl = false;
  bool disable_pin_on_wsl = true;
  window_provenance window;
  std::string profile_dir;  ///< where the capacity profiles are stored
  /// The config's patterns with this table's matches (match_weights), set by the setup that
  /// plans with them so that window sizing reads the residency rules' matches instead of
  /// searching again; nullptr: compiled and searched per machine.
  const plan_patterns* patterns = nullptr;
};

/// @brief The machine stage's inputs for a setup of @p table under @p settings with @p facts:
/// the one place the machine stage reads the settings' provenance; RAM probed (when neither set
/// nor stated) through @p paths.
[[nodiscard]] inline machine_inputs machine_inputs_for(const dynamic_offload_settings& settings,
                                                       const engine_facts& facts,
                                                       const system_paths& paths,
                                                       const weight_table& table,
                                                       const runtime_options& runtime) {
  const auto& p = settings.provenance;
  machine_inputs in;
  const bool ram_set = p.given(field_id::available_system_ram_gb);
  in.ram = ram_for(ram_set ? std::optional(settings.config.available_system_ram_gb) : std::nullopt,
                   describe(p.of(field_id::available_system_ram_gb)), facts.ram_bytes, paths, table,
                   runtime);
  in.engine_reserve_bytes = facts.reserve_device_bytes;
  in.device_held_bytes = facts.device_held_bytes;
  in.max_group_bytes = facts.max_group_bytes;
  in.zero_resident_reason = facts.zero_resident_reason;
  // A resident cap no source the user controls set was chosen for some card: it follows this one.
  if (const auto& cap = p.of(field_id::max_resident_module_budget_gb);
      !p.given(field_id::max_resident_module_budget_gb))
    in.resident_cap_origin = cap.source == origin::preset ? "preset " + cap.key : "the default";
  in.running_on_wsl = settings.running_on_wsl;
  in.disable_pin_on_wsl = settings.disable_pin_on_wsl;
  in.window.staging_stated = p.given(field_id::vmm_staging_buffer_gb);
  in.window.staging_origin = describe(p.of(field_id::vmm_staging_buffer_gb));
  in.window.budget_given = p.given(field_id::vmm_resident_weight_budget_gb);
  in.window.budget_origin = describe(p.of(field_id::vmm_resident_weight_budget_gb));
  in.profile_dir = settings.profile_dir;
  return in;
}

}  // namespace v0
}  // namespace ddo
