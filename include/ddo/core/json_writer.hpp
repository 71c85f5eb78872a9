// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::json_writer: the writer beside ddo's JSON reader (core/detail/json.hpp). Every
/// JSON document ddo, its programs and its benchmarks write is built here, so separators, key
/// quoting and string escaping (append_json_string, core/text.hpp) are written once.
///
/// Each object or array is opened with a layout, because the documents people read keep their
/// shape: `compact` ({"a":1,"b":2}), `spaced` ({"a": 1, "b": 2}) or `lines` (one member per
/// line, indented two spaces per open `lines` container, the closing bracket on its own line even
/// when empty). Numbers are written exactly (integers) or with a stated number of decimals
/// (doubles); a double that is not finite is written as null, since JSON has no NaN or infinity.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/text.hpp"

namespace ddo {
inline namespace v0 {

/// @brief How an object or array separates its members (see the file comment).
enum class json_layout { compact, spaced, lines };

/// @brief Builds one JSON document in a string (see the file comment). Misuse (a value where a
/// key is due, closing what is not open, reading an unfinished document) is a usage_error.
class json_writer {
 public:
  json_writer& begin_object(json_layout layout = json_layout::compact) { return open('{', layout); }
  json_writer& end_object() { return close('}'); }
  json_writer& begin_array(json_layout layout = json_layout::compact) { return open('[', layout); }
  json_writer& end_array() { return close(']'); }

  /// @brief The next member's key (inside an object).
  json_writer& key(std::string_view k) {
    DDO_EXPECTS(!open_.empty() && open_.back().object && !key_pending_,
                "json_writer::key: not inside an object, or a key without its value");
    separate();
    append_json_string(out_, k);
    out_ += open_.back().layout == json_layout::compact ? ":" : ": ";
    key_pending_ = true;
    return *this;
  }

  json_writer& value(std::string_view s) {
    before_value();
    append_json_string(out_, s);
    return *this;
  }
  json_writer& value(const char* s) { return value(std::string_view(s)); }
  json_writer& value(const std::string& s) { return value(std::string_view(s)); }
  json_writer& value(bool b) {
    before_value();
    out_ += b ? "true" : "false";
    return *this;
  }
  template <std::integral T>
  requires(!std::same_as<T, bool> && !std::same_as<T, char>) json_writer& value(T n) {
    before_value();
    out_ += std::to_string(n);
    return *this;
  }
  /// @brief @p d with @p decimals digits after the point (printf's %.Nf), or with six
  /// significant digits as iostreams print a double (%g) when @p decimals is negative; null when
  /// not finite.
  json_writer& value(double d, int decimals = -1) {
    before_value();
    // Not finite: NaN and the infinities give NaN here (no <cmath>, a large header for one
    // test, in a header the umbrella includes; CI caps the umbrella's include cost).
    if (!(d - d == 0.0)) {
      out_ += "null";
      return *this;
    }
    char buffer[64];
    if (decimals < 0)
      std::snprintf(buffer, sizeof buffer, "%g", d);
    else
      std::snprintf(buffer, sizeof buffer, "%.*f", decimals, d);
    out_ += buffer;
    return *this;
  }
  json_writer& null() {
    before_value();
    out_ += "null";
    return *this;
  }
  /// @brief A value the caller already encoded as JSON (a number literal, a quoted string from
  /// json_string()), written as it is: formats that share one encoding with TOML (plan files).
  json_writer& encoded(std::string_view json_text) {
    before_value();
    out_ += json_text;
    return *this;
  }

  /// @brief key(k) then value(v...).
  template <class... V>
  json_writer& member(std::string_view k, V&&... v) {
    key(k);
    return value(static_cast<V&&>(v)...);
  }

  /// @brief Whether every container opened was closed (and something was written).
  [[nodiscard]] bool complete() const noexcept { return open_.empty() && !out_.empty(); }
  /// @brief The document. @throws usage_error while a container is still open.
  [[nodiscard]] const std::string& str() const {
    DDO_EXPECTS(complete(), "json_writer::str: the document is not finished");
    return out_;
  }
  /// @brief Moves the document out (see str()).
  [[nodiscard]] std::string take() {
    DDO_EXPECTS(complete(), "json_writer::take: the document is not finished");
    return std::move(out_);
  }

 private:
  struct level {
    bool object;
    json_layout layout;
    std::size_t count;
  };

  json_writer& open(char bracket, json_layout layout) {
    before_value();
    out_ += bracket;
    open_.push_back({bracket == '{', layout, 0});
    return *this;
  }
  json_writer& close(char bracket) {
    DDO_EXPECTS(!open_.empty() && open_.back().object == (bracket == '}') && !key_pending_,
                "json_writer: closing a container that is not the innermost open one");
    const level l = open_.back();
    open_.pop_back();
    if (l.layout == json_layout::lines) newline();
    out_ += bracket;
    return *this;
  }
  // A line break indented two spaces per open `lines` container (a `lines` array inside a
  // `spaced` object lines up under its parent's members).
  void newline() {
    out_ += '\n';
    for (const auto& l : open_)
      if (l.layout == json_layout::lines) out_ += "  ";
  }
  // The separator before a member (a key in an object, a value in an array).
  void separate() {
    level& l = open_.back();
    if (l.count != 0) out_ += ',';
    if (l.layout == json_layout::lines)
      newline();
    else if (l.count != 0 && l.layout == json_layout::spaced)
      out_ += ' ';
    ++l.count;
  }
  void before_value() {
    if (open_.empty()) {
      DDO_EXPECTS(out_.empty(), "json_writer: a second value after the document's end");
      return;
    }
    if (open_.back().object) {
      DDO_EXPECTS(key_pending_, "json_writer: a value inside an object needs a key first");
      key_pending_ = false;
      return;
    }
    separate();
  }

  std::string out_;
  std::vector<level> open_;
  bool key_pending_ = false;
};

}  // namespace v0
}  // namespace ddo
