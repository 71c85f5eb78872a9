// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::budget_move: what one move of a running offloader's device budget did
/// (basic_offloader::move_budget, setup/device_budget.hpp's set_device_budget), as
/// offload_metrics::budget_moves reports it. A move keeps every resident piece (a group's
/// resident weights, one device allocation) whose weights stay, frees the ring and the pieces
/// that change, then allocates the new pieces and the ring: ddo's device bytes never exceed
/// max(before, after) during it (docs/design.md, "A device budget that moves").

#include <cstddef>
#include <cstdint>

namespace ddo {
inline namespace v0 {

/// @brief One budget move (see the file comment). Bytes are weight bytes unless named device.
struct budget_move {
  std::uint64_t step = 0;                 ///< the metrics step it was applied before
  bool deferred = false;                  ///< asked with leases alive: applied at a later boundary
  std::uint64_t budget_before_bytes = 0;  ///< runtime_options::device_budget_bytes (0: none)
  std::uint64_t budget_after_bytes = 0;
  std::uint64_t device_before_bytes = 0;  ///< ddo's device bytes (resident pieces + ring)
  std::uint64_t device_after_bytes = 0;
  /// The most device bytes ddo held during the move, sampled after every free and allocation.
  std::uint64_t device_peak_bytes = 0;
  std::size_t weights_promoted = 0;  ///< streamed before, resident after
  std::size_t weights_demoted = 0;   ///< resident before, streamed after
  std::uint64_t bytes_promoted = 0;
  std::uint64_t bytes_demoted = 0;
  /// Weight bytes read from their sources (host memory or file) for the move: the resident
  /// pieces uploaded and the pinned blocks packed anew; each at most once.
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_uploaded = 0;  ///< of bytes_read, copied to the device (resident pieces)
  /// Of bytes_read, packed into new pinned blocks: the offloader's own, or with a weight
  /// registry (cache_pinned_weights' default source) the pieces the registry read for the move.
  std::uint64_t bytes_packed = 0;
  std::size_t pieces_kept = 0;       ///< resident pieces left where they were
  std::size_t pieces_moved = 0;      ///< resident pieces freed or allocated anew
  std::uint64_t slot_bytes_before = 0;  ///< one ring slot (the largest streamed group)
  std::uint64_t slot_bytes_after = 0;
  std::size_t slots_before = 0;
  std::size_t slots_after = 0;
  double wait_ms = 0;  ///< host time waiting for ddo's loads and the engine's released work
  double move_ms = 0;  ///< the whole move, the wait included
};

}  // namespace v0
}  // namespace ddo
