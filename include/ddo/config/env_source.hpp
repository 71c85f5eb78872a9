// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::env_source: the `DDO_*` environment as a config source. It reads a map of
/// variables given to it (tests pass their own); ddo::process_environment() snapshots the real one.

#include <array>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/config/concepts.hpp"
#include "ddo/config/config_layer.hpp"
#include "ddo/core/linkage.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Variables ddo recognizes that are not config fields (settings, bootstrap controls).
inline constexpr std::array<std::string_view, 9> settings_variables = {
    "DDO_PRESET",          "DDO_PLAN",            "DDO_DISABLE_PIN_ON_WSL",
    "DDO_PROFILE_DIR",     "DDO_SAFETENSORS_BACKEND", "DDO_VMM_LIBRARY_PATH",
    "DDO_VMM_TORCH_CACHE_MIB", "DDO_VMM_ALLOCATOR_ROOT", "DDO_BACKEND"};

/// @brief The suffixes of per-component variables DDO_<COMPONENT>_<SUFFIX> (and the
/// compatibility alias DDO_RUNNER_<COMPONENT>_<SUFFIX>), longest first so matching is unambiguous.
inline constexpr std::array<std::string_view, 8> component_variable_suffixes = {
    "OFFLOAD_LOW_CPU_MEM_USAGE", "OFFLOAD_RECORD_STREAM", "NUM_BLOCKS_PER_GROUP",
    "DYNAMIC_OFFLOAD",           "GROUP_OFFLOAD",         "OFFLOAD_STREAM",
    "OFFLOAD_TYPE",              "ROUTE"};

/// @brief Prefix of the lifecycle variables DDO_PURGE_WINDOWS_STANDBY_<PHASE>.
inline constexpr std::string_view purge_variable_prefix = "DDO_PURGE_WINDOWS_STANDBY_";

/// @brief The `DDO_*` environment as a config source (origin env).
struct env_source {
  using source_category = config_source_tag;  ///< opts in to ddo::config_source

  /// Variable name → value. Only names starting with DDO_ are looked at.
  std::map<std::string, std::string> variables;

  /// @brief Parses every DDO_* variable: config fields (by the registry), DDO_PRESET, DDO_PLAN,
  /// DDO_DISABLE_PIN_ON_WSL, DDO_PROFILE_DIR, DDO_PURGE_WINDOWS_STANDBY_<PHASE>, the
  /// DDO_SAFETENSORS_BACKEND alias, DDO_<COMPONENT>_* and DDO_RUNNER_<COMPONENT>_*. An unknown
  /// DDO_* variable adds a warning naming the closest known one.
  /// @throws config_error naming the variable, the value seen and what is allowed.
  [[nodiscard]] config_layer collect() const;
};
static_assert(config_source<env_source>);

/// @brief A snapshot of this process's DDO_* environment variables.
[[nodiscard]] std::map<std::string, std::string> process_environment();

}  // namespace v0
}  // namespace ddo

#if DDO_HEADER_ONLY
#include "ddo/config/detail/env_source_impl.hpp"
#endif
