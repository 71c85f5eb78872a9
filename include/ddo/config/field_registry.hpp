// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The field registry: one table describing every dynamic_offload_config field (name,
/// environment variable, flag, type, unit, allowed values, meaning). Every source, the validator,
/// the TOML printer and the docs read this table, so a field is described exactly once.

#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ddo/config/field_id.hpp"
#include "ddo/config/field_info.hpp"
#include "ddo/core/text.hpp"

#include "ddo/config/detail/field_registry_impl.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Every config field, in the order of dynamic_offload_config (and of the printed TOML).
[[nodiscard]] inline std::span<const field_info> config_fields() noexcept {
  return detail::field_table;
}

/// @brief The registry row of field @p id.
[[nodiscard]] inline const field_info& field(field_id id) noexcept {
  return detail::field_table[field_index(id)];
}

/// @brief The index of field @p name in config_fields(), or nullopt.
[[nodiscard]] inline std::optional<std::size_t> find_field(std::string_view name) noexcept {
  const auto fields = config_fields();
  for (std::size_t i = 0; i < fields.size(); ++i)
    if (fields[i].name == name) return i;
  return std::nullopt;
}

/// @brief The index of the field read from environment variable @p variable, or nullopt.
[[nodiscard]] inline std::optional<std::size_t> find_field_by_env(std::string_view variable) noexcept {
  const auto fields = config_fields();
  for (std::size_t i = 0; i < fields.size(); ++i)
    if (!fields[i].env.empty() && fields[i].env == variable) return i;
  return std::nullopt;
}

/// @brief The registry row of field @p name; throws std::out_of_range for an unknown name
/// (a programming error: names in code are the reference's).
[[nodiscard]] inline const field_info& field(std::string_view name) {
  const auto index = find_field(name);
  if (!index) throw std::out_of_range("ddo: no config field named '" + sanitize_utf8(name) + "'");
  return config_fields()[*index];
}

}  // namespace v0
}  // namespace ddo
