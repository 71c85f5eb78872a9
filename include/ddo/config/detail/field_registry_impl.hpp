// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The registry table itself and the member accessors behind it. Not API: use
/// ddo::config_fields() from config/field_registry.hpp.

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "ddo/config/enum_names.hpp"
#include "ddo/config/field_id.hpp"
#include "ddo/config/field_info.hpp"
#include "ddo/core/module_kind.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

template <class T>
inline constexpr bool is_config_enum_v =
    std::is_same_v<T, exec_mode> || std::is_same_v<T, runtime_strategy> ||
    std::is_same_v<T, selection> || std::is_same_v<T, budget_policy> ||
    std::is_same_v<T, safetensors_backend> || std::is_same_v<T, offload_backend>;

template <class T>
field_value to_field_value(const T& member) {
  if constexpr (std::is_same_v<T, bool>) {
    return member;
  } else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, std::uint64_t>) {
    return static_cast<std::int64_t>(member);
  } else if constexpr (std::is_same_v<T, double>) {
    return member;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return member;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return member;
  } else if constexpr (std::is_same_v<T, std::vector<module_kind>>) {
    std::vector<std::string> names;
    for (module_kind kind : member) names.emplace_back(to_string(kind));
    return names;
  } else {
    static_assert(is_config_enum_v<T>, "ddo: config member of a type the registry cannot hold");
    return std::string(enum_name(member));
  }
}

// The sources parse and check values before they reach here, so a mismatch is a ddo bug; it is
// reported rather than ignored.
[[noreturn]] inline void field_value_mismatch() {
  throw std::logic_error("ddo: internal error: config value of the wrong type for its field");
}

template <class T>
void from_field_value(T& member, const field_value& value) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!std::holds_alternative<bool>(value)) field_value_mismatch();
    member = std::get<bool>(value);
  } else if constexpr (std::is_same_v<T, int>) {
    if (!std::holds_alternative<std::int64_t>(value)) field_value_mismatch();
    const auto v = std::get<std::int64_t>(value);
    member = static_cast<int>(std::clamp<std::int64_t>(v, std::numeric_limits<int>::min(),
                                                       std::numeric_limits<int>::max()));
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    if (!std::holds_alternative<std::int64_t>(value)) field_value_mismatch();
    const auto v = std::get<std::int64_t>(value);
    member = v < 0 ? 0 : static_cast<std::uint64_t>(v);
  } else if constexpr (std::is_same_v<T, double>) {
    if (std::holds_alternative<double>(value))
      member = std::get<double>(value);
    else if (std::holds_alternative<std::int64_t>(value))
      member = static_cast<double>(std::get<std::int64_t>(value));
    else
      field_value_mismatch();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!std::holds_alternative<std::string>(value)) field_value_mismatch();
    member = std::get<std::string>(value);
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    if (!std::holds_alternative<std::vector<std::string>>(value)) field_value_mismatch();
    member = std::get<std::vector<std::string>>(value);
  } else if constexpr (std::is_same_v<T, std::vector<module_kind>>) {
    if (!std::holds_alternative<std::vector<std::string>>(value)) field_value_mismatch();
    std::vector<module_kind> kinds;
    for (const auto& name : std::get<std::vector<std::string>>(value)) {
      const auto kind = parse_module_kind(name);
      if (!kind) field_value_mismatch();
      kinds.push_back(*kind);
    }
    member = std::move(kinds);
  } else {
    static_assert(is_config_enum_v<T>, "ddo: config member of a type the registry cannot hold");
    if (!std::holds_alternative<std::string>(value)) field_value_mismatch();
    const auto parsed = parse_enum<T>(std::get<std::string>(value));
    if (!parsed) field_value_mismatch();
    member = *parsed;
  }
}

template <class Config>
field_value read_field(const Config& config, field_id id) {
  switch (id) {
#define DDO_READ_FIELD(member, ...) \
  case field_id::member:            \
    return to_field_value(config.member);
    DDO_CONFIG_FIELDS(DDO_READ_FIELD)
#undef DDO_READ_FIELD
  }
  field_value_mismatch();
}

template <class Config>
void write_field(Config& config, field_id id, const field_value& value) {
  switch (id) {
#define DDO_WRITE_FIELD(member, ...)             \
  case field_id::member:                         \
    from_field_value(config.member, value);      \
    return;
    DDO_CONFIG_FIELDS(DDO_WRITE_FIELD)
#undef DDO_WRITE_FIELD
  }
  field_value_mismatch();
}

inline constexpr std::array<std::string_view, 5> module_kind_names = {"linear", "embedding", "norm",
                                                                      "conv", "other"};
inline constexpr std::span<const std::string_view> no_choices{};

inline constexpr std::string_view reason_vmm_pending =
    "not read by any VMM route of ddo yet (the older route's CPU-source registration cache and "
    "source-weight registration); the VMM routes read the other vmm_* fields "
    "(docs/transports.md)";
inline constexpr std::string_view reason_windows_only =
    "a Windows DXGI budget reserve; on Linux admission uses host RAM and the cgroup limit";

// One row per entry of DDO_CONFIG_FIELDS, the list field_id is generated from.
#define DDO_FIELD_ROW(member, type, env, scale, flag, unit, allowed, status, reason, meaning) \
  field_info{#member,                                                                     \
             field_type::type,                                                            \
             env,                                                                         \
             scale,                                                                       \
             flag,                                                                        \
             unit,                                                                        \
             allowed,                                                                     \
             meaning,                                                                     \
             field_status::status,                                                        \
             reason,                                                                      \
             field_id::member},

inline constexpr std::array field_table = {DDO_CONFIG_FIELDS(DDO_FIELD_ROW)};

#undef DDO_FIELD_ROW

static_assert(field_table.size() == field_count,
              "ddo: the registry and field_id expand the same list (config_field_list.hpp)");
static_assert(
    [] {
      for (std::size_t i = 0; i < field_table.size(); ++i)
        if (field_index(field_table[i].id) != i) return false;
      return true;
    }(),
    "ddo: row i of the registry describes field_id i");

}  // namespace detail
}  // namespace v0
}  // namespace ddo
