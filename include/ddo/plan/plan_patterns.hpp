// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::plan_patterns: the module-name patterns of a config, compiled once per plan
/// (make_plan compiles them and hands them to group inference and to the residency planner
/// through plan_context::patterns).

#include <string>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/pattern.hpp"
#include "ddo/model/execution_groups.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The config's module-name patterns, compiled (core/pattern.hpp).
struct plan_patterns {
  std::vector<pattern> skip_modules;             ///< `skip_modules_pattern`
  std::vector<pattern> always_resident_modules;  ///< `always_resident_modules_pattern`
  std::vector<pattern> resident_modules;  ///< `resident_module_patterns` (empty: "auto")
};

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
  return out;
}

}  // namespace v0
}  // namespace ddo
