// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::machine_capacity: what the machine offers a plan (measured by the runtime, or
/// stated by `ddo-plan --vram-gb/--ram-gb` to inspect plans for other machines).

#include <cstdint>
#include <optional>

namespace ddo {
inline namespace v0 {

/// @brief The capacities a plan is made against. A value of 0 means "unknown": free VRAM 0
/// turns off the device-capacity checks and gives a balanced budget of 0; available RAM 0 (with
/// `available_system_ram_gb` unset) gives an automatic pin budget of 0.
struct machine_capacity {
  std::uint64_t free_vram_bytes = 0;      ///< free device memory now (cudaMemGetInfo)
  std::uint64_t total_vram_bytes = 0;     ///< device memory in total (for the model-to-VRAM ratio)
  std::uint64_t available_ram_bytes = 0;  ///< min(MemAvailable, cgroup limit - usage)
  /// available_ram_bytes is the RAM the engine states for its machine (ddo-plan --ram-gb, a
  /// planning service describing another host), not a measurement here. A stated RAM outranks
  /// an `available_system_ram_gb` that resolution detected; only an explicitly set one outranks
  /// it. Set it with ddo::state_available_ram (plan/plan_context.hpp), which applies that rule.
  bool available_ram_stated = false;
  bool running_on_wsl = false;            ///< the process runs under WSL
  /// Slot/staging size the transport offers for one execution group's streamed bytes;
  /// 0 = unconstrained.
  std::uint64_t max_group_bytes = 0;
  /// The DDO_DISABLE_PIN_ON_WSL setting (default on): with running_on_wsl, nothing is pinned.
  bool disable_pin_on_wsl = true;
  /// The resident budget a stored capacity profile recommends for this workload on this device
  /// (profile/profile_lookup.hpp fills it from `profile_name`); empty when there is none.
  std::optional<std::uint64_t> profile_resident_budget_bytes;
};

}  // namespace v0
}  // namespace ddo
