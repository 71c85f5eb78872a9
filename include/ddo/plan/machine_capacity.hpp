// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::machine_capacity: what the machine offers a plan (measured by the runtime, or
/// stated by `ddo-plan --vram-gb/--ram-gb` to inspect plans for other machines).

#include <cstdint>
#include <optional>
#include <string>

namespace ddo {
inline namespace v0 {

/// @brief The capacities a plan is made against. A value of 0 means "unknown": free VRAM 0
/// turns off the device-capacity checks and gives a balanced budget of 0; available RAM 0 (with
/// `available_system_ram_gb` unset) gives an automatic pin budget of 0.
struct machine_capacity {
  std::uint64_t free_vram_bytes = 0;      ///< free device memory now (cudaMemGetInfo)
  std::uint64_t total_vram_bytes = 0;     ///< device memory in total (for the model-to-VRAM ratio)
  std::uint64_t available_ram_bytes = 0;  ///< min(MemAvailable, cgroup limit - usage)
  /// available_ram_bytes is the RAM the plan uses over the config's `available_system_ram_gb`:
  /// the RAM the engine states for its machine (ddo-plan --ram-gb, a planning service describing
  /// another host), or the one figure the setup path resolved (setup/machine_inputs.hpp: set,
  /// stated or probed, in that order). A stated RAM outranks an `available_system_ram_gb` that
  /// resolution detected; only an explicitly set one outranks it. Set it by hand with
  /// ddo::state_available_ram (plan/plan_context.hpp), which applies that rule.
  bool available_ram_stated = false;
  bool running_on_wsl = false;            ///< the process runs under WSL
  /// Slot/staging size the transport offers for one execution group's streamed bytes;
  /// 0 = unconstrained.
  std::uint64_t max_group_bytes = 0;
  /// How max_group_bytes came about when setup grew a preset's size
  /// (plan_budgets::max_group_detail).
  std::string max_group_detail;
  /// The DDO_DISABLE_PIN_ON_WSL setting (default on): with running_on_wsl, nothing is pinned.
  bool disable_pin_on_wsl = true;
  /// The resident budget a stored capacity profile recommends for this workload on this device
  /// (profile/profile_lookup.hpp fills it from `profile_name`); empty when there is none.
  std::optional<std::uint64_t> profile_resident_budget_bytes;
  /// Device bytes every resident weight together may take, whatever the free VRAM (nullopt: no
  /// such limit): the VMM route's mapped budget less the ring's window slots
  /// (vmm_resident_weight_budget_gb holds the resident set and the window). Rule-resident weights
  /// the built-in patterns keep are demoted to fit it, and the resident budget is limited to what
  /// is left.
  std::optional<std::uint64_t> resident_limit_bytes;
  std::string resident_limit_reason;  ///< why resident_limit_bytes is set, for the plan's detail
  /// Not empty: the setup path asks for a zero resident budget (nothing resident beyond the
  /// rules) for this reason, over every budget rule but an explicit resident_module_budget_gb
  /// (resident_budget_source::zero_resident).
  std::string zero_resident_reason;
  /// Not empty: `max_resident_module_budget_gb` was not set by a source the user controls (this
  /// names where it came from: "default", "preset low_ram_safe"). A fixed size chosen for some
  /// card follows this one instead: the balanced budget is free VRAM less the headroom, uncapped,
  /// and the plan's detail says so (issue 38; docs/planning.md).
  std::string resident_cap_origin;
  /// The ring slot setup sized for this plan when it tries a smaller ring than the largest
  /// group needs (setup/plan_loop.hpp, issue 38): a group streaming more is kept resident first
  /// while the automatic budget holds it, so that the plan fits that ring. 0: no such slot.
  std::uint64_t ring_slot_bytes = 0;
  /// What took the device before the plan, for a refusal to name ("card 4.00 GiB: ring 3 x
  /// 648 MiB, engine reserve ..., ddo reserve ..."); empty when nothing was subtracted.
  std::string free_vram_detail;
  /// The device had no room left beside the ring and the reserves: free_vram_bytes is the 1 B
  /// that stands for "known and empty" (0 means unknown); the device_shortfall_bytes more were
  /// needed for the ring and reserves alone.
  std::uint64_t device_shortfall_bytes = 0;
  /// Pinned host-to-device and disk read rates (bytes/s) measured or stated for this machine;
  /// 0: the plan's step bound assumes plan/tier_bound.hpp's figures and says so.
  double bus_bytes_per_s = 0.0;
  double disk_bytes_per_s = 0.0;
};

}  // namespace v0
}  // namespace ddo
