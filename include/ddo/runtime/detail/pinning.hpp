// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Pinning (not API): each streamed group's pinned weights are packed into one
/// page-aligned block (the file read or memcpy is the first touch of its pages) and page-locked
/// with register_host, by pin_workers threads, one group at a time each; blocks are reused
/// through a pinned_weight_cache when the options give one. With a shared_weight_store the store
/// holds them instead: each weight read and page-locked once for every offloader sharing it; with
/// a weight_registry its pieces, the model held in use while the offloader lives. With
/// pin_in_place the engine's own
/// pages are registered instead (whole pages, overlapping ranges merged, each once). Where the
/// driver refuses, the bytes are staged like pageable memory (allow_pin_fallback) or setup fails.
/// Runs at setup only.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "ddo/memory/weight_registry.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/runtime/detail/group_layout.hpp"
#include "ddo/runtime/detail/setup_meter.hpp"
#include "ddo/runtime/runtime_options.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

namespace pinning_detail {
struct store_piece;
}  // namespace pinning_detail

/// Where a budget move's new host copies find bytes the offloader holds already, so a move
/// reads no source twice: a demoted weight's bytes are on the device still (copied back, device
/// to host), a weight pinned before and now packed into another block is in its old block
/// (copied host to host). Not used at setup (nothing is held yet).
struct move_sources {
  /// Weight @p w's bytes on the device, or null where it has none to copy (not resident, or an
  /// adapter merged into it: its device bytes are not its base).
  std::function<const std::byte*(std::size_t w)> address;
  /// Weight @p w's page-locked host copy of the plan in place, or null.
  std::function<const std::byte*(std::size_t w)> pinned;
  /// Queues a copy of @p bytes from the device's @p src to the host's @p dst.
  std::function<void(std::byte* dst, const std::byte* src, std::uint64_t bytes)> copy;
  /// Waits for every queued copy.
  std::function<void()> wait;
  std::uint64_t copied_bytes = 0;    ///< weight bytes copied from the device (out)
  std::uint64_t repacked_bytes = 0;  ///< weight bytes copied from old host copies (out)
};

/// A page range of the engine's memory registered in place.
struct host_page_range {
  std::uintptr_t begin = 0, end = 0;
  bool ok = false;
};

/// Whole-page ranges under @p layout's in-place pieces, sorted, overlapping and adjacent ones
/// merged. @p page must be a power of two. A template of no use but its own (pinning_impl.hpp
/// says why).
template <class = void>
[[nodiscard]] std::vector<host_page_range> in_place_page_ranges(const group_layout& layout,
                                                                std::uintptr_t page);

/// The pinned state of one offloader: what was registered, what fell back, what the cache gave.
template <class T>
class group_pinning {
 public:
  group_pinning() = default;
  group_pinning(const group_pinning&) = delete;
  group_pinning& operator=(const group_pinning&) = delete;

  /// Packs and page-locks every group of @p layout (see the file comment); falls back by adding
  /// staged pieces to the group. Reports reading, packing and pinning to @p meter, and calls
  /// @p planned (when given) once every total is planned, before any work: a setup that uploads
  /// beside the pinning starts its reports then, so no report sees a total grow. A budget move
  /// passes @p from_device: the weights it holds already are copied from there (move_sources).
  /// @throws out_of_memory(memory_tier::pinned_host, ...) when page-locking fails without fallback.
  void pin(T& t, group_layout& layout, const weight_table& table, const offload_plan& plan,
           const runtime_options& options, const source_files& files, setup_meter& meter,
           const std::function<void()>& planned = {}, move_sources* from_device = nullptr);
  /// Unregisters the engine pages registered in place (blocks unregister themselves when the
  /// last holder — the layout or the cache — lets go) and gives the registry's model use back
  /// (after teardown synchronised the streams: no copy reads its pieces any more).
  void release(T& t) noexcept;

  /// A budget move with pin_in_place: unregisters the engine pages registered in place (the
  /// move waited for every copy: nothing reads them), so that the new layout's ranges, which may
  /// overlap them, register whole.
  void release_in_place(T& t) noexcept;
  /// Registers @p layout's in-place pieces again after release_in_place (a move that failed):
  /// pieces the driver now refuses are staged, as at setup.
  void register_in_place(T& t, group_layout& layout, const runtime_options& options);

  /// Exchanges the state with @p o (a budget move pins its new layout beside the old one). The
  /// registry's model use goes with it: the pieces the new layout copies from are held in use
  /// for the offloader's life, and the old use (pieces only the old layout read) goes with the
  /// old state.
  void swap(group_pinning& o) noexcept {
    std::swap(registry_use_, o.registry_use_);
    registered_.swap(o.registered_);
    std::swap(pinned_bytes_, o.pinned_bytes_);
    std::swap(in_place_bytes_, o.in_place_bytes_);
    std::swap(fallback_bytes_, o.fallback_bytes_);
    std::swap(cached_reused_, o.cached_reused_);
  }
  [[nodiscard]] std::uint64_t pinned_bytes() const noexcept { return pinned_bytes_; }
  [[nodiscard]] std::uint64_t fallback_bytes() const noexcept { return fallback_bytes_; }
  [[nodiscard]] std::uint64_t cached_blocks_reused() const noexcept { return cached_reused_; }
  [[nodiscard]] std::size_t registered_ranges() const noexcept { return registered_.size(); }
  /// With a weight_registry: the bytes this setup read into it, and those it found held.
  [[nodiscard]] std::uint64_t registry_loaded_bytes() const noexcept {
    return registry_use_.loaded_bytes();
  }
  [[nodiscard]] std::uint64_t registry_reused_bytes() const noexcept {
    return registry_use_.reused_bytes();
  }

 private:
  void pin_in_place(T& t, group_layout& layout, const runtime_options& options,
                    std::vector<host_page_range> ranges, setup_meter& meter);
  /// pin()'s path with runtime_options::weight_store: the in-place pieces point into the store,
  /// the weights it lacks added to it first (memory/shared_weight_store.hpp).
  void pin_from_store(T& t, group_layout& layout, const weight_table& table,
                      const offload_plan& plan, const runtime_options& options,
                      const source_files& files, setup_meter& meter, move_sources* from_device);
  /// pin()'s path with runtime_options::registry: the in-place pieces point into the model's
  /// pieces, held in use (registry_use_) until release().
  void pin_from_registry(T& t, group_layout& layout, const weight_table& table,
                         const offload_plan& plan, const runtime_options& options,
                         const source_files& files, setup_meter& meter,
                         move_sources* from_device);
  /// The last step of both: each in-place piece at its held copy's address, adjacent pieces of
  /// one block merged, unregistered copies staged (or refused without fallback).
  void use_held(group_layout& layout, const std::vector<group_runtime*>& parts,
                const std::vector<std::vector<pinning_detail::store_piece>>& held_of,
                const weight_table& table, const runtime_options& options);

  model_use registry_use_;  // the registry's model, in use while this offloader lives
  std::vector<void*> registered_;  // engine pages registered in place
  std::uint64_t pinned_bytes_ = 0;
  std::uint64_t in_place_bytes_ = 0;  // of pinned_bytes_, the engine pages registered in place
  std::uint64_t fallback_bytes_ = 0;
  std::uint64_t cached_reused_ = 0;
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo

#include "ddo/runtime/detail/pinning_impl.hpp"
