// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::field_id: the identity of a config field as an enum, generated from the same list
/// as the field registry (config/detail/config_field_list.hpp), so the two cannot drift.

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "ddo/config/detail/config_field_list.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One enumerator per dynamic_offload_config field, named like the member, in the order
/// of the registry (`static_cast<std::size_t>(id)` is the index into ddo::config_fields()).
enum class field_id : std::size_t {
#define DDO_FIELD_ID_ENUMERATOR(member, ...) member,
  DDO_CONFIG_FIELDS(DDO_FIELD_ID_ENUMERATOR)
#undef DDO_FIELD_ID_ENUMERATOR
};

/// @brief The reference's name of every field, indexed by field_id.
inline constexpr std::array field_id_names = {
#define DDO_FIELD_ID_NAME(member, ...) std::string_view{#member},
    DDO_CONFIG_FIELDS(DDO_FIELD_ID_NAME)
#undef DDO_FIELD_ID_NAME
};

/// @brief Number of config fields.
inline constexpr std::size_t field_count = field_id_names.size();

/// @brief The index of @p id in ddo::config_fields().
[[nodiscard]] constexpr std::size_t field_index(field_id id) noexcept {
  return static_cast<std::size_t>(id);
}

/// @brief The reference's name of @p id ("pin_cpu_workers").
[[nodiscard]] constexpr std::string_view to_string(field_id id) noexcept {
  const std::size_t index = field_index(id);
  return index < field_count ? field_id_names[index] : std::string_view{};
}

/// @brief The field named @p name (exact match), or nullopt.
[[nodiscard]] constexpr std::optional<field_id> parse_field_id(std::string_view name) noexcept {
  for (std::size_t i = 0; i < field_count; ++i)
    if (field_id_names[i] == name) return static_cast<field_id>(i);
  return std::nullopt;
}

}  // namespace v0
}  // namespace ddo
