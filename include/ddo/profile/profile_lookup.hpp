// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Applying a stored capacity profile to planning: `profile_name` looked up in the
/// settings' profile directory fills machine_capacity::profile_resident_budget_bytes, which the
/// residency planner uses unless `resident_module_budget_gb` is explicit (plan/residency_planner.hpp).

#include <optional>
#include <string>
#include <string_view>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/plan/machine_capacity.hpp"
#include "ddo/profile/profile_store.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Looks up `config.profile_name` under @p profile_dir and, when a profile exists (and
/// this is not a calibration run), puts its recommendation into @p machine. A profile measured
/// on a device of another size is not applied (its numbers would not hold) and the returned
/// note says so.
/// @return a one-line note for the settings summary ("" when profile_name is empty).
/// @throws config_error for an invalid name; format_error / io_error for a bad profile file.
inline std::string apply_capacity_profile(machine_capacity& machine,
                                          const dynamic_offload_config& config,
                                          std::string_view profile_dir) {
  if (config.profile_name.empty()) return {};
  const profile_store store(profile_dir);
  if (config.build_profile)
    return "capacity profile '" + config.profile_name + "': calibrating (zero resident), will be saved to " +
           store.path_of(config.profile_name).string();
  const auto profile = store.find(config.profile_name);
  if (!profile)
    return "capacity profile '" + config.profile_name + "': none stored in " +
           store.directory().string() + " (run once with build_profile to calibrate)";
  if (machine.total_vram_bytes != 0 && profile->total_vram_bytes != machine.total_vram_bytes)
    return "capacity profile '" + config.profile_name + "': measured on a device with " +
           std::to_string(profile->total_vram_bytes) + " B, this one has " +
           std::to_string(machine.total_vram_bytes) + " B: not applied (calibrate again)";
  machine.profile_resident_budget_bytes = profile->recommended_resident_budget_bytes;
  return "capacity profile '" + config.profile_name + "': resident budget " +
         std::to_string(profile->recommended_resident_budget_bytes) + " B from " +
         store.path_of(config.profile_name).string();
}

}  // namespace v0
}  // namespace ddo
