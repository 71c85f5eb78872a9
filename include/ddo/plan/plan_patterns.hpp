// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::plan_patterns: the module-name patterns of a config, compiled once per plan
/// (make_plan compiles them and hands them to group inference and to the residency planner
/// through plan_context::patterns), and each weight's matches of them, searched once per setup
/// (match_rule_patterns): setup plans many times with the same table, and searching the module
/// names again in each planner call was a quarter of setup's time (issue 38's property test).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/operational_defaults.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/pattern.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The pattern lists the residency rules search, in the rules' order
/// (plan/residency_planner.hpp): `skip_modules_pattern`; the `always_resident_modules_pattern`
/// entries the user gave; those that are built-in defaults (they apply outside the blocks only).
enum class rule_patterns : std::uint8_t { skip, user_always, builtin_always };

/// @brief For one weight, the index of the first pattern of each rule_patterns list that matches
/// its module name (into plan_patterns::skip_modules or always_resident_modules; -1: none;
/// unsearched: the rules did not need that list for it, searched when asked).
struct weight_pattern_matches {
  static constexpr std::int32_t unsearched = -2;
  std::int32_t skip = unsearched;
  std::int32_t user_always = unsearched;
  std::int32_t builtin_always = unsearched;
  [[nodiscard]] std::int32_t of(rule_patterns list) const noexcept {
    return list == rule_patterns::skip          ? skip
           : list == rule_patterns::user_always ? user_always
                                                : builtin_always;
  }
  void set(rule_patterns list, std::int32_t index) noexcept {
    (list == rule_patterns::skip          ? skip
     : list == rule_patterns::user_always ? user_always
                                          : builtin_always) = index;
  }
};

/// @brief The config's module-name patterns, compiled (core/pattern.hpp), and optionally each
/// weight's matches for one table (match_rule_patterns, plan/residency_planner.hpp).
struct plan_patterns {
  std::vector<pattern> skip_modules;             ///< `skip_modules_pattern`
  std::vector<pattern> always_resident_modules;  ///< `always_resident_modules_pattern`
  std::vector<pattern> resident_modules;  ///< `resident_module_patterns` (empty: "auto")
  /// Per always_resident_modules entry, 1 when its text is a built-in default's.
  std::vector<char> always_resident_builtin;
  /// Per weight of matched_table, its matches (match_rule_patterns); empty when not matched.
  std::vector<weight_pattern_matches> matches;
  const weight_table* matched_table = nullptr;  ///< the table matches is for
};

/// @brief The index of the first pattern of @p list in @p patterns that matches somewhere in
/// @p module, or -1.
[[nodiscard]] inline std::int32_t first_matching_pattern(const plan_patterns& patterns,
                                                         rule_patterns list,
                                                         std::string_view module) {
  const bool skip = list == rule_patterns::skip;
  const auto& ps = skip ? patterns.skip_modules : patterns.always_resident_modules;
  for (std::size_t k = 0; k < ps.size(); ++k) {
    if (!skip &&
        (patterns.always_resident_builtin[k] != 0) != (list == rule_patterns::builtin_always))
      continue;
    if (ps[k].search(module)) return static_cast<std::int32_t>(k);
  }
  return -1;
}

/// @brief The pattern at @p index of @p list (first_matching_pattern's answer), or nullptr for -1.
[[nodiscard]] inline const pattern* pattern_at(const plan_patterns& patterns, rule_patterns list,
                                               std::int32_t index) noexcept {
  if (index < 0) return nullptr;
  const auto& ps =
      list == rule_patterns::skip ? patterns.skip_modules : patterns.always_resident_modules;
  return &ps[static_cast<std::size_t>(index)];
}

/// @brief @p patterns' matches of @p table's weights (match_rule_patterns), or nullptr when they
/// were matched for no table or another one.
[[nodiscard]] inline const weight_pattern_matches* matches_of(const plan_patterns& patterns,
                                                              const weight_table& table) noexcept {
  return patterns.matched_table == &table && patterns.matches.size() == table.size()
             ? patterns.matches.data()
             : nullptr;
}

/// @brief Compiles the patterns of @p config that planning uses.
/// @throws config_error (source "config", key the field name) naming the pattern and the
/// construct outside the dialect.
[[nodiscard]] inline plan_patterns compile_plan_patterns(const dynamic_offload_config& config) {
  const auto compile = [](const std::vector<std::string>& texts, const char* field) {
    std::vector<pattern> out;
    out.reserve(texts.size());
    for (const auto& text : texts) {
      try {
        out.emplace_back(text);
      } catch (const pattern_error& e) {
        throw config_error(
            origin::config, field,
            std::string(field) + ": '" + text + "' is not a valid regular expression: " + e.what());
      }
    }
    return out;
  };
  plan_patterns out;
  out.skip_modules = compile(config.skip_modules_pattern, "skip_modules_pattern");
  out.always_resident_modules =
      compile(config.always_resident_modules_pattern, "always_resident_modules_pattern");
  out.resident_modules = compile_block_patterns(config.resident_module_patterns);
  const auto builtin = builtin_always_resident_patterns();
  for (const auto& p : out.always_resident_modules)
    out.always_resident_builtin.push_back(
        std::find(builtin.begin(), builtin.end(), p.text()) != builtin.end() ? 1 : 0);
  return out;
}

}  // namespace v0
}  // namespace ddo
