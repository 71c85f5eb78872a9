// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::toml_source: a TOML file as a config source (toml++; this is the only ddo header
/// that includes it — link through ddo_toml_dep, which defines TOML_HEADER_ONLY=1).
///
/// Accepted layout (every key is checked; an unknown key is an error suggesting the closest):
///   field = value              config fields by their reference names, at top level or in [config]
///   preset = "auto"            the preset (also [settings] requested_preset)
///   plan / disable_pin_on_wsl  as DDO_PLAN / DDO_DISABLE_PIN_ON_WSL (top level or [settings])
///   [components.NAME]          route, offload_stream, offload_record_stream, offload_type,
///                              offload_low_cpu_mem_usage, num_blocks_per_group, and config fields
///                              that apply to that component only
/// ddo-config's own output reads back: its derived [settings] keys (effective_preset, enabled,
/// *_pin_cpu_memory, running_on_wsl) and its [provenance] table are accepted and ignored.

// toml++ 3.x checks some of its parser's states with assert(): a config file such as "[=x]"
// trips one (parse_key) and aborts the program, although the code after the assertion reports
// the input as invalid TOML. A config file is untrusted input, so the assertions are compiled
// out, as toml++ itself does under NDEBUG, and the parser's own error is what the user sees
// (found by fuzz/toml_config_fuzzer.cpp; the fuzzer runs this way under ASan and UBSan).
#ifndef TOML_ASSERT
#define TOML_ASSERT(expr) static_assert(true)
#endif
#include <toml++/toml.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/config/closest_name.hpp"
#include "ddo/config/concepts.hpp"
#include "ddo/config/config_layer.hpp"
#include "ddo/config/field_registry.hpp"
#include "ddo/config/parse_value.hpp"
#include "ddo/config/toml_limits.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/regular_file.hpp"
#include "ddo/core/text.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {

inline std::string toml_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::string: return "string";
    case toml::node_type::array: return "array";
    case toml::node_type::table: return "table";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "unknown";
  }
}

[[noreturn]] inline void toml_type_error(const std::string& key, const toml::node& node,
                                         std::string_view expected) {
  throw config_error(origin::toml, key,
                     "TOML key " + key + " has type " + toml_type_name(node) + "; expected " +
                         std::string(expected));
}

/// A TOML value as a field_value (checked against the field afterwards).
inline field_value toml_to_value(const toml::node& node, const std::string& key,
                                 std::string_view expected) {
  if (const auto* b = node.as_boolean()) return b->get();
  if (const auto* i = node.as_integer()) return static_cast<std::int64_t>(i->get());
  if (const auto* f = node.as_floating_point()) return f->get();
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* array = node.as_array()) {
    std::vector<std::string> items;
    for (const auto& element : *array) {
      const auto* text = element.as_string();
      if (!text)
        throw config_error(origin::toml, key,
                           "TOML key " + key + " is an array holding a " + toml_type_name(element) +
                               "; expected an array of strings");
      items.push_back(text->get());
    }
    return items;
  }
  toml_type_error(key, node, expected);
}

inline bool toml_bool(const toml::node& node, const std::string& key) {
  const auto* b = node.as_boolean();
  if (!b) toml_type_error(key, node, "a boolean");
  return b->get();
}

/// Where a TOML key is, for messages: `FILE:TABLE.KEY`, or `FILE:KEY` at the top level.
inline std::string toml_where(const std::string& file, std::string_view table,
                              std::string_view key) {
  return file + ":" + (table.empty() ? "" : std::string(table) + ".") + std::string(key);
}

inline void toml_unknown_key(const std::string& file, std::string_view table, std::string_view key,
                             const std::vector<std::string>& known) {
  const std::string where = toml_where(file, table, key);
  // A [ddo] table (or [dynamic_offload], as in other tools' files) is the common first guess:
  // say where the keys go.
  const bool wrapper = table.empty() && (key == "ddo" || key == "dynamic_offload");
  throw config_error(origin::toml, where,
                     "TOML key " + where + " is not a ddo setting" +
                         (wrapper ? std::string("; ddo's keys go at the top level of the file or "
                                                "under [config] (components under "
                                                "[components.NAME]), not under [") +
                                        std::string(key) + "]"
                                  : did_you_mean(closest_name(key, known))));
}

inline std::vector<std::string> field_name_list() {
  std::vector<std::string> names;
  for (const auto& info : config_fields()) names.emplace_back(info.name);
  return names;
}

inline void read_toml_field(config_layer& layer, const std::string& file, std::string_view table,
                            std::string_view key, const toml::node& node) {
  const auto index = find_field(key);
  const std::string where_key = toml_where(file, table, key);
  const field_info& info = config_fields()[*index];
  const field_origin where{origin::toml, where_key};
  for (const auto& earlier : layer.fields)
    if (earlier.field == *index)
      throw config_error(origin::toml, where_key,
                         "TOML sets " + std::string(info.name) + " twice: at " + earlier.where.key +
                             " and at " + where_key +
                             " (the top level and [config] are the same settings); keep one");
  const field_value raw = toml_to_value(node, where_key, to_string(info.type));
  layer.fields.push_back({*index, normalize_field_value(info, raw, where), where});
}

/// The policy of component @p name: the table `[components.NAME]`.
inline component_policy read_toml_component(const std::string& file, const std::string& name,
                                            const toml::node& table_node) {
  static constexpr std::string_view policy_keys[] = {
      "route", "offload_stream", "offload_record_stream", "offload_type",
      "offload_low_cpu_mem_usage", "num_blocks_per_group"};
  component_policy policy;
  const std::string prefix = "components." + name;
  const auto* table = table_node.as_table();
  if (!table) toml_type_error(file + ":" + prefix, table_node, "a table");
  for (const auto& [key_node, node] : *table) {
    const std::string_view key = key_node.str();
    const std::string where = toml_where(file, prefix, key);
    if (key == "route") {
      const auto* text = node.as_string();
      if (!text) toml_type_error(where, node, "a string");
      const auto route = parse_route(to_lower(trim(text->get())));
      if (!route)
        throw config_error(origin::toml, where,
                           "TOML key " + where + " = \"" + text->get() +
                               "\": not a valid value; expected " + std::string(route_choices));
      policy.route = *route;
    } else if (key == "offload_stream") {
      policy.offload_stream = toml_bool(node, where);
    } else if (key == "offload_record_stream") {
      policy.offload_record_stream = toml_bool(node, where);
    } else if (key == "offload_low_cpu_mem_usage") {
      policy.offload_low_cpu_mem_usage = toml_bool(node, where);
    } else if (key == "offload_type") {
      const auto* text = node.as_string();
      if (!text) toml_type_error(where, node, "a string");
      const auto type = parse_group_offload_type(text->get());
      if (!type)
        throw config_error(origin::toml, where,
                           "TOML key " + where + " = \"" + text->get() +
                               "\": not a valid value; expected \"block_level\" or \"leaf_level\"");
      policy.offload_type = *type;
    } else if (key == "num_blocks_per_group") {
      const auto* number = node.as_integer();
      if (!number) toml_type_error(where, node, "a positive integer");
      if (number->get() < 1)
        throw config_error(origin::toml, where,
                           "TOML key " + where + " = " + std::to_string(number->get()) +
                               ": not a valid value; expected a positive integer");
      policy.num_blocks_per_group = number->get();
    } else if (const auto index = find_field(key)) {
      const field_info& info = config_fields()[*index];
      const field_value raw = toml_to_value(node, where, to_string(info.type));
      policy.config.emplace_back(info.id,
                                 normalize_field_value(info, raw, {origin::toml, where}));
    } else {
      auto known = field_name_list();
      known.insert(known.end(), std::begin(policy_keys), std::end(policy_keys));
      toml_unknown_key(file, prefix, key, known);
    }
  }
  return policy;
}

}  // namespace detail

namespace detail {
/// toml++ up to 3.3 classifies some non-ASCII code points as whitespace through a lookup that
/// reaches TOML_UNREACHABLE (undefined behaviour) for code points in its "no match" buckets —
/// é (U+00E9) or U+FB30 at a token boundary is enough (found by fuzz/toml_config_fuzzer.cpp
/// under UBSan). This is the same predicate: true where that lookup would be undefined.
[[nodiscard]] constexpr bool tomlpp_whitespace_lookup_undefined(char32_t c) noexcept {
  if (c <= U'\xA0' || c >= U'\uFEFF' || c == U'\u3000') return false;
  const auto bucket = (static_cast<std::uint64_t>(c) - 0xA0ull) / 0x3FAull;
  if ((1ull << bucket) & 0x7FFFFFFFFFFFF75Eull) return false;
  return bucket != 0x05 && bucket != 0x07;
}

/// Refuses text toml++ would parse with undefined behaviour (see above), naming the character's
/// line and column. @throws config_error.
inline void refuse_tomlpp_unsafe_text(std::string_view text, const std::string& file) {
#if TOML_LIB_MAJOR < 3 || (TOML_LIB_MAJOR == 3 && TOML_LIB_MINOR <= 3)
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence_length(text, i);
    if (n == 0) return;  // invalid UTF-8: toml++ reports it
    char32_t c = static_cast<unsigned char>(text[i]);
    if (n > 1) {
      c &= (n == 2 ? 0x1Fu : n == 3 ? 0x0Fu : 0x07u);
      for (std::size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3Fu);
    }
    if (tomlpp_whitespace_lookup_undefined(c)) {
      char code[16];
      std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(c));
      throw config_error(origin::toml, file,
                         file + ":" + std::to_string(line) + ":" + std::to_string(column) +
                             ": the character " + code +
                             " cannot be read safely by the TOML "
                             "library ddo uses (toml++ 3.3 or older); remove it or "
                             "write it as a \\u escape inside a string");
    }
    if (c == U'\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += n;
  }
#else
  (void)text;
  (void)file;
#endif
}

[[nodiscard]] inline config_layer parse_toml_config_unsanitized(std::string_view text,
                                                                const std::string& file) {
  check_toml_limits(text, file);  // before toml++, which recurses once per level
  refuse_tomlpp_unsafe_text(text, file);
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(file));
  } catch (const toml::parse_error& error) {
    const auto& begin = error.source().begin;
    throw config_error(origin::toml, file,
                       file + ":" + std::to_string(begin.line) + ":" +
                           std::to_string(begin.column) +
                           ": invalid TOML: " + std::string(error.description()));
  }
  config_layer layer;
  layer.source = origin::toml;
  const auto read_setting = [&](std::string_view table, std::string_view key,
                                const toml::node& node) -> bool {
    const std::string where = detail::toml_where(file, table, key);
    const auto refuse_twice = [&](const auto& earlier, std::string_view name) {
      if (earlier)
        throw config_error(origin::toml, where,
                           "TOML sets " + std::string(name) + " twice: at " + earlier->where.key +
                               " and at " + where + "; keep one");
    };
    if (key == "preset" || (table == "settings" && key == "requested_preset")) {
      refuse_twice(layer.preset, "the preset");
      const auto* text = node.as_string();
      if (!text) detail::toml_type_error(where, node, "a string");
      layer.preset = sourced<std::string>{to_lower(trim(text->get())), {origin::toml, where}};
      return true;
    }
    if (key == "plan" || key == "disable_pin_on_wsl") {
      auto& flag = key == "plan" ? layer.plan : layer.disable_pin_on_wsl;
      refuse_twice(flag, key);
      flag = sourced<bool>{detail::toml_bool(node, where), {origin::toml, where}};
      return true;
    }
    return false;
  };
  for (const auto& [key_node, node] : root) {
    const std::string_view key = key_node.str();
    if (key == "config" || key == "settings" || key == "components" || key == "provenance") {
      const auto* table = node.as_table();
      if (!table) detail::toml_type_error(file + ":" + std::string(key), node, "a table");
      if (key == "provenance") continue;  // ddo-config output: informational
      for (const auto& [inner_node, inner] : *table) {
        const std::string_view inner_key = inner_node.str();
        if (key == "config") {
          if (!find_field(inner_key))
            detail::toml_unknown_key(file, key, inner_key, detail::field_name_list());
          detail::read_toml_field(layer, file, key, inner_key, inner);
        } else if (key == "settings") {
          if (read_setting(key, inner_key, inner)) continue;
          // The settings read above, then the derived values ddo-config prints (skipped).
          static constexpr std::string_view known[] = {
              "requested_preset",         "plan",          "disable_pin_on_wsl",
              "effective_preset",         "enabled",       "requested_pin_cpu_memory",
              "effective_pin_cpu_memory", "running_on_wsl"};
          if (std::find(known + 3, std::end(known), inner_key) == std::end(known))
            detail::toml_unknown_key(file, key, inner_key, {std::begin(known), std::end(known)});
        } else {
          const std::string name(inner_key);
          layer.components[name] = detail::read_toml_component(file, name, inner);
        }
      }
      continue;
    }
    if (read_setting({}, key, node)) continue;
    if (!find_field(key)) {
      auto known = detail::field_name_list();
      known.insert(known.end(),
                   {"preset", "plan", "disable_pin_on_wsl", "config", "settings", "components"});
      detail::toml_unknown_key(file, {}, key, known);
    }
    detail::read_toml_field(layer, file, {}, key, node);
  }
  return layer;
}
}  // namespace detail

/// @brief Reads TOML text @p text (named @p file in messages) into a layer (origin toml).
/// @throws config_error for a syntax error (file:line:column), an unknown key (with the closest
/// known key), a value of the wrong type (key, type seen, type expected) or a setting given
/// twice (top level and [config]), and for text beyond ddo's limits (check_toml_limits: dotted
/// parts, depth, entries, string length; refused before toml++ reads it). Messages are one line of
/// UTF-8: bytes from the file that are not (control characters, toml++'s quotes of them) are shown
/// as \xHH.
[[nodiscard]] inline config_layer parse_toml_config(std::string_view text, const std::string& file) {
  try {
    return detail::parse_toml_config_unsanitized(text, file);
  } catch (const config_error& e) {
    throw config_error(e.source(), sanitize_utf8(e.key()), sanitize_utf8(e.what()));
  }
}

/// @brief The largest TOML config file read (a config is a few KiB; this refuses `/dev/zero`-like
/// inputs and accidents such as a model file given as --config).
inline constexpr std::uint64_t max_toml_config_bytes = 4ull << 20;

/// @brief Reads TOML file @p path into a layer (see parse_toml_config).
/// @throws io_error when the file cannot be read, is not a regular file (a FIFO is refused
/// without blocking) or exceeds max_toml_config_bytes; config_error as parse_toml_config.
[[nodiscard]] inline config_layer read_toml_config(const std::string& path) {
  return parse_toml_config(read_regular_file(path, max_toml_config_bytes, "config file"), path);
}

/// @brief A TOML file as a config source (origin toml).
struct toml_source {
  using source_category = config_source_tag;  ///< opts in to ddo::config_source
  std::string path;                             ///< the file to read
  /// @brief Reads the file; throws as read_toml_config.
  [[nodiscard]] config_layer collect() const { return read_toml_config(path); }
};
static_assert(config_source<toml_source>);

}  // namespace v0
}  // namespace ddo
