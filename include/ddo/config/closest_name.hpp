// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Suggesting the closest known name for a misspelt key, variable or flag.

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ddo {
inline namespace v0 {

/// @brief Levenshtein distance between @p a and @p b, ignoring ASCII case.
[[nodiscard]] inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      const std::size_t next = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = row[j];
      row[j] = next;
    }
  }
  return row[b.size()];
}

/// @brief The candidate closest to @p name by edit distance (ties: the first), or "" when no
/// candidate is within half the length of @p name (then a suggestion would only confuse).
template <class Range>
[[nodiscard]] std::string closest_name(std::string_view name, const Range& candidates) {
  std::string best;
  std::size_t best_distance = static_cast<std::size_t>(-1);
  for (const auto& candidate : candidates) {
    const std::string_view view(candidate);
    std::size_t distance = edit_distance(name, view);
    // A known name that merely extends what was typed ("one_shot" → "one_shot_fast") is a
    // better suggestion than its edit distance says.
    if (name.size() >= 3 && view.size() > name.size() && view.substr(0, name.size()) == name)
      distance = std::min<std::size_t>(distance, 1);
    if (distance < best_distance) {
      best_distance = distance;
      best = std::string(view);
    }
  }
  if (best.empty() || best_distance > std::max<std::size_t>(2, name.size() / 2)) return {};
  return best;
}

/// @brief "; did you mean 'X'?" for a suggestion, "" when there is none.
[[nodiscard]] inline std::string did_you_mean(const std::string& suggestion) {
  return suggestion.empty() ? std::string() : "; did you mean '" + suggestion + "'?";
}

}  // namespace v0
}  // namespace ddo
