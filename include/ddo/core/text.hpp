// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Bytes that are not text: tensor names, environment values and file contents are bytes
/// that need not be UTF-8. Everything ddo prints or writes as text goes through here:
/// - sanitize_utf8() for error messages and terminal output: valid UTF-8 is kept, every byte of
///   an invalid sequence becomes the visible text `\xHH`, and control characters (except tab)
///   become `\xHH` too, so a message is one readable line that cannot move the cursor;
/// - append_json_string() / json_string(), the one JSON string writer (plan JSON, Chrome traces,
///   anything else ddo writes as JSON): quotes, backslashes and control characters escaped
///   (`\n`, `\t`, `\u00XX`), invalid UTF-8 bytes written as the visible text `\xHH` (so the
///   output always parses and the bytes can still be told apart).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddo {
inline namespace v0 {

/// @brief Length of the valid UTF-8 sequence starting at @p text[i], or 0 when the bytes there
/// are not one (bad lead byte, truncated, overlong, surrogate, above U+10FFFF).
[[nodiscard]] inline std::size_t utf8_sequence_length(std::string_view text,
                                                      std::size_t i) noexcept {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    cp = b0 & 0x1Fu;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    cp = b0 & 0x0Fu;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    cp = b0 & 0x07u;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const unsigned char b = byte(i + k);
    if ((b & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

/// @brief Length of the longest valid UTF-8 prefix of @p text: the offset of the first byte
/// that does not start a valid sequence, or text.size() when the whole text is valid.
[[nodiscard]] inline std::size_t valid_utf8_prefix(std::string_view text) noexcept {
  std::size_t i = 0;
  for (std::size_t n = 0; i < text.size(); i += n)
    if ((n = utf8_sequence_length(text, i)) == 0) break;
  return i;
}

/// @brief Whether @p text is entirely valid UTF-8.
[[nodiscard]] inline bool is_valid_utf8(std::string_view text) noexcept {
  return valid_utf8_prefix(text) == text.size();
}

namespace detail {
inline void append_hex_byte(std::string& out, unsigned char b, std::string_view prefix) {
  constexpr char digits[] = "0123456789abcdef";
  out += prefix;
  out += digits[b >> 4];
  out += digits[b & 0xF];
}
}  // namespace detail

/// @brief @p text as one printable line: valid UTF-8 kept; bytes of invalid sequences and
/// control characters other than tab shown as `\xHH`.
[[nodiscard]] inline std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence_length(text, i);
    const auto b = static_cast<unsigned char>(text[i]);
    if (n == 0 || (n == 1 && ((b < 0x20 && b != '\t') || b == 0x7F))) {
      detail::append_hex_byte(out, b, "\\x");
      ++i;
      continue;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

/// @brief Appends @p text to @p out as a quoted JSON string (see the file comment).
inline void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence_length(text, i);
    const auto b = static_cast<unsigned char>(text[i]);
    if (n == 0) {
      detail::append_hex_byte(out, b, "\\\\x");  // the visible text \xHH
      ++i;
      continue;
    }
    if (n == 1) {
      switch (b) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (b < 0x20 || b == 0x7F)
            detail::append_hex_byte(out, b, "\\u00");
          else
            out += static_cast<char>(b);
      }
      ++i;
      continue;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  out += '"';
}

/// @brief @p text as a quoted JSON string (see append_json_string).
[[nodiscard]] inline std::string json_string(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  append_json_string(out, text);
  return out;
}

}  // namespace v0
}  // namespace ddo
