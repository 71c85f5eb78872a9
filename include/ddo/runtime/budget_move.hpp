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
  /// Weight bytes read from their sources (the engine's host memory or the files) for the
  /// move: of bytes_uploaded, what no page-locked host copy held; of bytes_packed, what neither
  /// the device nor an old host copy held. Each byte at most once, and never more than a fresh setup for the new
  /// budget reads.
  std::uint64_t bytes_read = 0;
  /// Copied to the device into the resident pieces allocated anew (promoted weights, and those
  /// of a piece whose weights changed).
  std::uint64_t bytes_uploaded = 0;
  /// Of bytes_uploaded, copied straight from the old plan's page-locked host copies (promoted
  /// weights that were pinned): no read.
  std::uint64_t bytes_uploaded_from_pinned = 0;
  /// Packed into new host copies: the offloader's own pinned blocks, or with a weight registry
  /// (cache_pinned_weights' default source) or a shared_weight_store the pieces it lacked.
  std::uint64_t bytes_packed = 0;
  /// Of bytes_packed, copied back from the device (demoted weights: their bytes were resident,
  /// so the move does not read their sources again).
  std::uint64_t bytes_copied_to_host = 0;
  /// Of bytes_packed, copied from the old plan's page-locked host copies (a group whose packed
  /// weights changed gets a new block; those it pinned before come from the old one).
  std::uint64_t bytes_repacked = 0;
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
