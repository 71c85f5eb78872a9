// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::field_status: whether a config field changes anything on this platform today.

#include <array>
#include <string_view>

#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The status of one config field (the registry's status column).
///
/// Every field is parsed, validated and printed; only `active` fields are read by the planner,
/// the runtime or the setup path. Setting a field of another status (from code, TOML, the
/// environment or a flag) adds a warning to dynamic_offload_settings::warnings that names the
/// field and the reason.
enum class field_status {
  active,                      ///< read by ddo: the value changes what it does
  no_effect_on_this_platform,  ///< meaningful on another platform only (Windows DXGI budgets)
  not_yet_implemented,         ///< read by a part of ddo that does not exist yet (the VMM route)
  single_value,                ///< one value accepted (validate refuses others), read by nothing
};

template <>
struct enum_names<field_status> {
  static constexpr std::array<std::string_view, 4> values = {
      "active", "no_effect_on_this_platform", "not_yet_implemented", "single_value"};
};

/// @brief "active", "no_effect_on_this_platform", "not_yet_implemented" or "single_value".
[[nodiscard]] constexpr std::string_view to_string(field_status status) noexcept {
  return enum_name(status);
}

}  // namespace v0
}  // namespace ddo
