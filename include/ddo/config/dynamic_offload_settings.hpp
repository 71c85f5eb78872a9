// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::dynamic_offload_settings: the resolved settings (the reference's settings table)
/// with the provenance of every config field, component routes and warnings.

#include <map>
#include <string>
#include <vector>

#include "ddo/config/component_policy.hpp"
#include "ddo/config/config_provenance.hpp"
#include "ddo/config/dynamic_offload_config.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The high-level resolved settings object: a plain value. Produced by
/// ddo::resolve_settings or ddo::settings_from_env (config/resolve.hpp, the resolver); most engines
/// only read it. The route of a component is ddo::resolve_component(settings, name).
struct dynamic_offload_settings {
  // --- the reference's settings table ------------------------------------------------------
  std::string requested_preset = "auto";    ///< preset requested by the caller or environment
  std::string effective_preset = "auto";    ///< preset after auto and platform resolution
  bool enabled = true;                      ///< whether ddo applies an offload route
  bool plan = false;                        ///< whether DDO_PLAN enabled the plan-mode route
  dynamic_offload_config config;            ///< the resolved config (pin_cpu_memory effective)
  bool requested_pin_cpu_memory = false;    ///< pinning choice before the WSL safety rule
  bool effective_pin_cpu_memory = false;    ///< pinning choice ddo uses
  bool disable_pin_on_wsl = true;           ///< whether WSL disables pinning automatically
  bool running_on_wsl = false;              ///< whether this process was detected as WSL
  /// Per-component route overrides given in code (highest precedence after an explicit route).
  std::map<std::string, component_policy> component_policies;

  // --- ddo additions -----------------------------------------------------------------------
  std::string preset_reason;           ///< why effective_preset was chosen
  config_provenance provenance;        ///< source of every config field
  /// Component policies from the TOML file and from the environment (DDO_<COMPONENT>_*), kept
  /// apart because they rank below code policies.
  std::map<std::string, component_policy> toml_component_policies;
  std::map<std::string, component_policy> env_component_policies;  ///< see above
  /// A whole config was given in code.
  bool explicit_config = false;
  /// A whole config or field overrides were given in code (the reference's "an explicit
  /// DynamicOffloadConfig, runtime overrides"): the preset's component-route fallback (the VAE's
  /// leaf route) is bypassed and the component gets dynamic_offload. Values from the
  /// environment, a TOML file or flags do not bypass it (docs/configuration.md).
  bool route_fallback_bypassed = false;
  /// DDO_PURGE_WINDOWS_STANDBY_<PHASE> values, by lower-case phase.
  std::map<std::string, bool> purge_windows_standby;
  std::string profile_dir;                     ///< DDO_PROFILE_DIR or ~/.ddo/profiles
  std::vector<resolved_component> components;  ///< routes of the components asked about
  std::vector<std::string> warnings;           ///< unknown variables, clamped ratios, ...
};

}  // namespace v0
}  // namespace ddo
