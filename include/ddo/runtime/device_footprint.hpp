// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The device bytes the offload runtime needs besides resident weights: the slot ring and
/// a fixed reserve. One formula, used both by setup (the machine the plan sees) and by the
/// runtime's own budget check, so what is planned is what is allocated.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ddo/core/units.hpp"
#include "ddo/model/weight_table.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Device bytes kept free beyond the runtime's own allocations when an offloader plans
/// for itself (CUDA context growth, cuBLAS workspaces the engine did not state, fragmentation).
inline constexpr std::uint64_t runtime_device_reserve_bytes = 64 * mib;

/// @brief Bytes of one ring slot holding the weights @p weights of @p table, each placed at an
/// @p alignment boundary (as the runtime lays a streamed group out in its slot).
/// @param alignment a power of two (runtime_options::alignment).
[[nodiscard]] inline std::uint64_t slot_bytes_for(const weight_table& table,
                                                  std::span<const std::size_t> weights,
                                                  std::uint64_t alignment) noexcept {
  std::uint64_t cursor = 0;
  for (std::size_t w : weights) cursor = round_up(cursor + table[w].bytes, alignment);
  return cursor;
}

/// @brief Bytes of the slot ring: @p slot_count slots of @p largest_slot_bytes each.
[[nodiscard]] constexpr std::uint64_t ring_bytes_for(std::uint64_t largest_slot_bytes,
                                                     std::size_t slot_count) noexcept {
  return largest_slot_bytes * static_cast<std::uint64_t>(slot_count);
}

}  // namespace v0
}  // namespace ddo
