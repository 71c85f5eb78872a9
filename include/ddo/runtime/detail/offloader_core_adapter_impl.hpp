// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief offloader_core's adapters (docs/adapters.md): attach, detach and scale changes between
/// steps, and the merge of a streamed group in its slot. Ordering: a slot's merge runs on the
/// merge stream after a wait on the slot's ready event as the copies recorded it, and records
/// the ready event again (pinned groups: at the load itself, so the merge of g runs while the
/// copy stream copies g+1; groups with staged parts: the staging stream records ready, and the
/// first acquire enqueues the merge). The next copy into the slot waits on that ready event. The
/// host copy, the files and other offloaders' memory are never written.

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/runtime/detail/budget_check.hpp"
// Part of ddo/runtime/detail/offloader_core.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {
namespace detail {

/// The transport at the bottom of @p t's adaptors (nvme, VMM, fault injection hold theirs).
template <class U>
auto& innermost_transport(U& t) noexcept {
  if constexpr (requires { t.upstream(); })
    return innermost_transport(t.upstream());
  else
    return t;
}

/// Whether the merge runs as a task on @p T's streams: host_sim under any adaptors, whose
/// "device" memory is host memory (merge_lora itself); a GPU route launches a kernel instead.
template <class T>
inline constexpr bool merges_as_task =
    requires(std::remove_reference_t<decltype(innermost_transport(std::declval<T&>()))>& b,
             typename T::stream_view v) { b.enqueue(v, [] {}); };

template <class T>
void offloader_core<T>::check_adapter_change(const std::string& what) const {
  if (native_.active())
    throw usage_error(what +
                      ": adapters are merged on the linear, file, host_sim and legacy VMM "
                      "(vmm_runtime) routes; the native VMM route (vmm_fast_runtime: registered "
                      "staging windows, the micro-cache) does not merge them (docs/adapters.md): "
                      "use vmm_runtime or linear_runtime, or apply the delta in the engine's "
                      "own GEMM");
  if constexpr (!merges_as_task<T>)
    DDO_EXPECTS(merge_launcher_ != nullptr,
                what +
                    ": this route merges on the device through the merge kernel the engine "
                    "compiles (ddo/adapter/lora_merge_cuda.cuh, nvcc): pass "
                    "ddo::launch_lora_merge_cuda to set_lora_merge_launcher first");
  DDO_EXPECTS(live_leases_ == 0, what + ": " + std::to_string(live_leases_) +
                                     " lease(s) are alive; change adapters between steps");
  DDO_EXPECTS(!graph_.active, what +
                                  ": a captured CUDA graph streams through this offloader; "
                                  "its loads and merges were fixed at capture, the factors and "
                                  "scales included (leave graph mode with release_device / "
                                  "restore_device, change the adapters, then capture again)");
  DDO_EXPECTS(!released_, what +
                              ": the device side was released (release_device); "
                              "restore_device first");
  DDO_EXPECTS(!pending_move_, what + ": a budget move is pending; begin_step applies it first");
}

template <class T>
void offloader_core<T>::attach_adapter(std::string name,
                                       std::shared_ptr<const lora_adapter> adapter, float scale) {
  check_adapter_change("attach_adapter('" + name + "')");
  if (merge_stream_.get() == nullptr) merge_stream_ = t_.make_stream();
  const auto before = adapters_.touched();
  adapters_.add(t_, T::view(copy_stream_), *table_, std::move(name), std::move(adapter), scale);
  adapters_changed(before);
}

template <class T>
void offloader_core<T>::detach_adapter(const std::string& name) {
  check_adapter_change("detach_adapter('" + name + "')");
  const auto before = adapters_.touched();
  synchronize();  // loads in flight may still merge with the factors freed below
  adapters_.remove(name, *table_);
  adapters_changed(before);
}

template <class T>
void offloader_core<T>::set_adapter_scale(const std::string& name, float scale) {
  check_adapter_change("set_adapter_scale('" + name + "')");
  const auto before = adapters_.touched();
  adapters_.set_scale(name, scale, *table_);
  adapters_changed(before);
}

/// The residents the old or the new set changes are written back and merged again; the slots'
/// occupants were merged with the old set: they load again (the next acquires find them).
template <class T>
void offloader_core<T>::adapters_changed(const std::vector<std::size_t>& before) {
  auto weights = adapters_.touched();
  weights.insert(weights.end(), before.begin(), before.end());
  std::sort(weights.begin(), weights.end());
  weights.erase(std::unique(weights.begin(), weights.end()), weights.end());
  const auto v = T::view(copy_stream_);
  adapters_.remerge_residents(
      t_, v, *table_, weights, [&](std::size_t w) { return resident_ptr_[w]; },
      [&](const lora_merge_job& job, stream_view s) { launch_merge(job, s); });
  for (std::size_t s = 0; s < slots_.size(); ++s)
    if (const std::size_t g = ring_schedule_.occupant(s); g != no_group) load(g, s);
}

/// A budget move with adapters attached: the new layout and the factors, which the move keeps,
/// within the budget (the plan's bytes are the layout's; the factors are ddo's device bytes too).
template <class T>
void offloader_core<T>::check_adapter_budget(const group_layout& layout,
                                             std::uint64_t budget_bytes) const {
  const std::uint64_t adapters = adapters_.device_bytes();
  if (adapters == 0 || budget_bytes == 0) return;
  const std::uint64_t need = runtime_device_bytes(layout, true) + adapters;
  if (need > budget_bytes)
    throw out_of_memory(memory_tier::device, need, budget_bytes,
                        "move_budget refused, nothing moved: the plan's resident weights and "
                        "ring (" + format_bytes_exact(need - adapters) + ") and the attached "
                        "adapters' factors (" + format_bytes_exact(adapters) + ") exceed the "
                        "device budget of " + format_bytes_exact(budget_bytes) +
                        "; plan for the budget less adapter_device_bytes(), or detach adapters");
}

/// After a budget move (or a failed one that put the old layout back): every resident piece
/// uploaded again holds its weights' base, and kept pieces hold merged bytes. Each adapted
/// resident is written back from its kept base (or has its base kept now) and merged again;
/// kept bases of weights the move demoted are dropped (their slot loads merge). The ring was
/// rebuilt empty: nothing to reload.
template <class T>
void offloader_core<T>::remerge_after_move() {
  if (!adapters_.any()) return;
  try {
    adapters_changed({});
  } catch (const std::exception& e) {
    // Not silent: residents may hold their base now; every later acquire rethrows this.
    staging_.fail(std::make_exception_ptr(usage_error(
        std::string("move_budget: merging the attached adapters into the moved residents "
                    "failed (") +
        e.what() + "); their bytes may be the base: set the offloader up again")));
    throw;
  }
}

template <class T>
void offloader_core<T>::launch_merge(const lora_merge_job& job, stream_view v) {
  if constexpr (merges_as_task<T>) {
    innermost_transport(t_).enqueue(v, [job] { merge_lora(job); });
  } else if constexpr (requires { v.handle; }) {
    merge_launcher_(job, static_cast<void*>(v.handle));
  } else {
    throw usage_error("attach_adapter: no merge runs on the " + std::string(t_.name()) +
                      " transport");
  }
}

template <class T>
void offloader_core<T>::merge_slot(std::size_t g, slot_state<T>& st) {
  const auto v = T::view(merge_stream_);
  t_.wait(v, st.ready);
  merge_slot_pointers(g, st, v);
  t_.record(st.ready, v);
}

/// The merges of g's streamed weights at the slot's pointers: its image, and on a
/// stable-address route g's mapped range and the slot's side image (the weights the route does
/// not cover).
template <class T>
void offloader_core<T>::merge_slot_pointers(std::size_t g, slot_state<T>& st, stream_view v) {
  const auto& gr = layout_.groups[g];
  const group_runtime* side = gr.side == no_group ? nullptr : &layout_.side_parts[gr.side];
  merge_weights(g, v, [&](std::size_t i) -> std::byte* {
    const bool in_slot = gr.slot_offset[i] != not_streamed ||
                         (side != nullptr && side->slot_offset[i] != not_streamed);
    return in_slot ? st.pointers[i] : nullptr;
  });
}

/// Launches on @p v the merge of each weight of g an adapter changes, at @p where(i) (the i-th
/// weight's device bytes; nullptr: resident, merged at attach).
template <class T>
template <class Where>
void offloader_core<T>::merge_weights(std::size_t g, stream_view v, Where where) {
  const auto& gr = layout_.groups[g];
  for (std::size_t i = 0; i < gr.weights.size(); ++i) {
    std::byte* at = where(i);
    if (at == nullptr) continue;
    if (const auto* job = adapters_.job_for(gr.weights[i])) {
      lora_merge_job j = *job;
      j.weight = at;
      launch_merge(j, v);
    }
  }
}

template <class T>
bool offloader_core<T>::group_merges(std::size_t g) const {
  const auto& gr = layout_.groups[g];
  for (std::size_t i = 0; i < gr.weights.size(); ++i)
    if (gr.slot_offset[i] != not_streamed && adapters_.job_for(gr.weights[i]) != nullptr)
      return true;
  return false;
}

template <class T>
void offloader_core<T>::merge_group(std::size_t g, std::byte* image, stream_view v) {
  const auto& gr = layout_.groups[g];
  merge_weights(g, v, [&](std::size_t i) -> std::byte* {
    return gr.slot_offset[i] == not_streamed ? nullptr : image + gr.slot_offset[i];
  });
}

/// Graph mode (linear route): position p's merges follow its copies the way an eager load's do,
/// on a stream of their own. The first S positions load on ddo's copy stream before each launch:
/// their merges go on the merge stream, re-recording `loaded` before the launch, whose event wait
/// node takes the record as of the launch. The others load inside the graph on its `side`
/// branch: the merges become kernel nodes on the merge branch, forked at `copied` and joined back
/// where the graph waits on `loaded` (the factors and scales are fixed at capture: adapters
/// change only outside graph mode, check_adapter_change).
template <class T>
void offloader_core<T>::merge_graph_load(std::size_t p, typename T::event& loaded, stream_view v,
                                         bool in_graph) {
  if constexpr (graph_streaming_transport<T> && !transport_with_stable_addresses<T>) {
    const std::size_t g = layout_.streamed_order[p];
    auto& st = slots_[graph_.slot_of(p)];
    if (compute_only_ || !group_merges(g)) {
      if (in_graph)
        t_.record_edge(loaded, v);
      else
        t_.record(loaded, v);
      return;
    }
    if (in_graph) {
      const auto m = T::view(graph_.merge_side);
      t_.record_edge(graph_.copied, v);
      t_.wait_edge(m, graph_.copied);
      merge_group(g, st.base, m);
      t_.record_edge(loaded, m);
    } else {
      const auto m = T::view(merge_stream_);
      t_.record(loaded, v);
      t_.wait(m, loaded);
      merge_group(g, st.base, m);
      t_.record(loaded, m);
    }
  } else {
    (void)p, (void)loaded, (void)v, (void)in_graph;
  }
}

template <class T>
void offloader_core<T>::finish_pending_merge(std::size_t g, slot_state<T>& st) {
  merge_slot(g, st);
  st.merge_pending = false;
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
