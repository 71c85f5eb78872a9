// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::field_info: the shape of one row of the field registry (config/field_registry.hpp).

#include <concepts>
#include <span>
#include <string>
#include <string_view>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/field_id.hpp"
#include "ddo/config/field_status.hpp"
#include "ddo/config/field_value.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {
// Defined by the registry (config/detail/field_registry_impl.hpp), one switch over the fields.
template <class Config>
field_value read_field(const Config& config, field_id id);
template <class Config>
void write_field(Config& config, field_id id, const field_value& value);
}  // namespace detail

/// @brief The kind of value a field holds, which decides how text and TOML values are read.
enum class field_type {
  boolean,       ///< bool; the environment uses the reference's boolean rule
  integer,       ///< signed integer (worker counts)
  count,         ///< non-negative integer (`*_bytes`, `*_mb`, slot counts)
  real,          ///< non-negative real (`*_gb`, ratios of model to VRAM)
  ratio,         ///< real clamped to 0..1
  text,          ///< free string
  choice,        ///< one of `allowed` (an enum's canonical names)
  pattern_list,  ///< regex patterns; text form separated by ',' or ';'
  kind_list,     ///< module kinds (linear, embedding, norm, conv, other)
};

/// @brief "boolean", "integer", ... as error messages and docs say it.
[[nodiscard]] constexpr std::string_view to_string(field_type type) noexcept {
  switch (type) {
    case field_type::boolean: return "boolean";
    case field_type::integer: return "integer";
    case field_type::count: return "non-negative integer";
    case field_type::real: return "non-negative number";
    case field_type::ratio: return "number from 0.0 to 1.0";
    case field_type::text: return "string";
    case field_type::choice: return "string";
    case field_type::pattern_list: return "array of strings";
    case field_type::kind_list: return "array of strings";
  }
  return "value";
}

/// @brief One row of the registry.
struct field_info {
  std::string_view name;  ///< the reference's field name (TOML key, config member)
  field_type type;        ///< how values are read and checked
  /// The `DDO_*` variable, empty when the reference reads none ("Python only").
  std::string_view env;
  /// Multiplier from the variable's unit to the field's (DDO_SMALL_TENSOR_THRESHOLD_KB: 1024).
  double env_scale;
  /// Whether `--ddo-<name-with-dashes>` exists (every field with a variable, plus the two VMM
  /// component flags the reference names without one).
  bool has_flag;
  std::string_view unit;                      ///< "bytes", "GiB", "MiB", "" (for the docs)
  std::span<const std::string_view> allowed;  ///< canonical values of a choice, else empty
  std::string_view meaning;                   ///< one sentence for docs/configuration.md
  /// Whether the field changes anything here (see ddo::field_status); setting a field that is
  /// not active adds a warning to the settings.
  field_status status;
  std::string_view status_reason;  ///< why a field is not active, "" when it is
  field_id id;  ///< which member of dynamic_offload_config the row describes

  /// @brief Reads the field out of a config.
  /// get and set are templates so that a translation unit that only names fields (the
  /// umbrella's provenance, the planner's errors) compiles no reader or writer. The table used
  /// to hold one of each per field as function pointers, which made every TU including the
  /// registry instantiate all of them.
  template <std::same_as<dynamic_offload_config> Config>
  [[nodiscard]] field_value get(const Config& config) const {
    return detail::read_field(config, id);
  }
  /// @brief Writes a value of the right alternative into a config (the sources have checked it).
  template <std::same_as<dynamic_offload_config> Config>
  void set(Config& config, const field_value& value) const {
    detail::write_field(config, id, value);
  }

  /// @brief `--ddo-` + name with '_' as '-', or "" when the field has no flag.
  [[nodiscard]] std::string flag() const {
    if (!has_flag) return {};
    std::string out = "--ddo-";
    for (char c : name) out.push_back(c == '_' ? '-' : c);
    return out;
  }
};

}  // namespace v0
}  // namespace ddo
