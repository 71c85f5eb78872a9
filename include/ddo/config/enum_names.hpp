// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Canonical names of the config enums ("plan", "spread", "mmap", ...) and their parsing.
///
/// One table per enum, in declaration order, used by every source, the printer and the docs.

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/field_id.hpp"
#include "ddo/config/preset_id.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The canonical names of enum @p E, indexed by its underlying value. Specialised below
/// for every config enum; the primary template is deliberately undefined.
template <class E>
struct enum_names;

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
/// @brief load_safetensors_backend values ("" keeps the library default).
template <>
struct enum_names<safetensors_backend> {
  static constexpr std::array<std::string_view, 3> values = {"", "mmap", "pread"};
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

/// @brief The canonical name of @p value.
template <class E>
[[nodiscard]] constexpr std::string_view enum_name(E value) noexcept {
  const auto index = static_cast<std::size_t>(value);
  return index < enum_names<E>::values.size() ? enum_names<E>::values[index] : std::string_view{};
}

/// @brief Parses a canonical name (exact match); nullopt for anything else.
template <class E>
[[nodiscard]] constexpr std::optional<E> parse_enum(std::string_view name) noexcept {
  for (std::size_t i = 0; i < enum_names<E>::values.size(); ++i)
    if (enum_names<E>::values[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

/// @brief All canonical names of @p E, for error messages and docs.
template <class E>
[[nodiscard]] constexpr std::span<const std::string_view> enum_values() noexcept {
  return enum_names<E>::values;
}

}  // namespace v0
}  // namespace ddo
