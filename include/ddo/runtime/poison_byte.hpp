// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::poison_byte: what poisoned slots hold (runtime_options::poison_slots and
/// poison_released_slots), so a read of bytes that were not loaded for the reader shows.

namespace ddo {
inline namespace v0 {

/// @brief 0xCD in every byte of a poisoned slot: in bf16 pairs, -4.3e8 (0xCDCD), far from any
/// weight a model holds, and a pattern ddo's synthetic weights never produce (they are never
/// zero, random per tensor).
inline constexpr int poison_byte = 0xCD;

}  // namespace v0
}  // namespace ddo
