// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief How a device refusal words the card: what is free for the plan, what took the rest
/// (machine_capacity::free_vram_detail: the ring, the reserves), and the smallest card that
/// would have done. Never "1 B free", the stand-in for a card already full (issue 37 item 5).

#include <cstdint>
#include <string>

#include "ddo/core/format_bytes.hpp"
#include "ddo/core/units.hpp"
#include "ddo/plan/machine_capacity.hpp"

namespace ddo {
inline namespace v0 {

/// @brief "only X of the device is free for the plan (card ...: ring ..., reserves ...)", or
/// "nothing of the device is free for the plan (N short) (...)" when the ring and the reserves
/// alone pass the card.
[[nodiscard]] inline std::string device_room_text(const machine_capacity& m) {
  std::string out = m.device_shortfall_bytes != 0
                        ? "nothing of the device is free for the plan (the ring and the reserves "
                          "pass it by " +
                              format_bytes(m.device_shortfall_bytes) + ")"
                        : "only " + format_bytes(m.free_vram_bytes) +
                              " of the device is free for the plan";
  if (!m.free_vram_detail.empty()) out += " (" + m.free_vram_detail + ")";
  return out;
}

/// @brief The smallest card (total device bytes) that holds @p needed bytes beside what took
/// @p m's card (its total less what is free, plus any shortfall); 0 when the total is unknown.
[[nodiscard]] inline std::uint64_t smallest_card_bytes(const machine_capacity& m,
                                                       std::uint64_t needed) noexcept {
  if (m.total_vram_bytes == 0) return 0;
  const std::uint64_t free = m.device_shortfall_bytes != 0 ? 0 : m.free_vram_bytes;
  const std::uint64_t taken = m.total_vram_bytes > free ? m.total_vram_bytes - free : 0;
  return saturating_add(saturating_add(taken, m.device_shortfall_bytes), needed);
}

/// @brief "; the smallest card that would do holds N" for a refusal's end ("" when unknown).
[[nodiscard]] inline std::string smallest_card_text(const machine_capacity& m,
                                                    std::uint64_t needed) {
  const std::uint64_t card = smallest_card_bytes(m, needed);
  return card == 0 ? std::string()
                   : "; the smallest card that would do has " + format_bytes(card);
}

}  // namespace v0
}  // namespace ddo
