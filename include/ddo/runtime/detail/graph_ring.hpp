// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Graph streaming's ring (not API; issue 29, docs/transports.md "CUDA graphs"): the slot
/// map that repeats every step and the per-position handshake state. A captured graph holds the
/// slot addresses of its capture, so position p of the step (the p-th streamed group in plan
/// order) always uses slot p mod S, whatever the streamed-group count N is modulo S; the eager
/// ring's overall-position map would repeat only every S / gcd(N, S) steps.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddo/transport/concepts.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// Transports the runtime streams through a captured graph: memory operations and graphs, with
/// slot addresses the runtime owns (linear: the graph loads them itself, every ordering a CUDA
/// edge) or stable addresses its binder maps (the legacy VMM route: ready and released flags
/// below). A transport that binds slots itself (bind_slot) is not one.
template <class T>
concept graph_streaming_transport =
    transport_with_graph_streaming<T> && !transport_with_slot_binding<T>;

template <class T>
struct graph_ring {
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  std::size_t positions = 0;               // N: streamed groups per step
  std::size_t slots = 0;                   // S
  std::vector<std::size_t> position_of;    // per group: its position in the step, or none
  std::uint32_t* ready = nullptr;          // per position: 1 once loaded, reset to 0 by the graph
  // Stable-address transports (VMM): per position, 1 once the graph is done with it (a write node
  // after its kernels), reset to 0 by ddo's binder before it unmaps the position's range. The
  // binder is a host thread: an event would be ambiguous to it (its wait takes the record as of
  // the call, which may be the next launch's), a flag reset by its consumer is not.
  std::uint32_t* released = nullptr;
  std::vector<typename T::event> release;  // per position: recorded by the graph (record node)
  // Slot-owning transports (linear): no memory waits. Per position, the end of its load: for the
  // first S positions a record on ddo's copy stream before each launch, which the graph's event
  // wait node takes as of the launch; for the others a record_edge inside the graph, after the
  // load the capture forked onto `side` at the release of the slot's previous occupant.
  std::vector<typename T::event> loaded;
  typename T::event fork;  // record_edge on the capturing stream where a load forks off
  typename T::stream side;  // the capture's load branch (its nodes run inside every launch)
  // With adapters attached: the capture's merge branch, forked off `side` at `copied` after a
  // load's copies, so that the merges of position p run while `side` copies p + 1.
  typename T::stream merge_side;
  typename T::event copied;
  typename T::event done;                  // recorded on the engine's stream after each launch
  std::vector<int> held;                   // per slot: captured leases alive
  std::size_t captured = 0;                // positions captured so far in the step being captured
  // The step being captured: the stream of its first acquire and that stream's capture. Every
  // captured acquire orders its wait on this stream (docs/cuda-graphs.md: one stream).
  typename T::stream_view stream{};
  std::uint64_t capture = 0;
  std::size_t launches = 0;
  std::string broken;  // why the captured step cannot be launched (empty: it can)
  bool active = false;

  [[nodiscard]] std::size_t slot_of(std::size_t p) const noexcept { return p % slots; }
  /// Flags allocated: ready and released, one each per position, on a stable-address transport
  /// (its loads run on ddo's staging thread, outside the graph); none where the graph loads.
  [[nodiscard]] std::size_t flag_count() const noexcept {
    return transport_with_stable_addresses<T> ? 2 * positions : 0;
  }
  /// The position whose release the load of @p p waits on: the slot's previous occupant, in this
  /// step (p - S) or, for the first S positions, the slot's last occupant of the previous step.
  [[nodiscard]] std::size_t previous(std::size_t p) const noexcept {
    return p >= slots ? p - slots : p + slots * ((positions - 1 - p) / slots);
  }
  /// Host writes: every ready flag 1, so a graph waiting on a load that will never come runs to
  /// its end (teardown) instead of hanging.
  void release_waiters() noexcept {
    for (std::size_t p = 0; p < positions && ready != nullptr; ++p)
      std::atomic_ref<std::uint32_t>(ready[p]).store(1, std::memory_order_release);
  }
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo
