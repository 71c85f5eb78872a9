// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief What setup takes besides the settings, the weight table and the transport
/// (setup_options): the resolution inputs (setup_resolution) and the engine facts (engine_facts).
/// Part of the one setup path (setup/setup.hpp).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/core/log_sink.hpp"
#include "ddo/memory/pinned_weight_cache.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/setup/plan_cache.hpp"
#include "ddo/transport/host_sim.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The resolution inputs of a setup: what the entry points that resolve settings
/// themselves (enable_offload, enable_pipeline_offload, with_offload_backend) resolve from, and
/// the pipeline budgets that rank as explicit config from code. Read by the resolve stage only.
struct setup_resolution {
  /// Explicit config, overrides, TOML, environment, CLI, component policies, the component's
  /// name and explicit route. `preset` stays empty unless the engine names one (then DDO_PRESET
  /// no longer chooses).
  resolve_inputs inputs;
  /// enable_pipeline_offload: ddo's device bytes in any phase of the pipeline, shared by its
  /// components (each plans against it for its own phase; setup/pipeline_budget.hpp).
  /// 0: the setting pipeline_device_budget_gb decides (its default 0: not shared, each
  /// component plans against the device memory free at its setup). Ranks as explicit config
  /// from code: TOML, DDO_PIPELINE_DEVICE_BUDGET_GB and the flag win (pipeline_budgets_from).
  std::uint64_t pipeline_device_budget_bytes = 0;
  /// enable_pipeline_offload: page-locked weight bytes of all components together, split once
  /// in proportion to their weight bytes. 0: the setting pipeline_pinned_budget_gb decides
  /// (its default 0: each component's own pin budget). Ranks as above.
  std::uint64_t pipeline_pinned_budget_bytes = 0;
};

/// @brief The engine facts of a setup: what the engine states about its run and machine, and
/// the objects it lends. The machine, plan and start stages read these (each the fields it
/// needs); resolution reads none but `ram_bytes` (the auto preset decides on it).
struct engine_facts {
  /// The engine's execution groups; empty: inferred from `resident_module_patterns`.
  std::optional<std::vector<execution_group>> groups;
  /// Base runtime options (metrics, trace, ...); the config's runtime fields go on top.
  runtime_options runtime;
  /// The application's pinned-weight cache, used when `cache_pinned_weights` is on.
  pinned_weight_cache* pinned_cache = nullptr;
  /// The application's plan cache, used when `cache_plan` is on (null: plans every time).
  plan_cache* plans = nullptr;
  /// Device bytes the engine needs besides ddo's (activations, workspaces): left free by the plan.
  std::uint64_t reserve_device_bytes = 0;
  /// Device bytes a running offloader of this component holds and frees before it moves to the
  /// plan (set_device_budget, setup/device_budget.hpp): counted free, as at its setup.
  std::uint64_t device_held_bytes = 0;
  /// Available RAM the engine states for its machine; wins over detection unless
  /// `available_system_ram_gb` was set explicitly (config, TOML, environment, flag, component).
  std::optional<std::uint64_t> ram_bytes;
  /// Largest streamed bytes of one group the transport's slot/staging holds (0: unconstrained);
  /// a plan streaming more in one group is refused (machine_capacity::max_group_bytes).
  std::uint64_t max_group_bytes = 0;
  /// Not empty: plan nothing resident beyond the rules, for this reason (a pipeline phase that
  /// runs once uploads its residents again every phase), unless resident_module_budget_gb is set
  /// (machine_capacity::zero_resident_reason; the plan's source is "zero_resident").
  std::string zero_resident_reason;
  /// Options of a host_sim transport ddo makes itself (backend host_sim, or simulate_device).
  host_sim_options host_sim;
  /// The transports ddo makes (with_prepared_offload): host_sim stands in for the device, every
  /// route running over it (its VMM mode for the VMM routes, the file route over it): a machine
  /// without a GPU, planning for one.
  bool simulate_device = false;
  /// Caps the device memory of the transport ddo makes (an emulated smaller card; a simulated
  /// device's capacity too), whichever entry point makes it (setup_transport); 0: the device's.
  std::uint64_t device_limit_bytes = 0;
  /// Activation rows per step the engine runs, for a stored profile's group timings
  /// (by_profile_planner); 0: the profile's calibrated high token count.
  std::uint64_t tokens = 0;
  /// Where ddo writes the setup details (`verbose`) and the offloader its profile summary
  /// (`show_profile`): stderr by default; a FILE*, nullptr (silent) or the engine's logger
  /// (core/log_sink.hpp).
  log_sink log;
};

/// @brief Everything setup takes besides the settings, the table and the transport: the
/// resolution inputs and the engine facts, apart so that each stage reads only its side.
struct setup_options : setup_resolution, engine_facts {};

}  // namespace v0
}  // namespace ddo
