// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::origin: where a value came from (a default, the preset, the engine's code, a TOML
/// file, a variable, a flag, a component policy) or which check refused it (the engine's own
/// input, a transport), with canonical names. config_error names one; the config provenance
/// records one per field (config/provenance.hpp). In core/ so that every layer can throw.

#include <array>
#include <string_view>

#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The sources of a setting, lowest precedence first, then the two origins of a value no
/// setting source gave. `detected` is a default measured on this machine
/// (available_system_ram_gb from MemAvailable and the cgroup limit): like default_value it is
/// not a choice of the application, so a RAM the engine states outranks it.
enum class origin {
  default_value,  ///< the dataclass or operational default
  detected,       ///< measured on this machine
  preset,         ///< the effective preset
  config,         ///< explicit config from code (resolve_inputs::config, overrides)
  toml,           ///< a TOML file
  env,            ///< a DDO_* environment variable
  cli,            ///< a --ddo-* flag
  component,      ///< a component policy
  engine,         ///< the engine's own input besides settings (a module-kind override)
  transport,      ///< a transport's check at construction (VMM granularity, O_DIRECT)
};

template <>
struct enum_names<origin> {
  static constexpr std::array<std::string_view, 10> values = {
      "default", "detected", "preset",    "config", "toml",
      "env",     "cli",      "component", "engine", "transport"};
};

/// @brief "default", "detected", "preset", "config", "toml", "env", "cli", "component",
/// "engine" or "transport".
[[nodiscard]] constexpr std::string_view to_string(origin source) noexcept {
  return enum_name(source);
}

}  // namespace v0
}  // namespace ddo
