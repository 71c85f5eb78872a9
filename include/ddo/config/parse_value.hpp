// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Reading text (an environment variable or a flag) into a field_value, by the registry.
///
/// The environment's boolean rule is the reference's: 1, true, yes, on (any case) are true and
/// everything else, including an empty value, is false. Flags are stricter: a value that is not
/// one of 1/true/yes/on/0/false/no/off is an error, since a typed flag has no legacy to keep.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/config/field_registry.hpp"
#include "ddo/config/provenance.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/text.hpp"

namespace ddo {
inline namespace v0 {

/// @brief @p text without leading and trailing ASCII whitespace.
[[nodiscard]] inline std::string_view trim(std::string_view text) noexcept {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

/// @brief ASCII lower-case copy of @p text.
[[nodiscard]] inline std::string to_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// @brief The reference's boolean rule: true for 1, true, yes, on (case-insensitive, trimmed);
/// false for everything else, including "" and typos.
[[nodiscard]] inline bool env_truthy(std::string_view text) {
  const std::string value = to_lower(trim(text));
  return value == "1" || value == "true" || value == "yes" || value == "on";
}

/// @brief Whether @p text is one of the spellings the boolean rule knows (true or false ones).
[[nodiscard]] inline bool is_boolean_spelling(std::string_view text) {
  const std::string value = to_lower(trim(text));
  return env_truthy(value) || value.empty() || value == "0" || value == "false" || value == "no" ||
         value == "off";
}

/// @brief Splits a pattern list on ',' and ';', trimming each item and dropping empty ones.
[[nodiscard]] inline std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ',' || text[i] == ';') {
      const auto item = trim(text.substr(start, i - start));
      if (!item.empty()) items.emplace_back(item);
      start = i + 1;
    }
  }
  return items;
}

/// @brief "a, b or c" (quoted values) for error messages.
[[nodiscard]] inline std::string join_allowed(std::span<const std::string_view> allowed) {
  std::string out;
  for (std::size_t i = 0; i < allowed.size(); ++i) {
    if (i > 0) out += i + 1 == allowed.size() ? " or " : ", ";
    // Appended piece by piece: `"literal" + std::string` trips g++ 12's -Wrestrict at -O3.
    out += '"';
    out += allowed[i];
    out += '"';
  }
  return out;
}

/// @brief The one-line message of a rejected value:
/// `<where>: "<seen>" is not allowed for <field>; expected <allowed>`.
[[nodiscard]] inline std::string rejected_value_message(const field_origin& where,
                                                        std::string_view field_name,
                                                        std::string_view seen,
                                                        std::string_view allowed) {
  // The value may be any bytes (an environment variable): shown sanitized (ddo/core/text.hpp).
  std::string message = describe(where) + " = \"" + sanitize_utf8(seen) + "\": not a valid value";
  if (where.key != field_name) message += " for " + std::string(field_name);
  message += "; expected " + std::string(allowed);
  return message;
}

[[noreturn]] inline void throw_rejected(const field_origin& where, std::string_view field_name,
                                        std::string_view seen, std::string_view allowed) {
  throw config_error(where.source, where.key,
                     rejected_value_message(where, field_name, seen, allowed));
}

/// @brief Parses a whole decimal integer; nullopt if @p text is anything else.
[[nodiscard]] inline std::optional<std::int64_t> parse_integer(std::string_view text) noexcept {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

/// @brief Parses a finite decimal number; nullopt if @p text is anything else.
[[nodiscard]] inline std::optional<double> parse_real(std::string_view text) noexcept {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
    return std::nullopt;
  return value;
}

/// @brief Reads @p text for @p info as source @p where says (environment booleans follow the
/// reference's rule; everything else is strict).
/// @throws config_error naming the variable or flag, the value seen and what is allowed.
[[nodiscard]] inline field_value parse_field_text(const field_info& info, std::string_view text,
                                                  const field_origin& where) {
  const double scale = where.source == origin::env ? info.env_scale : 1.0;
  switch (info.type) {
    case field_type::boolean: {
      if (where.source == origin::env) return env_truthy(text);
      const std::string value = to_lower(trim(text));
      if (env_truthy(value)) return true;
      if (value == "0" || value == "false" || value == "no" || value == "off") return false;
      throw_rejected(where, info.name, text, "true or false (1/0, yes/no, on/off)");
    }
    case field_type::integer: {
      // Integer fields are ints (worker counts): anything beyond that range is a typo.
      const auto value = parse_integer(text);
      if (!value || *value < std::numeric_limits<int>::min() ||
          *value > std::numeric_limits<int>::max())
        throw_rejected(where, info.name, text, "an integer (at most 2147483647)");
      return *value;
    }
    case field_type::count: {
      if (scale != 1.0) {
        const auto value = parse_real(text);
        // Bounded so the conversion to a 64-bit count is defined.
        if (!value || *value < 0 || *value * scale >= 9.0e18)
          throw_rejected(where, info.name, text, "a non-negative number");
        return static_cast<std::int64_t>(std::llround(*value * scale));
      }
      const auto value = parse_integer(text);
      if (!value || *value < 0) throw_rejected(where, info.name, text, "a non-negative integer");
      return *value;
    }
    case field_type::real: {
      const auto value = parse_real(text);
      if (!value || *value < 0) throw_rejected(where, info.name, text, "a non-negative number");
      return *value * scale;
    }
    case field_type::ratio: {
      const auto value = parse_real(text);
      if (!value) throw_rejected(where, info.name, text, "a number from 0.0 to 1.0");
      return *value;
    }
    case field_type::text: return std::string(text);
    case field_type::choice: {
      const std::string value = to_lower(trim(text));
      for (std::string_view allowed : info.allowed)
        if (allowed == value) return value;
      throw_rejected(where, info.name, text, join_allowed(info.allowed));
    }
    case field_type::pattern_list: return split_list(text);
    case field_type::kind_list: {
      auto kinds = split_list(text);
      for (auto& kind : kinds) {
        kind = to_lower(kind);
        if (std::find(info.allowed.begin(), info.allowed.end(), kind) == info.allowed.end())
          throw_rejected(where, info.name, text, "a list of " + join_allowed(info.allowed));
      }
      return kinds;
    }
  }
  throw_rejected(where, info.name, text, "a value");
}

/// @brief The TOML-style name of the alternative @p value holds ("boolean", "integer", ...).
[[nodiscard]] inline std::string_view value_type_name(const field_value& value) noexcept {
  switch (value.index()) {
    case 0: return "boolean";
    case 1: return "integer";
    case 2: return "float";
    case 3: return "string";
    default: return "array of strings";
  }
}

/// @brief Checks a typed value (from code or TOML) against field @p info and returns it in the
/// alternative the field stores (integers are accepted for reals; choices are checked).
/// @throws config_error naming the key, the type or value seen and what is expected.
[[nodiscard]] inline field_value normalize_field_value(const field_info& info,
                                                       const field_value& value,
                                                       const field_origin& where) {
  const auto wrong_type = [&](std::string_view expected) -> field_value {
    throw config_error(where.source, where.key,
                       describe(where) + " has type " + std::string(value_type_name(value)) +
                           "; expected " + std::string(expected) + " for " +
                           std::string(info.name));
  };
  const auto show = [&]() -> std::string {
    if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
    if (const auto* i = std::get_if<std::int64_t>(&value)) return std::to_string(*i);
    if (const auto* d = std::get_if<double>(&value)) return std::to_string(*d);
    if (const auto* s = std::get_if<std::string>(&value)) return *s;
    return "[...]";
  };
  switch (info.type) {
    case field_type::boolean:
      if (!std::holds_alternative<bool>(value)) return wrong_type("a boolean");
      return value;
    case field_type::integer:
      if (!std::holds_alternative<std::int64_t>(value)) return wrong_type("an integer");
      if (std::get<std::int64_t>(value) < std::numeric_limits<int>::min() ||
          std::get<std::int64_t>(value) > std::numeric_limits<int>::max())
        throw_rejected(where, info.name, show(), "an integer (at most 2147483647)");
      return value;
    case field_type::count:
      if (!std::holds_alternative<std::int64_t>(value)) return wrong_type("a non-negative integer");
      if (std::get<std::int64_t>(value) < 0)
        throw_rejected(where, info.name, show(), "a non-negative integer");
      return value;
    case field_type::real:
    case field_type::ratio: {
      double number = 0;
      if (const auto* i = std::get_if<std::int64_t>(&value))
        number = static_cast<double>(*i);
      else if (const auto* d = std::get_if<double>(&value))
        number = *d;
      else
        return wrong_type(info.type == field_type::real ? "a number" : "a number from 0.0 to 1.0");
      if (!std::isfinite(number) || (info.type == field_type::real && number < 0))
        throw_rejected(where, info.name, show(), info.type == field_type::real
                                                     ? "a non-negative number"
                                                     : "a number from 0.0 to 1.0");
      return number;
    }
    case field_type::text:
      if (!std::holds_alternative<std::string>(value)) return wrong_type("a string");
      return value;
    case field_type::choice: {
      if (!std::holds_alternative<std::string>(value)) return wrong_type("a string");
      const std::string& text = std::get<std::string>(value);
      for (std::string_view allowed : info.allowed)
        if (allowed == text) return value;
      throw_rejected(where, info.name, text, join_allowed(info.allowed));
    }
    case field_type::pattern_list:
    case field_type::kind_list: {
      if (!std::holds_alternative<std::vector<std::string>>(value))
        return wrong_type("an array of strings");
      if (info.type == field_type::kind_list)
        for (const auto& kind : std::get<std::vector<std::string>>(value))
          if (std::find(info.allowed.begin(), info.allowed.end(), kind) == info.allowed.end())
            throw_rejected(where, info.name, kind, "a list of " + join_allowed(info.allowed));
      return value;
    }
  }
  return wrong_type("a value");
}

}  // namespace v0
}  // namespace ddo
