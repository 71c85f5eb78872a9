// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief maybe_purge_windows_standby_cache: the reference's optional Windows lifecycle helper.
/// ddo targets Linux (and WSL): there it is a safe, reported no-op. It reads the resolved settings,
/// so it lives in config/ (platform/ sits below config/ and knows nothing of settings).

#include <optional>
#include <string>
#include <string_view>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/parse_value.hpp"

namespace ddo {
inline namespace v0 {

/// @brief What maybe_purge_windows_standby_cache did.
struct standby_purge_result {
  std::string phase;    ///< the phase name as given
  bool enabled = false;  ///< whether a purge was requested for this phase
  bool purged = false;   ///< whether the standby list was purged (never on Linux/WSL)
  std::string reason;   ///< why not (or "purged")
};

/// @brief Purges the Windows standby list at phase @p phase when enabled. Enabled is @p enabled
/// when given (an explicit flag wins, without touching the environment), else the settings'
/// DDO_PURGE_WINDOWS_STANDBY_<PHASE> value, else false. On Linux and WSL nothing is purged and
/// the reason says why; the call never fails.
[[nodiscard]] inline standby_purge_result maybe_purge_windows_standby_cache(
    std::string_view phase, const dynamic_offload_settings& settings,
    std::optional<bool> enabled = std::nullopt) {
  standby_purge_result result;
  result.phase = std::string(phase);
  if (enabled) {
    result.enabled = *enabled;
  } else if (const auto it = settings.purge_windows_standby.find(to_lower(phase));
             it != settings.purge_windows_standby.end()) {
    result.enabled = it->second;
  }
  if (!result.enabled) {
    result.reason = "disabled for this phase";
  } else if (settings.running_on_wsl) {
    result.reason =
        "running on WSL: the standby list belongs to the Windows host and cannot be purged from "
        "inside the Linux VM";
  } else {
    result.reason = "not Windows: the standby-list purge is Windows-only; nothing to do here";
  }
  return result;
}

}  // namespace v0
}  // namespace ddo
