// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::check_toml_limits: the bounds ddo enforces on a TOML config before toml++ reads it.
///
/// toml++ recurses once per level of the table tree it builds (parser::update_region_ends, the
/// tables' destructors), and its own nesting limit covers arrays and inline tables only: a table
/// header or key of 200,000 dotted parts (`[a.a.a…]`, 400 KB) overflows the stack. A config file
/// is untrusted input, so ddo scans the text first, without recursion, and refuses one that
/// exceeds these bounds, naming the limit and the line. A real config uses a few levels and a
/// few dozen keys; the bounds are far above that and far below what toml++ or memory can suffer.
///
/// The scan is a small TOML lexer (strings, comments, headers, keys, arrays, inline tables). On
/// text it cannot follow (invalid TOML) it resumes at the next line, so every line is still
/// checked; toml++ then reports the syntax error. fuzz/toml_config_fuzzer.cpp checks that any
/// text this accepts parses to a tree no deeper than max_toml_depth.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/error.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Most dotted parts in one key or table header (`components.transformer.route` has 3).
inline constexpr std::size_t max_toml_key_parts = 16;
/// @brief Deepest level of the table tree: a table header counts two levels a part (each part may
/// name an array of tables, whose element is one more level), a key one a part, an array or an
/// inline table one.
inline constexpr std::size_t max_toml_depth = 64;
/// @brief Most keys and array elements in one file together, each part of a dotted key or table
/// header counted (each may become a node of the tree).
inline constexpr std::size_t max_toml_entries = 20'000;
/// @brief Longest value of a string field, and of each element of a list field, in bytes,
/// whatever its source (code, TOML, the environment, flags): validate() refuses a longer one, so
/// that every value ddo accepts is one its TOML output (settings_toml.hpp) can hold (issue 37).
inline constexpr std::size_t max_config_value_bytes = 64 * 1024;
/// @brief Most elements of one list field (patterns, module kinds), whatever its source.
inline constexpr std::size_t max_config_list_elements = 1024;
/// @brief Longest string value or quoted key, in bytes of the file's text (escapes and quotes
/// included): a value of max_config_value_bytes written with every byte escaped (`\u00XX`, six
/// bytes), so what ddo writes always reads back.
inline constexpr std::size_t max_toml_string_bytes = 6 * max_config_value_bytes + 2;

namespace detail {

/// The scanner behind check_toml_limits: one pass, no recursion (its nesting is a vector).
class toml_limit_scanner {
 public:
  toml_limit_scanner(std::string_view text, const std::string& file) : in_(text), file_(file) {}

  void run() {
    while (pos_ < in_.size()) {
      skip_blank_lines();
      if (pos_ >= in_.size()) break;
      statement();
      finish_line();
    }
  }

 private:
  struct level {
    char kind;          // '[' array, '{' inline table
    std::size_t base;   // the depth of the array or table itself
    std::size_t depth;  // the depth of the value read next inside it
  };

  /// Thrown internally when the text is not TOML the scanner can follow: the line is skipped.
  struct resume {};

  [[noreturn]] void refuse(const std::string& what) const {
    throw config_error(origin::toml, file_,
                       file_ + ":" + std::to_string(line_) + ": " + what +
                           " (a limit ddo enforces before the TOML parser reads the file)");
  }

  [[nodiscard]] char at(std::size_t i) const noexcept { return i < in_.size() ? in_[i] : '\0'; }
  [[nodiscard]] char peek() const noexcept { return at(pos_); }

  void skip_spaces() noexcept {
    while (peek() == ' ' || peek() == '\t') ++pos_;
  }
  void skip_comment() noexcept {
    if (peek() != '#') return;
    while (pos_ < in_.size() && in_[pos_] != '\n') ++pos_;
  }
  void newline() noexcept {
    ++pos_;
    ++line_;
  }
  /// Spaces, comments and line breaks (between statements, and between array elements).
  void skip_blank_lines() noexcept {
    for (;;) {
      skip_spaces();
      skip_comment();
      if (peek() == '\r') ++pos_;
      if (pos_ < in_.size() && in_[pos_] == '\n') {
        newline();
        continue;
      }
      if (peek() == '\r') continue;
      return;
    }
  }
  /// Skips the rest of the line (after a statement, or text the scanner cannot follow).
  void finish_line() noexcept {
    while (pos_ < in_.size() && in_[pos_] != '\n') ++pos_;
    if (pos_ < in_.size()) newline();
  }

  void count_entry(std::size_t n = 1) {
    entries_ += n;
    if (entries_ > max_toml_entries)
      refuse("more than " + std::to_string(max_toml_entries) +
             " keys and array elements (each part of a dotted key or table header counts)");
  }
  void check_depth(std::size_t depth) const {
    if (depth > max_toml_depth)
      refuse("tables, arrays and inline tables nested more than " + std::to_string(max_toml_depth) +
             " levels deep");
  }

  /// A string at pos_ (basic, literal, or either multi-line form); checks its length.
  void string() {
    const char quote = peek();
    const std::size_t start = pos_;
    const std::size_t start_line = line_;
    const bool multi = at(pos_ + 1) == quote && at(pos_ + 2) == quote;
    if (multi) {
      pos_ += 3;
      for (;;) {
        if (pos_ >= in_.size()) throw resume{};
        const char c = in_[pos_];
        if (c == '\\' && quote == '"') {
          pos_ += 2;
          if (at(pos_ - 1) == '\n') ++line_;
          continue;
        }
        if (c == '\n') {
          newline();
          continue;
        }
        if (c == quote && at(pos_ + 1) == quote && at(pos_ + 2) == quote) {
          pos_ += 3;
          for (int extra = 0; extra < 2 && peek() == quote; ++extra) ++pos_;  // """a""""
          break;
        }
        ++pos_;
      }
    } else {
      ++pos_;
      for (;;) {
        if (pos_ >= in_.size() || in_[pos_] == '\n') throw resume{};
        const char c = in_[pos_];
        if (c == '\\' && quote == '"') {
          pos_ += 2;
          continue;
        }
        ++pos_;
        if (c == quote) break;
      }
    }
    if (pos_ - start > max_toml_string_bytes) {
      line_ = start_line;  // named by the line it starts on
      refuse("a string of " + std::to_string(pos_ - start) + " bytes; the limit is " +
             std::to_string(max_toml_string_bytes));
    }
  }

  [[nodiscard]] static bool bare_key_char(char c) noexcept {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  }

  /// A possibly dotted key at pos_; returns its number of parts.
  std::size_t key() {
    std::size_t parts = 0;
    for (;;) {
      skip_spaces();
      const char c = peek();
      if (c == '"' || c == '\'') {
        if (at(pos_ + 1) == c && at(pos_ + 2) == c) throw resume{};  // not a key
        string();
      } else if (bare_key_char(c)) {
        while (bare_key_char(peek())) ++pos_;
      } else {
        throw resume{};
      }
      if (++parts > max_toml_key_parts)
        refuse("a key or table header of more than " + std::to_string(max_toml_key_parts) +
               " dotted parts");
      skip_spaces();
      if (peek() != '.') return parts;
      ++pos_;
    }
  }

  /// One line's statement: a table header, or `key = value` (the value may span lines).
  void statement() {
    try {
      if (peek() == '[') {
        const bool array_of_tables = at(pos_ + 1) == '[';
        pos_ += array_of_tables ? 2 : 1;
        const std::size_t parts = key();
        count_entry(parts);
        table_depth_ = 2 * parts + (array_of_tables ? 1 : 0);
        check_depth(table_depth_);
        return;
      }
      const std::size_t parts = key();
      count_entry(parts);
      const std::size_t depth = table_depth_ + parts;
      check_depth(depth);
      skip_spaces();
      if (peek() != '=') throw resume{};
      ++pos_;
      value(depth);
    } catch (const resume&) {
      // Not TOML this scanner follows: toml++ will report it; the next line is still checked.
    }
  }

  /// The value of a key at depth @p depth, with every array and inline table inside it.
  void value(std::size_t depth) {
    std::vector<level> stack;  // the arrays and inline tables open around the next value
    for (;;) {
      // A value starts here (in an array, also after line breaks and comments).
      if (!stack.empty() && stack.back().kind == '[')
        skip_blank_lines();
      else
        skip_spaces();
      const char c = peek();
      const std::size_t here = stack.empty() ? depth : stack.back().depth;
      if (c == '"' || c == '\'') {
        string();
      } else if (c == '[') {
        ++pos_;
        check_depth(here + 1);
        stack.push_back({'[', here, here + 1});
        skip_blank_lines();
        if (peek() != ']') {
          count_entry();
          continue;  // the first element
        }
      } else if (c == '{') {
        ++pos_;
        stack.push_back({'{', here, here});
        skip_spaces();
        if (peek() != '}') {
          inline_key(stack.back());
          continue;
        }
      } else {
        scalar();
      }
      // After a value (or an empty array or table): separators and closing brackets.
      for (;;) {
        if (stack.empty()) return;
        level& open = stack.back();
        if (open.kind == '[')
          skip_blank_lines();
        else
          skip_spaces();
        const char d = peek();
        if (d == ',') {
          ++pos_;
          if (open.kind == '{') {
            skip_spaces();
            inline_key(open);
          } else {
            skip_blank_lines();
            if (peek() == ']') continue;  // trailing comma
            count_entry();
          }
          break;
        }
        if ((d == ']' && open.kind == '[') || (d == '}' && open.kind == '{')) {
          ++pos_;
          stack.pop_back();
          continue;
        }
        throw resume{};
      }
    }
  }

  /// `key =` inside the inline table @p table: its value is at the table's depth plus the
  /// key's parts.
  void inline_key(level& table) {
    const std::size_t parts = key();
    count_entry(parts);
    table.depth = table.base + parts;
    check_depth(table.depth);
    skip_spaces();
    if (peek() != '=') throw resume{};
    ++pos_;
  }

  /// A number, boolean, date or time: up to a separator (a date and time may hold one space).
  void scalar() {
    const std::size_t start = pos_;
    for (;;) {
      const char c = peek();
      if (c == '\0' && pos_ >= in_.size()) break;
      if (c == ' ' && pos_ - start == 10 && at(start + 4) == '-' && at(pos_ + 1) >= '0' &&
          at(pos_ + 1) <= '9') {
        ++pos_;  // "1979-05-27 07:32:00"
        continue;
      }
      if (c == ',' || c == ']' || c == '}' || c == '#' || c == ' ' || c == '\t' || c == '\n' ||
          c == '\r')
        break;
      ++pos_;
    }
    if (pos_ == start) throw resume{};
  }

  std::string_view in_;
  const std::string& file_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
  std::size_t entries_ = 0;
  std::size_t table_depth_ = 0;
};

}  // namespace detail

/// @brief Refuses TOML text @p text (named @p file in messages) that exceeds max_toml_key_parts,
/// max_toml_depth, max_toml_entries or max_toml_string_bytes, naming the limit and the line.
/// Text within them may still be invalid TOML (the parser reports that).
/// @throws config_error (source "toml").
inline void check_toml_limits(std::string_view text, const std::string& file) {
  detail::toml_limit_scanner(text, file).run();
}

}  // namespace v0
}  // namespace ddo
