// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Where a resolved value came from: default, preset, config, toml, env, cli or component.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The sources of a setting, lowest precedence first. `detected` is a default measured on
/// this machine (available_system_ram_gb from MemAvailable and the cgroup limit): like
/// default_value it is not a choice of the application, so a RAM the engine states outranks it.
enum class origin { default_value, detected, preset, config, toml, env, cli, component };

template <>
struct enum_names<origin> {
  static constexpr std::array<std::string_view, 8> values = {
      "default", "detected", "preset", "config", "toml", "env", "cli", "component"};
};

/// @brief "default", "detected", "preset", "config", "toml", "env", "cli" or "component".
[[nodiscard]] constexpr std::string_view to_string(origin source) noexcept {
  return enum_name(source);
}

/// @brief The origin of one value: the source, and the key within it (the `DDO_*` variable, the
/// `--ddo-*` flag, `file.toml:key`, the preset name, or `component NAME`).
struct field_origin {
  origin source = origin::default_value;  ///< which source set the value last
  std::string key;                        ///< the variable, flag, file key or preset name

  friend bool operator==(const field_origin&, const field_origin&) = default;
};

/// @brief How an error message names a source: "environment variable DDO_X", "flag --ddo-x",
/// "TOML key file:x", "preset auto", "explicit config field x", "component vae policy field x".
[[nodiscard]] inline std::string describe(const field_origin& where) {
  switch (where.source) {
    case origin::default_value: return "default of " + where.key;
    case origin::detected: return "detected " + where.key;
    case origin::preset: return "preset " + where.key;
    case origin::config: return "explicit config field " + where.key;
    case origin::toml: return "TOML key " + where.key;
    case origin::env: return "environment variable " + where.key;
    case origin::cli: return "flag " + where.key;
    case origin::component: return where.key;
  }
  return where.key;
}

}  // namespace v0
}  // namespace ddo
