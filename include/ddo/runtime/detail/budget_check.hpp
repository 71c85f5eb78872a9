// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The runtime's own budget check (not API): a plan whose resident arena plus slot ring
/// does not fit the device budget or the free device memory, or whose pinned weights exceed the
/// pinned budget, is refused at setup with the numbers. The ring is ring_bytes_for() of the
/// layout's largest slot (device_footprint.hpp): the formula setup uses for the machine the plan
/// sees, so what is planned is what is allocated.

#include <cstdint>
#include <string>

#include "ddo/core/error.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/runtime/detail/group_layout.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/runtime/device_footprint.hpp"
#include "ddo/runtime/runtime_options.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// Device bytes the runtime allocates for @p layout: resident arena + ring (no ring for a
/// stable-address transport: its window is sized, and refused, by the transport itself).
[[nodiscard]] inline std::uint64_t runtime_device_bytes(const group_layout& layout,
                                                        bool ring = true) noexcept {
  return layout.resident_bytes + (ring ? ring_bytes_for(layout.slot_bytes, layout.slot_count) : 0);
}

/// @throws out_of_memory(memory_tier::device, ...) or out_of_memory(memory_tier::pinned_host, ...)
/// with the numbers.
/// @param device_free_bytes what the transport reports free now.
/// @param ring whether the runtime allocates a ring (false for stable-address transports).
inline void check_runtime_budgets(const group_layout& layout, const offload_plan& plan,
                                  const runtime_options& options, std::uint64_t device_free_bytes,
                                  bool ring = true) {
  const std::uint64_t need = runtime_device_bytes(layout, ring);
  auto describe = [&] {
    if (!ring) return "resident weights " + format_bytes_exact(layout.resident_bytes);
    return "resident weights " + format_bytes_exact(layout.resident_bytes) + " + ring of " +
           std::to_string(layout.slot_count) + " slots x " + format_bytes_exact(layout.slot_bytes) +
           " (the largest streamed group) = " + format_bytes_exact(need);
  };
  if (options.device_budget_bytes != 0 && need > options.device_budget_bytes)
    throw out_of_memory(memory_tier::device, need, options.device_budget_bytes,
                        "offloader setup refused: " + describe() +
                            " exceeds the device budget of " +
                            format_bytes_exact(options.device_budget_bytes) +
                            "; lower the resident budget, use smaller groups or fewer slots");
  if (need > device_free_bytes)
    throw out_of_memory(memory_tier::device, need, device_free_bytes,
                        "offloader setup refused: " + describe() + " but only " +
                            format_bytes_exact(device_free_bytes) + " of device memory are free");
  const std::uint64_t pinned = layout.pinned_weight_bytes();  // as the planner counted them
  const std::uint64_t pin_budget = options.pinned_budget_bytes != 0 ? options.pinned_budget_bytes
                                                                    : plan.budgets.pin_budget_bytes;
  if (pin_budget != 0 && pinned > pin_budget)
    throw out_of_memory(memory_tier::pinned_host, pinned, pin_budget,
                        "offloader setup refused: the plan pins " + format_bytes_exact(pinned) +
                            " but the pinned budget is " + format_bytes_exact(pin_budget));
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
