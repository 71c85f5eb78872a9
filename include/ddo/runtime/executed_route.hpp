// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::executed_route: the route an offloader runs (runtime_options::route, reported in
/// offload_metrics::route): the component's route as setup executed it, the VMM routes named
/// apart (a component_route says what was asked; this says what runs).

#include <array>
#include <string_view>

#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The route that runs.
enum class executed_route {
  none,                     ///< every weight uploaded once, nothing streams
  dynamic_offload,          ///< the planned ring (linear, file route, or a VMM transport's window)
  diffusers_group_offload,  ///< the Diffusers group-offload translation (runtime/routes.hpp)
  vmm_runtime,              ///< the legacy VMM route: two pinned staging buffers
  vmm_fast_runtime,         ///< the native VMM route: registered windows, retained sources
};

template <>
struct enum_names<executed_route> {
  static constexpr std::array<std::string_view, 5> values = {
      "none", "dynamic_offload", "diffusers_group_offload", "vmm_runtime", "vmm_fast_runtime"};
};

/// @brief "none", "dynamic_offload", "diffusers_group_offload", "vmm_runtime" or
/// "vmm_fast_runtime".
[[nodiscard]] constexpr std::string_view to_string(executed_route route) noexcept {
  return enum_name(route);
}

/// @brief Whether @p route is one of the two VMM routes.
[[nodiscard]] constexpr bool is_vmm_route(executed_route route) noexcept {
  return route == executed_route::vmm_runtime || route == executed_route::vmm_fast_runtime;
}

}  // namespace v0
}  // namespace ddo
