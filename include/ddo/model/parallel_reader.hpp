// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::parallel_reader: the one pool of threads that fills host memory from model files
/// (positional reads: file_reader::read, or O_DIRECT through file_reader::read_direct) and from
/// host memory (memcpy) — for packing, for the staging loop and for the file route's slots.
///
/// Why: one thread reads cached file pages at ~7 GB/s and copies pageable memory at ~5-6 GB/s,
/// while 8 threads reach ~47 GB/s from the page cache (physical-limits.md) — the difference
/// between a staged route far below PCIe and one near it, and between a setup that reads the
/// weights once at disk/page-cache speed and one that crawls. The reads are positional reads
/// into the destination (never through a mapping), so the file's pages stay in the page cache and
/// are never counted in the process (RSS), and a file that shrank is an io_error naming the file
/// and offset, never a SIGBUS.
///
/// The work of one run() is the concatenation of its tasks, claimed in grains (a few MiB, less
/// for small runs so every thread gets some) by the caller and the helper threads; a grain may
/// span tasks. A failure (an io_error of a read, an exception of a batch callback) stops the
/// other participants at their next grain; run() returns only after every participant stopped
/// touching the destinations, then rethrows the first failure — so the caller may free the
/// destinations while unwinding.
///
/// A gated run (start_gated) is the staging pipeline's mode (runtime/detail/staging_pipeline.hpp):
/// the helper threads alone fill the tasks batch by batch, each batch only after the caller
/// opened it (its destination is free again), while the caller waits for finished batches and
/// hands them on (a host→device copy) — no fork-join barrier between batches, so the threads
/// keep copying while the caller issues copies.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/thread_limits.hpp"
#include "ddo/core/units.hpp"
#include "ddo/model/file_reader.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One destination range and where its bytes come from: host memory (src) or a file.
struct read_task {
  std::byte* dst = nullptr;           ///< destination (bytes bytes)
  std::uint64_t bytes = 0;            ///< length
  const std::byte* src = nullptr;     ///< host source; null: read from `file`
  const file_reader* file = nullptr;  ///< file source (when src is null); must outlive run()
  std::uint64_t file_offset = 0;      ///< offset of the first byte in `file`
  std::size_t batch = 0;              ///< tasks of one batch complete together (see run())
  /// Read through the file's O_DIRECT descriptor (file_reader::read_direct): file_offset, dst
  /// and bytes are multiples of direct_io_alignment, and bytes past `required` may be cut short
  /// by the end of the file (an aligned range widened past it). A part of the task a grain
  /// leaves unaligned is read buffered, its required bytes only.
  bool direct = false;
  std::uint64_t required = 0;  ///< direct: bytes from the task's start that must arrive
};

/// @brief A pool of `threads` participants (the calling thread and threads-1 helpers) that
/// fills destinations from files and host memory. Move-free; helpers live as long as the pool.
///
/// run() is called by one thread at a time (it is not reentrant); the pool may be handed from
/// one thread to another between runs when that hand-off is itself ordered (a thread start, a
/// mutex).
/// A class template only so that its member functions are instantiated where a pool is used:
/// as a plain class its bodies (std::function, atomics, threads) were compiled in every
/// translation unit that includes the offloader — 6 MB of template instantiation in the
/// umbrella header's compile (tests/build_checks/include_cost.py). Use the alias below.
template <class Unused = void>
class basic_parallel_reader {
 public:
  /// Default largest amount of work one participant claims at a time: 4 MiB reads reach the
  /// page cache's throughput (physical-limits.md measured 4 MiB preads) and keep threads
  /// balanced. A pool reading a disk with O_DIRECT may want larger requests (constructor).
  static constexpr std::uint64_t default_max_grain = 4 * mib;
  /// Smallest claim: below this, per-call overhead shows.
  static constexpr std::uint64_t min_grain = 256 * kib;
  /// Runs smaller than this stay on the calling thread (waking helpers costs more).
  static constexpr std::uint64_t parallel_threshold = 2 * mib;

  /// @brief Starts threads-1 helper threads (0 is taken as 1: the caller alone); a participant
  /// claims at most @p max_grain bytes at a time (a request's size; a multiple of
  /// direct_io_alignment, at least 64 KiB).
  /// @throws usage_error for a bad @p max_grain or more than max_worker_threads threads;
  /// std::system_error when a thread cannot be started (those already started are stopped and
  /// joined first).
  explicit basic_parallel_reader(std::size_t threads, std::uint64_t max_grain = default_max_grain)
      : participants_(threads == 0 ? 1 : threads), max_grain_(max_grain) {
    DDO_EXPECTS(participants_ <= max_worker_threads,
                "parallel_reader: " + std::to_string(threads) + " threads asked; at most " +
                    std::to_string(max_worker_threads) + " (ddo/core/thread_limits.hpp)");
    DDO_EXPECTS(max_grain >= 64 * kib && max_grain % direct_io_alignment == 0,
                "parallel_reader: the largest grain must be a multiple of " +
                    std::to_string(direct_io_alignment) + " of at least 64 KiB, got " +
                    std::to_string(max_grain));
    try {
      helpers_.reserve(participants_ - 1);
      for (std::size_t i = 1; i < participants_; ++i) helpers_.emplace_back([this] { loop(); });
    } catch (...) {
      stop_helpers();  // a joinable std::thread destroyed unjoined would terminate the process
      throw;
    }
  }
  basic_parallel_reader(const basic_parallel_reader&) = delete;
  basic_parallel_reader& operator=(const basic_parallel_reader&) = delete;
  ~basic_parallel_reader() { stop_helpers(); }

  /// @brief Participants (the caller included).
  [[nodiscard]] std::size_t threads() const noexcept { return participants_; }

  /// @brief Starts a gated run: the helper threads (not the caller) fill @p tasks, whose batches
  /// must not decrease along the span, each batch b only after open(b). The tasks (and their
  /// destinations) must stay valid until finish(). Batches without bytes are complete at once.
  /// @throws usage_error when the pool has no helper thread, a batch is out of order or not below
  /// @p batch_count.
  void start_gated(std::span<const read_task> tasks, std::size_t batch_count) {
    DDO_EXPECTS(participants_ > 1, "parallel_reader: a gated run needs helper threads (threads >= 2)");
    if (gated_capacity_ < batch_count) {
      remaining_ = std::make_unique<std::atomic<std::uint64_t>[]>(batch_count);
      gated_capacity_ = batch_count;
    }
    for (std::size_t b = 0; b < batch_count; ++b) remaining_[b].store(0, std::memory_order_relaxed);
    starts_.clear();
    items_.clear();
    std::uint64_t total = 0;
    std::size_t last = 0;
    for (const auto& t : tasks) {
      DDO_EXPECTS(t.bytes == 0 || t.dst != nullptr, "parallel_reader: a task without destination");
      DDO_EXPECTS(t.bytes == 0 || t.src != nullptr || t.file != nullptr,
                  "parallel_reader: a task with neither a host source nor a file");
      DDO_EXPECTS(t.batch < batch_count && t.batch >= last,
                  "parallel_reader: gated task of batch " + std::to_string(t.batch) + " after batch " +
                      std::to_string(last) + " (of " + std::to_string(batch_count) + ")");
      last = t.batch;
      starts_.push_back(total);
      remaining_[t.batch].fetch_add(t.bytes, std::memory_order_relaxed);
      total += t.bytes;
    }
    // Claims never cross a batch: a grain waiting for its batch to open must not hold bytes of
    // an earlier batch, whose completion may be what opens it.
    const std::uint64_t helpers = participants_ - 1;
    std::uint64_t at = 0;
    for (std::size_t b = 0; b < batch_count; ++b) {
      const std::uint64_t bytes = remaining_[b].load(std::memory_order_relaxed);
      const std::uint64_t grain = clamp_grain(round_up((bytes + helpers - 1) / helpers, 64 * kib));
      for (std::uint64_t off = 0; off < bytes; off += grain)
        items_.push_back({at + off, at + std::min(bytes, off + grain), b});
      at += bytes;
    }
    tasks_ = tasks;
    total_ = total;
    done_ = nullptr;
    next_.store(0, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    {
      std::lock_guard lock(mutex_);
      gated_ = true;
      open_ = 0;
      busy_ = participants_ - 1;
      ++generation_;
    }
    cv_.notify_all();
  }

  /// @brief Lets the helpers write batches [0, @p batch] of the gated run.
  void open_through(std::size_t batch) {
    {
      std::lock_guard lock(mutex_);
      open_ = std::max(open_, batch + 1);
    }
    gate_cv_.notify_all();
  }

  /// @brief Waits until batch @p b of the gated run is in place; false when a helper failed
  /// instead (finish() then throws its failure).
  [[nodiscard]] bool wait_batch(std::size_t b) {
    if (remaining_[b].load(std::memory_order_acquire) == 0) return true;
    std::unique_lock lock(mutex_);
    filled_cv_.wait(lock, [&] {
      return remaining_[b].load(std::memory_order_acquire) == 0 || failed_.load(std::memory_order_relaxed);
    });
    return remaining_[b].load(std::memory_order_acquire) == 0;
  }

  /// @brief Whether batch @p b of the gated run is in place (never waits).
  [[nodiscard]] bool batch_filled(std::size_t b) const noexcept {
    return remaining_[b].load(std::memory_order_acquire) == 0;
  }

  /// @brief Ends the gated run: waits until every helper stopped touching the destinations and
  /// rethrows the first failure. With @p cancel, the helpers stop at their next grain instead of
  /// finishing (the caller is unwinding).
  void finish(bool cancel = false) {
    {
      std::unique_lock lock(mutex_);
      if (cancel) failed_.store(true, std::memory_order_relaxed);
      gate_cv_.notify_all();
      idle_cv_.wait(lock, [&] { return busy_ == 0; });
      gated_ = false;
    }
    tasks_ = {};
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  /// @brief Fills every task's destination; returns when all bytes are in place.
  /// @throws io_error of a failed read (naming the file and offset); the first failure wins, and
  /// nothing is being written when it is thrown.
  void run(std::span<const read_task> tasks) { run(tasks, 0, {}); }

  /// @brief As run(tasks), and calls @p batch_done(b) once for every batch b in
  /// [0, @p batch_count) right after the last byte of that batch is in place, on whichever
  /// participant wrote it (batches without bytes: on the caller, before any read). Lets a caller
  /// act on a finished part (page-lock a packed block) while the rest is still being read.
  /// @throws usage_error when a task's batch is not below @p batch_count; io_error of a failed
  /// read; whatever batch_done threw. The first failure wins; nothing is being written when it
  /// is thrown.
  void run(std::span<const read_task> tasks, std::size_t batch_count,
           const std::function<void(std::size_t)>& batch_done) {
    std::uint64_t total = 0;
    const std::size_t batches = batch_done ? batch_count : 0;
    starts_.clear();
    for (const auto& t : tasks) {
      DDO_EXPECTS(t.bytes == 0 || t.dst != nullptr, "parallel_reader: a task without destination");
      DDO_EXPECTS(t.bytes == 0 || t.src != nullptr || t.file != nullptr,
                  "parallel_reader: a task with neither a host source nor a file");
      DDO_EXPECTS(!batch_done || t.batch < batches,
                  "parallel_reader: a task of batch " + std::to_string(t.batch) + " but only " +
                      std::to_string(batches) + " batches");
      starts_.push_back(total);
      total += t.bytes;
    }
    tasks_ = tasks;
    total_ = total;
    done_ = batch_done ? &batch_done : nullptr;
    if (done_ != nullptr) {
      if (gated_capacity_ < batches) {
        remaining_ = std::make_unique<std::atomic<std::uint64_t>[]>(batches);
        gated_capacity_ = batches;
      }
      std::vector<std::uint64_t> sums(batches, 0);
      for (const auto& t : tasks) sums[t.batch] += t.bytes;
      for (std::size_t b = 0; b < batches; ++b) remaining_[b].store(sums[b], std::memory_order_relaxed);
      for (std::size_t b = 0; b < batches; ++b)
        if (sums[b] == 0) (*done_)(b);
    }
    const std::size_t workers = participants_ == 1 || total < parallel_threshold ? 1 : participants_;
    grain_ = clamp_grain(round_up((total + 2 * workers - 1) / (2 * workers), 4 * kib));
    next_.store(0, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    if (workers > 1) {
      {
        std::lock_guard lock(mutex_);
        busy_ = participants_ - 1;
        ++generation_;
      }
      cv_.notify_all();
    }
    work();
    if (workers > 1) {
      std::unique_lock lock(mutex_);
      idle_cv_.wait(lock, [&] { return busy_ == 0; });
    }
    tasks_ = {};
    done_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  [[nodiscard]] std::uint64_t clamp_grain(std::uint64_t g) const noexcept {
    return std::min(max_grain_, std::max(std::min(min_grain, max_grain_), g));
  }

  struct grain_item {
    std::uint64_t begin, end;
    std::size_t batch;
  };

  void stop_helpers() noexcept {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    gate_cv_.notify_all();
    for (auto& t : helpers_) t.join();
    helpers_.clear();
  }

  void loop() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      bool gated = false;
      {
        std::lock_guard lock(mutex_);
        gated = gated_;
      }
      if (gated)
        work_gated();
      else
        work();
      {
        std::lock_guard lock(mutex_);
        --busy_;
      }
      idle_cv_.notify_one();
    }
  }

  /// Claims grains until the work is done or a participant failed.
  void work() noexcept {
    try {
      for (;;) {
        if (failed_.load(std::memory_order_relaxed)) return;
        const std::uint64_t begin = next_.fetch_add(grain_, std::memory_order_relaxed);
        if (begin >= total_) return;
        do_range(begin, std::min(total_, begin + grain_));
      }
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }

  /// A helper's share of a gated run: grains in order, each once its batch is open.
  void work_gated() noexcept {
    try {
      for (;;) {
        if (failed_.load(std::memory_order_relaxed)) return;
        const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
        if (i >= items_.size()) return;
        const grain_item item = items_[i];
        {
          std::unique_lock lock(mutex_);
          gate_cv_.wait(lock, [&] { return open_ > item.batch || failed_.load(std::memory_order_relaxed) || stop_; });
          if (open_ <= item.batch) return;
        }
        do_range(item.begin, item.end);
        if (remaining_[item.batch].fetch_sub(item.end - item.begin, std::memory_order_acq_rel) ==
            item.end - item.begin) {
          { std::lock_guard lock(mutex_); }  // a waiter between its check and its wait sees it
          filled_cv_.notify_all();
        }
      }
    } catch (...) {
      {
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
      { std::lock_guard lock(mutex_); }
      filled_cv_.notify_all();
      gate_cv_.notify_all();
    }
  }

  /// Bytes [a, a + n) of direct task @p t: O_DIRECT when the part is aligned (a grain of a
  /// task whose concatenated start is aligned), else its required bytes through the page cache.
  static void read_direct_part(const read_task& t, std::uint64_t a, std::uint64_t n) {
    const std::uint64_t need = t.required > a ? std::min(n, t.required - a) : 0;
    const bool aligned = (t.file_offset + a) % direct_io_alignment == 0 && n % direct_io_alignment == 0 &&
                         reinterpret_cast<std::uintptr_t>(t.dst + a) % direct_io_alignment == 0;
    if (aligned)
      (void)t.file->read_direct(t.file_offset + a, std::span<std::byte>(t.dst + a, static_cast<std::size_t>(n)), need);
    else if (need != 0)
      t.file->read(t.file_offset + a, std::span<std::byte>(t.dst + a, static_cast<std::size_t>(need)));
  }

  /// Bytes [begin, end) of the concatenated tasks.
  void do_range(std::uint64_t begin, std::uint64_t end) {
    auto it = std::upper_bound(starts_.begin(), starts_.end(), begin);
    std::size_t i = static_cast<std::size_t>(it - starts_.begin()) - 1;
    while (begin < end) {
      const read_task& t = tasks_[i];
      const std::uint64_t a = begin - starts_[i];
      const std::uint64_t n = std::min(end, starts_[i] + t.bytes) - begin;
      if (n != 0) {
        if (t.src != nullptr)
          std::memcpy(t.dst + a, t.src + a, static_cast<std::size_t>(n));
        else if (t.direct)
          read_direct_part(t, a, n);
        else
          t.file->read(t.file_offset + a, std::span<std::byte>(t.dst + a, static_cast<std::size_t>(n)));
        if (done_ != nullptr &&
            remaining_[t.batch].fetch_sub(n, std::memory_order_acq_rel) == n)
          (*done_)(t.batch);
      }
      begin += n;
      ++i;
    }
  }

  std::size_t participants_;
  std::uint64_t max_grain_;
  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::condition_variable gate_cv_;    // a gated batch opened (or a failure)
  std::condition_variable filled_cv_;  // a gated batch is complete (or a failure)
  std::size_t busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  bool gated_ = false;  // the run in progress is gated (under mutex_)
  std::size_t open_ = 0;  // gated: batches [0, open_) may be written (under mutex_)

  // The run in progress: written by run() before the helpers are woken (under mutex_), read by
  // every participant.
  std::span<const read_task> tasks_;
  std::vector<std::uint64_t> starts_;  // per task: its first byte in the concatenation
  std::uint64_t total_ = 0;
  std::uint64_t grain_ = default_max_grain;
  const std::function<void(std::size_t)>* done_ = nullptr;
  std::unique_ptr<std::atomic<std::uint64_t>[]> remaining_;  // per batch (done_, or gated)
  std::size_t gated_capacity_ = 0;                          // remaining_'s length
  std::vector<grain_item> items_;                           // gated: the grains, in order
  std::atomic<std::uint64_t> next_{0};
  std::atomic<bool> failed_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

/// @brief The pool (see basic_parallel_reader).
using parallel_reader = basic_parallel_reader<>;


}  // namespace v0
}  // namespace ddo
