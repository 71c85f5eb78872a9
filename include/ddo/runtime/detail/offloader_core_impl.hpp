// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Definitions of offloader_core.hpp: the hot path, metrics, bindings (not API; setup is
/// in offloader_core_setup_impl.hpp). Out of the class on purpose: they are not
/// implicitly inline, so `extern template` (end of basic_offloader.hpp) keeps them out of every TU
/// but the one that instantiates them.

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <variant>

#include "ddo/core/error.hpp"
#include "ddo/runtime/nvtx_range.hpp"
// Part of ddo/runtime/detail/offloader_core.hpp, which includes it (not back: no include cycles).
#include "ddo/runtime/detail/offloader_core_adapter_impl.hpp"
#include "ddo/runtime/detail/offloader_core_graph_impl.hpp"
#include "ddo/runtime/detail/offloader_core_move_impl.hpp"
#include "ddo/runtime/detail/offloader_core_setup_impl.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

// --- the hot path -----------------------------------------------------------------------------

template <class T>
auto offloader_core<T>::acquire(std::size_t g, stream_view s) -> lease_type {
  DDO_EXPECTS(g < layout_.groups.size(), "acquire: group index " + std::to_string(g) +
                                             " is out of range; the plan has " +
                                             std::to_string(layout_.groups.size()) + " groups");
  if (released_) throw_released(g);
  if (pending_move_) {
    // A move synchronizes: never inside a capture (it waits for the next boundary outside).
    bool capturing = false;
    if constexpr (requires { { T::capturing(s) } -> std::same_as<bool>; })
      capturing = T::capturing(s);
    if (!capturing) apply_pending_move_at_boundary(timing_.starts_step(g));
  }
  nvtx_range range(options_.nvtx, "ddo acquire");
  staging_.rethrow_error();
  fence_poisoned();
  auto& gr = layout_.groups[g];
  if constexpr (requires { { T::capturing(s) } -> std::same_as<bool>; }) {
    if (T::capturing(s)) {
      // A ring smaller than the streamed groups streams through the graph (graph_ring.hpp).
      if constexpr (graph_streaming_transport<T>)
        if (gr.streamed() && (graph_.active || slots_.size() < layout_.streamed_order.size()))
          return acquire_captured(g, s);
      refuse_unreplayable_capture(g);
    }
  }
  if (graph_.active && gr.streamed())
    throw usage_error("acquire('" + gr.name +
                      "'): this offloader streams through a captured CUDA graph now (its slots "
                      "follow the graph's map): launch the step with launch_graph, or leave graph "
                      "mode with release_device / restore_device first");
  timing_.note_acquire(g);
  auto& step = timing_.current();
  ++step.acquires;
  int slot = -1;
  if (gr.streamed()) {
    slot = ring_schedule_.slot_of(g);
    if (slot >= 0) {
      ++step.hits;
    } else {
      ++step.misses;
      slot = ring_schedule_.victim_for_miss(g);
      if (slot < 0) throw_ring_full(g);
      load(g, static_cast<std::size_t>(slot));
    }
    auto& st = slots_[static_cast<std::size_t>(slot)];
    wait_staged(st);
    if (st.merge_pending) finish_pending_merge(g, st);
    if (timing_.timing()) {
      const std::size_t a = timing_.take(), b = timing_.take();
      t_.record(timing_.at(a), s);
      t_.wait(s, st.ready);
      t_.record(timing_.at(b), s);
      timing_.add_pending(span_kind::stall, g, 0, a, b, 0);
    } else {
      t_.wait(s, st.ready);
    }
    ring_schedule_.hold(static_cast<std::size_t>(slot));
  }
  if (timing_.timing() && options_.time_compute && gr.leases == 0) {
    // After the wait above: the span is the engine's compute, not its stall.
    const std::size_t e = timing_.take();
    t_.record(timing_.at(e), s);
    timing_.compute_started(g, e);
  }
  ++gr.leases;
  ++live_leases_;
  std::byte* const* ptrs =
      slot >= 0 ? slots_[static_cast<std::size_t>(slot)].pointers.data() : gr.pointers.data();
  lease_type result(this, g, slot, s, ptrs, gr.weights.size());
  ring_schedule_.acquired(g);
  prefetch();
  if (bindings_.any(g)) bindings_.write(g, ptrs);
  timing_.lease_started(g);
  return result;
}

/// An acquire captured into a CUDA graph is replayed without ddo: the graph's event wait node
/// waits on the ready event's record as of each launch, and nothing loads a group while the
/// graph runs. That is right only when every streamed group stays loaded (and no timing event
/// is baked in); anything else would replay reads of ranges ddo has remapped.
template <class T>
void offloader_core<T>::refuse_unreplayable_capture(std::size_t g) const {
  const std::string what = "acquire('" + layout_.groups[g].name +
                           "') on a stream being captured into a CUDA graph: ";
  if (timing_.timing())
    throw usage_error(what + "metrics timing events would be baked into the graph and never "
                             "read back; capture with runtime_options::metrics off");
  if (layout_.groups[g].streamed() && slots_.size() < layout_.streamed_order.size())
    throw usage_error(what + "ddo holds " + std::to_string(slots_.size()) + " of the " +
                      std::to_string(layout_.streamed_order.size()) +
                      " streamed groups at once. A graph's event wait node waits on the record its "
                      "event has when the graph is launched, so a group that ddo loads while the "
                      "graph runs would be read before its copy. Capture needs every streamed "
                      "group to stay loaded: a mapped budget (vmm_resident_weight_budget_gb) or a "
                      "slot_count that holds all " +
                      std::to_string(layout_.streamed_order.size()) +
                      " groups, or capture only resident groups (docs/transports.md, CUDA graphs)");
}

template <class T>
void offloader_core<T>::release(std::size_t g, int slot, stream_view s) {
  nvtx_range range(options_.nvtx, "ddo release");
  fence_poisoned();
  auto& gr = layout_.groups[g];
  --live_leases_;
  if (--gr.leases == 0) {
    bindings_.restore(g);
    if (timing_.timing() && options_.time_compute) {
      const std::size_t e = timing_.take();
      t_.record(timing_.at(e), s);
      timing_.compute_ended(g, e);
    }
  }
  if (slot >= 0 && graph_.active) {
    try {
      release_captured(g, static_cast<std::size_t>(slot), s);
    } catch (const std::exception& e) {
      // A lease drops in a noexcept destructor: the failure is printed there, and the graph,
      // whose release of g is missing or partial, is refused at launch (issue 37).
      graph_.broken = "launch_graph: the release of '" + gr.name +
                      "' failed inside the capture (" + e.what() +
                      "): the graph lacks it; capture the step again";
      throw;
    }
  } else if (slot >= 0) {
    auto& st = slots_[static_cast<std::size_t>(slot)];
    // One release event covers every lease of this occupancy: a release on another stream
    // than the previous one first waits on it, so re-recording loses none of the readers.
    if (st.released && !(st.release_stream == s)) t_.wait(s, st.release);
    // Not inside a capture that is not graph streaming: its graph replays with every group
    // loaded and loads nothing, so a captured fill would feed the poison to the next replay.
    bool capturing = false;
    if constexpr (requires { { T::capturing(s) } -> std::same_as<bool>; })
      capturing = T::capturing(s);
    if (options_.poison_released_slots && gr.leases == 0 && !compute_only_ && gr.streamed() &&
        !capturing)
      poison_released(gr, st, s, static_cast<std::size_t>(slot));
    t_.record(st.release, s);
    st.released = true;
    st.release_stream = s;
    // A poisoned slot keeps its hold until fence_poisoned: the prefetch below must not load the
    // next group into it before the engine's late reads (issue 37).
    if (!st.poisoned) ring_schedule_.drop(static_cast<std::size_t>(slot));
  }
  timing_.lease_ended(g);
  prefetch();
}

/// Debug mode (runtime_options::poison_released_slots): on s after the lease's work (and, through
/// the wait on the previous release, the other streams' readers) and before the release event
/// that the next copy into the slot — or, on a stable-address (VMM) route, the unmap of g's
/// range — waits on. A stable-address route fills g's mapped range (still mapped to the slot's
/// pages: nothing rebinds the slot before the release event) and the slot's side image. The
/// slot no longer holds g: its next acquire loads it again.
template <class T>
void offloader_core<T>::poison_released(const group_runtime& gr, slot_state<T>& st, stream_view s,
                                        std::size_t slot) {
  if (gr.slot_bytes > 0) t_.fill_device(st.image, poison_byte, gr.slot_bytes, s);
  if (gr.side != no_group) {
    const auto side_bytes = layout_.side_parts[gr.side].slot_bytes;
    if (side_bytes > 0) t_.fill_device(st.side_image, poison_byte, side_bytes, s);
  }
  ring_schedule_.vacate(slot);
  st.poisoned = true;
}

/// A slot poisoned at a release went back to the ring at once (issue 37): the prefetch of that
/// very release loaded the next group into it after the release event, so a read the engine
/// enqueued right after lease.reset() raced the copy and saw valid weights of another group in
/// most runs. Held until the engine's next call to ddo, and its release event then recorded again
/// on the stream of the release, the slot's next copy follows all the engine issued on that
/// stream meanwhile: such a read sees the poison every time. (The stream is one the engine has
/// just used; a stream being captured gets no record, which would be a graph node: the slot
/// returns as it is, and a graph's first launch waits on its release.)
template <class T>
void offloader_core<T>::fence_poisoned() {
  if (!options_.poison_released_slots) return;
  for (std::size_t k = 0; k < slots_.size(); ++k) {
    auto& st = slots_[k];
    if (!st.poisoned) continue;
    bool capturing = false;
    if constexpr (requires { { T::capturing(st.release_stream) } -> std::same_as<bool>; })
      capturing = T::capturing(st.release_stream);
    if (!capturing) t_.record(st.release, st.release_stream);
    st.poisoned = false;
    ring_schedule_.drop(k);
  }
}

template <class T>
std::byte* offloader_core<T>::lease_data(std::size_t g, std::byte* const* ptrs,
                                         std::string_view name) const {
  const auto& gr = layout_.groups[g];
  for (std::size_t i = 0; i < gr.weights.size(); ++i)
    if ((*table_)[gr.weights[i]].name == name) return ptrs[i];
  throw usage_error("lease::data: weight '" + std::string(name) + "' is not in group '" + gr.name + "'");
}

template <class T>
std::size_t offloader_core<T>::lease_weight_index(std::size_t g, std::size_t i) const {
  const auto& gr = layout_.groups[g];
  DDO_EXPECTS(i < gr.weights.size(), "lease: weight position " + std::to_string(i) +
                                         " is out of range; group '" + gr.name + "' has " +
                                         std::to_string(gr.weights.size()) + " weights");
  return gr.weights[i];
}

template <class T>
void offloader_core<T>::throw_ring_full(std::size_t g) const {
  std::string held;
  for (std::size_t s = 0; s < ring_schedule_.slot_count(); ++s) {
    if (!held.empty()) held += ", ";
    const std::size_t occupant = ring_schedule_.occupant(s);
    held += occupant == no_group ? std::string("a poisoned slot")
                                 : "'" + layout_.groups[occupant].name + "'";
  }
  throw usage_error("acquire('" + layout_.groups[g].name + "'): all " + std::to_string(slots_.size()) +
                    " slots of the ring are held by live leases (" + held +
                    "); drop a lease before acquiring another group, or raise slot_count");
}

/// Where group g's image goes in slot st: the slot's base, or (a transport with slot binding,
/// e.g. VMM) the address the transport maps for g — asked at load time, after the previous
/// occupant's release event was recorded (the transport may wait on it before remapping).
template <class T>
void offloader_core<T>::bind_slot_to(slot_state<T>& st, std::size_t g) {
  if constexpr (transport_with_slot_binding<T>)
    st.image = t_.bind_slot(st.base, layout_.slot_bytes, g, st.release);
  else
    st.image = st.base;
  const auto& gr = layout_.groups[g];
  for (std::size_t i = 0; i < gr.weights.size(); ++i)
    st.pointers[i] = gr.slot_offset[i] == not_streamed ? gr.resident[i] : st.image + gr.slot_offset[i];
}

template <class T>
void offloader_core<T>::wait_staged(slot_state<T>& st) {
  if (st.staged_ticket == 0) return;
  const double waited = staging_.wait_recorded(st.staged_ticket);
  if (waited > 0.0) timing_.current().host_wait_ms += waited;
}

template <class T>
void offloader_core<T>::copy_pinned_parts(const group_runtime& gr, std::byte* image, stream_view v,
                                          step_metrics& step) {
  if (gr.has_block_copy()) {
    const std::uint64_t chunk = options_.max_copy_bytes == 0 ? gr.pinned_bytes : options_.max_copy_bytes;
    for (std::uint64_t off = 0; off < gr.pinned_bytes; off += chunk) {
      t_.copy_to_device(image + off, gr.block_data() + off, std::min(chunk, gr.pinned_bytes - off), v);
      ++step.copies;
    }
  }
  for (const auto& piece : gr.in_place) {
    t_.copy_to_device(image + piece.slot_offset, piece.host, piece.bytes, v);
    ++step.copies;
  }
}

template <class T>
void offloader_core<T>::prefetch() {
  if (graph_.active) return;  // graph mode: loads are enqueued by launch_graph only
  if (!ring_schedule_.prefetch([this](std::size_t g, std::size_t s) { load(g, s); }))
    ++timing_.current().deferred_prefetches;
}

/// Starts bringing group g into slot s (which no lease holds). A failure part-way (a copy that
/// could not be issued) leaves the slot empty rather than claiming g with half its bytes, and is
/// kept like a staging failure: prefetches run inside release(), whose caller (a lease's
/// destructor) cannot throw, so the next acquire() rethrows it.
template <class T>
void offloader_core<T>::load(std::size_t g, std::size_t s) {
  try {
    load_unguarded(g, s);
  } catch (...) {
    if (ring_schedule_.occupant(s) == g) ring_schedule_.vacate(s);
    staging_.fail(std::current_exception());
    throw;
  }
}

template <class T>
void offloader_core<T>::load_unguarded(std::size_t g, std::size_t s) {
  auto& st = slots_[s];
  auto& gr = layout_.groups[g];
  wait_staged(st);  // the previous occupant's staging job must have recorded its events
  ring_schedule_.assign(g, s);
  if constexpr (transport_with_stable_addresses<T>) {
    load_stable(g, s);
    return;
  }
  bind_slot_to(st, g);
  st.released = false;
  st.merge_pending = false;
  if (compute_only_) {
    // Nothing copied: the slot keeps its previous bytes. Its ready event still follows the
    // previous occupant's release, so the engine's wait on it orders nothing new.
    const auto v = T::view(copy_stream_);
    t_.wait(v, st.release);
    t_.wait(v, st.ready);
    t_.record(st.ready, v);
    return;
  }
  auto& step = timing_.current();
  ++step.group_loads;
  for (std::size_t i = 0; i < transfer_source_count; ++i) step.bytes_by_source[i] += gr.bytes_by_source[i];
  const std::uint64_t bytes = gr.load_bytes();
  std::size_t t_start = no_group, t_end = no_group;
  if (timing_.timing()) {
    t_start = timing_.take();
    t_end = timing_.take();
  }
  if (gr.has_copy_part()) {
    const auto v = T::view(copy_stream_);
    t_.wait(v, st.release);
    t_.wait(v, st.ready);
    if (options_.poison_slots) t_.fill_device(st.image, poison_byte, gr.slot_bytes, v);
    if (t_start != no_group) t_.record(timing_.at(t_start), v);
    copy_pinned_parts(gr, st.image, v, step);
    if (!gr.has_staged_part()) {
      if (t_end != no_group) t_.record(timing_.at(t_end), v);
      t_.record(st.ready, v);
      if (adapters_.any()) merge_slot(g, st);
      if (t_start != no_group) timing_.add_pending(span_kind::copy, g, bytes, t_start, t_end, 0);
      return;
    }
    t_.record(st.ready, v);  // the staging job waits on it, then re-records it
  }
  typename staging_worker<T>::job job;
  job.release = &st.release;
  job.ready = &st.ready;
  job.image = st.image;
  job.poison_bytes = options_.poison_slots && !gr.has_copy_part() ? gr.slot_bytes : 0;
  job.pieces = &gr.staged;
  job.timing_start = gr.has_copy_part() || t_start == no_group ? nullptr : &timing_.at(t_start);
  job.timing_end = t_end == no_group ? nullptr : &timing_.at(t_end);
  step.copies += staging_.estimate_copies(gr.staged);
  st.staged_ticket = staging_.submit(job);
  st.merge_pending = adapters_.any();
  if (t_start != no_group) timing_.add_pending(span_kind::copy, g, bytes, t_start, t_end, st.staged_ticket);
}

/// A stable-address transport (VMM): the staging thread maps g's range on slot s's memory once
/// the previous occupant's events completed, then copies every part (pinned directly, pageable
/// and file through the staging buffers) and records the slot's ready event. A split layout's
/// side part (the weights the route does not cover) follows as a second job into the slot's
/// side image; the worker runs jobs in order on one stream, so the ready event it records last
/// covers both.
template <class T>
template <class U>
  requires transport_with_stable_addresses<U>
void offloader_core<T>::load_stable(std::size_t g, std::size_t s) {
  auto& st = slots_[s];
  auto& gr = layout_.groups[g];
  const group_runtime* side = gr.side == no_group ? nullptr : &layout_.side_parts[gr.side];
  point_at_stable(st, g);
  st.released = false;
  if (compute_only_) {
    // The binder maps g's range (the slot's handles keep their previous bytes); nothing copied.
    auto job = stable_job(nullptr, st, st.image, timing_.current());
    job.bind_slot = s;
    job.bind_group = g;
    st.staged_ticket = staging_.submit(job);
    st.merge_pending = false;
    return;
  }
  auto& step = timing_.current();
  count_load(gr, side, step);
  const std::uint64_t bytes = gr.load_bytes() + (side != nullptr ? side->load_bytes() : 0);
  std::size_t t_start = no_group, t_end = no_group;
  if (timing_.timing()) {
    t_start = timing_.take();
    t_end = timing_.take();
  }
  auto job = stable_job(&gr, st, st.image, step);
  job.timing_start = t_start == no_group ? nullptr : &timing_.at(t_start);
  job.bind_slot = s;
  job.bind_group = g;
  if (side == nullptr) {
    job.timing_end = t_end == no_group ? nullptr : &timing_.at(t_end);
    st.staged_ticket = staging_.submit(job);
  } else {
    staging_.submit(job);
    auto side_job = stable_job(side, st, st.side_image, step);
    side_job.timing_end = t_end == no_group ? nullptr : &timing_.at(t_end);
    st.staged_ticket = staging_.submit(side_job);
  }
  // As a staged group on the linear route: the first acquire merges in the mapped range (and
  // the side image) on the merge stream after the ready event the staging job records; the
  // binder's unmap of the range waits on the ready event the merge records again.
  st.merge_pending = adapters_.any();
  if (t_start != no_group) timing_.add_pending(span_kind::copy, g, bytes, t_start, t_end, st.staged_ticket);
}

/// Slot st's pointers for group g on a stable-address transport: g's own range (none when every
/// streamed weight of g is one the route does not cover: its job only unmaps the slot's previous
/// occupant, vmm_window::bind), the slot's side image for those weights, residents as they are.
template <class T>
template <class U>
  requires transport_with_stable_addresses<U>
void offloader_core<T>::point_at_stable(slot_state<T>& st, std::size_t g) {
  const auto& gr = layout_.groups[g];
  const group_runtime* side = gr.side == no_group ? nullptr : &layout_.side_parts[gr.side];
  st.image = gr.slot_bytes > 0 ? t_.stable_address(g) : nullptr;
  for (std::size_t i = 0; i < gr.weights.size(); ++i) {
    if (gr.slot_offset[i] != not_streamed)
      st.pointers[i] = st.image + gr.slot_offset[i];
    else if (side != nullptr && side->slot_offset[i] != not_streamed)
      st.pointers[i] = st.side_image + side->slot_offset[i];
    else
      st.pointers[i] = gr.resident[i];
  }
}

/// The staging job that copies @p part (null: nothing, calibration's compute-only pass) into
/// @p image of slot st; counts its copies in @p step. The caller sets the bind and timing.
template <class T>
auto offloader_core<T>::stable_job(const group_runtime* part, slot_state<T>& st, std::byte* image,
                                   step_metrics& step) -> typename staging_worker<T>::job {
  static const std::vector<staged_piece> no_pieces;
  typename staging_worker<T>::job job;
  job.release = &st.release;
  job.ready = &st.ready;
  job.image = image;
  job.pieces = &no_pieces;
  if (part == nullptr) return job;
  job.poison_bytes = options_.poison_slots ? part->slot_bytes : 0;
  job.pieces = &part->staged;
  if (part->has_block_copy()) {
    job.block = part->block_data();
    job.block_bytes = part->pinned_bytes;
    job.block_chunk = options_.max_copy_bytes;
  }
  job.direct = &part->in_place;
  step.copies += pinned_copies(*part) + staging_.estimate_copies(part->staged);
  return job;
}

template <class T>
std::byte* offloader_core<T>::stable_data(std::size_t w) const {
  DDO_EXPECTS(w < table_->size(), "stable_data: weight index " + std::to_string(w) + " is out of range");
  if (resident_ptr_[w] != nullptr) return resident_ptr_[w];
  if constexpr (transport_with_stable_addresses<T>) {
    const std::size_t g = layout_.group_of[w];
    if (g != no_group && layout_.groups[g].streamed()) {
      const auto& gr = layout_.groups[g];
      for (std::size_t i = 0; i < gr.weights.size(); ++i) {
        if (gr.weights[i] != w) continue;
        if (gr.slot_offset[i] != not_streamed) return const_cast<T&>(t_).stable_address(g) + gr.slot_offset[i];
        if (gr.side != no_group && layout_.side_parts[gr.side].slot_offset[i] != not_streamed)
          throw usage_error("stable_data: weight '" + (*table_)[w].name +
                            "' is not one the VMM route covers (dense BF16/FP16 weights of linear "
                            "layers: 2-D, module kind linear); it keeps its planned placement and "
                            "streams through a linear side image whose address changes with the "
                            "slot: read it from the lease (lease.data), or set "
                            "vmm_component_tensor_ownership on the native route to map it too");
      }
    }
  }
  throw usage_error("stable_data: weight '" + (*table_)[w].name +
                    "' has no stable device address (it is neither resident nor streamed by a "
                    "transport with stable addresses, e.g. VMM)");
}

// --- steps, metrics, bindings, queries -----------------------------------------------------------

template <class T>
void offloader_core<T>::begin_step() {
  if (pending_move_) apply_pending_move_at_boundary(true);
  timing_.begin_step();
}

template <class T>
void offloader_core<T>::set_compute_only(bool on) {
  DDO_EXPECTS(live_leases_ == 0, "set_compute_only: " + std::to_string(live_leases_) +
                                     " leases are alive; drop them before switching the mode");
  if (on == compute_only_) return;
  // A captured step holds its loads of positions >= S as graph nodes (or not, in compute-only
  // mode) while launch_graph decides the first S at each launch: switching after a capture would
  // replay a step that copies part of its groups.
  DDO_EXPECTS(!graph_.active, "set_compute_only: a step was captured and streams through graph "
                              "mode, whose loads were fixed at capture; switch before capturing "
                              "(release_device and restore_device leave graph mode)");
  compute_only_ = on;
  if (on || released_) return;
  // The slots loaded while copying nothing hold other groups' bytes: load their occupants
  // again (into the same slots, so a stable-address window keeps one mapping per group).
  for (std::size_t s = 0; s < slots_.size(); ++s)
    if (const std::size_t g = ring_schedule_.occupant(s); g != no_group) load(g, s);
}

template <class T>
offload_metrics offloader_core<T>::metrics(bool wait) {
  timing_.harvest(wait);
  offload_metrics m;
  m.route = options_.route;
  m.transport = std::string(t_.name());
  m.timing = options_.metrics;
  m.steps = timing_.steps();
  for (const auto& s : m.steps) m.totals += s;
  m.resident_bytes = resident_device_bytes_;
  m.budget_moves = moves_;
  m.slot_bytes = layout_.slot_bytes;
  m.slot_count = slots_.size();
  m.pinned_bytes = pinning_.pinned_bytes();
  m.pin_fallback_bytes = pinning_.fallback_bytes();
  m.staging_bytes = native_.active() ? native_.staging_bytes() : staging_.buffer_bytes();
  // The native counters belong to the staging thread: read them once its queued jobs ran (a
  // host wait in metrics(), never on the hot path).
  if (native_.active()) staging_.wait_all();
  m.native = native_.stats();
  // A VMM transport's physical handles count while this offloader holds the window.
  m.device_bytes = device_bytes();
  m.peak_device_bytes = peak_device_bytes_;
  if constexpr (requires { { t_.vmm_stats() } -> std::same_as<vmm_window_stats>; }) {
    // A snapshot under the transport's lock: binds still queued on the staging thread are
    // counted by a later call (no host wait here).
    m.vmm = t_.vmm_stats();
  }
  m.cached_blocks_reused = pinning_.cached_blocks_reused();
  return m;
}

template <class T>
void offloader_core<T>::synchronize() {
  staging_.wait_all();
  t_.synchronize(T::view(copy_stream_));
  t_.synchronize(staging_.stream());
  if (merge_stream_.get() != nullptr) t_.synchronize(T::view(merge_stream_));
}

template <class T>
void offloader_core<T>::bind(std::size_t w, void* target, void (*write)(void*, void*), void* original) {
  DDO_EXPECTS(options_.strategy == runtime_strategy::swap,
              "bind: binding engine pointers is the swap strategy; this offloader runs "
              "linear_runtime_strategy=functional (use the lease's pointers, or set swap)");
  DDO_EXPECTS(live_leases_ == 0, "bind: cannot bind while leases are alive");
  DDO_EXPECTS(w < table_->size(), "bind: weight index out of range");
  bindings_.bind(w, binding{target, write, original}, (*table_)[w].name);
}

template <class T>
void offloader_core<T>::unbind(std::size_t w) {
  DDO_EXPECTS(live_leases_ == 0, "unbind: cannot unbind while leases are alive");
  bindings_.unbind(w);
}

template <class T>
std::byte* offloader_core<T>::resident_data(std::size_t w) const {
  DDO_EXPECTS(w < resident_ptr_.size() && resident_ptr_[w] != nullptr,
              "resident_data: weight is not resident on the device");
  return resident_ptr_[w];
}

}  // namespace detail

// --- lease members (need the core) -------------------------------------------------------------
template <class Transport>
std::byte* lease<Transport>::data(std::size_t i) const {
  DDO_EXPECTS(core_ != nullptr, "lease::data: the lease is empty (moved from or released)");
  DDO_EXPECTS(i < count_, "lease::data: weight position " + std::to_string(i) +
                              " is out of range; the group has " + std::to_string(count_));
  return pointers_[i];
}
template <class Transport>
std::byte* lease<Transport>::data(std::string_view name) const {
  DDO_EXPECTS(core_ != nullptr, "lease::data: the lease is empty (moved from or released)");
  return core_->lease_data(group_, pointers_, name);
}
template <class Transport>
std::size_t lease<Transport>::weight_index(std::size_t i) const {
  DDO_EXPECTS(core_ != nullptr, "lease::weight_index: the lease is empty");
  return core_->lease_weight_index(group_, i);
}
template <class Transport>
void lease<Transport>::reset() noexcept {
  if (core_ == nullptr) return;
  auto* core = std::exchange(core_, nullptr);
  try {
    core->release(group_, slot_, stream_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddo: releasing group %zu failed: %s\n", group_, e.what());
  } catch (...) {  // noexcept: anything else would terminate the engine
    std::fprintf(stderr, "ddo: releasing group %zu failed (a non-standard exception)\n", group_);
  }
}

}  // namespace v0
}  // namespace ddo
