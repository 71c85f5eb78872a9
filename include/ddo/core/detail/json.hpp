// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief A small strict JSON reader for safetensors headers, index files and plan files (not
/// API). It sits in core/detail because model/ (safetensors) and plan/ (plan files) both read JSON.
///
/// The core may use only the standard library, so ddo carries its own parser. It is strict
/// (RFC 8259: no trailing commas, no comments, no leading zeros, duplicate object keys refused)
/// and bounded (nesting depth), because its input is untrusted and it runs under a fuzzer.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ddo/core/text.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// Thrown by parse_json; the callers turn it into a format_error naming the file.
struct json_error {
  std::size_t offset;
  std::string message;
};

class json_value {
 public:
  enum class kind { null, boolean, number, string, array, object };

  [[nodiscard]] kind type() const noexcept { return kind_; }
  [[nodiscard]] bool is_object() const noexcept { return kind_ == kind::object; }
  [[nodiscard]] bool is_array() const noexcept { return kind_ == kind::array; }
  [[nodiscard]] bool is_string() const noexcept { return kind_ == kind::string; }
  [[nodiscard]] bool is_number() const noexcept { return kind_ == kind::number; }
  /// The string's value, or the number's literal text.
  [[nodiscard]] const std::string& text() const noexcept { return text_; }
  [[nodiscard]] bool boolean() const noexcept { return bool_; }
  [[nodiscard]] const std::vector<json_value>& items() const noexcept { return items_; }
  [[nodiscard]] const std::vector<std::pair<std::string, json_value>>& members() const noexcept {
    return members_;
  }
  /// The member called @p key of an object, or nullptr.
  [[nodiscard]] const json_value* find(std::string_view key) const noexcept {
    for (const auto& [k, v] : members_)
      if (k == key) return &v;
    return nullptr;
  }
  /// A non-negative integer literal that fits uint64, else nullopt (fractions, exponents,
  /// signs and overflow are all refused: sizes and offsets are exact).
  [[nodiscard]] std::optional<std::uint64_t> as_u64() const noexcept {
    if (kind_ != kind::number || text_.empty()) return std::nullopt;
    std::uint64_t value = 0;
    for (char c : text_) {
      if (c < '0' || c > '9') return std::nullopt;
      const auto digit = static_cast<std::uint64_t>(c - '0');
      if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
      value = value * 10 + digit;
    }
    return value;
  }
  /// A short description for error messages: "a string", "an array", ...
  [[nodiscard]] std::string_view describe() const noexcept {
    switch (kind_) {
      case kind::null:
        return "null";
      case kind::boolean:
        return "a boolean";
      case kind::number:
        return "a number";
      case kind::string:
        return "a string";
      case kind::array:
        return "an array";
      case kind::object:
        return "an object";
    }
    return "a value";
  }

 private:
  friend class json_parser;
  kind kind_ = kind::null;
  bool bool_ = false;
  std::string text_;
  std::vector<json_value> items_;
  std::vector<std::pair<std::string, json_value>> members_;
};

class json_parser {
 public:
  static constexpr int max_depth = 64;

  explicit json_parser(std::string_view input) : in_(input) {}

  json_value parse_document() {
    skip_ws();
    json_value v = parse_value(0);
    skip_ws();
    if (pos_ != in_.size()) fail("unexpected characters after the JSON value");
    return v;
  }

  /// Streams a document that is one object: calls @p on_member(key, value) for each member in
  /// order, building only that member's value, so a header of a million tensors never exists
  /// as one tree. Keys are not checked for duplicates here (the caller knows its keys).
  /// Returns false, consuming nothing, when the document does not start with an object.
  template <class OnMember>
  bool parse_object_members(OnMember&& on_member) {
    skip_ws();
    if (pos_ >= in_.size() || in_[pos_] != '{') return false;
    ++pos_;
    skip_ws();
    if (peek() == '}') {
      ++pos_;
    } else {
      for (;;) {
        skip_ws();
        if (peek() != '"') fail("expected a string key in JSON object");
        std::string key = parse_string();
        skip_ws();
        if (peek() != ':') fail("expected ':' after key \"" + printable(key) + "\"");
        ++pos_;
        skip_ws();
        json_value member = parse_value(1);
        on_member(std::move(key), std::move(member));
        skip_ws();
        const char d = peek();
        ++pos_;
        if (d == '}') break;
        if (d != ',') fail("expected ',' or '}' in JSON object");
      }
    }
    skip_ws();
    if (pos_ != in_.size()) fail("unexpected characters after the JSON value");
    return true;
  }

  // A pull interface for readers that keep part of a document and only check the rest (the
  // sharded-model index keeps its weight map; its metadata may be a 100 MB array that must not
  // become a tree of 60x its size). Each call starts after whitespace.

  /// The next character, after whitespace. @throws json_error at the end of the input.
  [[nodiscard]] char next() {
    skip_ws();
    return peek();
  }
  /// The object at the current position, member by member: @p on_member(std::string key) must
  /// consume the member's value with value(), skip() or members(). @p depth is the object's.
  /// Duplicate keys are not checked here (the caller knows which keys it keeps).
  template <class OnMember>
  void members(int depth, OnMember&& on_member) {
    if (depth > max_depth) fail("JSON nested deeper than " + std::to_string(max_depth) + " levels");
    if (next() != '{') fail("expected a JSON object");
    ++pos_;
    if (next() == '}') {
      ++pos_;
      return;
    }
    for (;;) {
      if (next() != '"') fail("expected a string key in JSON object");
      std::string key = parse_string();
      if (next() != ':') fail("expected ':' after key \"" + printable(key) + "\"");
      ++pos_;
      skip_ws();
      on_member(std::move(key));
      const char d = next();
      ++pos_;
      if (d == '}') break;
      if (d != ',') fail("expected ',' or '}' in JSON object");
    }
  }
  /// The value at the current position, as a tree (nested @p depth deep).
  json_value value(int depth) {
    skip_ws();
    return parse_value(depth);
  }
  /// Checks the value at the current position as strictly as value() does (duplicate keys
  /// aside) and keeps nothing of it: memory does not grow with its size.
  void skip(int depth) {
    skip_ws();
    if (depth > max_depth) fail("JSON nested deeper than " + std::to_string(max_depth) + " levels");
    const char c = peek();
    if (c == '{') {
      members(depth, [&](std::string) { skip(depth + 1); });
    } else if (c == '[') {
      ++pos_;
      if (next() == ']') {
        ++pos_;
        return;
      }
      for (;;) {
        skip(depth + 1);
        const char d = next();
        ++pos_;
        if (d == ']') break;
        if (d != ',') fail("expected ',' or ']' in JSON array");
      }
    } else if (c == '"') {
      (void)scan_string<false>();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      (void)number_text();
    } else {
      (void)parse_value(depth);  // a literal: nothing to keep anyway
    }
  }
  /// Checks that only whitespace is left.
  void end() {
    skip_ws();
    if (pos_ != in_.size()) fail("unexpected characters after the JSON value");
  }

 private:
  [[noreturn]] void fail(std::string message) const { throw json_error{pos_, std::move(message)}; }

  void skip_ws() noexcept {
    while (pos_ < in_.size() &&
           (in_[pos_] == ' ' || in_[pos_] == '\t' || in_[pos_] == '\n' || in_[pos_] == '\r'))
      ++pos_;
  }

  [[nodiscard]] char peek() const {
    if (pos_ >= in_.size()) fail("unexpected end of JSON");
    return in_[pos_];
  }

  void expect(std::string_view word) {
    if (in_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  json_value parse_value(int depth) {
    if (depth > max_depth) fail("JSON nested deeper than " + std::to_string(max_depth) + " levels");
    json_value v;
    const char c = peek();
    if (c == '{') {
      v.kind_ = json_value::kind::object;
      ++pos_;
      skip_ws();
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      std::unordered_set<std::string> seen;
      for (;;) {
        skip_ws();
        if (peek() != '"') fail("expected a string key in JSON object");
        std::string key = parse_string();
        if (!seen.insert(key).second)
          fail("duplicate key \"" + printable(key) + "\" in JSON object");
        skip_ws();
        if (peek() != ':') fail("expected ':' after key \"" + printable(key) + "\"");
        ++pos_;
        skip_ws();
        json_value member = parse_value(depth + 1);
        v.members_.emplace_back(std::move(key), std::move(member));
        skip_ws();
        const char d = peek();
        ++pos_;
        if (d == '}') break;
        if (d != ',') fail("expected ',' or '}' in JSON object");
      }
    } else if (c == '[') {
      v.kind_ = json_value::kind::array;
      ++pos_;
      skip_ws();
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      for (;;) {
        skip_ws();
        v.items_.push_back(parse_value(depth + 1));
        skip_ws();
        const char d = peek();
        ++pos_;
        if (d == ']') break;
        if (d != ',') fail("expected ',' or ']' in JSON array");
      }
    } else if (c == '"') {
      v.kind_ = json_value::kind::string;
      v.text_ = parse_string();
    } else if (c == 't') {
      expect("true");
      v.kind_ = json_value::kind::boolean;
      v.bool_ = true;
    } else if (c == 'f') {
      expect("false");
      v.kind_ = json_value::kind::boolean;
    } else if (c == 'n') {
      expect("null");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind_ = json_value::kind::number;
      v.text_ = parse_number();
    } else {
      fail(std::string("unexpected character '") + printable(std::string(1, c)) + "' in JSON");
    }
    return v;
  }

  std::string parse_number() { return std::string(number_text()); }

  /// The number literal at pos_, checked, as a view of the input.
  std::string_view number_text() {
    const std::size_t start = pos_;
    auto digits = [&] {
      const std::size_t d = pos_;
      while (pos_ < in_.size() && in_[pos_] >= '0' && in_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    if (pos_ < in_.size() && in_[pos_] == '-') ++pos_;
    if (pos_ < in_.size() && in_[pos_] == '0') {
      ++pos_;
      if (pos_ < in_.size() && in_[pos_] >= '0' && in_[pos_] <= '9')
        fail("leading zeros are not allowed in JSON numbers");
    } else if (digits() == 0) {
      fail("malformed JSON number");
    }
    if (pos_ < in_.size() && in_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) fail("malformed JSON number");
    }
    if (pos_ < in_.size() && (in_[pos_] == 'e' || in_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < in_.size() && (in_[pos_] == '+' || in_[pos_] == '-')) ++pos_;
      if (digits() == 0) fail("malformed JSON number");
    }
    return in_.substr(start, pos_ - start);
  }

  unsigned hex4() {
    if (in_.size() - pos_ < 4) fail("truncated \\u escape in JSON string");
    unsigned value = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = in_[pos_++];
      value <<= 4;
      if (h >= '0' && h <= '9')
        value |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f')
        value |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        value |= static_cast<unsigned>(h - 'A' + 10);
      else
        fail("invalid hex digit in \\u escape");
    }
    return value;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() { return scan_string<true>(); }

  /// The string at pos_, checked; its value when @p Keep, else an empty string (skip()).
  template <bool Keep>
  std::string scan_string() {
    ++pos_;  // opening quote
    std::string out;
    // Characters appended to the value, only when it is kept.
    const auto put = [&](char ch) {
      if constexpr (Keep)
        out += ch;
      else
        (void)ch;
    };
    for (;;) {
      if (pos_ >= in_.size()) fail("unterminated JSON string");
      const char c = in_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character inside a JSON string");
      if (c != '\\') {
        put(c);
        continue;
      }
      if (pos_ >= in_.size()) fail("unterminated escape in JSON string");
      const char e = in_[pos_++];
      switch (e) {
        case '"':
          put('"');
          break;
        case '\\':
          put('\\');
          break;
        case '/':
          put('/');
          break;
        case 'b':
          put('\b');
          break;
        case 'f':
          put('\f');
          break;
        case 'n':
          put('\n');
          break;
        case 'r':
          put('\r');
          break;
        case 't':
          put('\t');
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (in_.substr(pos_, 2) != "\\u") fail("unpaired surrogate in JSON string");
            pos_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("unpaired surrogate in JSON string");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate in JSON string");
          }
          if constexpr (Keep) append_utf8(out, cp);
          break;
        }
        default:
          fail("invalid escape in JSON string");
      }
    }
  }

 public:
  /// Keys and values quoted in error messages: control characters and invalid UTF-8 shown as
  /// \xHH (sanitize_utf8), long text cut.
  static std::string printable(std::string_view s) {
    std::string out = sanitize_utf8(s.substr(0, 200));
    if (s.size() > 200) out += "...";
    return out;
  }

 private:
  std::string_view in_;
  std::size_t pos_ = 0;
};

/// @p s as a JSON string literal, quotes included: ddo's one JSON string writer, json_string()
/// (control characters escaped, UTF-8 kept, invalid UTF-8 bytes shown as \\xHH).
inline std::string json_quote(std::string_view s) { return json_string(s); }

/// Parses one JSON document. @throws json_error with the byte offset.
inline json_value parse_json(std::string_view input) {
  return json_parser(input).parse_document();
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
