// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::resolve_context: what resolution needs besides the config sources. A value header:
/// code that only passes a context along includes this, not the resolver (config/resolve.hpp,
/// which resolves).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddo/config/component_policy.hpp"
#include "ddo/memory/system_probe.hpp"

namespace ddo {
inline namespace v0 {

/// @brief What resolution needs besides the sources: the component being configured, the
/// machine, and the model.
struct resolve_context {
  /// The component being configured ("" for a whole pipeline or a plain model). Its policy's
  /// config overrides apply to the resolved config, and `route` applies to it.
  std::string component;
  std::vector<std::string> components;  ///< further components whose routes to resolve
  std::optional<component_route> route;  ///< explicit route for `component` (wins over policies)
  std::optional<std::uint64_t> model_bytes;  ///< total weight bytes, when known (for auto)
  std::optional<bool> vmm_supported;         ///< device VMM support, when known (for auto)
  std::optional<bool> running_on_wsl;        ///< overrides WSL detection (tests)
  std::optional<double> detected_ram_gb;     ///< overrides RAM detection (tests)
  /// Available RAM the engine states for its machine (ddo-plan and ddo-run --ram-gb, a planning
  /// service describing another host): auto decides on it instead of detected RAM; an
  /// `available_system_ram_gb` a source sets still wins.
  std::optional<std::uint64_t> stated_ram_bytes;
  system_paths paths;                        ///< where the probes read (tests inject files)
};

}  // namespace v0
}  // namespace ddo
