// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::enum_names<E>: the one mechanism that names ddo's enums. Each enum specialises it
/// beside its declaration with its canonical names in declaration order; enum_name, parse_enum
/// and enum_values then print, parse and list every enum the same way (settings, plans, traces,
/// metrics, errors and docs). It sits in core/ so that every layer's enums can use it.

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

namespace ddo {
inline namespace v0 {

/// @brief The canonical names of enum @p E, indexed by its underlying value: a specialisation
/// has `static constexpr` `values` (a std::array of std::string_view, or a reference to one).
/// The primary template is deliberately undefined.
template <class E>
struct enum_names;

/// @brief The canonical name of @p value; empty for a value outside the enum's names.
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
