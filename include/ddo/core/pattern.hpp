// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::pattern: the one place ddo matches regular expressions (module-name patterns of
/// the config, execution-group patterns, module-kind overrides).
///
/// The dialect is the regular part of ECMAScript (what std::regex::ECMAScript accepts, minus the
/// constructs that are not regular):
///  - literals; `.` (any byte but `\n` and `\r`); `\` before a punctuation character makes it
///    literal (`\.`, `\(`, `\\`, `\/`, `\-`, ...);
///  - classes `[abc]`, `[a-z0-9_]`, negated `[^.]`, with `\d \w \s \D \W \S` and escapes inside;
///    `\d \w \s \D \W \S` outside; `\n \t \r \f \v \0 \xHH \uHHHH` (HHHH at most 00FF);
///  - repetition `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}` (m, n at most 1000), each greedy or lazy
///    (a trailing `?`);
///  - alternation `|`, groups `( )` and `(?: )` (groups only group: no submatches are reported);
///  - anchors `^` and `$` (start and end of the name: names have no lines), `\b` and `\B`.
/// Rejected with a ddo::pattern_error naming the pattern, the offset and the construct:
/// backreferences (`\1`, `\k<name>`), lookahead and lookbehind (`(?=`, `(?!`, `(?<=`, `(?<!`),
/// named groups, inline flags, `\p{...}`, `\c`, unknown letter escapes, a `{` that does not start a
/// repetition, a quantifier with nothing to repeat, a `]` first in a class (`[]` is an empty class
/// in ECMAScript and a literal `]` in Python's re: write `\]`), unbalanced parentheses and brackets.
///
/// Matching has std::regex_search's semantics (the match is the leftmost, and among matches
/// starting there the one a backtracking ECMAScript matcher would find first), but runs as a Pike
/// VM: time O(length of the name × size of the pattern), memory O(size of the pattern), no
/// recursion over the input — a tensor name of any length matches in bounded stack.
/// A repeated part that can match the empty string (`(a|)*`) repeats as in RE2 and the ECMAScript
/// specification; libstdc++'s std::regex stops after an empty iteration, so on such patterns the
/// match found may be shorter there.
/// A pattern is compiled once (the constructor) and searched any number of times, from any number
/// of threads.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/linkage.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Where a pattern matched in a subject: [position, position + length).
struct pattern_match {
  std::size_t position = 0;  ///< offset of the first matched byte
  std::size_t length = 0;    ///< number of matched bytes (0 for an empty match)
};

namespace detail {
enum class pattern_op : std::uint8_t {
  byte,               ///< one byte equal to `value`
  any,                ///< any byte but '\n' and '\r'
  set,                ///< a byte in class `x`
  split,              ///< continue at x (preferred) and at y
  jump,               ///< continue at x
  begin,              ///< assert position 0
  end,                ///< assert end of subject
  word_boundary,      ///< \b
  not_word_boundary,  ///< \B
  match,              ///< the pattern matched
};
struct pattern_instruction {
  pattern_op op = pattern_op::match;
  std::uint8_t value = 0;
  std::uint32_t x = 0;
  std::uint32_t y = 0;
};
/// A set of bytes (256 bits).
struct byte_class {
  std::uint64_t bits[4] = {0, 0, 0, 0};
  void add(unsigned char c) noexcept { bits[c >> 6] |= std::uint64_t{1} << (c & 63); }
  [[nodiscard]] bool has(unsigned char c) const noexcept {
    return (bits[c >> 6] >> (c & 63)) & 1;
  }
};
struct pattern_compiler;
}  // namespace detail

/// @brief A compiled regular expression of ddo's dialect (see this header's description).
class pattern {
 public:
  /// @brief Compiles @p text.
  /// @throws pattern_error naming @p text, the offset and the construct when @p text is not in
  /// the dialect (or expands to more than 50,000 instructions).
  explicit pattern(std::string text);

  /// @brief The text the pattern was compiled from.
  [[nodiscard]] const std::string& text() const noexcept { return text_; }

  /// @brief Whether the pattern matches anywhere in @p subject (std::regex_search).
  [[nodiscard]] bool search(std::string_view subject) const { return find(subject).has_value(); }

  /// @brief The match std::regex_search would report for @p subject, if any.
  [[nodiscard]] std::optional<pattern_match> find(std::string_view subject) const;

 private:
  std::string text_;
  std::vector<detail::pattern_instruction> program_;
  std::vector<detail::byte_class> classes_;
  friend struct detail::pattern_compiler;
};

/// @brief Compiles every text of @p texts, in order.
/// @throws pattern_error for the first text outside the dialect.
[[nodiscard]] inline std::vector<pattern> compile_patterns(const std::vector<std::string>& texts) {
  std::vector<pattern> out;
  out.reserve(texts.size());
  for (const auto& t : texts) out.emplace_back(t);
  return out;
}

/// @brief The first pattern of @p patterns that matches somewhere in @p subject, or nullptr.
[[nodiscard]] inline const pattern* first_match(const std::vector<pattern>& patterns,
                                                std::string_view subject) {
  for (const auto& p : patterns)
    if (p.search(subject)) return &p;
  return nullptr;
}

}  // namespace v0
}  // namespace ddo

#if DDO_HEADER_ONLY
#include "ddo/core/detail/pattern_impl.hpp"
#endif
