// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Canonical names of the config enums ("plan", "spread", "mmap", ...) and their parsing.
///
/// One table per enum, in declaration order, used by every source, the printer and the docs: the
/// specialisations of ddo::enum_names (core/enum_names.hpp, the mechanism) for the config enums
/// declared in dynamic_offload_config.hpp, field_id.hpp and preset_id.hpp.

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/field_id.hpp"
#include "ddo/config/preset_id.hpp"
#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief execution_mode values.
template <>
struct enum_names<exec_mode> {
  static constexpr std::array<std::string_view, 3> values = {"plan", "linear_runtime",
                                                             "vmm_runtime"};
};
/// @brief linear_runtime_strategy values.
template <>
struct enum_names<runtime_strategy> {
  static constexpr std::array<std::string_view, 2> values = {"functional", "swap"};
};
/// @brief pin_weight_selection / resident_module_selection values.
template <>
struct enum_names<selection> {
  static constexpr std::array<std::string_view, 3> values = {"first", "spread", "largest"};
};
/// @brief auto_budget_policy values.
template <>
struct enum_names<budget_policy> {
  static constexpr std::array<std::string_view, 2> values = {"off", "balanced"};
};
/// @brief backend values.
template <>
struct enum_names<offload_backend> {
  static constexpr std::array<std::string_view, 5> values = {"auto", "linear", "vmm", "nvme",
                                                             "host_sim"};
};

/// @brief Field names (config/field_id.hpp), so enum_name / parse_enum work on field_id too.
template <>
struct enum_names<field_id> {
  static constexpr const auto& values = field_id_names;
};
/// @brief Preset names (config/preset_id.hpp).
template <>
struct enum_names<preset_id> {
  static constexpr const auto& values = preset_id_names;
};

}  // namespace v0
}  // namespace ddo
