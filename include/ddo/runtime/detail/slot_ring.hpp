// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The slot ring (not API): slot_state<T>, a slot's device side (its memory, its
/// ready/release events). The policy — occupancy, eviction, prefetch — is ring_schedule
/// (core/detail/ring_schedule.hpp), which the step predictor replays as well.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ddo/core/detail/ring_schedule.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// A slot's device side.
template <class T>
struct slot_state {
  std::byte* base = nullptr;
  std::byte* image = nullptr;        // where the occupant's bytes are (base, or bound)
  std::byte* side_image = nullptr;   // stable-address routes: the linear side image (uncovered weights)
  std::vector<std::byte*> pointers;  // the occupant's weight addresses (lease pointers)
  bool released = false;             // a lease of the current occupant was dropped
  // Poisoned at a release (runtime_options::poison_released_slots): held out of the ring until
  // the engine's next call fences it (offloader_core::fence_poisoned), so that a read the engine
  // enqueued after the release, before that call, sees the poison, never the next group.
  bool poisoned = false;
  typename T::stream_view release_stream{};  // the stream of that drop
  std::uint64_t staged_ticket = 0;   // latest staging job into this slot
  // Adapters: the staging job that loaded the occupant recorded `ready` without the merge, which
  // the first acquire then enqueues on the merge stream (offloader_core::finish_pending_merge).
  bool merge_pending = false;
  typename T::event ready;           // recorded after the last copy into the slot
  typename T::event release;         // recorded when a lease on the slot is dropped
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo
