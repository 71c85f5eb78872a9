// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Group layout (not API): where every weight of a plan goes — its offset in the resident
/// arena, or its offset in a ring slot and the source its bytes come from — computed once at
/// setup from the table, the plan and the runtime options. Pure host logic: no transport.
///
/// Slot layout of a streamed group: pinned weights packed into a block first (one contiguous
/// copy), then pinned weights registered in place (one copy each), then staged weights
/// (pageable and file, through the staging buffers). Every weight starts at an alignment
/// boundary, so a group's slot is slot_bytes_for() of its streamed weights (device_footprint.hpp).
///
/// On a stable-address (VMM) route the layout is split: a group's image holds the weights the
/// route covers (dense BF16/FP16 linear weights, component_ownership.hpp) and is mapped at the
/// group's stable address; the weights it does not cover keep their planned placement, so the
/// streamed ones go to a *side part* (a group_runtime of its own in group_layout::side_parts,
/// laid out the same way) that the runtime copies into a linear side image of the slot.

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/linkage.hpp"
#include "ddo/memory/pinned_weight_cache.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/runtime/metrics.hpp"
#include "ddo/runtime/runtime_options.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

inline constexpr std::size_t no_group = std::numeric_limits<std::size_t>::max();
inline constexpr std::uint64_t not_streamed = std::numeric_limits<std::uint64_t>::max();

/// Bytes of one weight copied from host memory or read from a file into a device range.
struct staged_piece {
  std::uint64_t slot_offset = 0;     // offset in the destination (slot or resident arena)
  std::uint64_t bytes = 0;
  const std::byte* host = nullptr;   // host source; null: read from file
  std::size_t file = 0;
  std::uint64_t file_offset = 0;
  transfer_source source = transfer_source::pageable_staged;
};

/// Everything the runtime precomputes about one execution group.
struct group_runtime {
  std::string name;
  std::vector<std::size_t> weights;        // weight-table indices, plan order
  std::vector<std::uint64_t> slot_offset;  // per weight; not_streamed for resident ones
  std::vector<std::byte*> resident;        // per weight; resident device address or null
  std::uint64_t pinned_bytes = 0;          // slot bytes [0, pinned_bytes) come from block_data()
  std::uint64_t packed_weight_bytes = 0;   // weight bytes in `block` (without alignment)
  std::shared_ptr<pinned_block> block;     // its own, or one that tiny groups share
  std::uint64_t block_offset = 0;          // where this group's bytes start in `block`
  std::vector<staged_piece> in_place;      // pinned weights registered where the engine has them
  std::vector<staged_piece> staged;        // sorted by slot offset
  std::uint64_t slot_bytes = 0;            // bytes of the slot this group uses
  std::array<std::uint64_t, transfer_source_count> bytes_by_source{};
  std::vector<std::byte*> pointers;        // lease pointers of a group that is not streamed
  int leases = 0;
  bool pinned_staged = false;              // pinning failed: the block is staged like pageable
  std::size_t side = no_group;             // its side part (group_layout::side_parts), if any
  [[nodiscard]] std::byte* block_data() const noexcept { return block->data() + block_offset; }
  [[nodiscard]] bool streamed() const noexcept { return slot_bytes > 0 || side != no_group; }
  [[nodiscard]] bool has_block_copy() const noexcept { return pinned_bytes > 0 && !pinned_staged; }
  [[nodiscard]] bool has_copy_part() const noexcept { return has_block_copy() || !in_place.empty(); }
  [[nodiscard]] bool has_staged_part() const noexcept { return !staged.empty(); }
  [[nodiscard]] std::uint64_t load_bytes() const noexcept {
    std::uint64_t n = 0;
    for (auto b : bytes_by_source) n += b;
    return n;
  }
};

/// The layout of a whole plan.
struct group_layout {
  std::vector<group_runtime> groups;
  std::vector<std::size_t> by_name;             // the groups sorted by name (find_group)
  std::vector<std::size_t> group_of;            // per weight: its group or no_group
  /// Per weight: its offset in its resident piece, or not_streamed. The residents are kept in
  /// one device allocation per group (a piece; the ungrouped residents in one more, index
  /// groups.size()), so that a budget move frees exactly the groups it demotes (docs/design.md).
  std::vector<std::uint64_t> resident_offset;
  std::vector<std::uint64_t> resident_piece_bytes;  // per piece (aligned; 0: none)
  std::uint64_t resident_bytes = 0;             // all pieces (aligned)
  std::uint64_t resident_weight_bytes = 0;      // weight bytes in the arena (unaligned)
  std::uint64_t slot_bytes = 0;                 // the largest streamed group's slot
  std::size_t slot_count = 0;                   // slots of the ring (0: nothing streamed)
  std::size_t prefetch_depth = 0;               // bounded by the ring
  std::size_t max_group_weights = 0;            // most weights in one streamed group
  std::vector<std::size_t> streamed_order;      // streamed groups, plan order
  std::vector<char> file_used;                  // per table file: read by this plan (0/1)
  bool staging_needed = false;                  // some bytes go through the staging buffers
  /// Split layouts only (file comment): the side parts, and the largest one's slot. A side
  /// part's weights list is its group's; slot_offset marks the weights laid out in it.
  std::vector<group_runtime> side_parts;
  std::uint64_t side_slot_bytes = 0;

  /// Calls f(group_runtime&) for every part that holds copies: the groups, then the side parts.
  template <class F>
  void for_each_part(F&& f) {
    for (auto& gr : groups) f(gr);
    for (auto& gr : side_parts) f(gr);
  }
  template <class F>
  void for_each_part(F&& f) const {
    for (const auto& gr : groups) f(gr);
    for (const auto& gr : side_parts) f(gr);
  }

  /// Whether pinned weight @p w is copied into a packed block (not registered in place, nor
  /// copied from a shared_weight_store or weight_registry, whose addresses setup fills in).
  [[nodiscard]] static bool packed(const weight_table& table, const runtime_options& o,
                                   std::size_t w) {
    if (o.shared_host_copies()) return false;
    return !(o.pin_in_place && std::holds_alternative<host_source>(table[w].source));
  }
  [[nodiscard]] std::optional<std::size_t> find_group(std::string_view name) const;
  /// The resident piece weight @p w is kept in when resident: its group's, or the last one.
  [[nodiscard]] std::size_t resident_piece_of(std::size_t w) const noexcept {
    return group_of[w] == no_group ? groups.size() : group_of[w];
  }
  /// Whether piece @p p holds the same weights at the same offsets in @p other (a budget move
  /// keeps such a piece where it is).
  [[nodiscard]] bool same_resident_piece(const group_layout& other, std::size_t p,
                                         const std::vector<std::size_t>& weights) const noexcept {
    if (resident_piece_bytes[p] != other.resident_piece_bytes[p]) return false;
    for (std::size_t w : weights)
      if (resident_offset[w] != other.resident_offset[w]) return false;
    return true;
  }
  /// Weight bytes that setup reads from files (packed pinned weights and residents).
  [[nodiscard]] std::uint64_t pinned_weight_bytes() const noexcept;
  /// The largest piece read from a file (0: none): a staged piece without host bytes, or a
  /// resident weight whose source is a file.
  [[nodiscard]] std::uint64_t largest_file_piece(const weight_table& table) const;
};

/// Validates @p plan against @p table and lays it out. Normalises @p options in place (the
/// chunk floor of max_copy_bytes). @p split_uncovered: a stable-address route that does not own
/// the whole component (file comment). @throws usage_error naming the weight, group or option.
/// This and open_source_files are templates of no use but their own: a non-template inline
/// function is analysed, and the library templates it calls instantiated, in every header-only
/// TU that includes the runtime (11 MB of GCC's memory in one including <ddo/ddo.hpp>;
/// docs/development.md); compiled once, the instantiating TU holds their one copy (extern below).
template <class = void>
[[nodiscard]] group_layout make_group_layout(const weight_table& table, const offload_plan& plan,
                                             runtime_options& options, bool split_uncovered = false);

/// The table's files this layout reads (null for files it does not); @p faults (may be null) is
/// consulted before every read. @p backend is load_safetensors_backend as the runtime takes it
/// (runtime_options::file_backend): pread reads each weight once into its final host home (a
/// pinned block, a staging buffer); mmap copies into the same home out of a read-only mapping
/// advised sequential and drops each read's mapped pages behind it (file_reader_options::
/// drop_mapped_pages), so no page is held twice — a mapping kept whole would add the file's
/// pages to the process's RSS on top of that copy (2.13x the weights measured on the pinned
/// route). The page cache keeps the file either way, so a second run reads memory, not the disk.
using source_files = std::vector<std::unique_ptr<file_reader>>;
template <class = void>
[[nodiscard]] source_files open_source_files(
    const weight_table& table, const group_layout& layout, file_fault_hook* faults = nullptr,
    safetensors_backend backend = safetensors_backend::pread);

#if !DDO_HEADER_ONLY
extern template group_layout make_group_layout<>(const weight_table&, const offload_plan&,
                                                 runtime_options&, bool);
extern template source_files open_source_files<>(const weight_table&, const group_layout&,
                                                 file_fault_hook*, safetensors_backend);
#endif

}  // namespace detail
}  // namespace v0
}  // namespace ddo

#if DDO_HEADER_ONLY
#include "ddo/runtime/detail/group_layout_impl.hpp"
#endif
