// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::memory_tier: the kinds of memory ddo budgets and reports on (out_of_memory names
/// one), with their canonical names.

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief A kind of memory a request can run out of.
enum class memory_tier {
  device,           ///< GPU memory (resident weights, the slot ring, transport allocations)
  pinned_host,      ///< page-locked host memory
  pageable_host,    ///< ordinary host memory
  host,             ///< host memory of unspecified kind (mappings, bench buffers)
  file,             ///< a weight's file (the NVMe route)
  transport_slot,   ///< one slot/staging buffer of a transport (an execution group must fit)
  staging,          ///< pinned staging buffers of the pageable and file routes
  vmm_backing,      ///< physical backing of the VMM route
  registered_host,  ///< host memory ddo mapped and registered (native VMM windows, retained
                    ///< sources)
};

template <>
struct enum_names<memory_tier> {
  static constexpr std::array<std::string_view, 9> values = {
      "device",         "pinned_host", "pageable_host", "host",           "file",
      "transport_slot", "staging",     "vmm_backing",   "registered_host"};
};
/// @brief The canonical names, indexed by memory_tier (enum_names<memory_tier>::values).
inline constexpr const auto& memory_tier_names = enum_names<memory_tier>::values;

/// @brief "device", "pinned_host", "pageable_host", "host", "file", "transport_slot",
/// "staging", "vmm_backing" or "registered_host".
[[nodiscard]] constexpr std::string_view to_string(memory_tier tier) noexcept {
  return enum_name(tier);
}

/// @brief The tier named @p name (canonical spelling), or nullopt.
[[nodiscard]] constexpr std::optional<memory_tier> parse_memory_tier(
    std::string_view name) noexcept {
  return parse_enum<memory_tier>(name);
}

}  // namespace v0
}  // namespace ddo
