// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The transport concept: how bytes reach the device, with the transport's own streams and
/// events, so that host_sim (threads standing in for the copy engine) and the CUDA transports are
/// driven by the same runtime code.
///
/// A transport is a cheap, copyable handle to shared state (copies refer to the same device,
/// the same accounting). It provides:
/// - `stream` (owning, movable) and `stream_view` (non-owning, trivially copyable) with
///   `T::view(stream&)`; the engine passes a `stream_view` of its compute stream to acquire().
/// - `event` (owning, movable): `record(event&, stream_view)` captures the work enqueued on the
///   stream so far; `wait(stream_view, const event&)` makes later work on the stream wait for the
///   most recent record made before the call (an event never recorded is complete, exactly like
///   cudaStreamWaitEvent — the runtime therefore only waits on events it knows are recorded).
/// - device memory (`allocate_device`/`free_device`), pinned host memory
///   (`allocate_pinned`/`free_pinned`), page-locking of existing host memory
///   (`register_host`/`unregister_host`, which reports failure by returning false).
/// - `elapsed_ms(start, end)` between two events made with timing=true; it waits for both.
/// - asynchronous copies `copy_to_device` (source must be pinned or registered: pageable
///   sources are staged by the runtime, never handed to the transport) and `copy_to_host`, and
///   `fill_device` for poisoning.
///
/// Optional capability, detected with a requires-expression: `std::byte* bind_slot(std::byte*
/// slot_base, std::uint64_t slot_bytes, std::size_t group, const event& release)` — called on
/// the engine's thread when `group` is about to be loaded into a slot (after the previous
/// occupant's `release` event was recorded), it returns the device address the group's bytes
/// get. Without it the address is the slot's base (linear, host_sim). A VMM transport
/// implements it by mapping the slot's physical backing at the group's reserved virtual range
/// (waiting on `release` before it unmaps the previous occupant), which gives every weight a
/// stable address without touching the runtime. See docs/transports.md.
///
/// Transports differ by capabilities, each a concept below beside the base concept. The runtime
/// asks for a capability (`if constexpr (transport_with_...<T>)`) at the one place it matters and
/// never switches on a transport's name; a new transport (VMM, NVMe) adds capabilities, not
/// branches in the runtime's hot path.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/model/file_fault_hook.hpp"
#include "ddo/platform/cuda_device.hpp"
#include "ddo/transport/allocation_ledger.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The opt-in tag: a transport declares `using transport_category = ddo::transport_tag;`.
struct transport_tag {};
/// @brief An instance of the tag, for the `_tag` convention.
inline constexpr transport_tag transport_v{};

/// @brief A way for weights to reach the device. See the file comment for the contract.
template <class T>
concept transport =
    requires { typename T::transport_category; } &&
    std::same_as<typename T::transport_category, transport_tag> && std::copy_constructible<T> &&
    std::movable<typename T::stream> && std::movable<typename T::event> &&
    std::copyable<typename T::stream_view> &&
    requires(T& t, const T& ct, typename T::stream& s, typename T::stream_view v,
             typename T::event& e, const typename T::event& ce, std::byte* d, const std::byte* h,
             std::size_t n, void* p) {
      { ct.name() } -> std::convertible_to<std::string_view>;
      { t.make_stream() } -> std::same_as<typename T::stream>;
      { T::view(s) } -> std::same_as<typename T::stream_view>;
      { t.make_event(bool{}) } -> std::same_as<typename T::event>;
      t.record(e, v);
      t.wait(v, ce);
      { t.ready(ce) } -> std::same_as<bool>;
      t.synchronize(ce);
      t.synchronize(v);
      { t.elapsed_ms(ce, ce) } -> std::convertible_to<double>;
      { t.allocate_device(n) } -> std::same_as<std::byte*>;
      t.free_device(d, n);
      { t.allocate_pinned(n) } -> std::same_as<std::byte*>;
      t.free_pinned(d, n);
      { t.register_host(p, n) } -> std::same_as<bool>;
      t.unregister_host(p);
      t.copy_to_device(d, h, n, v);
      t.copy_to_host(d, h, n, v);
      t.fill_device(d, int{}, n, v);
      { t.device_memory() } -> std::same_as<device_memory_info>;
    };

/// @brief Whether a transport maps groups at their own addresses (see bind_slot above).
template <class T>
concept transport_with_slot_binding =
    transport<T> && requires(T& t, std::byte* base, std::uint64_t bytes, std::size_t group,
                             const typename T::event& release) {
      { t.bind_slot(base, bytes, group, release) } -> std::same_as<std::byte*>;
    };

/// @brief Whether a transport wants to be told about the runtime's own threads: `bind_thread()`
/// is called first on each (the linear transport makes its device current there).
template <class T>
concept transport_with_thread_binding = transport<T> && requires(T& t) { t.bind_thread(); };

/// @brief Whether a transport reads file bytes straight into device memory (e.g. NVMe → GPU):
/// `read_file_to_device(std::byte* dst, const std::string& path, std::uint64_t offset,
/// std::size_t bytes, stream_view s)` enqueues the read on @p s (ordered like a copy on it).
/// The runtime's staging worker then issues file pieces through it instead of the staging buffers.
template <class T>
concept transport_with_file_reads =
    transport<T> && requires(T& t, std::byte* d, const std::string& path, std::uint64_t off,
                             std::size_t n, typename T::stream_view v) {
      t.read_file_to_device(d, path, off, n, v);
    };

/// @brief One file piece of a batched read (transport_with_batched_file_reads): bytes
/// [offset, offset + bytes) of the file at @p path, for the device at @p dst.
struct device_file_read {
  std::byte* dst = nullptr;
  const std::string* path = nullptr;
  std::uint64_t offset = 0;
  std::size_t bytes = 0;
};

/// @brief Whether a transport reads a group's file pieces as one batch:
/// `read_files_to_device(std::span<const device_file_read>, stream_view)`, ordered on the
/// stream like read_file_to_device for each piece. Why: a piece at a time lets the disk's queue
/// drain at every piece's end (the file route then read a Flux block's 18-108 MiB pieces at 69%
/// of the disk's rate); a batch keeps the reads of the next pieces in flight while a piece's copy
/// is issued. The runtime's staging loop hands a run's file pieces over in one call when it can.
template <class T>
concept transport_with_batched_file_reads =
    transport_with_file_reads<T> &&
    requires(T& t, std::span<const device_file_read> pieces, typename T::stream_view v) {
      t.read_files_to_device(pieces, v);
    };

/// @brief What the runtime tells a file-staging transport at setup (transport_with_file_staging).
struct file_staging_request {
  const std::vector<std::string>* paths = nullptr;  ///< the weight table's files, by index
  /// Per file: whether the plan reads it at run time (0/1; char, not bool: std::vector<bool>'s
  /// instantiation costs every TU including the umbrella 3%).
  std::vector<char> used;
  file_fault_hook* faults = nullptr;       ///< consulted before every read (tests); may be null
  /// The largest file piece the plan reads (0: unknown): staging larger than it is not
  /// page-locked, a piece never needs more than one slot of it plus O_DIRECT's widening.
  std::uint64_t largest_piece_bytes = 0;
};

/// @brief Whether a transport stages file pieces itself, through pinned memory it owns (the
/// NVMe route, transport/nvme.hpp): `prepare_file_reads(const file_staging_request&)` at setup
/// (opens the files, page-locks its staging), `read_file_to_device` for every file piece (see
/// transport_with_file_reads), `release_file_reads()` at teardown after the streams were
/// synchronized (no throw), and `staging_slot_bytes()`: the most one group may stream, which
/// setup turns into the plan's per-group limit.
template <class T>
concept transport_with_file_staging =
    transport_with_file_reads<T> && requires(T& t, const T& ct, const file_staging_request& r) {
      t.prepare_file_reads(r);
      t.release_file_reads();
      { ct.staging_slot_bytes() } -> std::convertible_to<std::uint64_t>;
    };

/// @brief Whether a transport exposes its allocation_ledger (allocation_ledger.hpp):
/// `ledger()` returning a const reference to it; the runtime reads leak and peak counts there.
template <class T>
concept transport_with_ledger = transport<T> && requires(const T& t) {
  { t.ledger().in_use(ledger_kind::device) } -> std::convertible_to<std::uint64_t>;
};

/// @brief What the runtime tells a transport with stable addresses at setup (see below).
struct stable_address_request {
  std::vector<std::uint64_t> group_bytes;  ///< per group: bytes of its streamed image (0: none)
  std::uint64_t slot_bytes = 0;            ///< the largest streamed group's image
  std::uint64_t resident_bytes = 0;        ///< the resident arena (counts against the budget)
  std::uint64_t largest_staged_bytes = 0;  ///< most bytes one group stages (pageable/file)
  std::size_t max_slots = 0;               ///< upper bound on slots (0: one per streamed group)
  /// Device bytes the runtime allocates per slot beside the mapped range (the linear side image
  /// of the weights the route does not cover); they count against the budget like the handles.
  std::uint64_t side_slot_bytes = 0;
  /// Groups the runtime streams (a group whose streamed weights are all uncovered has no mapped
  /// range but still takes a slot); 0: those with a nonzero group_bytes.
  std::size_t streamed_groups = 0;
};

/// @brief Whether a transport gives every streamed group a stable device address (VMM):
/// - `prepare_stable_addresses(const stable_address_request&)` at setup reserves the ranges and
///   creates the physical memory; it returns how many groups can be mapped at once (the ring's
///   slot count; the runtime allocates no ring beyond the side images of request.side_slot_bytes);
/// - `stable_address(g)` is group g's address for the whole run;
/// - `bind_stable(slot, g)` runs on ddo's staging thread once the slot's previous occupant's
///   release and ready events completed: it maps g's range on the slot's memory (a group with no
///   range, group_bytes 0, only unmaps the slot's previous occupant);
/// - `release_stable_addresses()` at teardown, after every event completed (no throw).
/// The runtime then issues every load of a streamed group from its staging thread (map, then
/// copy); see docs/transports.md.
template <class T>
concept transport_with_stable_addresses =
    transport<T> && requires(T& t, const stable_address_request& r, std::size_t n) {
      { t.prepare_stable_addresses(r) } -> std::same_as<std::size_t>;
      { t.stable_address(n) } -> std::same_as<std::byte*>;
      t.bind_stable(n, n);
      t.release_stable_addresses();
    };

/// @brief What setup asks a transport that sizes its staging or window from the groups a plan
/// may stream (transport_with_window_sizing), before planning. Plain numbers: the transport layer
/// sits below the settings (setup/setup.hpp reads them).
struct window_sizing_request {
  bool streams = false;         ///< the route streams through a ring (false: nothing to size)
  bool staging_stated = false;  ///< the user set vmm_staging_buffer_gb: honoured, never grown
  bool native_route = false;    ///< the native VMM route (it stages through its own windows)
  std::uint64_t staging_setting_bytes = 0;  ///< vmm_staging_buffer_gb as resolved
  std::uint64_t largest_group_bytes = 0;    ///< the largest group that may stream, unaligned
  std::uint64_t slot_bytes = 0;             ///< one ring slot (the largest streamed image)
  std::uint64_t resident_budget_bytes = 0;  ///< vmm_resident_weight_budget_gb (0: none)
  std::uint64_t page_bytes = 0;             ///< vmm_page_mb (0: the window picks its handle)
};

/// @brief A transport's answer to a window_sizing_request.
struct window_sizing {
  /// The most bytes one group may stream (0: no limit): the plan's per-group limit.
  std::uint64_t group_limit_bytes = 0;
  std::uint64_t staging_bytes = 0;  ///< the staging one group goes through, after sizing
  bool grown = false;               ///< staging_bytes was grown past the setting (setup notes it)
  /// Whether the resident weights share resident_budget_bytes with the window: the plan keeps
  /// resident at most the budget less the ring's slots (runtime_options::slot_count) of
  /// window_slot_bytes each, so that the window can load ahead of compute.
  bool shares_resident_budget = false;
  std::uint64_t window_slot_bytes = 0;
};

/// @brief Whether a transport sizes its staging or window from the plan's groups:
/// `size_window(const window_sizing_request&)` at setup, before planning and before any
/// prepare, may grow what a preset sized (never what the user stated) and answers the limits the
/// plan must respect (window_sizing). The file route's slots (transport/nvme.hpp) and the VMM
/// window (transport/detail/stable_addresses.hpp) answer it; setup asks it instead of testing
/// which transport it holds.
template <class T>
concept transport_with_window_sizing =
    transport<T> && requires(T& t, const window_sizing_request& r) {
      { t.size_window(r) } -> std::same_as<window_sizing>;
    };

/// @brief Whether a transport can stream weights through a captured CUDA graph (issue 29;
/// docs/transports.md, "CUDA graphs"): `graph_exec` (what the engine launches: cudaGraphExec_t,
/// host_sim's graph), `static bool capturing(stream_view)`, `static std::uint64_t
/// capture_id(stream_view)` (the capture the stream takes part in, its origin's or a fork's; 0
/// when not capturing), `launch_graph(const graph_exec&, stream_view)`,
/// `check_graph_streaming()` (throws naming what the driver lacks), edges between two streams
/// of one capture (`record_edge(event&, s)`, `wait_edge(s, const event&)`: a fork or a join,
/// never an external node as record/wait make while capturing), 32-bit flags
/// the host and the device both reach (`allocate_flags(n)` zeroed, `free_flags(p, n)`), and the
/// stream memory operations `wait_value(s, flag, v)` (later work on s waits until *flag == v) and
/// `write_value(s, flag, v)`, which a capture turns into graph nodes holding v.
template <class T>
concept transport_with_graph_streaming =
    transport<T> && requires(T& t, typename T::stream_view v, const typename T::graph_exec& g,
                             std::uint32_t* flag, std::uint32_t value, std::size_t n,
                             typename T::event& e) {
      { T::capturing(v) } -> std::same_as<bool>;
      t.record_edge(e, v);
      t.wait_edge(v, std::as_const(e));
      { T::capture_id(v) } -> std::same_as<std::uint64_t>;
      t.launch_graph(g, v);
      t.check_graph_streaming();
      { t.allocate_flags(n) } -> std::same_as<std::uint32_t*>;
      t.free_flags(flag, n);
      t.wait_value(v, flag, value);
      t.write_value(v, flag, value);
    };

/// @brief A transport whose device is simulated (`static constexpr bool simulated_device =
/// true`): host_sim, and every adaptor over it (its VMM mode, the file route, fault injection:
/// detail::transport_adaptor passes the flag up). A simulated
/// device stands in for any device, so setup checks no device name against it (a capacity
/// profile's) and names its device "host_sim", whatever the transport's own name.
template <class T>
concept transport_with_simulated_device = transport<T> && requires { requires T::simulated_device; };

namespace detail {
/// Used by templates that take a transport, for a readable error on misuse.
template <class T>
inline constexpr bool check_transport() {
  static_assert(transport<T>,
                "ddo: the Transport template argument does not model ddo::transport; it needs "
                "`using transport_category = ddo::transport_tag;` and the members listed in "
                "ddo/transport/concepts.hpp");
  return true;
}
}  // namespace detail

}  // namespace v0
}  // namespace ddo
