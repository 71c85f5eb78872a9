// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Config sources for what application code passes: ddo::explicit_source (preset, whole
/// config, field overrides, component policies) and ddo::layer_source (a layer built elsewhere,
/// e.g. by the TOML or command-line helpers).

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddo/config/closest_name.hpp"
#include "ddo/config/concepts.hpp"
#include "ddo/config/config_layer.hpp"
#include "ddo/config/field_override.hpp"
#include "ddo/config/field_registry.hpp"
#include "ddo/config/parse_value.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {
/// @brief @p o's value checked against its field (type, allowed values, and for a value given as
/// an enum, that it is the field's own enum), as normalize_field_value returns it.
/// @throws config_error naming the field, the value and what is allowed.
[[nodiscard]] inline field_value normalize_override(const field_override& o,
                                                    const field_origin& where) {
  if (field_index(o.field) >= field_count)
    throw config_error(where.source, where.key,
                       describe(where) + ": field_id " + std::to_string(field_index(o.field)) +
                           " is not a ddo setting (there are " + std::to_string(field_count) +
                           ")");
  const field_info& info = config_fields()[field_index(o.field)];
  const bool same_enum = info.allowed.data() == o.enum_vocabulary.data() &&
                         info.allowed.size() == o.enum_vocabulary.size();
  if (!o.enum_vocabulary.empty() && (info.type != field_type::choice || !same_enum))
    throw config_error(where.source, where.key,
                       describe(where) + " = " + std::get<std::string>(o.value) +
                           ": an enum value of another field's type; expected " +
                           (info.type == field_type::choice
                                ? "one of " + join_allowed(info.allowed)
                                : std::string(to_string(info.type))) +
                           " for " + std::string(info.name));
  return normalize_field_value(info, o.value, where);
}
}  // namespace detail

/// @brief What code passes explicitly (origin config; component policies rank as component).
struct explicit_source {
  using source_category = config_source_tag;  ///< opts in to ddo::config_source

  std::optional<std::string> preset;  ///< wins over DDO_PRESET; --ddo-preset wins over it
  /// A whole DynamicOffloadConfig: replaces the preset's config and from_env()'s operational
  /// defaults, and bypasses the preset's component-route fallback.
  std::optional<dynamic_offload_config> config;
  /// Individual fields (field_id, value), applied on top of the preset (provenance config); like
  /// a whole config they bypass the preset's component-route fallback (the reference's "runtime
  /// overrides").
  std::vector<field_override> overrides;
  std::optional<bool> plan;                ///< as DDO_PLAN, from code
  std::optional<bool> disable_pin_on_wsl;  ///< as DDO_DISABLE_PIN_ON_WSL, from code
  /// Per-component policies (route, group-offload parameters, config overrides).
  std::map<std::string, component_policy> component_policies;

  /// @brief The layer; throws config_error for a value of the wrong type or enum.
  [[nodiscard]] config_layer collect() const {
    config_layer layer;
    layer.source = origin::config;
    layer.whole_config = config;
    if (preset) layer.preset = sourced<std::string>{*preset, {origin::config, "preset"}};
    if (plan) layer.plan = sourced<bool>{*plan, {origin::config, "plan"}};
    if (disable_pin_on_wsl)
      layer.disable_pin_on_wsl = sourced<bool>{*disable_pin_on_wsl, {origin::config, "disable_pin_on_wsl"}};
    for (const auto& o : overrides) {
      const field_origin where{origin::config, std::string(to_string(o.field))};
      layer.fields.push_back({field_index(o.field), detail::normalize_override(o, where), where});
    }
    layer.components = component_policies;
    return layer;
  }

  /// @brief The names of all fields (for suggestions).
  [[nodiscard]] static std::vector<std::string_view> field_names() {
    std::vector<std::string_view> names;
    for (const auto& info : config_fields()) names.push_back(info.name);
    return names;
  }
};
static_assert(config_source<explicit_source>);

/// @brief A layer built elsewhere (read_toml_config, cli_config_layer) as a source.
struct layer_source {
  using source_category = config_source_tag;  ///< opts in to ddo::config_source
  config_layer layer;                           ///< returned as is
  /// @brief A copy of the layer.
  [[nodiscard]] config_layer collect() const { return layer; }
};
static_assert(config_source<layer_source>);

}  // namespace v0
}  // namespace ddo
