// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The kinds of module a weight belongs to (the reference's module classes). Vocabulary
/// shared by config/ (target_module_classes) and model/ (the weight table), so it sits below
/// both: config/ includes no model/ header.

#include <array>
#include <optional>
#include <string_view>

#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief What kind of module a weight belongs to. Decides eligibility for the dynamic runtime
/// (`target_module_classes`) and which built-in always-resident patterns apply.
enum class module_kind { linear, embedding, norm, conv, other };

template <>
struct enum_names<module_kind> {
  static constexpr std::array<std::string_view, 5> values = {"linear", "embedding", "norm", "conv",
                                                             "other"};
};

inline constexpr std::array<module_kind, 5> all_module_kinds = {
    module_kind::linear, module_kind::embedding, module_kind::norm, module_kind::conv,
    module_kind::other};

/// @brief Canonical lower-case name: "linear", "embedding", "norm", "conv", "other".
[[nodiscard]] constexpr std::string_view to_string(module_kind kind) noexcept {
  return enum_name(kind);
}

/// @brief Parses a canonical name; nullopt for anything else.
[[nodiscard]] constexpr std::optional<module_kind> parse_module_kind(std::string_view name) noexcept {
  return parse_enum<module_kind>(name);
}

}  // namespace v0
}  // namespace ddo
