// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief How large ddo's two pinned staging buffers are (not API), from the layout: a buffer
/// never needs more than the largest span one staging pass copies through it, so the setting
/// (`staging_buffer_bytes`, `vmm_staging_buffer_gb` on the VMM route) is a cap, not a size. A plan
/// whose streamed groups stage nothing (everything pinned) keeps no staging buffer while it runs:
/// the residents' upload at setup borrows buffers of the residents' span, freed after setup.

#include <algorithm>
#include <cstdint>
#include <variant>
#include <vector>

#include "ddo/core/units.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/runtime/detail/group_layout.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// What passes through the staging buffers, in bytes of destination span.
struct staging_demand {
  std::uint64_t run_bytes = 0;    ///< largest span of one group's buffered pieces (0: no group stages)
  std::uint64_t setup_bytes = 0;  ///< span of the residents uploaded through the buffers at setup
};

/// Whether @p p passes through the buffers: host bytes always; file bytes unless the transport
/// reads files into the device itself (@p files_bypass, transport_with_file_reads).
[[nodiscard]] inline bool buffered_piece(const staged_piece& p, bool files_bypass) noexcept {
  return p.host != nullptr || !files_bypass;
}

/// From the first buffered piece's start to the last one's end (@p pieces sorted by offset):
/// a buffer of this size takes a group's staged part in one chunk.
[[nodiscard]] inline std::uint64_t buffered_span(const std::vector<staged_piece>& pieces,
                                                 bool files_bypass) noexcept {
  std::uint64_t begin = 0, end = 0;
  bool any = false;
  for (const auto& p : pieces) {
    if (p.bytes == 0 || !buffered_piece(p, files_bypass)) continue;
    if (!any) begin = p.slot_offset;
    any = true;
    end = std::max(end, p.slot_offset + p.bytes);
  }
  return any ? end - begin : 0;
}

/// The demand of a layout (after pinning: a pinning fallback adds staged pieces).
[[nodiscard]] inline staging_demand staging_demand_of(const group_layout& l, const weight_table& table,
                                                      bool files_bypass) {
  staging_demand d;
  l.for_each_part([&](const group_runtime& gr) {
    d.run_bytes = std::max(d.run_bytes, buffered_span(gr.staged, files_bypass));
  });
  // Each resident piece is uploaded by a staging run of its own: the widest piece's span.
  std::vector<std::uint64_t> begin(l.resident_piece_bytes.size(), 0), end(begin.size(), 0);
  std::vector<char> any(begin.size(), 0);
  for (std::size_t w = 0; w < table.size(); ++w) {
    if (l.resident_offset[w] == not_streamed || table[w].bytes == 0) continue;
    if (files_bypass && std::holds_alternative<file_source>(table[w].source)) continue;
    const std::size_t p = l.resident_piece_of(w);
    const std::uint64_t at = l.resident_offset[w];
    begin[p] = any[p] ? std::min(begin[p], at) : at;
    any[p] = 1;
    end[p] = std::max(end[p], at + table[w].bytes);
  }
  for (std::size_t p = 0; p < begin.size(); ++p)
    if (any[p]) d.setup_bytes = std::max(d.setup_bytes, end[p] - begin[p]);
  return d;
}

/// Bytes of each of the two buffers: the larger demand capped by @p setting, rounded up to
/// 4 KiB (the smallest buffer the runtime accepts); 0 when nothing passes through them.
[[nodiscard]] inline std::uint64_t staging_buffer_bytes_for(const staging_demand& d,
                                                            std::uint64_t setting) noexcept {
  const std::uint64_t need = std::max(d.run_bytes, d.setup_bytes);
  if (need == 0) return 0;
  return std::min(round_up(need, std::uint64_t{4096}), round_up(setting, std::uint64_t{4096}));
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
