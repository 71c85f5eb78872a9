// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Definitions of group_layout.hpp (not API).

#include <algorithm>
#include <string>
#include <variant>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/runtime/component_ownership.hpp"
// Part of ddo/runtime/detail/group_layout.hpp, which includes it (not back: no include cycles).
#include "ddo/runtime/device_footprint.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

DDO_INLINE std::optional<std::size_t> group_layout::find_group(std::string_view name) const {
  auto it = std::lower_bound(by_name.begin(), by_name.end(), name,
                             [&](std::size_t g, std::string_view n) { return groups[g].name < n; });
  if (it == by_name.end() || groups[*it].name != name) return std::nullopt;
  return *it;
}

DDO_INLINE std::uint64_t group_layout::pinned_weight_bytes() const noexcept {
  std::uint64_t pinned = 0;
  for_each_part([&](const group_runtime& gr) {
    pinned += gr.bytes_by_source[static_cast<std::size_t>(transfer_source::pinned)];
  });
  return pinned;
}

DDO_INLINE std::uint64_t group_layout::largest_file_piece(const weight_table& table) const {
  std::uint64_t largest = 0;
  for_each_part([&](const group_runtime& gr) {
    for (const auto& p : gr.staged)
      if (p.host == nullptr) largest = std::max(largest, p.bytes);
  });
  for (std::size_t w = 0; w < table.size(); ++w)
    if (resident_offset[w] != not_streamed && std::holds_alternative<file_source>(table[w].source))
      largest = std::max(largest, table[w].bytes);
  return largest;
}

namespace layout_detail {

/// Weight @p w's source and placement: a host source has bytes, a 'file' placement a file, and a
/// weight that is not resident a group (@p group_of) to stream with.
template <class = void>
void check_weight(const weight_table& table, const offload_plan& plan,
                             const std::vector<std::size_t>& group_of, std::size_t w) {
  const auto& info = table[w];
  const auto where = plan.decisions[w].where;
  if (const auto* h = std::get_if<host_source>(&info.source))
    DDO_EXPECTS(h->data != nullptr || info.bytes == 0,
                "offloader: weight '" + info.name + "' has a null host pointer");
  if (where == placement::file)
    DDO_EXPECTS(
        std::holds_alternative<file_source>(info.source),
        "offloader: weight '" + info.name + "' is placed 'file' but its source is host memory");
  DDO_EXPECTS(where == placement::gpu_resident || group_of[w] != no_group,
              "offloader: weight '" + info.name + "' is placed " + std::string(to_string(where)) +
                  " but belongs to no group, so it would never reach the device");
}

/// The plan, and the options' sizes, the layout is made from.
template <class = void>
void check_inputs(const weight_table& table, const offload_plan& plan,
                             const runtime_options& options) {
  DDO_EXPECTS(plan.decisions.size() == table.size(),
              "offloader: the plan has " + std::to_string(plan.decisions.size()) +
                  " decisions but the weight table has " + std::to_string(table.size()) +
                  " weights; make the plan from this table");
  const std::uint64_t align = options.alignment;
  DDO_EXPECTS(align != 0 && (align & (align - 1)) == 0,
              "runtime_options::alignment must be a power of two, got " + std::to_string(align));
  DDO_EXPECTS(options.staging_buffer_bytes >= 4096,
              "runtime_options::staging_buffer_bytes must be at least 4096, got " +
                  std::to_string(options.staging_buffer_bytes));
  DDO_EXPECTS(options.vmm_covered.empty() || options.vmm_covered.size() == table.size(),
              "runtime_options::vmm_covered has " + std::to_string(options.vmm_covered.size()) +
                  " entries but the weight table has " + std::to_string(table.size()) +
                  " weights; leave it empty or give one per weight");
}

/// One group's slot: pass 0 packed pinned weights, 1 pinned in place, 2 staged weights; only
/// the streamed weights @p in_part accepts (a split layout's image or side part).
template <class InPart>
void lay_out_slot(group_runtime& gr, const weight_table& table, const offload_plan& plan,
                  const runtime_options& options, InPart in_part) {
  const std::uint64_t align = options.alignment;
  gr.slot_offset.assign(gr.weights.size(), not_streamed);
  std::vector<std::size_t> streamed;
  std::uint64_t cursor = 0;
  for (int pass = 0; pass < 3; ++pass) {
    for (std::size_t i = 0; i < gr.weights.size(); ++i) {
      const std::size_t w = gr.weights[i];
      const auto where = plan.decisions[w].where;
      if (where == placement::gpu_resident || !in_part(w)) continue;
      const auto& info = table[w];
      const bool pinned = where == placement::pinned_host;
      const int weight_pass = !pinned ? 2 : (group_layout::packed(table, options, w) ? 0 : 1);
      if (weight_pass != pass) continue;
      streamed.push_back(w);
      gr.slot_offset[i] = cursor;
      if (pinned) {
        gr.bytes_by_source[static_cast<std::size_t>(transfer_source::pinned)] += info.bytes;
        if (pass == 0) gr.packed_weight_bytes += info.bytes;
        if (pass == 1 && info.bytes > 0) {
          staged_piece piece;
          piece.slot_offset = cursor;
          piece.bytes = info.bytes;
          // From a shared_weight_store or registry: the address is theirs, set at pinning.
          if (!options.shared_host_copies()) piece.host = std::get<host_source>(info.source).data;
          piece.source = transfer_source::pinned;
          gr.in_place.push_back(piece);
        }
      } else {
        staged_piece piece;
        piece.slot_offset = cursor;
        piece.bytes = info.bytes;
        if (const auto* f = std::get_if<file_source>(&info.source)) {
          piece.file = f->file_index;
          piece.file_offset = f->offset;
          piece.source = transfer_source::file;
        } else {
          piece.host = std::get<host_source>(info.source).data;
        }
        gr.bytes_by_source[static_cast<std::size_t>(piece.source)] += info.bytes;
        if (piece.bytes > 0) gr.staged.push_back(piece);
      }
      cursor = round_up(cursor + info.bytes, align);
    }
    if (pass == 0) gr.pinned_bytes = cursor;
  }
  // The same formula the planner's machine sees (device_footprint.hpp).
  gr.slot_bytes = slot_bytes_for(table, streamed, align);
}

}  // namespace layout_detail

template <class>
group_layout make_group_layout(const weight_table& table, const offload_plan& plan,
                                          runtime_options& options, bool split_uncovered) {
  layout_detail::check_inputs(table, plan, options);
  const std::uint64_t align = options.alignment;
  group_layout l;
  l.group_of.assign(table.size(), no_group);
  l.groups.resize(plan.groups.size());
  for (std::size_t g = 0; g < plan.groups.size(); ++g) {
    const auto& pg = plan.groups[g];
    auto& gr = l.groups[g];
    gr.name = pg.name.empty() ? "group " + std::to_string(g) : pg.name;
    gr.weights = pg.weights;
    for (std::size_t w : pg.weights) {
      DDO_EXPECTS(w < table.size(), "offloader: group '" + gr.name + "' names weight index " +
                                        std::to_string(w) + " but the table has " +
                                        std::to_string(table.size()) + " weights");
      DDO_EXPECTS(l.group_of[w] == no_group,
                  "offloader: weight '" + table[w].name + "' is in two groups ('" +
                      l.groups[l.group_of[w]].name + "' and '" + gr.name + "')");
      l.group_of[w] = g;
    }
  }
  // By name: 8 bytes a group (a hash map of the names cost about 70; issue 30 counts 200,000
  // groups). By (name, index), so the first of two groups with one name is found, as before.
  l.by_name.resize(l.groups.size());
  for (std::size_t g = 0; g < l.by_name.size(); ++g) l.by_name[g] = g;
  std::sort(l.by_name.begin(), l.by_name.end(), [&](std::size_t a, std::size_t b) {
    return l.groups[a].name != l.groups[b].name ? l.groups[a].name < l.groups[b].name : a < b;
  });
  // Residents: every gpu_resident weight in its group's piece (the ungrouped ones in the last
  // piece). Every other weight streams with its group: each file that holds a weight is read.
  l.resident_offset.assign(table.size(), not_streamed);
  l.resident_piece_bytes.assign(l.groups.size() + 1, 0);
  l.file_used.assign(table.files().size(), 0);
  for (std::size_t w = 0; w < table.size(); ++w) {
    const auto& info = table[w];
    layout_detail::check_weight(table, plan, l.group_of, w);
    if (const auto* f = std::get_if<file_source>(&info.source)) l.file_used[f->file_index] = 1;
    if (plan.decisions[w].where != placement::gpu_resident) continue;
    std::uint64_t& cursor = l.resident_piece_bytes[l.resident_piece_of(w)];
    l.resident_offset[w] = cursor;
    l.resident_weight_bytes += info.bytes;
    cursor = round_up(cursor + std::max<std::uint64_t>(info.bytes, 1), align);
    l.resident_bytes += round_up(std::max<std::uint64_t>(info.bytes, 1), align);
  }
  const auto covered = [&](std::size_t w) {
    if (!split_uncovered) return true;
    return options.vmm_covered.empty() ? vmm_covered_weight(table[w]) : options.vmm_covered[w] != 0;
  };
  for (std::size_t g = 0; g < l.groups.size(); ++g) {
    auto& gr = l.groups[g];
    layout_detail::lay_out_slot(gr, table, plan, options, covered);
    if (split_uncovered) {
      group_runtime side;
      side.name = gr.name + " (side)";
      side.weights = gr.weights;
      layout_detail::lay_out_slot(side, table, plan, options,
                                  [&](std::size_t w) { return !covered(w); });
      if (side.slot_bytes > 0) {
        gr.side = l.side_parts.size();
        l.side_slot_bytes = std::max(l.side_slot_bytes, side.slot_bytes);
        l.side_parts.push_back(std::move(side));
      }
    }
    l.slot_bytes = std::max(l.slot_bytes, gr.slot_bytes);
    if (gr.streamed()) {
      l.streamed_order.push_back(g);
      l.max_group_weights = std::max(l.max_group_weights, gr.weights.size());
    }
  }
  // Resident uploads go through the staging buffers too.
  l.staging_needed = l.resident_bytes > 0;
  l.for_each_part([&](const group_runtime& gr) { l.staging_needed |= gr.has_staged_part(); });
  l.slot_count = std::min(options.slot_count, l.streamed_order.size());
  DDO_EXPECTS(l.streamed_order.empty() || l.slot_count >= 1,
              "runtime_options::slot_count must be at least 1 when groups are streamed");
  l.prefetch_depth = std::min(options.prefetch_depth, l.slot_count);
  if (options.max_copy_bytes != 0) options.max_copy_bytes = std::max(options.max_copy_bytes, 16 * mib);
  return l;
}

template <class>
source_files open_source_files(const weight_table& table, const group_layout& layout,
                                          file_fault_hook* faults, safetensors_backend backend) {
  // "" (library_default) is pread here: ddo's measured default (docs/benchmarks.md).
  const bool mapped = backend == safetensors_backend::mmap;
  source_files files(table.files().size());
  for (std::size_t f = 0; f < layout.file_used.size(); ++f)
    if (layout.file_used[f])
      files[f] = std::make_unique<file_reader>(
          table.files()[f], mapped ? safetensors_backend::mmap : safetensors_backend::pread,
          file_reader_options{.direct_io = false, .faults = faults, .drop_mapped_pages = mapped});
  return files;
}

#if !DDO_HEADER_ONLY
// Compiled once: the instantiating TU (ddo/instantiate.hpp includes this header) holds their one
// copy; group_layout.hpp declares them extern.
template group_layout make_group_layout<>(const weight_table&, const offload_plan&,
                                          runtime_options&, bool);
template source_files open_source_files<>(const weight_table&, const group_layout&,
                                          file_fault_hook*, safetensors_backend);
#endif

}  // namespace detail
}  // namespace v0
}  // namespace ddo
