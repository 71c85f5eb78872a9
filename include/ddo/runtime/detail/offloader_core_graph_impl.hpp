// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Definitions of offloader_core.hpp's graph streaming (not API; issue 29): captured
/// acquires and releases, launch_graph and leaving graph mode. The protocol and why it is right
/// on every replay: docs/transports.md, "CUDA graphs".

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "ddo/core/chrono.hpp"
#include "ddo/core/error.hpp"
#include "ddo/runtime/poison_byte.hpp"
// Part of ddo/runtime/detail/offloader_core.hpp (through offloader_core_impl.hpp).

namespace ddo {
inline namespace v0 {
namespace detail {

/// The transport's guard relaxing the thread's capture mode (linear), or nothing (host_sim).
template <class T>
auto relaxed_capture(T& t) {
  if constexpr (requires { t.relaxed_capture(); })
    return t.relaxed_capture();
  else
    return 0;
}

/// Position p of a captured step: the graph waits for ready[p] == 1 and resets it (the consumer
/// resets: the nodes' values are fixed at capture and right on every replay), then reads slot
/// p mod S, whose pointers every launch loads g into.
template <class T>
template <class U>
requires graph_streaming_transport<U>
auto offloader_core<T>::acquire_captured(std::size_t g, stream_view s) -> lease_type {
  auto& gr = layout_.groups[g];
  const std::string what = "acquire('" + gr.name + "') captured into a CUDA graph: ";
  if (timing_.timing())
    throw usage_error(what +
                      "metrics timing events would need host reads of every replay; "
                      "capture with runtime_options::metrics off");
  if (!graph_.active) enter_graph_mode(what);
  const std::size_t p = graph_.position_of[g];
  const std::uint64_t capture = T::capture_id(s);
  const bool new_capture = capture != graph_.capture;
  if (p == 0 && (graph_.captured == graph_.positions || new_capture)) {
    graph_.captured = 0;  // the next step, or the step captured again from its start
    if (std::all_of(graph_.held.begin(), graph_.held.end(), [](int h) { return h == 0; }))
      graph_.broken.clear();  // a lease of an abandoned capture, dropped after it ended
  }
  // The step's acquires wait on one stream, in one capture: on the linear route the loads of
  // its later positions are forked inside it, and a graph cannot join another capture's work.
  if (graph_.captured > 0 && !new_capture && !(s == graph_.stream)) refuse_forked_stream(what);
  if (graph_.captured > 0 && new_capture)
    throw usage_error(what + "the step's first " + std::to_string(graph_.captured) +
                      " streamed acquire(s) were captured in another capture, which ended "
                      "part-way; a step is captured whole in one capture (the loads of its later "
                      "positions are part of it). Capture it again from '" +
                      layout_.groups[layout_.streamed_order[0]].name + "'");
  graph_.stream = s;
  graph_.capture = capture;
  if (p != graph_.captured)
    throw usage_error(
        what +
        "a replay loads the plan's streamed groups in plan order, one position each, so "
        "a captured step acquires them in that order, each once; the next one is '" +
        (graph_.captured < graph_.positions
             ? layout_.groups[layout_.streamed_order[graph_.captured]].name
             : layout_.groups[layout_.streamed_order[0]].name + "' (a new step") +
        "' (docs/transports.md, CUDA graphs)");
  const std::size_t k = graph_.slot_of(p);
  if (graph_.held[k] > 0)
    throw usage_error(what + "the lease of '" +
                      layout_.groups[layout_.streamed_order[graph_.previous(p)]].name +
                      "', which uses the same slot, is alive: its release must come before this "
                      "group's wait (the load waits on it), so a captured step holds at most " +
                      std::to_string(graph_.slots) + " streamed leases at once (slot_count)");
  auto& st = slots_[k];
  // The pointers the captured kernels keep: slot k's image (linear), or g's own stable range,
  // which every launch's binder maps on slot k's handles before its load (VMM).
  if constexpr (transport_with_stable_addresses<T>)
    point_at_stable(st, g);
  else
    bind_slot_to(st, g);
  if constexpr (transport_with_stable_addresses<T>) {
    t_.wait_value(s, graph_.ready + p, 1);
    t_.write_value(s, graph_.ready + p, 0);
    // Adapters: merge nodes in the mapped range after the load's flag (the binder maps g at
    // this stable address on every launch, so the node's address holds); before the kernels.
    if (adapters_.any() && !compute_only_) merge_slot_pointers(g, st, s);
  } else if (p < graph_.slots) {
    t_.wait(s, graph_.loaded[p]);  // an event wait node: the load launch_graph made before it
  } else {
    t_.wait_edge(s, graph_.loaded[p]);  // joins the load forked at its slot's previous release
  }
  ++graph_.held[k];
  ++graph_.captured;
  ++gr.leases;
  ++live_leases_;
  lease_type result(this, g, static_cast<int>(k), s, st.pointers.data(), gr.weights.size());
  if (bindings_.any(g)) bindings_.write(g, st.pointers.data());
  return result;
}

/// A captured acquire after the step's first, in the same capture, must be made on the first's
/// stream: the replay's order argument (docs/cuda-graphs.md) holds for the waits and releases of
/// one stream, and a stream forked into the capture (it waited on an event recorded in it) is
/// ordered against it only by the fork's edges. A lease drops on its acquiring stream, so the
/// drops follow.
template <class T>
template <class U>
requires graph_streaming_transport<U>
void offloader_core<T>::refuse_forked_stream(const std::string& what) const {
  throw usage_error(
      what +
      "it is made on a stream forked into the capture (a stream that waited on an event "
      "recorded in it), not on the stream that acquired '" +
      layout_.groups[layout_.streamed_order[0]].name +
      "'. ddo orders a captured step's loads and releases on one stream; a forked stream's "
      "acquires and lease drops would be ordered only by the fork's edges. Acquire and drop every "
      "streamed lease on the stream that began the capture (fork the engine's kernels, not ddo's "
      "calls; docs/cuda-graphs.md)");
}

/// The first captured acquire of a streamed group: no host sync (the first launch's loads wait
/// on the eager ring's events); the flags and events are made here, once.
template <class T>
template <class U>
requires graph_streaming_transport<U>
void offloader_core<T>::enter_graph_mode(const std::string& what) {
  for (std::size_t s = 0; s < ring_schedule_.slot_count(); ++s)
    if (ring_schedule_.leases(s) > 0)
      throw usage_error(what + "a lease of '" + layout_.groups[ring_schedule_.occupant(s)].name +
                        "' taken before the capture is alive; drop it before capturing a step");
  // The VMM route's loads run on the staging thread, which stages pageable and file bytes too.
  for (const std::size_t g : layout_.streamed_order)
    if (!transport_with_stable_addresses<T> && layout_.groups[g].has_staged_part())
      throw usage_error(what + "group '" + layout_.groups[g].name +
                        "' streams pageable or file bytes; graph streaming loads on ddo's copy "
                        "stream at each launch, from pinned memory only: pin every streamed group "
                        "(pin_weight_selection, the pinned budget), or run the legacy VMM "
                        "route (execution_mode = vmm_runtime), whose loads stage them");
  if (native_.active())
    throw usage_error(what +
                      "graph streaming runs on the linear route and the legacy VMM route "
                      "(execution_mode = vmm_runtime); the native VMM route (vmm_fast_runtime: "
                      "registered staging windows, the micro-cache) is not supported. Use "
                      "vmm_runtime or linear_runtime, or a budget that keeps every streamed group "
                      "mapped (the graph is then launched directly)");
  if constexpr (transport_with_stable_addresses<T>) t_.check_graph_streaming();
  // CUDA: the allocations below run inside the engine's capture, which may refuse them as unsafe
  // in global mode; the transport relaxes the thread's mode meanwhile.
  [[maybe_unused]] auto relaxed = relaxed_capture(t_);
  const std::size_t n = layout_.streamed_order.size();
  graph_.positions = n;
  graph_.slots = slots_.size();
  graph_.position_of.assign(layout_.groups.size(), graph_ring<T>::none);
  for (std::size_t p = 0; p < n; ++p) graph_.position_of[layout_.streamed_order[p]] = p;
  // The events first: they free themselves if a later step throws, the flags would not (graph
  // mode is entered only below, and end_graph_mode frees the flags of an active one only).
  graph_.release.clear();
  graph_.loaded.clear();
  if constexpr (!transport_with_stable_addresses<T>) {  // VMM: ready and released flags instead
    for (std::size_t p = 0; p < n; ++p) graph_.release.push_back(t_.make_event(false));
    for (std::size_t p = 0; p < n; ++p) graph_.loaded.push_back(t_.make_event(false));
    graph_.fork = t_.make_event(false);
    graph_.side = t_.make_stream();
    if (adapters_.any()) {  // attach is refused in graph mode: no later adapter needs them
      graph_.merge_side = t_.make_stream();
      graph_.copied = t_.make_event(false);
      if (merge_stream_.get() == nullptr) merge_stream_ = t_.make_stream();
    }
  }
  graph_.done = t_.make_event(false);
  if constexpr (transport_with_stable_addresses<T>) {
    graph_.ready = t_.allocate_flags(graph_.flag_count());
    graph_.released = graph_.ready + n;
  }
  graph_.held.assign(graph_.slots, 0);
  graph_.captured = 0;
  graph_.launches = 0;
  graph_.broken.clear();
  staging_.abandon_flag_waits(false);  // a teardown of an earlier graph mode may have set it
  graph_.active = true;
}

/// The lease of a captured position drops inside the capture: an event record node, recorded by
/// every launch, that the load of the slot's next occupant waits on (a CUDA-visible edge).
template <class T>
void offloader_core<T>::release_captured(std::size_t g, std::size_t slot, stream_view s) {
  if constexpr (graph_streaming_transport<T>) {
    auto& st = slots_[slot];
    --graph_.held[slot];
    if (!T::capturing(s)) {
      graph_.broken = "launch_graph: the lease of '" + layout_.groups[g].name +
                      "' was dropped after the capture ended (a lease kept past the step): its "
                      "release is not in the graph. Drop every lease inside the captured step and "
                      "capture it again";
      signal_release(graph_.position_of[g], s);
      return;
    }
    const auto& gr = layout_.groups[g];
    if (options_.poison_released_slots) {
      // Not a stable range (VMM): mapped only while a replay holds it, so CUDA refuses a memset
      // node on it when the graph is instantiated (H200); the binder unmaps it before the slot's
      // next occupant, after which a late read faults instead of reading poison.
      if (gr.slot_bytes > 0 && !transport_with_stable_addresses<T>)
        t_.fill_device(st.image, poison_byte, gr.slot_bytes, s);
      if (gr.side != no_group && layout_.side_parts[gr.side].slot_bytes > 0)
        t_.fill_device(st.side_image, poison_byte, layout_.side_parts[gr.side].slot_bytes, s);
    }
    const std::size_t q = graph_.position_of[g];
    // Linear: only the last S positions' releases are waited on (by the next launch's loads of
    // the first S); the others order the in-graph load of q + S through the fork's edge.
    if (transport_with_stable_addresses<T> || q + graph_.slots >= graph_.positions)
      signal_release(q, s);
    if constexpr (!transport_with_stable_addresses<T>)
      if (q + graph_.slots < graph_.positions) load_in_graph(q + graph_.slots, s);
  } else {
    (void)g, (void)slot, (void)s;
  }
}

/// Linear route, position p >= S: its load becomes part of the captured step, forked off @p s
/// right after the release of the slot's previous occupant (p - S) and joined where p is
/// acquired. Every ordering is a CUDA edge: nothing in the graph waits on work issued after its
/// launch, so no hardware-queue assignment can deadlock it (CUDA_DEVICE_MAX_CONNECTIONS=1 did
/// with memory waits), and the launch needs no host work for these positions.
template <class T>
void offloader_core<T>::load_in_graph(std::size_t p, stream_view s) {
  if constexpr (graph_streaming_transport<T> && !transport_with_stable_addresses<T>) {
    const auto side = T::view(graph_.side);
    auto& st = slots_[graph_.slot_of(p)];
    const auto& gr = layout_.groups[layout_.streamed_order[p]];
    t_.record_edge(graph_.fork, s);
    t_.wait_edge(side, graph_.fork);
    if (!compute_only_) {
      if (options_.poison_slots) t_.fill_device(st.base, poison_byte, gr.slot_bytes, side);
      step_metrics counted_per_launch;  // launch_graph counts the bytes of every replay
      copy_pinned_parts(gr, st.base, side, counted_per_launch);
    }
    merge_graph_load(p, graph_.loaded[p], side, true);
  } else {
    (void)p, (void)s;
  }
}

/// Position p's release: an event record (linear: ddo's copy stream waits on it) or a write of
/// released[p] = 1 (VMM: ddo's binder, a host thread, polls it before it unmaps p's range).
template <class T>
void offloader_core<T>::signal_release(std::size_t p, stream_view s) {
  if constexpr (transport_with_stable_addresses<T>) {
    if constexpr (transport_with_graph_streaming<T>) t_.write_value(s, graph_.released + p, 1);
  } else {
    t_.record(graph_.release[p], s);
  }
}

/// The loads of the first min(S, N) positions wait on the previous launch's releases and are
/// enqueued before the launch. The others wait on this launch's: on the linear route they are
/// part of the graph (load_in_graph), on the VMM route staging jobs queued after the launch (an
/// event wait takes the latest record made before the call; a launch re-records its record nodes).
template <class T>
template <class U>
requires graph_streaming_transport<U>
void offloader_core<T>::launch_graph(const typename U::graph_exec& exec, stream_view s) {
  if (released_)
    throw usage_error(
        "launch_graph: this component's device memory was released at a phase "
        "switch (release_device left graph mode); capture its step again");
  DDO_EXPECTS(graph_.active,
              "launch_graph: no step was captured with a streamed group (graph streaming starts "
              "at the first acquire of a streamed group on a capturing stream, when the ring "
              "holds fewer slots than streamed groups); with every group loaded, launch the "
              "graph directly");
  DDO_EXPECTS(graph_.broken.empty(), graph_.broken);
  DDO_EXPECTS(graph_.captured == graph_.positions,
              "launch_graph: the captured step acquired " + std::to_string(graph_.captured) +
                  " of the " + std::to_string(graph_.positions) +
                  " streamed groups; a replay loads every streamed group, so capture a whole step");
  const int held =
      std::count_if(graph_.held.begin(), graph_.held.end(), [](int h) { return h > 0; });
  DDO_EXPECTS(held == 0, "launch_graph: " + std::to_string(held) +
                             " captured lease(s) are still alive (a lease kept past the step): "
                             "their releases are not in the graph; drop them inside the capture");
  staging_.rethrow_error();
  if constexpr (transport_with_stable_addresses<T>)
    if (graph_.launches == 0) quiesce_window_for_graph();
  timing_.begin_step();
  auto& step = timing_.current();
  const std::size_t first = std::min(graph_.slots, graph_.positions);
  for (std::size_t p = 0; p < first; ++p) load_position(p, step);
  t_.launch_graph(exec, s);
  t_.record(graph_.done, s);  // right after the launch: teardown waits for it whatever follows
  for (std::size_t p = first; p < graph_.positions; ++p) {
    if constexpr (transport_with_stable_addresses<T>) {
      load_position(p, step);
    } else if (!compute_only_) {  // loaded inside the graph (load_in_graph): counted here
      const auto& gr = layout_.groups[layout_.streamed_order[p]];
      count_load(gr, nullptr, step);
      step.copies += pinned_copies(gr);
    }
  }
  ++graph_.launches;
}

template <class T>
template <class U>
requires graph_streaming_transport<U>
void offloader_core<T>::load_position(std::size_t p, step_metrics& step) {
  if constexpr (transport_with_stable_addresses<T>) {
    load_position_stable(p, step);
  } else {
    const auto v = T::view(copy_stream_);
    auto& st = slots_[graph_.slot_of(p)];
    const auto& gr = layout_.groups[layout_.streamed_order[p]];
    t_.wait(v, graph_.release[graph_.previous(p)]);
    if (graph_.launches == 0) {  // the eager steps before the capture are done with the slot
      t_.wait(v, st.release);
      t_.wait(v, st.ready);
    }
    if (!compute_only_) {
      if (options_.poison_slots) t_.fill_device(st.base, poison_byte, gr.slot_bytes, v);
      copy_pinned_parts(gr, st.base, v, step);
      count_load(gr, nullptr, step);
    }
    merge_graph_load(p, graph_.loaded[p], v, false);
  }
}

/// A load of @p gr (and of its @p side part, if any) in the step's metrics; its copies count
/// where they are issued (copy_pinned_parts, stable_job) or, inside a graph, pinned_copies().
template <class T>
void offloader_core<T>::count_load(const group_runtime& gr, const group_runtime* side,
                                   step_metrics& step) const {
  ++step.group_loads;
  for (const group_runtime* part : {&gr, side})
    if (part != nullptr)
      for (std::size_t i = 0; i < transfer_source_count; ++i)
        step.bytes_by_source[i] += part->bytes_by_source[i];
}

/// The copy calls of @p gr's pinned bytes: its packed block in chunks of max_copy_bytes, then
/// each piece pinned in place (copy_pinned_parts' and a stable job's).
template <class T>
std::uint64_t offloader_core<T>::pinned_copies(const group_runtime& gr) const {
  std::uint64_t n = gr.in_place.size();
  if (gr.has_block_copy())
    n += options_.max_copy_bytes == 0
             ? 1
             : (gr.pinned_bytes + options_.max_copy_bytes - 1) / options_.max_copy_bytes;
  return n;
}

/// Position p on a stable-address transport (VMM): a staging job whose binder waits for the
/// graph's released flag of the slot's previous occupant (none on the first launch: the window
/// was emptied), unmaps it and maps p's group on slot p mod S, and whose worker copies the group
/// (and then its side image) and writes ready[p] = 1. The graph's kernels read the group's stable
/// address; the slot only decides which handles back it.
template <class T>
template <class U>
requires graph_streaming_transport<U>
void offloader_core<T>::load_position_stable(std::size_t p, step_metrics& step) {
  const std::size_t k = graph_.slot_of(p);
  const std::size_t g = layout_.streamed_order[p];
  auto& st = slots_[k];
  const auto& gr = layout_.groups[g];
  const group_runtime* side = gr.side == no_group ? nullptr : &layout_.side_parts[gr.side];
  std::byte* image = gr.slot_bytes > 0 ? t_.stable_address(g) : nullptr;
  auto job = stable_job(compute_only_ ? nullptr : &gr, st, image, step);
  job.bind_slot = k;
  job.bind_group = g;
  // The first launch's first S positions have no previous occupant (the window was emptied).
  if (graph_.launches > 0 || p >= graph_.slots)
    job.release_flag = graph_.released + graph_.previous(p);
  if (!compute_only_) count_load(gr, side, step);
  if (side == nullptr || compute_only_) {
    job.ready_flag = graph_.ready + p;
    staging_.submit_when_room(job);
    return;
  }
  staging_.submit_when_room(job);
  auto side_job = stable_job(side, st, st.side_image, step);
  side_job.ready_flag = graph_.ready + p;  // the worker runs jobs in order: after both parts
  side_job.after_previous = true;          // ordered after the graph's release by the bind
  staging_.submit_when_room(side_job);
}

template <class T>
void offloader_core<T>::quiesce_window_for_graph() {
  if constexpr (transport_with_stable_addresses<T>) {
    // A host sync once, at the first launch: the eager ring's loads and leases end, then every
    // slot is unmapped (position p maps on slot p mod S, the eager ring may hold it elsewhere).
    staging_.wait_all();
    staging_.rethrow_error();
    for (auto& st : slots_) {
      t_.synchronize(st.release);
      t_.synchronize(st.ready);
    }
    for (std::size_t k = 0; k < slots_.size(); ++k) t_.bind_stable(k, no_group);
  }
}

template <class T>
void offloader_core<T>::settle_graph_loads() noexcept {
  if constexpr (transport_with_stable_addresses<T>) {
    // Every launch queued its whole step, so each job ends as the last launch runs: wait for that,
    // unless a job failed (the graph waits for its ready flag forever) or the device stopped.
    // Then the jobs still waiting for the graph are abandoned, and every job ends (their copies
    // too) before end_graph_mode's host writes let the graph run out: no copy or map races its
    // reads, and no job writes a flag after the flags go.
    for (;;) {
      if (staging_.settled() && !staging_.failed()) return;
      bool alive = true;
      try {
        (void)t_.ready(graph_.done);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ddo: leaving graph mode: %s\n", e.what());
        alive = false;
      }
      if (staging_.failed() || !alive) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    staging_.abandon_flag_waits(true);
    staging_.wait_drained();
    try {
      t_.synchronize(staging_.stream());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddo: leaving graph mode: %s\n", e.what());
    }
    // Abandoning stays on (jobs still polling give up) until the next capture enters graph mode.
  }
}

template <class T>
void offloader_core<T>::end_graph_mode() noexcept {
  if constexpr (graph_streaming_transport<T>) {
    if (!graph_.active) return;
    auto quiet = [](auto&& f) {
      try {
        f();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ddo: leaving graph mode: %s\n", e.what());
      }
    };
    // ddo's loads wait only on records of launches already made: they end. The last launch may
    // wait on flags that no load will write (a launch_graph that threw part-way): host writes
    // release it, written until it ended (a flag the replay consumed meanwhile is written again).
    settle_graph_loads();
    if (copy_stream_.get() != nullptr) quiet([&] { t_.synchronize(T::view(copy_stream_)); });
    if (merge_stream_.get() != nullptr) quiet([&] { t_.synchronize(T::view(merge_stream_)); });
    if (staging_.has_stream()) quiet([&] { t_.synchronize(staging_.stream()); });
    quiet([&] {
      while (!t_.ready(graph_.done)) {
        graph_.release_waiters();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    for (auto& e : graph_.release) quiet([&] { t_.synchronize(e); });
    if (graph_.ready != nullptr) quiet([&] { t_.free_flags(graph_.ready, graph_.flag_count()); });
    graph_.ready = nullptr;
    graph_.released = nullptr;
    graph_.release.clear();
    graph_.loaded.clear();
    graph_.fork = typename T::event{};
    graph_.side = typename T::stream{};  // its work lives only in the captured graphs
    graph_.merge_side = typename T::stream{};
    graph_.copied = typename T::event{};
    graph_.done = typename T::event{};
    graph_.active = false;
  }
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
