// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Printing resolved settings as TOML ([settings], [config], [components.NAME],
/// [provenance]), as ddo-config prints them and the runner reuses. Needs no TOML library.

#include <charconv>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <string_view>
#include <variant>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/field_registry.hpp"

namespace ddo {
inline namespace v0 {

/// @brief @p text as a TOML basic string, quotes included.
[[nodiscard]] inline std::string toml_quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escape[8];
          std::snprintf(escape, sizeof escape, "\\u%04x", static_cast<unsigned>(c));
          out += escape;
        } else {
          out.push_back(c);
        }
    }
  }
  return out + "\"";
}

/// @brief @p value as a TOML float: the shortest text that reads back exactly, with a decimal
/// point (6.0, 0.625, 1e+20 → 1e+20).
[[nodiscard]] inline std::string toml_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return text;
}

/// @brief A field value as TOML.
[[nodiscard]] inline std::string toml_value(const field_value& value) {
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<std::int64_t>(&value)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&value)) return toml_float(*d);
  if (const auto* s = std::get_if<std::string>(&value)) return toml_quote(*s);
  std::string out = "[";
  const auto& items = std::get<std::vector<std::string>>(value);
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + toml_quote(items[i]);
  return out + "]";
}

/// @brief A TOML key: bare when it is made of letters, digits, '_' and '-', else quoted.
[[nodiscard]] inline std::string toml_key(std::string_view key) {
  bool bare = !key.empty();
  for (char c : key)
    bare = bare && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-');
  return bare ? std::string(key) : toml_quote(key);
}

/// @brief Writes @p settings as TOML: [settings] (the settings table), [config] (every field
/// under its reference name, in the unit its name says; enums canonical; lists as string
/// arrays; a field that is not active carries its status as a comment), [components.NAME] for
/// each resolved component, [provenance] (each field's source).
inline void write_settings_toml(std::ostream& out, const dynamic_offload_settings& settings) {
  const auto boolean = [](bool b) { return b ? "true" : "false"; };
  out << "[settings]\n"
      << "requested_preset = " << toml_quote(settings.requested_preset) << '\n'
      << "effective_preset = " << toml_quote(settings.effective_preset) << '\n'
      << "enabled = " << boolean(settings.enabled) << '\n'
      << "plan = " << boolean(settings.plan) << '\n'
      << "requested_pin_cpu_memory = " << boolean(settings.requested_pin_cpu_memory) << '\n'
      << "effective_pin_cpu_memory = " << boolean(settings.effective_pin_cpu_memory) << '\n'
      << "disable_pin_on_wsl = " << boolean(settings.disable_pin_on_wsl) << '\n'
      << "running_on_wsl = " << boolean(settings.running_on_wsl) << '\n';
  out << "\n[config]\n";
  for (const auto& info : config_fields()) {
    out << info.name << " = " << toml_value(info.get(settings.config));
    if (info.status != field_status::active) out << "  # " << to_string(info.status);
    out << '\n';
  }
  for (const auto& component : settings.components) {
    out << "\n[components." << toml_key(component.name) << "]\n"
        << "route = " << toml_quote(to_string(component.route)) << '\n'
        << "offload_stream = " << boolean(component.offload_stream) << '\n'
        << "offload_record_stream = " << boolean(component.offload_record_stream) << '\n'
        << "offload_type = " << toml_quote(to_string(component.offload_type)) << '\n'
        << "offload_low_cpu_mem_usage = " << boolean(component.offload_low_cpu_mem_usage) << '\n'
        << "num_blocks_per_group = " << component.num_blocks_per_group << '\n';
  }
  out << "\n[provenance]\n";
  const auto fields = config_fields();
  for (std::size_t i = 0; i < fields.size(); ++i)
    out << fields[i].name << " = " << toml_quote(to_string(settings.provenance.at(i).source))
        << '\n';
}

}  // namespace v0
}  // namespace ddo
