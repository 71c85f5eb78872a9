// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Component routes (auto, dynamic_offload, diffusers_group_offload, none), their aliases,
/// the group-offload parameters, and a component's policy as code, TOML or the environment give it.

#include <array>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/config/field_override.hpp"
#include "ddo/config/field_value.hpp"
#include "ddo/config/provenance.hpp"
#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief How one component (transformer, text_encoder, vae, ...) is handled.
/// auto: the preset's choice for the component. dynamic_offload: ddo's planner and transport.
/// diffusers_group_offload: ddo's equivalent of Diffusers group offloading (whole blocks or
/// leaves moved as groups, no residency planning). none: no offload; the component stays where
/// the engine put it (the reference's standard CUDA placement).
enum class component_route { auto_select, dynamic_offload, diffusers_group_offload, none };

template <>
struct enum_names<component_route> {
  static constexpr std::array<std::string_view, 4> values = {"auto", "dynamic_offload",
                                                             "diffusers_group_offload", "none"};
};

/// @brief Canonical route name: "auto", "dynamic_offload", "diffusers_group_offload", "none".
[[nodiscard]] constexpr std::string_view to_string(component_route route) noexcept {
  return enum_name(route);
}

/// @brief Every accepted route spelling, canonical names first, then the reference's aliases
/// (dynamic/ddo, diffusers/group/group_offload, cuda/standard/off).
inline constexpr std::array<std::pair<std::string_view, component_route>, 12> route_spellings = {{
    {"auto", component_route::auto_select},
    {"dynamic_offload", component_route::dynamic_offload},
    {"diffusers_group_offload", component_route::diffusers_group_offload},
    {"none", component_route::none},
    {"dynamic", component_route::dynamic_offload},
    {"ddo", component_route::dynamic_offload},
    {"diffusers", component_route::diffusers_group_offload},
    {"group", component_route::diffusers_group_offload},
    {"group_offload", component_route::diffusers_group_offload},
    {"cuda", component_route::none},
    {"standard", component_route::none},
    {"off", component_route::none},
}};

/// @brief The route for a canonical name or alias (exact, lower-case); nullopt otherwise.
[[nodiscard]] constexpr std::optional<component_route> parse_route(std::string_view name) noexcept {
  for (const auto& [spelling, route] : route_spellings)
    if (spelling == name) return route;
  return std::nullopt;
}

/// @brief The allowed route spellings as one string, for error messages.
inline constexpr std::string_view route_choices =
    "auto, dynamic_offload, diffusers_group_offload, none (aliases: dynamic, ddo, diffusers, "
    "group, group_offload, cuda, standard, off)";

/// @brief Group-offload granularity: whole blocks (num_blocks_per_group at a time) or leaves.
enum class group_offload_type { block_level, leaf_level };

template <>
struct enum_names<group_offload_type> {
  static constexpr std::array<std::string_view, 2> values = {"block_level", "leaf_level"};
};

/// @brief "block_level" or "leaf_level".
[[nodiscard]] constexpr std::string_view to_string(group_offload_type type) noexcept {
  return enum_name(type);
}

/// @brief Parses "block_level" / "leaf_level"; nullopt otherwise.
[[nodiscard]] constexpr std::optional<group_offload_type> parse_group_offload_type(
    std::string_view name) noexcept {
  if (name == "block_level") return group_offload_type::block_level;
  if (name == "leaf_level") return group_offload_type::leaf_level;
  return std::nullopt;
}

/// @brief One component's policy as a source gives it: every member optional, so that layers
/// (TOML, environment, code) override member by member.
struct component_policy {
  std::optional<component_route> route;           ///< the route, if this source names one
  std::optional<bool> offload_stream;             ///< group offload: copy on a side stream
  std::optional<bool> offload_record_stream;      ///< group offload: record_stream semantics
  std::optional<group_offload_type> offload_type;  ///< block_level or leaf_level
  std::optional<bool> offload_low_cpu_mem_usage;  ///< group offload: pin per use, not up front
  std::optional<std::int64_t> num_blocks_per_group;  ///< block_level group size (positive)
  /// Config overrides for this component only (field_id, value); they outrank every other
  /// source for the component they name (provenance "component").
  std::vector<field_override> config;

  /// @brief Adds a config override for this component; the value is checked at resolution.
  /// @p value is anything a field_value is made from (true, 4, 1.5, a vector of strings) or the
  /// field's enum (selection::first). A template so that a translation unit that never calls it
  /// (every TU including the umbrella) does not compile the vector's insertion of a variant: 5%
  /// of the umbrella.
  template <class Value>
    requires std::constructible_from<field_override, field_id, Value&&>
  component_policy& set(field_id field, Value&& value) {
    config.emplace_back(field, std::forward<Value>(value));
    return *this;
  }
};

/// @brief A component's route and group-offload parameters after resolution.
struct resolved_component {
  std::string name;                                     ///< component name, as given
  component_route route = component_route::dynamic_offload;  ///< never auto_select
  bool offload_stream = false;                          ///< effective (WSL rule applied)
  bool offload_record_stream = false;                   ///< effective (WSL rule applied)
  group_offload_type offload_type = group_offload_type::block_level;
  bool offload_low_cpu_mem_usage = false;
  std::int64_t num_blocks_per_group = 1;
  field_origin route_origin;  ///< which source decided the route

  friend bool operator==(const resolved_component&, const resolved_component&) = default;
};

/// @brief The name a component has inside environment variables: upper-case, every character
/// that is not a letter or digit as '_' ("text_encoder" → "TEXT_ENCODER").
[[nodiscard]] inline std::string component_env_name(std::string_view component) {
  std::string out;
  for (char c : component) {
    const auto u = static_cast<unsigned char>(c);
    out.push_back((u >= 'a' && u <= 'z') ? static_cast<char>(u - 'a' + 'A')
                  : ((u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9')) ? c
                                                                        : '_');
  }
  return out;
}

}  // namespace v0
}  // namespace ddo
