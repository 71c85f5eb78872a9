// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Implementation of ddo::env_source. Not API.

#include <unistd.h>

#include <optional>

#include "ddo/config/closest_name.hpp"
// Part of ddo/config/env_source.hpp, which includes it (not back: no include cycles).
#include "ddo/config/field_registry.hpp"
#include "ddo/config/parse_value.hpp"

extern char** environ;  // POSIX: declared by no standard header under strict C++

namespace ddo {
inline namespace v0 {
namespace detail {

struct component_variable {
  std::string component;  // lower-case
  std::string_view suffix;
  bool alias = false;  // DDO_RUNNER_<COMPONENT>_*
};

DDO_INLINE std::optional<component_variable> match_component_variable(std::string_view name) {
  if (name.rfind("DDO_", 0) != 0) return std::nullopt;
  for (std::string_view suffix : component_variable_suffixes) {
    if (name.size() < 4 + suffix.size() + 2) continue;
    if (name.substr(name.size() - suffix.size()) != suffix) continue;
    if (name[name.size() - suffix.size() - 1] != '_') continue;
    std::string_view middle = name.substr(4, name.size() - 4 - suffix.size() - 1);
    bool alias = false;
    if (middle.rfind("RUNNER_", 0) == 0 && middle.size() > 7) {
      middle.remove_prefix(7);
      alias = true;
    }
    if (middle.empty()) return std::nullopt;
    return component_variable{to_lower(middle), suffix, alias};
  }
  return std::nullopt;
}

DDO_INLINE std::vector<std::string> known_variable_names(std::string_view unknown) {
  std::vector<std::string> names;
  for (const auto& info : config_fields())
    if (!info.env.empty()) names.emplace_back(info.env);
  for (std::string_view name : settings_variables) names.emplace_back(name);
  // Per-component forms built from the unknown name's own leading words, so that
  // DDO_VAE_ROUT suggests DDO_VAE_ROUTE.
  std::vector<std::string_view> words;
  for (std::size_t start = 4, end; start <= unknown.size(); start = end + 1) {
    end = unknown.find('_', start);
    if (end == std::string_view::npos) end = unknown.size();
    words.push_back(unknown.substr(start, end - start));
  }
  std::string component;
  for (std::size_t k = 0; k + 1 < words.size(); ++k) {
    component += (k ? "_" : "") + std::string(words[k]);
    for (std::string_view suffix : component_variable_suffixes)
      names.push_back("DDO_" + component + "_" + std::string(suffix));
  }
  return names;
}

struct component_env_values {
  std::map<std::string_view, std::pair<std::string, std::string>> primary;  // suffix → (var, value)
  std::map<std::string_view, std::pair<std::string, std::string>> alias;
};

DDO_INLINE component_policy parse_component_env(const std::string& component,
                                                const component_env_values& values,
                                                std::vector<std::string>& warnings) {
  const auto pick = [&](std::string_view suffix)
      -> std::optional<std::pair<std::string, std::string>> {
    if (auto it = values.primary.find(suffix); it != values.primary.end()) return it->second;
    if (auto it = values.alias.find(suffix); it != values.alias.end()) return it->second;
    return std::nullopt;
  };
  const auto boolean = [&](std::string_view suffix) -> std::optional<bool> {
    const auto entry = pick(suffix);
    if (!entry) return std::nullopt;
    if (!is_boolean_spelling(entry->second))
      warnings.push_back("ddo: environment variable " + entry->first + " = \"" + entry->second +
                         "\" reads as false (true is 1, true, yes or on)");
    return env_truthy(entry->second);
  };
  const auto reject = [](const std::string& variable, const std::string& value,
                         std::string_view allowed) -> void {
    throw config_error(origin::env, variable,
                       "environment variable " + variable + " = \"" + value +
                           "\": not a valid value; expected " + std::string(allowed));
  };
  component_policy policy;
  if (const auto route = pick("ROUTE")) {
    const auto parsed = parse_route(to_lower(trim(route->second)));
    if (!parsed) reject(route->first, route->second, route_choices);
    policy.route = *parsed;
  } else {
    const auto group = boolean("GROUP_OFFLOAD");
    const auto dynamic = boolean("DYNAMIC_OFFLOAD");
    if (group.value_or(false) && dynamic.value_or(false))
      throw config_error(origin::env, "DDO_" + component_env_name(component) + "_GROUP_OFFLOAD",
                         "environment variables DDO_" + component_env_name(component) +
                             "_GROUP_OFFLOAD and DDO_" + component_env_name(component) +
                             "_DYNAMIC_OFFLOAD are both true: choose one route (or set DDO_" +
                             component_env_name(component) + "_ROUTE)");
    if (group.value_or(false)) policy.route = component_route::diffusers_group_offload;
    if (dynamic.value_or(false)) policy.route = component_route::dynamic_offload;
  }
  policy.offload_stream = boolean("OFFLOAD_STREAM");
  policy.offload_record_stream = boolean("OFFLOAD_RECORD_STREAM");
  policy.offload_low_cpu_mem_usage = boolean("OFFLOAD_LOW_CPU_MEM_USAGE");
  if (const auto type = pick("OFFLOAD_TYPE")) {
    const auto parsed = parse_group_offload_type(to_lower(trim(type->second)));
    if (!parsed) reject(type->first, type->second, "\"block_level\" or \"leaf_level\"");
    policy.offload_type = *parsed;
  }
  if (const auto blocks = pick("NUM_BLOCKS_PER_GROUP")) {
    const auto parsed = parse_integer(blocks->second);
    if (!parsed || *parsed < 1) reject(blocks->first, blocks->second, "a positive integer");
    policy.num_blocks_per_group = *parsed;
  }
  return policy;
}

/// Why ddo ignores each of the reference's bootstrap variables (nullopt: not one of them).
inline std::optional<std::string_view> ignored_bootstrap_reason(std::string_view name) {
  if (name == "DDO_VMM_LIBRARY_PATH")
    return "ddo loads no native library before CUDA starts (it is compiled into the engine and "
           "calls the CUDA driver through the runtime's entry points)";
  if (name == "DDO_VMM_TORCH_CACHE_MIB")
    return "ddo has no PyTorch allocator, so there is no allocator cache to size";
  if (name == "DDO_VMM_ALLOCATOR_ROOT") return "ddo needs no host-harness checkout";
  return std::nullopt;
}

}  // namespace detail

DDO_INLINE config_layer env_source::collect() const {
  config_layer layer;
  layer.source = origin::env;
  std::map<std::string, detail::component_env_values> components;
  for (const auto& [name, value] : variables) {
    if (name.rfind("DDO_", 0) != 0) continue;
    const field_origin where{origin::env, name};
    if (const auto index = find_field_by_env(name)) {
      const field_info& info = config_fields()[*index];
      const bool empty = trim(value).empty();
      // An empty value means "unset" for numbers and for choices that have no empty spelling;
      // booleans follow the reference's rule (empty is false), lists and strings keep it.
      if (empty && (info.type == field_type::integer || info.type == field_type::count ||
                    info.type == field_type::real || info.type == field_type::ratio ||
                    (info.type == field_type::choice &&
                     std::find(info.allowed.begin(), info.allowed.end(), "") == info.allowed.end())))
        continue;
      if (info.type == field_type::boolean && !is_boolean_spelling(value))
        layer.warnings.push_back("ddo: environment variable " + name + " = \"" + value +
                                 "\" reads as false (true is 1, true, yes or on)");
      layer.fields.push_back({*index, parse_field_text(info, value, where), where});
      continue;
    }
    if (name == "DDO_SAFETENSORS_BACKEND") {
      if (variables.count("DDO_LOAD_SAFETENSORS_BACKEND")) continue;  // the main name wins
      const auto id = field_id::load_safetensors_backend;
      layer.fields.push_back({field_index(id), parse_field_text(field(id), value, where), where});
      continue;
    }
    if (name == "DDO_PRESET") {
      const std::string preset = to_lower(trim(value));
      if (!preset.empty()) layer.preset = sourced<std::string>{preset, where};
      continue;
    }
    if (name == "DDO_PLAN" || name == "DDO_DISABLE_PIN_ON_WSL") {
      if (!is_boolean_spelling(value))
        layer.warnings.push_back("ddo: environment variable " + name + " = \"" + value +
                                 "\" reads as false (true is 1, true, yes or on)");
      (name == "DDO_PLAN" ? layer.plan : layer.disable_pin_on_wsl) =
          sourced<bool>{env_truthy(value), where};
      continue;
    }
    if (name == "DDO_PROFILE_DIR") {
      if (!trim(value).empty()) layer.profile_dir = value;
      continue;
    }
    if (name.rfind(purge_variable_prefix, 0) == 0 && name.size() > purge_variable_prefix.size()) {
      layer.purge_windows_standby[to_lower(name.substr(purge_variable_prefix.size()))] =
          env_truthy(value);
      continue;
    }
    if (const auto reason = detail::ignored_bootstrap_reason(name)) {
      // The reference's bootstrap controls of its Python native library: recognised (no
      // "unknown variable" warning), ignored, and said so once, so nobody tunes a knob that
      // does nothing here.
      if (!trim(value).empty())
        layer.warnings.push_back("ddo: note: environment variable " + name +
                                 " is recognised and ignored: " + std::string(*reason));
      continue;
    }
    if (std::find(settings_variables.begin(), settings_variables.end(), name) !=
        settings_variables.end())
      continue;  // bootstrap controls: recognized, used by process setup only
    if (const auto component = detail::match_component_variable(name)) {
      auto& slot = component->alias ? components[component->component].alias
                                    : components[component->component].primary;
      slot[component->suffix] = {name, value};
      continue;
    }
    const std::string suggestion = closest_name(name, detail::known_variable_names(name));
    layer.warnings.push_back("ddo: unknown environment variable " + name + " ignored" +
                             (suggestion.empty() ? std::string()
                                                 : "; did you mean " + suggestion + "?"));
  }
  for (const auto& [component, values] : components)
    layer.components[component] = detail::parse_component_env(component, values, layer.warnings);
  return layer;
}

DDO_INLINE std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> variables;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    if (text.rfind("DDO_", 0) != 0) continue;
    const auto equals = text.find('=');
    if (equals == std::string_view::npos) continue;
    variables.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return variables;
}

}  // namespace v0
}  // namespace ddo
