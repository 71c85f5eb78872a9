// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::basic_offloader<Transport>: runs a ready offload_plan — residents uploaded once,
/// streamed groups brought into a ring of device slots just before the engine needs them,
/// overlapped with its compute. ddo::offloader (runtime/offloader.hpp) adds planning and
/// configuration on top; this class is the runtime alone, so engines and tests can hand it a
/// plan they built themselves.
///
/// Setup (the constructor) does every allocation the run will need: the resident arena, the
/// ring (slot_count slots of the largest streamed group), two pinned staging buffers, events,
/// and packs + page-locks pinned groups. Budgets are checked first and a plan that cannot fit
/// is refused with the numbers. The hot path (acquire, release) allocates nothing and never
/// synchronizes the host with the device.
///
/// Threads: one offloader is driven from one engine thread (acquire, lease drops, metrics);
/// it runs its own staging and pin threads internally. Leases may be passed between streams,
/// not used concurrently from several threads. Lifetimes: the weight table, the host memory and
/// files its sources name, and a pinned_weight_cache given in the options must outlive the
/// offloader; leases must be dropped before it is destroyed.
///
/// Compile cost: a program can compile ddo once (core/linkage.hpp): every TU with
/// DDO_EXTERN_TEMPLATES, which makes this header declare the host_sim and linear instantiations
/// extern (at its end; setup/setup.hpp declares the transports the setup path adds), and one TU
/// including ddo/instantiate.hpp, which defines them.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ddo/core/linkage.hpp"
#include "ddo/runtime/detail/offloader_core.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Transports whose offloader streams through a captured step (launch_graph): CUDA-graph
/// support with slot addresses the runtime owns (docs/cuda-graphs.md). The public name of the
/// runtime's own condition, for engines that choose their replay path at compile time.
template <class T>
concept graph_streaming_transport = detail::graph_streaming_transport<T>;

/// @brief The offload runtime over one transport. Move-only; leases point into it, so it must
/// outlive them (moving the offloader does not invalidate leases).
/// @tparam Transport a ddo::transport (host_sim_transport, linear_transport, ...).
template <class Transport>
class basic_offloader {
  static_assert(detail::check_transport<Transport>());

 public:
  using transport_type = Transport;
  using stream_view = typename Transport::stream_view;
  using lease_type = lease<Transport>;

  /// @brief Sets up the runtime for @p plan over @p table (which must outlive the offloader,
  /// as must the host memory and files its sources name).
  /// @throws out_of_memory when a budget cannot hold the plan (device: resident + ring; pinned
  /// host), usage_error for a plan that does not match the table, cuda_error / io_error.
  basic_offloader(Transport transport, const weight_table& table, offload_plan plan,
                  runtime_options options = {})
      : core_(std::make_unique<detail::offloader_core<Transport>>(std::move(transport), table,
                                                                  std::move(plan),
                                                                  std::move(options))) {}

  /// @brief Brings group @p group to the device for work enqueued on @p stream after this call.
  /// Prefetches the following groups on ddo's copy stream as far as the ring allows.
  /// @note The returned pointers are valid for work on @p stream until the lease is dropped;
  /// dropping it records a release event on @p stream (no host sync).
  /// @throws usage_error when every slot is held by a live lease, or the index is out of range.
  [[nodiscard]] lease_type acquire(std::size_t group, stream_view stream) {
    return core_->acquire(group, stream);
  }
  /// @brief acquire() by group name. @throws usage_error for an unknown name.
  [[nodiscard]] lease_type acquire(std::string_view group, stream_view stream) {
    const auto g = core_->find_group(group);
    DDO_EXPECTS(g.has_value(), "acquire: no group named '" + std::string(group) + "'");
    return core_->acquire(*g, stream);
  }

  /// @brief Swap strategy: registers the engine's pointer @p engine_pointer (the tensor-data
  /// pointer of weight @p weight_name). Each lease of the weight's group writes the device
  /// address there; dropping the lease (also during stack unwinding) and destroying the
  /// offloader restore the value it had at bind time.
  /// @throws usage_error under the functional strategy, with leases alive, or for an unknown name.
  template <class T>
  void bind(std::string_view weight_name, T*& engine_pointer) {
    const auto w = core_->find_weight(weight_name);
    DDO_EXPECTS(w.has_value(), "bind: no weight named '" + std::string(weight_name) + "'");
    using U = std::remove_cv_t<T>;
    core_->bind(*w, static_cast<void*>(&engine_pointer),
                +[](void* target, void* value) { *static_cast<T**>(target) = static_cast<U*>(value); },
                const_cast<U*>(engine_pointer));
  }
  /// @brief Restores and forgets the binding of @p weight_name.
  void unbind(std::string_view weight_name) {
    const auto w = core_->find_weight(weight_name);
    DDO_EXPECTS(w.has_value(), "unbind: no weight named '" + std::string(weight_name) + "'");
    core_->unbind(*w);
  }

  /// @brief Launches @p exec, a captured step, on @p stream and enqueues that step's loads on
  /// ddo's copy stream: graph streaming (docs/transports.md, "CUDA graphs"). A step captured with
  /// a streamed group while the ring holds fewer slots than streamed groups waits on memory flags
  /// only these loads set, so every replay goes through this call. Starts a metrics step.
  /// @throws usage_error when no whole step was captured, or a captured lease is still alive.
  template <class U = Transport>
    requires detail::graph_streaming_transport<U>
  void launch_graph(const typename U::graph_exec& exec, stream_view stream) {
    core_->launch_graph(exec, stream);
  }
  /// @brief Whether a captured step put the offloader in graph mode (see launch_graph).
  [[nodiscard]] bool graph_mode() const noexcept { return core_->graph_mode(); }

  /// @brief Starts a new metrics step now (steps also start automatically when the engine
  /// acquires a group whose index is not above the previous one).
  void begin_step() { core_->begin_step(); }
  /// @brief A snapshot of the metrics. Harvests finished timing events; with @p wait it
  /// synchronizes with the outstanding ones first (a host sync: not for the hot path).
  [[nodiscard]] offload_metrics metrics(bool wait = false) { return core_->metrics(wait); }
  /// @brief Waits for every load ddo issued (not for the engine's own work).
  void synchronize() { core_->synchronize(); }

  /// @brief Compute-only mode, for timing the engine's compute back to back (calibrate()'s
  /// sustained pass): streamed groups get their slots as usual, but nothing is copied into
  /// them, so a lease's pointers address whatever bytes the slot held before — the engine's
  /// results are meaningless while it is on, and its compute must not depend on the weights'
  /// values (e.g. data-dependent routing). Switching it off loads every slot's group again.
  /// @throws usage_error while leases are alive.
  void set_compute_only(bool on) { core_->set_compute_only(on); }
  [[nodiscard]] bool compute_only() const noexcept { return core_->compute_only(); }

  /// @brief Frees ddo's device memory of this offloader (resident arena and ring, or a VMM
  /// window) after its loads and the engine's released work finish; the plan, pinned blocks and
  /// staging stay, so restore_device() needs no re-planning and no re-pinning. A pipeline calls
  /// it at phase boundaries (setup/pipeline_offload.hpp); acquire() refuses until restored.
  /// @note Synchronizes with ddo's streams and the lease release events (a phase boundary, not
  /// the hot path). @throws usage_error while leases are alive (their pointers would dangle).
  void release_device() { core_->release_device(); }
  /// @brief Brings the device side back: uploads the residents and allocates the ring again.
  /// Synchronizes. @throws out_of_memory / cuda_error, leaving nothing allocated.
  void restore_device() { core_->restore_device(); }
  /// @brief Whether release_device() ran and restore_device() has not.
  [[nodiscard]] bool device_released() const noexcept { return core_->device_released(); }

  /// @brief Moves the device budget of a running offloader to @p budget_bytes, running
  /// @p plan: a fresh plan for that budget over this table and these execution groups
  /// (setup/device_budget.hpp's set_device_budget makes it with the setup's own plan stage and
  /// calls this). Only what differs moves: resident groups the new plan streams are freed and
  /// stream from where it puts them (pinned blocks packed anew, the weight registry's or the
  /// shared_weight_store's pieces, the engine's pages registered in place, or their files; the
  /// file route's staging slots sized for the largest file piece), streamed groups it keeps
  /// resident are uploaded, the ring follows the largest streamed group; ddo's device
  /// bytes stay within max(old, new) budget throughout (metrics().budget_moves).
  /// Applied now when no lease is alive, else at the first step boundary (begin_step, or the
  /// acquire that starts a step) with none alive — a lease's weights never move under it; a
  /// later call replaces a pending move. After a move, addresses of moved residents
  /// (resident_data) and of the ring change: bindings follow, a captured graph must be
  /// captured again.
  /// @return whether the move was applied now.
  /// On a released offloader (release_device: a pipeline component outside its phase) only
  /// the plan and the host side move; restore_device() then brings the new plan up.
  /// @throws usage_error while a captured graph streams (graph_mode()), on the VMM routes
  /// (vmm_runtime, native_vmm: their addresses are stable for the run), with adapters
  /// attached, for a plan of other groups; out_of_memory when @p plan does not fit
  /// @p budget_bytes. Nothing changes then. A failure during the move itself puts the old
  /// placement back and rethrows.
  bool move_budget(offload_plan plan, std::uint64_t budget_bytes) {
    return core_->move_budget(std::move(plan), budget_bytes);
  }
  /// @brief Whether a move_budget() waits for a step boundary without leases.
  [[nodiscard]] bool budget_move_pending() const noexcept { return core_->budget_move_pending(); }

  /// @brief Attaches a LoRA adapter (adapter/lora_adapter.hpp, loaded against this offloader's
  /// table) under @p name at @p scale, last in the merge order: W + Σ scale_i · B_i · A_i
  /// (adapter/lora_merge.hpp). Its factors go to the device (adapter_device_bytes, counted in
  /// device_bytes); resident weights it changes are merged now (their base kept in pinned
  /// memory for exact detaches), streamed ones in their slot at every load, after the copy and
  /// before the group is ready. No re-planning, no re-pinning; the host copy and the files are
  /// never written. Between steps: synchronizes ddo's copy stream (docs/adapters.md).
  /// A captured step merges too (a step captured after the attach); budget moves keep the
  /// merges (docs/adapters.md).
  /// @throws usage_error while leases are alive, in graph mode, after release_device, on the
  /// native VMM route, on a GPU route without set_lora_merge_launcher, for a name in use or an
  /// adapter of another table; out_of_memory.
  void attach_adapter(std::string name, std::shared_ptr<const lora_adapter> adapter,
                      float scale = 1.0f) {
    core_->attach_adapter(std::move(name), std::move(adapter), scale);
  }
  /// @brief Detaches adapter @p name: the weights it changed return to their base bytes exactly
  /// (with the other adapters' deltas merged again). Same conditions as attach_adapter.
  void detach_adapter(const std::string& name) { core_->detach_adapter(name); }
  /// @brief Changes adapter @p name's scale (exact: merged again from the base bytes).
  void set_adapter_scale(const std::string& name, float scale) {
    core_->set_adapter_scale(name, scale);
  }
  /// @brief The merge kernel of a GPU route: ddo::launch_lora_merge_cuda from
  /// ddo/adapter/lora_merge_cuda.cuh, compiled by the engine's nvcc (host_sim needs none).
  void set_lora_merge_launcher(lora_merge_launcher launch) noexcept {
    core_->set_lora_merge_launcher(launch);
  }
  /// @brief The attached adapters' names, in merge order.
  [[nodiscard]] std::vector<std::string> adapter_names() const { return core_->adapter_names(); }
  /// @brief Device bytes of the attached adapters' factors.
  [[nodiscard]] std::uint64_t adapter_device_bytes() const noexcept {
    return core_->adapter_device_bytes();
  }
  /// @brief Pinned host bytes keeping the base of merged resident weights.
  [[nodiscard]] std::uint64_t adapter_kept_base_bytes() const noexcept {
    return core_->adapter_kept_base_bytes();
  }

  [[nodiscard]] std::size_t group_count() const noexcept { return core_->group_count(); }
  [[nodiscard]] const std::string& group_name(std::size_t g) const { return core_->group_name(g); }
  [[nodiscard]] std::optional<std::size_t> find_group(std::string_view name) const {
    return core_->find_group(name);
  }
  /// @brief Device address of a resident weight (valid until a budget move moves its group).
  [[nodiscard]] std::byte* resident_data(std::size_t weight_index) const {
    return core_->resident_data(weight_index);
  }
  /// @brief Device address of a weight for the whole run, known at setup: a resident weight's,
  /// or (a transport with stable addresses, e.g. VMM) a streamed weight's reserved address,
  /// backed by memory whenever a lease of its group is alive.
  /// @throws usage_error for a streamed weight of a transport without stable addresses, and for
  /// a streamed weight the VMM route does not cover (not a dense BF16/FP16 linear weight: it
  /// streams through the slot's linear side image; docs/transports.md).
  [[nodiscard]] std::byte* stable_data(std::size_t weight_index) const {
    return core_->stable_data(weight_index);
  }
  [[nodiscard]] const offload_plan& plan() const noexcept { return core_->plan(); }
  /// @brief The weight table the offloader runs (the engine's; not owned).
  [[nodiscard]] const weight_table& table() const noexcept { return core_->table(); }
  [[nodiscard]] const runtime_options& options() const noexcept { return core_->options(); }
  /// @brief Bytes of one ring slot (largest streamed group, aligned).
  [[nodiscard]] std::uint64_t slot_bytes() const noexcept { return core_->slot_bytes(); }
  [[nodiscard]] std::size_t slot_count() const noexcept { return core_->slot_count(); }
  /// @brief ddo's device bytes: resident arena + ring.
  [[nodiscard]] std::uint64_t device_bytes() const noexcept { return core_->device_bytes(); }
  [[nodiscard]] int live_leases() const noexcept { return core_->live_leases(); }
  [[nodiscard]] Transport& transport() noexcept { return core_->transport(); }

 private:
  std::unique_ptr<detail::offloader_core<Transport>> core_;
};

/// The runtime's instantiations for one transport: declared extern where ddo is compiled once
/// (below, and setup/setup.hpp for the transports the setup path constructs), defined by
/// ddo/instantiate.hpp. @p PREFIX is `extern` or empty.
#define DDO_RUNTIME_INSTANTIATIONS(PREFIX, TRANSPORT)    \
  PREFIX template class detail::offloader_core<TRANSPORT>; \
  PREFIX template class basic_offloader<TRANSPORT>;        \
  PREFIX template class lease<TRANSPORT>;

}  // namespace v0
}  // namespace ddo

// Compiled once (core/linkage.hpp): a TU using basic_offloader<host_sim_transport> or
// <linear_transport> pays the include only and links against the TU including
// ddo/instantiate.hpp. Declared here, after the class, rather than in a header of their own that
// would have to include this one back.
#if !DDO_HEADER_ONLY
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"

namespace ddo {
inline namespace v0 {
DDO_RUNTIME_INSTANTIATIONS(extern, host_sim_transport)
DDO_RUNTIME_INSTANTIATIONS(extern, linear_transport)
}  // namespace v0
}  // namespace ddo
#endif
