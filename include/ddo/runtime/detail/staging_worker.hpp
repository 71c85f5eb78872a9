// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The staging worker (not API): pageable and file bytes reach the device on ddo's
/// staging stream through a ring of pinned staging buffers (two allocations of
/// staging_buffer_bytes, cut into ring buffers of at most 16 MiB) or the native VMM route's
/// windows, by the one staging loop (staging_pipeline.hpp: a pool of threads fills, this
/// worker's thread issues the copies), so the engine's thread never copies or reads a file on
/// the hot path.
///
/// Protocol with the engine thread: submit() queues a job (a slot's staged pieces) and returns
/// its ticket; the worker waits (on the staging stream) for the slot's release and ready events,
/// stages the pieces and records the slot's ready event, then marks the ticket recorded. The
/// engine waits on the host until a slot's ticket is recorded before it waits on the ready event
/// (wait_recorded). At most one job per slot is outstanding (a slot is reloaded only after its
/// previous job was recorded), so the queue is a fixed ring sized at start(): submit() never
/// allocates. A worker failure is kept and rethrown on the engine thread.
///
/// Capability: a transport modelling transport_with_file_reads reads file pieces straight into
/// the device (e.g. NVMe → GPU); those pieces skip the staging buffers.
///
/// On a stable-address transport (VMM) a second thread, the binder, maps each job's group ahead
/// of its copies, in ticket order: it waits on the host for the slot's previous occupant's
/// release and ready events, then binds. The worker runs a job only once the binder passed it,
/// so binding job k+1 overlaps job k's fill and copies (the map/unmap/set-access calls neither
/// wait for nor slow copies in flight on other ranges; physical-limits.md). With the bind on
/// the worker's thread the copy stream idled for each bind: ~0.35 ms per 226 MB group, 5-9% of
/// the native route's step from pageable memory on the H200.

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "ddo/core/chrono.hpp"
#include "ddo/core/error.hpp"
#include "ddo/model/parallel_reader.hpp"
#include "ddo/runtime/detail/group_layout.hpp"
#include "ddo/runtime/detail/native_staging.hpp"
#include "ddo/runtime/detail/owned_memory.hpp"
#include "ddo/runtime/detail/setup_meter.hpp"
#include "ddo/runtime/detail/staging_pipeline.hpp"
#include "ddo/runtime/poison_byte.hpp"
#include "ddo/transport/concepts.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// Calls t.bind_thread() when the transport wants to know about ddo's threads.
template <class T>
void bind_runtime_thread(T& t) {
  if constexpr (transport_with_thread_binding<T>) t.bind_thread();
}

template <class T>
class staging_worker {
 public:
  using stream_view = typename T::stream_view;
  using event = typename T::event;

  /// One slot load's staged part. The events and pieces must outlive the job.
  struct job {
    const event* release = nullptr;  // the staging stream waits on it first
    event* ready = nullptr;          // waited on, then recorded after the copies
    std::byte* image = nullptr;      // destination base
    std::uint64_t poison_bytes = 0;  // fill [image, image + n) with poison_byte first (0: no)
    const std::vector<staged_piece>* pieces = nullptr;
    event* timing_start = nullptr;   // recorded before the copies (metrics)
    event* timing_end = nullptr;     // recorded after them
    // Stable-address transports (VMM): map group bind_group on slot bind_slot first (after
    // release and ready completed on the host), then copy the pinned parts directly.
    std::size_t bind_slot = no_group;
    std::size_t bind_group = no_group;
    const std::byte* block = nullptr;  // packed pinned block copied to image[0, block_bytes)
    std::uint64_t block_bytes = 0;
    std::uint64_t block_chunk = 0;     // largest single copy (0: one copy)
    const std::vector<staged_piece>* direct = nullptr;  // pinned in place: copied directly
    // Graph streaming on a stable-address transport (offloader_core_graph_impl.hpp): the binder
    // waits for *release_flag == 1 (a captured graph is done with the slot's previous occupant)
    // and resets it, instead of waiting on the release and ready events; after the copies the
    // worker writes *ready_flag = 1 on the staging stream (the graph's wait node consumes it).
    std::uint32_t* release_flag = nullptr;
    std::uint32_t* ready_flag = nullptr;
    // Run only if the job before it succeeded (graph streaming: a split layout's side part,
    // which the mapped part's wait for the graph orders; skipped, it fails too).
    bool after_previous = false;
  };

  staging_worker() = default;
  staging_worker(const staging_worker&) = delete;
  staging_worker& operator=(const staging_worker&) = delete;
  ~staging_worker() { stop(); }

  /// Largest ring buffer (staging_pipeline.hpp says why).
  static constexpr std::uint64_t max_ring_bytes = max_staging_chunk_bytes;

  /// Creates the staging stream and the copy threads; @p files must outlive the worker.
  void prepare(T& t, std::uint64_t buffer_bytes, std::size_t copy_threads, const source_files& files);
  /// Allocates the two pinned staging buffers of @p bytes each, 0: the size given to prepare(),
  /// and cuts them into the ring (idempotent; the offloader passes the layout's demand capped
  /// by the setting, staging_size.hpp).
  void ensure_buffers(std::uint64_t bytes = 0);
  /// Frees the buffers (after the copies that read them completed): setup used them for the
  /// residents only and no group stages while running.
  void release_buffers() noexcept;
  [[nodiscard]] bool has_buffers() const noexcept { return buffers_[0].data != nullptr; }
  [[nodiscard]] std::uint64_t buffer_bytes() const noexcept { return has_buffers() ? 2 * buffer_bytes_ : 0; }
  [[nodiscard]] stream_view stream() noexcept { return T::view(stream_); }
  [[nodiscard]] bool has_stream() const noexcept { return stream_.get() != nullptr; }

  /// Copies @p pieces (sorted by offset) to dst_base + offset on @p v through the staging
  /// buffers: while one buffer's bytes travel, the other is filled. Used at setup on the calling
  /// thread (before start()) and by the worker thread. Reports reading/uploading to @p meter.
  /// Returns the copies issued.
  std::uint64_t stage(std::byte* dst_base, const std::vector<staged_piece>& pieces, stream_view v,
                      setup_meter* meter = nullptr, pre_copy_hook before = {});
  /// Copies stage() would issue for @p pieces (metrics, without running them).
  [[nodiscard]] std::uint64_t estimate_copies(const std::vector<staged_piece>& pieces) const noexcept;

  /// Routes staging through the native VMM route's windows and micro-cache (native_staging.hpp
  /// plans onto the same loop) instead of the pinned ring; @p n is prepared and outlives the
  /// worker's thread.
  void use_native(native_stager<T>* n) {
    native_ = n;
    pipeline_.set_buffers(n->buffers(), n->ring_count(), n->chunk_bytes());
  }

  /// Starts the worker thread; @p max_outstanding bounds the jobs queued at once.
  void start(std::size_t max_outstanding);
  [[nodiscard]] bool running() const noexcept { return thread_.joinable(); }
  /// Lets @p max_outstanding jobs be queued at once (a budget move grew the ring); only while
  /// nothing is queued (the caller waited for the queue).
  void reserve_jobs(std::size_t max_outstanding);
  /// Queues @p j; returns its ticket (tickets grow by one from 1). Never allocates.
  std::uint64_t submit(const job& j);
  /// submit(), first waiting for room in the queue (graph streaming queues a whole step's loads,
  /// more than the slots: each queued job ends without another submit, so the wait ends).
  std::uint64_t submit_when_room(const job& j);
  /// Whether every submitted job was recorded, or one failed.
  [[nodiscard]] bool settled() const;
  /// Waits until every submitted job was recorded, failed or not (wait_all stops at a failure):
  /// nothing the queued jobs write outlives this call but their work on the staging stream.
  void wait_drained();
  /// Whether a job failed (its failure is kept for rethrow_error).
  [[nodiscard]] bool failed() const;
  /// While on, the binder gives up waiting for a release flag (the job fails): teardown after a
  /// failed graph load or a dead device, where the graph will not release the slot.
  void abandon_flag_waits(bool on) noexcept { abandon_.store(on, std::memory_order_release); }
  /// Waits until ticket @p t was recorded; returns the host milliseconds waited (0: none).
  /// @throws the worker's failure.
  double wait_recorded(std::uint64_t t);
  /// Waits for ticket @p t or a failure; true when it was recorded (no throw).
  bool wait_recorded_or_failed(std::uint64_t t);
  /// Highest ticket recorded so far.
  [[nodiscard]] std::uint64_t recorded() const;
  /// Waits until every submitted job was recorded or one failed.
  void wait_all();
  /// Rethrows the worker's failure, if any.
  void rethrow_error() const;
  /// Keeps @p e as the worker's failure (the first one wins): the next wait or rethrow_error()
  /// on the engine thread throws it. Used for failures the worker's caller cannot throw from.
  void fail(std::exception_ptr e);
  /// Stops and joins the worker thread (queued jobs run first).
  void stop() noexcept;
  /// Frees buffers, events, copy threads and the stream; call after stop() and a synchronize.
  void release() noexcept;

 private:
  void loop();
  void bind_loop();
  void wait_release_flag(std::uint32_t* flag);
  void run(const job& j);

  T* t_ = nullptr;
  const source_files* files_ = nullptr;
  std::uint64_t buffer_bytes_ = 0;
  std::uint64_t ring_bytes_ = 0;  // one ring buffer (a part of a staging buffer)
  void size_ring(std::uint64_t buffer_bytes);  // buffer_bytes_ and ring_bytes_
  typename T::stream stream_;
  std::array<pinned_allocation<T>, 2> buffers_{};
  staging_pipeline<T> pipeline_;  // used by one thread at a time (setup, then worker)
  native_stager<T>* native_ = nullptr;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<job> ring_;  // fixed capacity; [head_, head_ + queued_) are queued
  std::size_t head_ = 0;
  std::size_t queued_ = 0;
  std::uint64_t submitted_ = 0;
  std::uint64_t recorded_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
  // The binder (stable-address transports; file comment). A job's ring position is
  // (ticket − 1) mod the ring's size; the worker waits for bound_ ≥ its ticket, so the binder
  // has read a position before submit() can reuse it.
  bool binding_ = false;
  std::uint64_t bound_ = 0;                      // highest ticket the binder passed
  std::vector<std::exception_ptr> bind_errors_;  // per ring position: its bind's failure
  std::atomic<bool> abandon_{false};
  bool previous_failed_ = false;  // the worker thread's: whether its last job failed
  std::thread binder_;
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo

#include "ddo/runtime/detail/staging_worker_impl.hpp"
