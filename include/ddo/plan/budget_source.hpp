// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::resident_budget_source and ddo::pin_budget_source: where a plan's two budgets came
/// from, with their canonical names (plan summaries, JSON and TOML forms).

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The rule that set the resident module budget (plan_budgets::resident_budget_source).
enum class resident_budget_source {
  none,                    ///< auto_budget_policy off and no resident_module_budget_gb
  explicit_budget,         ///< resident_module_budget_gb ("explicit")
  build_profile,           ///< zero-resident calibration for a capacity profile
  profile,                 ///< a stored capacity profile's recommendation
  balanced,                ///< derived from free VRAM (auto_budget_policy balanced)
  full_pin_zero_resident,  ///< the reference's full-pin zero-resident rule
  route_none,              ///< component route none: everything resident, nothing planned
  route_group_offload,     ///< component route diffusers_group_offload
  /// The setup path asked for nothing resident beyond the rules (machine_capacity::
  /// zero_resident_reason: a pipeline phase that runs once, where residents would be uploaded
  /// again every phase); an explicit resident_module_budget_gb still wins.
  zero_resident,
};

/// @brief The rule that set the pinned-host budget (plan_budgets::pin_budget_source).
enum class pin_budget_source {
  disabled,         ///< pin_cpu_memory off
  wsl,              ///< the WSL safety rule turned pinning off
  full_pin,         ///< every streamed weight (full pin, capacity profiles)
  explicit_budget,  ///< pin_weight_budget_gb ("explicit")
  ratio,            ///< pin_weight_budget_ratio of the streamed bytes
  automatic,        ///< every streamed weight that usable RAM allows ("auto")
  group_offload,    ///< the diffusers_group_offload route pins its streamed weights
  not_pinned,       ///< a route that streams from pageable memory
};

template <>
struct enum_names<resident_budget_source> {
  static constexpr std::array<std::string_view, 9> values = {
      "none",       "explicit",           "build_profile",
      "profile",    "balanced",           "full_pin_zero_resident",
      "route_none", "route_group_offload", "zero_resident"};
};
template <>
struct enum_names<pin_budget_source> {
  static constexpr std::array<std::string_view, 8> values = {
      "disabled", "wsl", "full_pin", "explicit", "ratio", "auto", "group_offload", "not_pinned"};
};

namespace detail {
inline constexpr const auto& resident_budget_source_names =
    enum_names<resident_budget_source>::values;
inline constexpr const auto& pin_budget_source_names = enum_names<pin_budget_source>::values;

template <class E, std::size_t N>
constexpr std::optional<E> parse_by_name(const std::array<std::string_view, N>& names,
                                         std::string_view name) noexcept {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}
}  // namespace detail

/// @brief "none", "explicit", "build_profile", "profile", "balanced", "full_pin_zero_resident",
/// "route_none", "route_group_offload" or "zero_resident".
[[nodiscard]] constexpr std::string_view to_string(resident_budget_source source) noexcept {
  return enum_name(source);
}

/// @brief "disabled", "wsl", "full_pin", "explicit", "ratio", "auto", "group_offload" or
/// "not_pinned".
[[nodiscard]] constexpr std::string_view to_string(pin_budget_source source) noexcept {
  return enum_name(source);
}

/// @brief The resident budget source named @p name (a canonical name), or nullopt.
[[nodiscard]] constexpr std::optional<resident_budget_source> parse_resident_budget_source(
    std::string_view name) noexcept {
  return detail::parse_by_name<resident_budget_source>(detail::resident_budget_source_names, name);
}

/// @brief The pin budget source named @p name (a canonical name), or nullopt.
[[nodiscard]] constexpr std::optional<pin_budget_source> parse_pin_budget_source(
    std::string_view name) noexcept {
  return detail::parse_by_name<pin_budget_source>(detail::pin_budget_source_names, name);
}

}  // namespace v0
}  // namespace ddo
