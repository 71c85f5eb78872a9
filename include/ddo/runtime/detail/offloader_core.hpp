// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The offloader's engine room (not API: use ddo::basic_offloader). It composes the parts
/// that each do one job:
/// - group_layout.hpp: where every weight goes (resident arena, slot offsets, sources);
/// - budget_check.hpp: resident + ring against the budgets (device_footprint.hpp's formula);
/// - pinning.hpp: packing and page-locking pinned groups, fallback, the pinned-weight cache;
/// - staging_worker.hpp: the staging thread, its buffers and pageable/file pieces;
/// - native_staging.hpp: the native VMM route's registered windows, retained sources and
///   micro-cache (used instead of the staging buffers when runtime_options::native_vmm is on);
/// - slot_ring.hpp: slot occupancy, eviction and prefetch scheduling;
/// - step_timing.hpp: steps, timing events, metrics and trace spans;
/// - pointer_bindings.hpp: the swap strategy's engine pointers;
/// - setup_meter.hpp: setup progress reports; ddo/runtime/nvtx_range.hpp: the NVTX guard.
///
/// Protocol (docs/transports.md has the long form):
/// - Every slot has a `ready` event (recorded after the last copy into it) and a `release` event
///   (recorded on the engine's stream when a lease on it is dropped).
/// - A copy into a slot is issued only while no lease holds the slot, so its release event has
///   been recorded (or was never needed); the copy stream waits on `release` and `ready` first.
/// - Pinned bytes are copied by the engine's thread on the copy stream; pageable and file bytes
///   by the staging worker on the staging stream. The engine waits (host) for the worker to have
///   *recorded* a slot's ready event before it waits on it.
/// - Prefetch runs after every acquire and release (ring_schedule::prefetch).
///
/// Member functions are defined out of the class (offloader_core_impl.hpp), so an engine can
/// instantiate the core once (end of basic_offloader.hpp) and every other TU pays the include only.

#include <memory>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/adapter/lora_delta.hpp"
#include "ddo/core/chrono.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/runtime/budget_move.hpp"
#include "ddo/runtime/detail/adapter_deltas.hpp"
#include "ddo/runtime/detail/graph_ring.hpp"
#include "ddo/runtime/detail/group_layout.hpp"
#include "ddo/runtime/detail/native_staging.hpp"
#include "ddo/runtime/detail/owned_memory.hpp"
#include "ddo/runtime/detail/pinning.hpp"
#include "ddo/runtime/detail/pointer_bindings.hpp"
#include "ddo/runtime/detail/slot_ring.hpp"
#include "ddo/runtime/detail/staging_worker.hpp"
#include "ddo/runtime/detail/step_timing.hpp"
#include "ddo/runtime/lease.hpp"
#include "ddo/runtime/metrics.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/transport/concepts.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

template <class Transport>
class offloader_core {
 public:
  using T = Transport;
  using stream_view = typename T::stream_view;
  using event = typename T::event;
  using lease_type = lease<T>;

  offloader_core(T transport, const weight_table& table, offload_plan plan, runtime_options options);
  offloader_core(const offloader_core&) = delete;
  offloader_core& operator=(const offloader_core&) = delete;
  ~offloader_core();

  // --- the hot path: no allocation, no lock but the staging worker's, no host sync --------------
  lease_type acquire(std::size_t g, stream_view s);
  void release(std::size_t g, int slot, stream_view s);
  std::byte* lease_data(std::size_t g, std::byte* const* ptrs, std::string_view name) const;
  std::size_t lease_weight_index(std::size_t g, std::size_t i) const;

  // --- graph streaming (graph_ring.hpp; docs/transports.md, "CUDA graphs") ---------------------
  /// Enqueues the step's loads around a launch of the captured step @p exec on @p s.
  template <class U = Transport>
    requires graph_streaming_transport<U>
  void launch_graph(const typename U::graph_exec& exec, stream_view s);
  [[nodiscard]] bool graph_mode() const noexcept { return graph_.active; }

  // --- steps and metrics ----------------------------------------------------------------------
  void begin_step();
  /// Calibration's sustained-compute pass (runtime/calibration.hpp): loads claim (and on a
  /// stable-address transport map) slots but copy nothing. Leaving the mode reloads every
  /// occupied slot. @throws usage_error while leases are alive.
  void set_compute_only(bool on);
  [[nodiscard]] bool compute_only() const noexcept { return compute_only_; }
  offload_metrics metrics(bool wait);
  /// Waits for every load ddo issued (not for the engine's streams).
  void synchronize();

  // --- the device side, for a pipeline's phases (setup/pipeline_offload.hpp) ----------------
  /// Frees the resident arena and the ring once ddo's loads and the engine's released work are
  /// done; the plan, pinned blocks, staging buffers and threads stay. Synchronizes (a phase
  /// boundary, not the hot path). @throws usage_error while leases are alive.
  void release_device();
  /// Uploads the residents and allocates the ring again, as setup did. Synchronizes.
  /// @throws out_of_memory / cuda_error (nothing stays allocated then).
  void restore_device();
  [[nodiscard]] bool device_released() const noexcept { return released_; }

  // --- a device budget that moves (offloader_core_move_impl.hpp) ------------------------------
  /// Checks @p plan (a fresh plan for @p budget_bytes, over this table and these groups) against
  /// the budget and moves to it: now when no lease is alive, else at the first step boundary
  /// (begin_step, or the acquire that starts a step) with none alive; a later call replaces a
  /// move still pending. @return whether it was applied now. @throws usage_error (the route
  /// cannot move, a captured graph is live, the device was released, the plan's groups differ),
  /// out_of_memory (the plan does not fit the budget), leaving everything as it was.
  bool move_budget(offload_plan plan, std::uint64_t budget_bytes);
  [[nodiscard]] bool budget_move_pending() const noexcept { return pending_move_ != nullptr; }

  // --- adapters (offloader_core_adapter_impl.hpp; docs/adapters.md) --------------------------
  /// Between steps (no lease alive): uploads the factors, merges the resident weights the
  /// adapter changes (their base kept in pinned memory) and reloads the occupied slots; every
  /// later load merges in its slot. @throws usage_error (a route the merge does not run on yet,
  /// leases alive, graph mode, a released device, a bad name or table), out_of_memory.
  void attach_adapter(std::string name, std::shared_ptr<const lora_adapter> adapter, float scale);
  /// Writes the residents' base back, merges what stays, reloads the occupied slots.
  void detach_adapter(const std::string& name);
  void set_adapter_scale(const std::string& name, float scale);
  void set_lora_merge_launcher(lora_merge_launcher launch) noexcept { merge_launcher_ = launch; }
  [[nodiscard]] std::vector<std::string> adapter_names() const { return adapters_.names(); }
  [[nodiscard]] std::uint64_t adapter_device_bytes() const noexcept {
    return adapters_.device_bytes();
  }
  [[nodiscard]] std::uint64_t adapter_kept_base_bytes() const noexcept {
    return adapters_.kept_base_bytes();
  }

  // --- bindings -------------------------------------------------------------------------------
  void bind(std::size_t w, void* target, void (*write)(void*, void*), void* original);
  void unbind(std::size_t w);

  // --- queries --------------------------------------------------------------------------------
  [[nodiscard]] std::size_t group_count() const noexcept { return layout_.groups.size(); }
  [[nodiscard]] const std::string& group_name(std::size_t g) const { return layout_.groups.at(g).name; }
  [[nodiscard]] std::optional<std::size_t> find_group(std::string_view name) const {
    return layout_.find_group(name);
  }
  [[nodiscard]] std::optional<std::size_t> find_weight(std::string_view name) const {
    return table_->find(name);
  }
  [[nodiscard]] std::byte* resident_data(std::size_t w) const;
  /// Weight w's address for the whole run: resident, or streamed by a stable-address transport.
  [[nodiscard]] std::byte* stable_data(std::size_t w) const;
  [[nodiscard]] const offload_plan& plan() const noexcept { return plan_; }
  [[nodiscard]] const runtime_options& options() const noexcept { return options_; }
  [[nodiscard]] std::uint64_t slot_bytes() const noexcept { return layout_.slot_bytes; }
  [[nodiscard]] std::size_t slot_count() const noexcept { return slots_.size(); }
  /// The resident arena, the ring (on a stable-address (VMM) transport: the side images of the
  /// weights the route does not cover) and the physical handles of the window while this
  /// offloader holds it.
  [[nodiscard]] std::uint64_t device_bytes() const noexcept {
    return resident_device_bytes_ + ring_.bytes + window_bytes_ + adapters_.device_bytes();
  }
  [[nodiscard]] int live_leases() const noexcept { return live_leases_; }
  [[nodiscard]] T& transport() noexcept { return t_; }
  [[nodiscard]] const weight_table& table() const noexcept { return *table_; }

 private:
  using clock = std::chrono::steady_clock;

  // setup
  void plan_setup_progress();
  /// Allocates and uploads the resident pieces (@p only: those marked 1; null: all). A budget
  /// move passes @p pinned_copies (per weight: a page-locked host copy, or null), which are
  /// copied to the device straight, not read from their sources. @return the bytes so copied.
  std::uint64_t upload_residents(setup_meter* meter, const std::vector<char>* only = nullptr,
                                 const std::vector<const std::byte*>* pinned_copies = nullptr);
  /// Frees resident piece @p p and forgets its weights' addresses.
  void free_resident_piece(std::size_t p) noexcept;
  bool pin_beside_upload();
  void allocate_ring(std::size_t max_slots);
  void free_device_side() noexcept;
  [[noreturn]] void throw_released(std::size_t g) const;
  void note_device_peak() noexcept;
  void teardown() noexcept;
  // budget moves (offloader_core_move_impl.hpp)
  struct pending_budget_move {
    offload_plan plan;
    runtime_options options;
    group_layout layout;
    bool deferred = false;
  };
  void refuse_budget_move(const offload_plan& plan) const;
  void apply_budget_move();
  void apply_pending_move_at_boundary(bool boundary);
  double wait_for_slot_users();
  void pin_for_move(pending_budget_move& next, group_pinning<T>& pins, budget_move& record);
  [[nodiscard]] std::vector<const std::byte*> pinned_host_copies() const;
  void move_device_side(pending_budget_move& next, budget_move& record);
  void restore_after_failed_move(group_layout& old, const std::vector<char>& kept) noexcept;
  void fit_staging_for_move(bool for_upload);
  void commit_released_move(pending_budget_move& next);
  void resize_file_slots();
  void size_staging_jobs(std::size_t slots);
  std::uint64_t rebuild_pieces_and_ring(
      const std::vector<char>& fresh,
      const std::vector<const std::byte*>* pinned_copies = nullptr);
  // loading
  void bind_slot_to(slot_state<T>& st, std::size_t g);
  void wait_staged(slot_state<T>& st);
  void load(std::size_t g, std::size_t s);
  void load_unguarded(std::size_t g, std::size_t s);
  /// Enqueues on @p v the copies of @p gr's pinned bytes (its packed block, in chunks of
  /// max_copy_bytes, and its pieces pinned in place) into the slot image at @p image; the eager
  /// load and the graph's per-position load share it.
  void copy_pinned_parts(const group_runtime& gr, std::byte* image, stream_view v, step_metrics& step);
  // A constrained member template, so that an explicit instantiation for a transport without
  // stable addresses (ddo/instantiate.hpp) leaves it out: explicit instantiation never
  // instantiates member templates, while constrained non-template members are skipped only by
  // compilers that implement [temp.explicit]/10 (g++ does, clang 14 does not).
  template <class U = Transport>
    requires transport_with_stable_addresses<U>
  void load_stable(std::size_t g, std::size_t s);
  template <class U = Transport>
    requires transport_with_stable_addresses<U>
  void point_at_stable(slot_state<T>& st, std::size_t g);
  typename staging_worker<T>::job stable_job(const group_runtime* part, slot_state<T>& st,
                                             std::byte* image, step_metrics& step);
  void prefetch();
  void poison_released(const group_runtime& gr, slot_state<T>& st, stream_view s, std::size_t slot);
  /// Returns the slots poisoned at earlier releases to the ring, their release events recorded
  /// again on their releases' streams (the engine's later reads there see the poison first);
  /// called first by acquire and release, the engine's next calls.
  void fence_poisoned();
  [[noreturn]] void throw_ring_full(std::size_t g) const;
  void refuse_unreplayable_capture(std::size_t g) const;
  // adapters (offloader_core_adapter_impl.hpp)
  void check_adapter_change(const std::string& what) const;
  void adapters_changed(const std::vector<std::size_t>& before);
  void launch_merge(const lora_merge_job& job, stream_view v);
  void check_adapter_budget(const group_layout& layout, std::uint64_t budget_bytes) const;
  void remerge_after_move();
  /// Enqueues on the merge stream, after slot st's ready event as recorded now, the merge of
  /// every streamed weight of g an adapter changes, and records the ready event there again.
  void merge_slot(std::size_t g, slot_state<T>& st);
  void merge_slot_pointers(std::size_t g, slot_state<T>& st, stream_view v);
  template <class Where>
  void merge_weights(std::size_t g, stream_view v, Where where);
  /// Whether an attached adapter changes a streamed weight of g.
  [[nodiscard]] bool group_merges(std::size_t g) const;
  /// Enqueues on @p v the merge of every streamed weight of g an adapter changes, in @p image
  /// (a slot's image holding g).
  void merge_group(std::size_t g, std::byte* image, stream_view v);
  /// A graph-mode load's merges (linear route): on ddo's merge stream, or inside the capture on
  /// the graph's merge branch, after @p loaded as recorded on @p v, which it records again.
  void merge_graph_load(std::size_t p, typename T::event& loaded, stream_view v, bool in_graph);
  void finish_pending_merge(std::size_t g, slot_state<T>& st);
  // graph streaming (offloader_core_graph_impl.hpp)
  template <class U = Transport>
    requires graph_streaming_transport<U>
  lease_type acquire_captured(std::size_t g, stream_view s);
  template <class U = Transport>
    requires graph_streaming_transport<U>
  void enter_graph_mode(const std::string& what);
  /// Refuses a captured acquire on a stream forked into the step's capture.
  template <class U = Transport>
  requires graph_streaming_transport<U>
  [[noreturn]] void refuse_forked_stream(const std::string& what) const;
  template <class U = Transport>
    requires graph_streaming_transport<U>
  void load_position(std::size_t p, step_metrics& step);
  void load_in_graph(std::size_t p, stream_view s);
  void count_load(const group_runtime& gr, const group_runtime* side, step_metrics& step) const;
  [[nodiscard]] std::uint64_t pinned_copies(const group_runtime& gr) const;
  /// The first launch on a stable-address transport: the eager loads end and the window's slots
  /// are emptied (a group the eager ring mapped on another slot than its position's).
  void quiesce_window_for_graph();
  /// Stable-address transports: waits until the staging thread ran every graph load it was
  /// given (each ends as the last launch runs), abandoning them if one failed or the device did.
  void settle_graph_loads() noexcept;
  template <class U = Transport>
    requires graph_streaming_transport<U>
  void load_position_stable(std::size_t p, step_metrics& step);
  void release_captured(std::size_t g, std::size_t slot, stream_view s);
  void signal_release(std::size_t p, stream_view s);
  /// Leaves graph mode (release_device, teardown): ddo's loads end, waiting graphs are released
  /// (host writes to the flags), the last launch ends, the flags and events go.
  void end_graph_mode() noexcept;

  T t_;
  const weight_table* table_;
  offload_plan plan_;
  runtime_options options_;

  group_layout layout_;
  source_files files_;
  setup_meter meter_;
  group_pinning<T> pinning_;
  native_stager<T> native_;  // before staging_: its thread stops before the windows go
  staging_worker<T> staging_;
  ring_schedule ring_schedule_;
  step_timing<T> timing_;
  pointer_bindings bindings_;
  graph_ring<T> graph_;

  typename T::stream copy_stream_;
  std::vector<device_allocation<T>> resident_;  // per resident piece (group_layout)
  std::uint64_t resident_device_bytes_ = 0;     // the pieces' bytes together
  device_allocation<T> ring_;  // stable-address transports: the slots' side images
  std::vector<std::byte*> resident_ptr_;  // per weight: device address or null
  std::vector<slot_state<T>> slots_;
  std::uint64_t peak_device_bytes_ = 0;
  // The physical bytes of the transport's stable-address window while this offloader holds it
  // (prepared in allocate_ring, released in free_device_side): the window is the transport's,
  // shared by a pipeline's components one phase at a time, so only its holder counts it.
  std::uint64_t window_bytes_ = 0;
  bool holds_window_ = false;
  int live_leases_ = 0;
  bool released_ = false;  // release_device() ran and restore_device() has not
  bool compute_only_ = false;  // set_compute_only: loads copy nothing
  std::unique_ptr<pending_budget_move> pending_move_;  // move_budget, waiting for no leases
  // The merges of streamed groups: on a stream of their own, after the slot's copies (an event
  // wait), so that the copies of the next groups proceed while a group merges.
  typename T::stream merge_stream_;
  adapter_deltas<T> adapters_;                     // attach_adapter; freed before t_ goes
  lora_merge_launcher merge_launcher_ = nullptr;   // a GPU route's merge kernel
  std::vector<budget_move> moves_;                     // every move applied (metrics)
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo

#include "ddo/runtime/detail/offloader_core_impl.hpp"
