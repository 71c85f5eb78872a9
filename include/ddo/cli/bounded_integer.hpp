// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::bounded_integer: an integer command-line option with a range, for
/// Boost.Program_options. A plain `po::value<std::uint32_t>` reads "-1" as 4294967295 (the
/// conversion wraps); this type reads only decimal digits (a leading '+' allowed, a '-' only
/// where the range has negative values) and refuses anything outside [Min, Max] with a message
/// that names the option, the value seen and the allowed range.
///
/// @code
///   ddo::bounded_integer<std::uint32_t, 1, 4096> blocks{24};
///   desc.add_options()("blocks", po::value(&blocks)->default_value(blocks), "blocks");
///   // --blocks -1  ->  "the argument '-1' for option '--blocks' is invalid: expected an
///   //                   integer from 1 to 4096"
/// @endcode

#include <boost/program_options.hpp>

#include <charconv>
#include <concepts>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace ddo {
inline namespace v0 {

/// @brief Parses @p text as a whole decimal integer in [lo, hi]; nullopt for anything else
/// (signs that do not fit the type, spaces, suffixes, overflow, values outside the range).
template <std::integral T>
[[nodiscard]] std::optional<T> parse_bounded_integer(std::string_view text, T lo, T hi) noexcept {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  // from_chars accepts '-' for signed types only; for unsigned types "-1" fails here instead
  // of wrapping.
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (value < lo || value > hi) return std::nullopt;
  return value;
}

/// @brief An integer option whose value must lie in [Min, Max].
/// @tparam T the integer type stored; @tparam Min, Max the inclusive range.
template <std::integral T, T Min = T{0}, T Max = std::numeric_limits<T>::max()>
struct bounded_integer {
  static_assert(Min <= Max, "ddo::bounded_integer: Min must not exceed Max");
  static constexpr T min = Min;  ///< smallest allowed value
  static constexpr T max = Max;  ///< largest allowed value
  T value = Min;                 ///< the value read

  constexpr bounded_integer() = default;
  /// @brief A default (for default_value); not range-checked at compile time, so checked here.
  constexpr bounded_integer(T v) : value(v < Min ? Min : (v > Max ? Max : v)) {}  // NOLINT
  constexpr operator T() const noexcept { return value; }  // NOLINT

  /// @brief "an integer from Min to Max" (for messages and help texts).
  [[nodiscard]] static std::string allowed() {
    return "an integer from " + std::to_string(Min) + " to " + std::to_string(Max);
  }

  friend std::ostream& operator<<(std::ostream& out, const bounded_integer& b) {
    return out << b.value;
  }
};

/// @brief The Boost.Program_options validator of bounded_integer (found by ADL).
/// @throws boost::program_options::error_with_option_name naming the option, the value and the
/// range.
template <std::integral T, T Min, T Max>
void validate(boost::any& out, const std::vector<std::string>& values,
              bounded_integer<T, Min, Max>*, int) {
  namespace po = boost::program_options;
  po::validators::check_first_occurrence(out);
  const std::string& text = po::validators::get_single_string(values);
  const auto parsed = parse_bounded_integer<T>(text, Min, Max);
  if (!parsed) {
    po::error_with_option_name e("the argument '%value%' for option '%canonical_option%' is "
                                 "invalid: expected " +
                                 bounded_integer<T, Min, Max>::allowed());
    e.set_substitute("value", text);
    throw e;
  }
  out = boost::any(bounded_integer<T, Min, Max>(*parsed));
}

}  // namespace v0
}  // namespace ddo
