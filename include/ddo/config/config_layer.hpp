// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::config_layer: what one config source contributes, before resolution merges the
/// layers in precedence order.

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddo/config/component_policy.hpp"
#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/field_value.hpp"
#include "ddo/config/provenance.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One field set by a source: the registry index, the parsed value, and where it came from.
struct field_assignment {
  std::size_t field = 0;  ///< index into config_fields()
  field_value value;      ///< already of the field's type (sources parse and check)
  field_origin where;     ///< source and key (variable, flag, file:key)
};

/// @brief A setting outside the config struct, with where it came from.
template <class T>
struct sourced {
  T value{};           ///< the value
  field_origin where;  ///< source and key
};

/// @brief Everything one source says. Every member is optional; the resolver takes each from the
/// highest-precedence layer that has it.
struct config_layer {
  origin source = origin::config;  ///< the source kind, for provenance
  /// A whole config given in code (DynamicOffloadConfig): it replaces the preset's config and the
  /// operational defaults, and bypasses the preset's component-route fallback (reference: "VAE
  /// component policy").
  std::optional<dynamic_offload_config> whole_config;
  std::vector<field_assignment> fields;                ///< fields this source sets
  std::optional<sourced<std::string>> preset;          ///< DDO_PRESET, --ddo-preset, TOML preset
  std::optional<sourced<bool>> plan;                   ///< DDO_PLAN
  std::optional<sourced<bool>> disable_pin_on_wsl;     ///< DDO_DISABLE_PIN_ON_WSL
  std::optional<sourced<double>> vmm_total_staging_gb;  ///< --ddo-vmm-total-staging-gb
  std::optional<std::string> profile_dir;              ///< DDO_PROFILE_DIR
  std::map<std::string, component_policy> components;  ///< per-component policies, by name
  std::map<std::string, bool> purge_windows_standby;   ///< phase (lower-case) → enabled
  std::vector<std::string> warnings;                   ///< for the program to print to stderr
};

}  // namespace v0
}  // namespace ddo
