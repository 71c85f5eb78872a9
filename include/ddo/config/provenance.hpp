// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Where a resolved value came from (ddo::origin, core/origin.hpp) and how a message names
/// it.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/origin.hpp"

namespace ddo {
inline namespace v0 {

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
    case origin::engine: return "the engine's " + where.key;
    case origin::transport: return "transport check of " + where.key;
  }
  return where.key;
}

}  // namespace v0
}  // namespace ddo
