// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Applying a stored capacity profile to planning: `profile_name` looked up in the
/// settings' profile directory fills machine_capacity::profile_resident_budget_bytes, which the
/// residency planner uses unless `resident_module_budget_gb` is explicit (plan/residency_planner.hpp).

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/error.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/machine_capacity.hpp"
#include "ddo/profile/model_fingerprint.hpp"
#include "ddo/profile/profile_store.hpp"
#include "ddo/profile/profile_timings.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Looks up `config.profile_name` under @p profile_dir and, when a profile exists (and
/// this is not a calibration run), puts its recommendation into @p machine. A profile measured
/// on another device (its total memory, or its name when @p device_name is given) or another
/// model (when @p table is given and the profile has a fingerprint) is not applied — its
/// numbers would not hold — and the returned note is a warning that says so.
/// @return a one-line note for the settings summary ("" when profile_name is empty).
/// @throws config_error for an invalid name; format_error / io_error for a bad profile file.
inline std::string apply_capacity_profile(machine_capacity& machine,
                                          const dynamic_offload_config& config,
                                          std::string_view profile_dir,
                                          const weight_table* table = nullptr,
                                          std::string_view device_name = {}) {
  if (config.profile_name.empty()) return {};
  const profile_store store(profile_dir);
  if (config.build_profile)
    return "capacity profile '" + config.profile_name + "': calibrating (zero resident), will be saved to " +
           store.path_of(config.profile_name).string();
  const auto profile = store.find(config.profile_name);
  if (!profile)
    return "capacity profile '" + config.profile_name + "': none stored in " +
           store.directory().string() + " (run once with build_profile to calibrate)";
  if (const auto why = profile_mismatch(
          *profile, table != nullptr && !profile->model_fingerprint.empty() ? model_fingerprint(*table) : "",
          device_name, machine.total_vram_bytes))
    return *why;
  machine.profile_resident_budget_bytes = profile->recommended_resident_budget_bytes;
  // The calibration's loads are the machine's measured rates for the plan's step bound
  // (plan/tier_bound.hpp): groups read from their file give the disk's, pinned ones the bus's.
  std::uint64_t file_bytes = 0, file_ns = 0, pinned_bytes = 0, pinned_ns = 0;
  for (const auto& g : profile->groups) {
    if (g.file_bytes != 0 && g.pinned_bytes == 0 && g.staged_bytes == 0) {
      file_bytes += g.file_bytes;
      file_ns += g.transfer_ns;
    } else if (g.pinned_bytes != 0 && g.file_bytes == 0 && g.staged_bytes == 0) {
      pinned_bytes += g.pinned_bytes;
      pinned_ns += g.transfer_ns;
    }
  }
  if (file_ns != 0) machine.disk_bytes_per_s = static_cast<double>(file_bytes) * 1e9 / file_ns;
  if (pinned_ns != 0)
    machine.bus_bytes_per_s = static_cast<double>(pinned_bytes) * 1e9 / pinned_ns;
  return "capacity profile '" + config.profile_name + "': resident budget " +
         std::to_string(profile->recommended_resident_budget_bytes) + " B from " +
         store.path_of(config.profile_name).string() +
         (profile->format < capacity_profile_format
              ? " (format " + std::to_string(profile->format) +
                    ": a budget only, no per-group timings; calibrate again for the overlap-aware "
                    "planner)"
              : "");
}

/// @brief A stored profile's group timings for one run, or why there are none.
struct stored_group_timings {
  capacity_profile profile;
  std::vector<group_timing> timings;  ///< empty: not applied (see note)
  std::uint64_t tokens = 0;           ///< the run's token count (0: the profile's calibrated high)
  std::string note;  ///< a warning (another device or model, extrapolated tokens), or ""
};

/// @brief The group timings of profile @p name under @p profile_dir for @p table on device
/// @p device_name ("" for a simulated device, which stands in for any) at @p tokens. A profile
/// of another model or device gives no timings and a warning.
/// @return nullopt when no profile @p name is stored.
/// @throws usage_error for a profile without group timings (format 1); format_error / io_error
/// for a bad profile file.
[[nodiscard]] inline std::optional<stored_group_timings> find_group_timings(
    std::string_view profile_dir, const std::string& name, const weight_table& table,
    std::string_view device_name, std::uint64_t tokens) {
  auto found = profile_store(profile_dir).find(name);
  if (!found) return std::nullopt;
  stored_group_timings out;
  out.profile = std::move(*found);
  out.tokens = tokens;
  if (const auto why = profile_mismatch(out.profile, model_fingerprint(table), device_name, 0)) {
    out.note = *why;
    return out;
  }
  out.timings = timings_at(out.profile, tokens, &out.note);
  return out;
}

/// @brief The timings the overlap-aware planner plans with when the settings name a stored
/// profile (`profile_name`, not calibrating): nullopt without profile_name, while calibrating,
/// or before the profile is stored. A format 1 profile (a budget only) or one of another device
/// or model gives a result without timings and a note (its budget still applies:
/// apply_capacity_profile).
[[nodiscard]] inline std::optional<stored_group_timings> stored_timings_for(
    const dynamic_offload_config& config, std::string_view profile_dir, const weight_table& table,
    std::string_view device_name, std::uint64_t tokens) {
  if (config.profile_name.empty() || config.build_profile) return std::nullopt;
  try {
    return find_group_timings(profile_dir, config.profile_name, table, device_name, tokens);
  } catch (const usage_error& e) {  // a format 1 profile: its budget still applies
    stored_group_timings t;
    t.note = std::string("note: ") + e.what();
    return t;
  }
}

}  // namespace v0
}  // namespace ddo
