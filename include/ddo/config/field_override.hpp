// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::field_override: one config field set from code, keyed by ddo::field_id (a
/// misspelt field does not compile) with a typed value; an enum field takes its enum
/// (`{field_id::backend, offload_backend::nvme}`).

#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ddo/config/field_id.hpp"
#include "ddo/config/field_value.hpp"
#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief An enum with canonical names (a specialisation of ddo::enum_names).
template <class E>
concept named_enum = std::is_enum_v<E> && requires { enum_names<E>::values; };

/// @brief One field set from code (resolve_inputs::overrides, explicit_source::overrides,
/// component_policy::config). Resolution checks the value against the field's type and, for an
/// enum field, that an enum value is of that field's enum.
struct field_override {
  field_id field;     ///< which field
  field_value value;  ///< its value (an enum's canonical name for an enum value)
  /// The names of the enum @ref value was given as; empty when it was not given as an enum.
  std::span<const std::string_view> enum_vocabulary;

  /// @brief A value of any field_value alternative (true, std::int64_t{4}, 1.5, a string, a
  /// vector of strings).
  template <class Value>
    requires std::constructible_from<field_value, Value&&>
  field_override(field_id id, Value&& v) : field(id), value(std::forward<Value>(v)) {}

  /// @brief An enum value, kept as its canonical name (offload_backend::nvme: "nvme").
  template <named_enum E>
  field_override(field_id id, E v)
      : field(id), value(std::string(enum_name(v))), enum_vocabulary(enum_values<E>()) {}
};

}  // namespace v0
}  // namespace ddo
