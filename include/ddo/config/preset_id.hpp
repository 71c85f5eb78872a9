// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::preset_id: the built-in presets as an enum, with their canonical names.

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace ddo {
inline namespace v0 {

/// @brief Every preset a caller may request. auto_select ("auto") is resolved to one of the
/// others by ddo::resolve_preset (config/presets.hpp); docs/presets.md gives each one's values.
enum class preset_id {
  auto_select,                    ///< "auto": platform-aware choice
  one_shot_fast,                  ///< pin everything that fits, balanced resident budget
  low_ram_safe,                   ///< no pinning, mmap loading, larger RAM headroom
  wsl_compat,                     ///< WSL: no pinning
  diffusers_offload_compat,       ///< group offload, block level
  diffusers_leaf_offload_compat,  ///< group offload, leaf level
  off,                            ///< ddo applies no offload route
  warm_process,                   ///< long-lived process: caches pinned weights
  nvme_baseline,                  ///< stream from the weights' files
  vmm_fast_runtime,               ///< native VMM route
};

/// @brief The canonical preset names, indexed by preset_id.
inline constexpr std::array<std::string_view, 10> preset_id_names = {
    "auto",
    "one_shot_fast",
    "low_ram_safe",
    "wsl_compat",
    "diffusers_offload_compat",
    "diffusers_leaf_offload_compat",
    "off",
    "warm_process",
    "nvme_baseline",
    "vmm_fast_runtime"};

/// @brief "auto", "one_shot_fast", ...
[[nodiscard]] constexpr std::string_view to_string(preset_id id) noexcept {
  const auto index = static_cast<std::size_t>(id);
  return index < preset_id_names.size() ? preset_id_names[index] : std::string_view{};
}

/// @brief The preset named @p name (exact, canonical spelling), or nullopt.
[[nodiscard]] constexpr std::optional<preset_id> parse_preset(std::string_view name) noexcept {
  for (std::size_t i = 0; i < preset_id_names.size(); ++i)
    if (preset_id_names[i] == name) return static_cast<preset_id>(i);
  return std::nullopt;
}

}  // namespace v0
}  // namespace ddo
