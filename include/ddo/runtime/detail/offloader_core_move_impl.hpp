// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Definitions of offloader_core.hpp's budget moves (not API): a running offloader moves
/// to a fresh plan for another device budget, changing only what differs. Out of the class on
/// purpose (see offloader_core_impl.hpp).
///
/// Order, so that ddo's device bytes never exceed max(before, after) (budget_move.hpp):
/// 1. wait for ddo's loads and the engine's released work (no lease is alive: a move waits for
///    a step boundary without leases);
/// 2. host side: pack and page-lock the new layout's pinned groups, a group whose packed
///    weights stay taking its block back (a pinned_weight_cache: the engine's, or one made of
///    the old blocks), so only new blocks read their bytes; with a weight registry or a
///    shared_weight_store the pinned weights are their pieces (those held reused, the rest read
///    once into them); with pin_in_place the old layout's engine pages are unregistered first
///    (nothing reads them after 1.; CUDA refuses a second registration of a page) and the new
///    layout's registered. Nothing on the device moved yet, so a failure leaves the offloader
///    as it was (the old pages registered again);
/// 3. device side, frees first: the ring, then every resident piece (a group's residents) whose
///    weights change; then allocations: the new pieces (uploaded from their sources) and the
///    new ring. A failure there frees what was allocated and puts the old pieces and ring back.

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ddo/core/chrono.hpp"
#include "ddo/core/error.hpp"
#include "ddo/runtime/detail/budget_check.hpp"
#include "ddo/runtime/detail/staging_size.hpp"
// Part of ddo/runtime/detail/offloader_core.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {
namespace detail {

template <class T>
void offloader_core<T>::refuse_budget_move(const offload_plan& plan) const {
  // Why not the VMM routes: their contract is one device address per streamed group for the
  // whole run (stable_address; engines bind it once), and the mapped ranges, physical slots and
  // windows are sized for the setup's plan; a move changes which weights stream, so the ranges
  // would move under the engine's pointers (docs/engine-walkthrough.md).
  if constexpr (transport_with_stable_addresses<T>)
    throw usage_error(
        "move_budget: the VMM route (vmm_runtime) gives each streamed group one device address "
        "for the whole run and sizes its mapped window for the setup's plan; a budget move "
        "would change which weights those addresses hold. Set the offloader up again for the "
        "new budget (with cache_pinned_weights, a pinned_cache or a shared_weight_store nothing "
        "is read again), or run the linear route (execution_mode linear_runtime), whose budget "
        "moves");
  DDO_EXPECTS(!options_.native_vmm.enabled,
              "move_budget: native_vmm (vmm_native_transport) maps the streamed weights into "
              "windows sized for the setup's plan at stable addresses; set the offloader up "
              "again for the new budget, or run the linear route, whose budget moves");
  DDO_EXPECTS(!graph_.active,
              "move_budget: a captured CUDA graph streams through this offloader's ring, whose "
              "addresses a move changes; leave graph mode (release_device / restore_device), "
              "move, then capture the step again");
  DDO_EXPECTS(plan.groups.size() == layout_.groups.size(),
              "move_budget: the plan has " + std::to_string(plan.groups.size()) +
                  " groups, the offloader " + std::to_string(layout_.groups.size()) +
                  "; plan for the same table and execution groups");
  for (std::size_t g = 0; g < plan.groups.size(); ++g)
    DDO_EXPECTS(plan.groups[g].weights == layout_.groups[g].weights,
                "move_budget: group '" + layout_.groups[g].name +
                    "' holds other weights in the new plan; plan for the same execution groups");
}

template <class T>
bool offloader_core<T>::move_budget(offload_plan plan, std::uint64_t budget_bytes) {
  refuse_budget_move(plan);
  auto next = std::make_unique<pending_budget_move>();
  next->options = options_;
  next->options.device_budget_bytes = budget_bytes;
  next->layout = make_group_layout(*table_, plan, next->options, false);
  // What the transport has free now, plus what this offloader holds and frees first (not the
  // adapters' factors: they stay, and count in the new budget too).
  const std::uint64_t free =
      t_.device_memory().free_bytes + device_bytes() - adapters_.device_bytes();
  check_runtime_budgets(next->layout, plan, next->options, free, true);
  check_adapter_budget(next->layout, budget_bytes);
  next->plan = std::move(plan);
  next->deferred = live_leases_ != 0;
  pending_move_ = std::move(next);
  if (live_leases_ != 0) return false;
  apply_budget_move();
  return true;
}

template <class T>
void offloader_core<T>::apply_pending_move_at_boundary(bool boundary) {
  if (!boundary || live_leases_ != 0 || graph_.active) return;
  apply_budget_move();
}

/// Waits for ddo's loads and the engine's work on the slots (released leases' events):
/// before a budget move and release_device free device memory.
/// @return the host milliseconds waited.
template <class T>
double offloader_core<T>::wait_for_slot_users() {
  const auto start = clock::now();
  staging_.wait_all();
  staging_.rethrow_error();
  for (auto& st : slots_) {
    t_.synchronize(st.release);
    t_.synchronize(st.ready);
  }
  t_.synchronize(T::view(copy_stream_));
  if (staging_.has_stream()) t_.synchronize(staging_.stream());
  return std::chrono::duration<double, std::milli>(clock::now() - start).count();
}

/// Packs and page-locks @p next's pinned groups into @p pins; a group whose packed weights
/// stay takes its block back, and a demoted weight's new copy is copied from the device (where
/// its bytes are), not read again. Sets @p record's bytes_packed and bytes_copied_to_host.
template <class T>
void offloader_core<T>::pin_for_move(pending_budget_move& next, group_pinning<T>& pins,
                                     budget_move& record) {
  const auto& table = *table_;
  pinned_weight_cache own;
  pinned_weight_cache* cache = options_.pinned_cache != nullptr ? options_.pinned_cache : &own;
  if (cache == &own)
    layout_.for_each_part([&](const group_runtime& gr) {
      if (!gr.block || gr.pinned_staged || !gr.block->registered()) return;
      own.insert(pinning_detail::block_key(gr, table, plan_, options_),
                 std::make_shared<pinned_block>(gr.block, gr.block_offset, gr.pinned_bytes));
    });
  std::uint64_t read = 0;
  next.layout.for_each_part([&](const group_runtime& gr) {
    if (gr.pinned_bytes != 0 &&
        !cache->find(pinning_detail::block_key(gr, table, next.plan, next.options)))
      read += gr.packed_weight_bytes;
  });
  runtime_options o = next.options;
  o.pinned_cache = cache;
  setup_meter quiet;
  // With a weight registry (cache_pinned_weights' default source) or a shared_weight_store the
  // demoted groups' host copies are their pieces: what they read for them is the move's read
  // too, each weight once (a registry or store shared with another offloader loading at this
  // moment counts that one's loads as well).
  const std::uint64_t loaded = o.registry ? o.registry->stats().loaded_bytes : 0;
  const std::uint64_t held =
      o.weight_store ? pinning_detail::store_bytes_held(*o.weight_store, table, o, &next.plan) : 0;
  // pin_in_place: the old layout's engine pages are let go first (file comment), and registered
  // again when the new layout's pinning fails.
  pinning_.release_in_place(t_);
  // A weight an adapter changes holds merged bytes on the device, not its base: read it.
  const auto pinned = pinned_host_copies();
  move_sources from_device{
      [&](std::size_t w) -> const std::byte* {
        return released_ || adapters_.job_for(w) != nullptr ? nullptr : resident_ptr_[w];
      },
      [&](std::size_t w) { return pinned[w]; },
      [&](std::byte* dst, const std::byte* src, std::uint64_t bytes) {
        t_.copy_to_host(dst, src, static_cast<std::size_t>(bytes), T::view(copy_stream_));
      },
      [&] { t_.synchronize(T::view(copy_stream_)); }};
  try {
    pins.pin(t_, next.layout, table, next.plan, o, files_, quiet, {}, &from_device);
  } catch (...) {
    pins.release(t_);
    pinning_.register_in_place(t_, layout_, options_);
    throw;
  }
  if (o.registry) read += o.registry->stats().loaded_bytes - loaded;
  if (o.weight_store)
    read += pinning_detail::store_bytes_held(*o.weight_store, table, o, &next.plan) - held;
  record.bytes_packed = read;
  record.bytes_copied_to_host = from_device.copied_bytes;
  record.bytes_repacked = from_device.repacked_bytes;
}

/// Per weight, the page-locked host copy the plan in place streams it from (a packed block, or
/// a registry's or store's piece), or null: a budget move uploads a promoted weight from it
/// instead of reading its source. Not the engine's pages registered in place (pin_for_move let
/// them go), nor copies whose page-locking fell back (staged).
template <class T>
std::vector<const std::byte*> offloader_core<T>::pinned_host_copies() const {
  const auto& table = *table_;
  std::vector<const std::byte*> at(table.size(), nullptr);
  layout_.for_each_part([&](const group_runtime& gr) {
    for (std::size_t i = 0; i < gr.weights.size(); ++i) {
      const std::size_t w = gr.weights[i];
      const std::uint64_t off = gr.slot_offset[i];
      if (off == not_streamed || plan_.decisions[w].where != placement::pinned_host) continue;
      if (group_layout::packed(table, options_, w)) {
        if (gr.block && gr.block->registered() && !gr.pinned_staged)
          at[w] = gr.block_data() + off;
        continue;
      }
      if (!options_.shared_host_copies()) continue;
      for (const auto& p : gr.in_place)  // registered: those refused were staged
        if (p.slot_offset <= off && off < p.slot_offset + p.bytes)
          at[w] = p.host + (off - p.slot_offset);
    }
  });
  return at;
}

/// Sizes the staging buffers for the layout now in place as setup does (for_upload: the
/// residents' upload too; after it, only what groups stage while running).
template <class T>
void offloader_core<T>::fit_staging_for_move(bool for_upload) {
  auto demand = staging_demand_of(layout_, *table_, transport_with_file_reads<T>);
  if (!for_upload) demand.setup_bytes = 0;
  const std::uint64_t bytes = staging_buffer_bytes_for(demand, options_.staging_buffer_bytes);
  if (staging_.has_buffers() && staging_.buffer_bytes() == 2 * bytes) return;
  staging_.release_buffers();
  if (bytes != 0) staging_.ensure_buffers(bytes);
}

template <class T>
void offloader_core<T>::apply_budget_move() {
  auto next = std::move(pending_move_);  // a failed move is dropped: nothing changed
  const auto start = clock::now();
  budget_move record;
  bool same = true;
  for (std::size_t w = 0; w < plan_.decisions.size() && same; ++w)
    same = plan_.decisions[w].where == next->plan.decisions[w].where;
  if (same) {
    // The placement stays: only the budget changes (the ring, its loads and every block stay).
    record.step = timing_.steps().size();
    record.deferred = next->deferred;
    record.budget_before_bytes = options_.device_budget_bytes;
    record.budget_after_bytes = next->options.device_budget_bytes;
    record.device_before_bytes = record.device_after_bytes = record.device_peak_bytes =
        device_bytes();
    record.slot_bytes_before = record.slot_bytes_after = layout_.slot_bytes;
    record.slots_before = record.slots_after = slots_.size();
    record.pieces_kept = resident_.size();
    options_.device_budget_bytes = next->options.device_budget_bytes;
    plan_.budgets = std::move(next->plan.budgets);
    record.move_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    moves_.push_back(record);
    return;
  }
  record.step = timing_.steps().size();
  record.deferred = next->deferred;
  record.budget_before_bytes = options_.device_budget_bytes;
  record.budget_after_bytes = next->options.device_budget_bytes;
  record.device_before_bytes = device_bytes();
  record.device_peak_bytes = device_bytes();
  record.slot_bytes_before = layout_.slot_bytes;
  record.slots_before = slots_.size();
  const auto& table = *table_;
  for (std::size_t w = 0; w < table.size(); ++w) {
    const bool was = plan_.decisions[w].where == placement::gpu_resident;
    const bool is = next->plan.decisions[w].where == placement::gpu_resident;
    if (was == is) continue;
    (is ? record.weights_promoted : record.weights_demoted) += 1;
    (is ? record.bytes_promoted : record.bytes_demoted) += table[w].bytes;
  }
  record.wait_ms = wait_for_slot_users();
  group_pinning<T> pins;
  pin_for_move(*next, pins, record);
  try {
    // Released (a pipeline component outside its phase): only the host side and the layout
    // change; restore_device brings the new layout up (and merges the adapters into it).
    if (released_) commit_released_move(*next);
    else move_device_side(*next, record);  // commits the layout, or puts the old one back
  } catch (...) {
    pins.release(t_);  // the new layout's engine pages and registry use, then the old pages
    pinning_.register_in_place(t_, layout_, options_);
    if (!released_) remerge_after_move();  // the old pieces came back as their base
    throw;
  }
  if (!released_) remerge_after_move();  // the pieces uploaded came as their base
  pinning_.swap(pins);  // the old blocks, registry use and pages go with `pins`
  pins.release(t_);     // (the old pages were unregistered before the pinning)
  plan_ = std::move(next->plan);
  options_.device_budget_bytes = next->options.device_budget_bytes;
  record.bytes_read = record.bytes_uploaded - record.bytes_uploaded_from_pinned +
                      record.bytes_packed - record.bytes_copied_to_host - record.bytes_repacked;
  record.device_after_bytes = device_bytes();
  record.slot_bytes_after = layout_.slot_bytes;
  record.slots_after = slots_.size();
  record.move_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
  moves_.push_back(record);
}

/// Frees the ring and the changing pieces, then allocates the new pieces and the ring, and
/// commits @p next's layout (file comment). On a failure the old layout, pieces and ring come
/// back and the failure is rethrown.
template <class T>
void offloader_core<T>::move_device_side(pending_budget_move& next, budget_move& record) {
  const auto& table = *table_;
  const std::size_t pieces = layout_.resident_piece_bytes.size();
  std::vector<std::vector<std::size_t>> piece_weights(pieces);
  for (std::size_t w = 0; w < table.size(); ++w)
    piece_weights[layout_.resident_piece_of(w)].push_back(w);
  std::vector<char> kept(pieces, 0), fresh(pieces, 0);
  resident_.resize(pieces);
  for (std::size_t p = 0; p < pieces; ++p) {
    kept[p] = resident_[p].data != nullptr &&
              layout_.same_resident_piece(next.layout, p, piece_weights[p]);
    fresh[p] = !kept[p] && next.layout.resident_piece_bytes[p] != 0;
    if (!kept[p] && (resident_[p].data != nullptr || fresh[p])) ++record.pieces_moved;
    if (kept[p]) ++record.pieces_kept;
  }
  // The old layout's host copies stay alive (its blocks, the old pinning's registry use) until
  // the move committed, after the uploads from them completed.
  const auto pinned_copies = pinned_host_copies();
  slots_.clear();
  ring_ = device_allocation<T>{};
  for (std::size_t p = 0; p < pieces; ++p)
    if (!kept[p]) free_resident_piece(p);
  group_layout old = std::exchange(layout_, std::move(next.layout));
  try {
    record.bytes_uploaded_from_pinned = rebuild_pieces_and_ring(fresh, &pinned_copies);
    size_staging_jobs(slots_.size());
  } catch (...) {
    restore_after_failed_move(old, kept);
    throw;
  }
  record.device_peak_bytes = std::max(record.device_peak_bytes, device_bytes());
  for (std::size_t w = 0; w < table.size(); ++w)
    if (layout_.resident_offset[w] != not_streamed && fresh[layout_.resident_piece_of(w)])
      record.bytes_uploaded += table[w].bytes;
}

/// The file route's two staging slots sized for the layout's largest file piece, as
/// prepare_file_reads sizes them at setup; no-op on the other routes.
template <class T>
void offloader_core<T>::resize_file_slots() {
  if constexpr (requires(std::uint64_t n) { t_.resize_file_staging(n); })
    (void)t_.resize_file_staging(layout_.largest_file_piece(*table_));
}

/// The staging worker's queue for a ring of @p slots: one job per load (two on a split layout:
/// the mapped image, then the side image) and the upload's; started where the layout stages.
template <class T>
void offloader_core<T>::size_staging_jobs(std::size_t slots) {
  const std::size_t jobs = (layout_.side_parts.empty() ? 1 : 2) * slots + 1;
  if (staging_.running()) staging_.reserve_jobs(jobs);
  else if (layout_.staging_needed && slots != 0) staging_.start(jobs);
}

/// A move while the device side is released: the new layout in place with no device memory,
/// as release_device leaves one (staging buffers for restore_device's upload, the staging
/// worker's jobs for its ring, the file route's slots for its largest piece).
template <class T>
void offloader_core<T>::commit_released_move(pending_budget_move& next) {
  group_layout old = std::exchange(layout_, std::move(next.layout));
  try {
    resize_file_slots();
    free_device_side();  // nothing to free: the new layout's addresses forgotten, as released
    fit_staging_for_move(true);
    size_staging_jobs(layout_.slot_count);
  } catch (...) {
    layout_ = std::move(old);
    free_device_side();
    throw;
  }
}

/// The device side of a layout after its old pieces and ring went: the file route's staging
/// slots resized, the @p fresh pieces uploaded (the others kept their memory), then the ring
/// (after the pieces: ddo's device bytes only grow here), its schedule reset, staging sized for
/// the upload and then for the steps.
template <class T>
std::uint64_t offloader_core<T>::rebuild_pieces_and_ring(
    const std::vector<char>& fresh, const std::vector<const std::byte*>* pinned_copies) {
  resize_file_slots();  // before the upload: promoted weights read through them
  fit_staging_for_move(true);
  const std::uint64_t from_copies = upload_residents(nullptr, &fresh, pinned_copies);
  allocate_ring(std::min(options_.slot_count, layout_.groups.size()));
  ring_schedule_.reset(layout_.groups.size(), layout_.slot_count, layout_.streamed_order,
                       layout_.prefetch_depth);
  t_.synchronize(T::view(copy_stream_));
  if (staging_.has_stream()) t_.synchronize(staging_.stream());
  fit_staging_for_move(false);
  return from_copies;
}

/// After a failed move: frees what it allocated and brings the old layout, pieces and ring back
/// (they fitted before the move; a failure now is printed: the offloader then refuses acquires
/// of what it lacks, as after a failed restore_device).
template <class T>
void offloader_core<T>::restore_after_failed_move(group_layout& old,
                                                  const std::vector<char>& kept) noexcept {
  try {
    t_.synchronize(T::view(copy_stream_));
    if (staging_.has_stream()) t_.synchronize(staging_.stream());
    slots_.clear();
    ring_ = device_allocation<T>{};
    for (std::size_t p = 0; p < kept.size(); ++p)
      if (!kept[p]) free_resident_piece(p);
    layout_ = std::move(old);
    std::vector<char> back(kept.size(), 0);
    for (std::size_t p = 0; p < kept.size(); ++p) back[p] = !kept[p];
    rebuild_pieces_and_ring(back);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddo: restoring the device side after a failed budget move: %s\n",
                 e.what());
  }
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
