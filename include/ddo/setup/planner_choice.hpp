// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The residency planner of a run (planner_for): by profile, with the stored capacity
/// profile's group timings where they apply, or the engine's. Part of the one setup path
/// (setup/setup.hpp).

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/by_profile_planner.hpp"
#include "ddo/profile/profile_lookup.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/runtime/transport_setup.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {
template <class Planner>
inline constexpr bool is_by_profile_planner = false;
template <class Fallback>
inline constexpr bool is_by_profile_planner<by_profile_planner<Fallback>> = true;
}  // namespace detail

/// @brief The residency planner of this run: a by_profile_planner gets the group timings of the
/// stored capacity profile @p config names (`profile_name`, stored under @p profile_dir) when
/// they apply to @p table on @p transport's device at @p tokens (engine_facts::tokens), and says
/// which planner plans and why; any other planner is default-constructed.
/// @param runtime the runtime options the plan runs with (its ring: slot_count, prefetch_depth).
/// @param found set to the profile lookup (nullopt: no profile_name, calibrating, or none stored)
/// for a caller that reports it; untouched for other planners.
/// @throws format_error / io_error for a bad profile file.
template <class Planner, class Transport>
[[nodiscard]] Planner planner_for(const weight_table& table, const dynamic_offload_config& config,
                                  const std::string& profile_dir, std::uint64_t tokens,
                                  const runtime_options& runtime, const Transport& transport,
                                  std::optional<stored_group_timings>* found = nullptr) {
  Planner planner{};
  if constexpr (detail::is_by_profile_planner<Planner>) {
    // A simulated device stands in for any device: no name to check.
    std::string device;
    if constexpr (requires {
                    { transport.device() } -> std::convertible_to<int>;
                  })
      device = transport_device_name(transport);
    auto timings = stored_timings_for(config, profile_dir, table, device, tokens);
    if (timings && !timings->timings.empty()) {
      planner.overlap.emplace();
      planner.overlap->timings = timings->timings;
      planner.overlap->ring = {runtime.slot_count, runtime.prefetch_depth};
      planner.reason = "overlap-aware: capacity profile '" + config.profile_name +
                       "', group timings at " +
                       (tokens != 0 ? std::to_string(tokens) + " tokens"
                                    : std::string("its calibrated token count"));
    } else {
      planner.reason =
          config.profile_name.empty() ? "selection: no profile_name"
          : config.build_profile      ? "selection: calibrating"
          : !timings ? "selection: capacity profile '" + config.profile_name + "' not stored yet"
                     : "selection: capacity profile '" + config.profile_name +
                           "' has no group timings that apply here";
    }
    if (found != nullptr) *found = std::move(timings);
  }
  return planner;
}

}  // namespace v0
}  // namespace ddo
