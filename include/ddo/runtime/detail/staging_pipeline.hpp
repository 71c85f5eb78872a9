// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The one staging loop (not API): how pageable and file bytes reach the device through
/// a set of host buffers — the linear route's pinned staging ring, or the native VMM route's
/// registered windows and micro-cache slots (runtime/detail/native_staging.hpp plans onto it).
///
/// A run is planned first, as units in issue order: a ring chunk (pieces' bytes at consecutive
/// slot offsets, filled into the next ring buffer, then one copy), a buffered piece (a copy from
/// one addressed buffer, filled first or not: the micro-cache), a direct piece (a copy straight
/// from registered memory) or a device read (the transport reads a file piece into the device,
/// transport_with_file_reads). Then the units run as a pipeline: the pool's helper threads
/// (ddo/model/parallel_reader.hpp, a gated run) fill the units' buffers, each as soon as its
/// buffer is free again, while this thread waits for each unit in turn, issues its copy and
/// records the buffer's event. There is no barrier between chunks: the threads fill chunk k+1,
/// k+2, ... while chunk k's copy is issued and travels.
///
/// A buffer is free once the copy that last read it completed. The loop waits on the host for
/// that copy (never for the most recently issued one, so at least one copy stays queued behind
/// the one waited for and the copy engine does not idle), unless the unit it must issue next
/// cannot be filled otherwise. The buffers' state (which copy last read each, the ring's next
/// buffer) lasts across runs, so the next job's first chunks are filled while the previous
/// job's last copies travel.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/model/parallel_reader.hpp"
#include "ddo/runtime/detail/group_layout.hpp"
#include "ddo/runtime/detail/setup_meter.hpp"
#include "ddo/transport/concepts.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// Largest ring chunk: copies of 16 MiB reach the PCIe ceiling (physical-limits.md), and more,
/// smaller chunks let the threads fill ahead while copies travel (both routes' rings are cut so).
inline constexpr std::uint64_t max_staging_chunk_bytes = 16 * mib;

/// Work that must precede a run's first copy — on a stable-address transport the host's wait for
/// the slot's previous readers and the bind of its range; the stream's waits on the slot's events.
/// run() calls it once the filling threads have started, so the first chunks fill while it
/// waits (a non-owning reference to a callable; empty: nothing to do).
class pre_copy_hook {
 public:
  pre_copy_hook() = default;
  template <class F>
  explicit pre_copy_hook(F& f) noexcept : ctx_(&f), fn_([](void* c) { (*static_cast<F*>(c))(); }) {}
  void operator()() const {
    if (fn_ != nullptr) fn_(ctx_);
  }

 private:
  void* ctx_ = nullptr;
  void (*fn_)(void*) = nullptr;
};

template <class T>
class staging_pipeline {
 public:
  using stream_view = typename T::stream_view;
  using event = typename T::event;
  static constexpr std::size_t no_buffer = static_cast<std::size_t>(-1);

  /// Starts @p copy_threads filling threads (at least one); @p t and @p files outlive the
  /// pipeline (until release()).
  void prepare(T& t, std::size_t copy_threads, const source_files& files) {
    t_ = &t;
    files_ = &files;
    // The caller of a gated run only issues copies: copy_threads helpers do the filling.
    // Within the bound (runtime_options::staging_threads comes from code unchecked).
    pool_ = std::make_unique<parallel_reader>(
        std::clamp<std::size_t>(copy_threads, 1, max_worker_threads - 1) + 1);
  }
  [[nodiscard]] bool prepared() const noexcept { return t_ != nullptr; }

  /// The buffer set: @p addresses[i] is buffer i; [0, @p ring) form the chunk ring, each
  /// @p ring_bytes long; the rest are addressed by add_buffered (micro-cache slots). Replaces a
  /// previous set (whose copies the caller has synchronized).
  void set_buffers(std::vector<std::byte*> addresses, std::size_t ring, std::uint64_t ring_bytes) {
    DDO_EXPECTS(ring <= addresses.size(), "staging_pipeline: ring larger than the buffer set (a ddo bug)");
    buffers_ = std::move(addresses);
    ring_ = ring;
    ring_bytes_ = ring_bytes;
    ring_next_ = 0;
    free_.clear();
    free_.resize(buffers_.size());
    for (auto& e : free_) e = t_->make_event(false);
    reader_seq_.assign(buffers_.size(), 0);
    last_in_run_.assign(buffers_.size(), no_buffer);
  }
  /// Forgets the buffer set (its memory is about to be freed; no run may be in flight).
  void clear_buffers() noexcept {
    buffers_.clear();
    free_.clear();
    reader_seq_.clear();
    last_in_run_.clear();
    ring_ = 0;
    ring_bytes_ = 0;
    ring_next_ = 0;
  }
  [[nodiscard]] std::uint64_t ring_bytes() const noexcept { return ring_bytes_; }
  [[nodiscard]] bool has_ring() const noexcept { return ring_ != 0; }
  /// The filling threads, for fills outside a run (the native route's first reads).
  [[nodiscard]] parallel_reader& pool() noexcept { return *pool_; }

  /// Starts planning a run whose copies go to @p dst_base + each piece's slot offset.
  void begin(std::byte* dst_base) {
    dst_base_ = dst_base;
    units_.clear();
    tasks_.clear();
    open_ = false;
  }

  /// Piece @p p's bytes, from @p host (null: p's file), through the ring's chunks.
  void add_staged(const staged_piece& p, const std::byte* host) {
    DDO_EXPECTS(ring_ != 0, "staging_pipeline: staged bytes but no staging buffers (a ddo bug)");
    std::uint64_t off = p.slot_offset;
    std::uint64_t done = 0;
    while (done < p.bytes) {
      if (open_ && off >= chunk_start_ + ring_bytes_) open_ = false;
      if (!open_) {
        unit u;
        u.buffer = ring_next_;
        ring_next_ = (ring_next_ + 1) % ring_;
        u.src = buffers_[u.buffer];
        u.dst_offset = off;
        u.fill = true;
        units_.push_back(u);
        chunk_start_ = off;
        open_ = true;
      }
      unit& u = units_.back();
      const std::uint64_t take = std::min(p.bytes - done, chunk_start_ + ring_bytes_ - off);
      add_task(buffers_[u.buffer] + (off - chunk_start_), take, p, host, done);
      off += take;
      done += take;
      u.bytes = off - chunk_start_;  // the copy spans alignment gaps between pieces
      if (u.bytes == ring_bytes_) open_ = false;
    }
  }

  /// Piece @p p copied straight from registered host memory @p src.
  void add_direct(const staged_piece& p, const std::byte* src) {
    open_ = false;  // a chunk's copy (which spans gaps) must not overwrite this piece
    unit u;
    u.dst_offset = p.slot_offset;
    u.src = src;
    u.bytes = p.bytes;
    u.weight_bytes = p.bytes;
    units_.push_back(u);
  }

  /// Piece @p p copied from buffer @p buffer; with @p fill, its bytes (p's host source or
  /// file) are put there first, once the buffer's previous copy completed.
  void add_buffered(const staged_piece& p, std::size_t buffer, bool fill) {
    open_ = false;
    unit u;
    u.dst_offset = p.slot_offset;
    u.buffer = buffer;
    u.src = buffers_[buffer];
    u.bytes = p.bytes;
    u.fill = fill;
    units_.push_back(u);
    if (fill)
      add_task(buffers_[buffer], p.bytes, p, p.host, 0);
    else
      units_.back().weight_bytes = p.bytes;
  }

  /// Piece @p p (a file piece) read into the device by the transport itself.
  void add_device_read(const staged_piece& p)
    requires transport_with_file_reads<T>
  {
    open_ = false;
    unit u;
    u.dst_offset = p.slot_offset;
    u.bytes = p.bytes;
    u.weight_bytes = p.bytes;
    u.file_bytes = p.bytes;
    u.device_read = &p;
    units_.push_back(u);
  }

  /// Runs the planned units on @p v (see the file comment); returns the copies issued. Calls
  /// @p before once the threads fill the first units whose buffers are free, before the first
  /// copy (always, even for a run without units). Reports reading/uploading to @p meter. A
  /// failure (a read, a copy, @p before) stops the filling threads before it propagates, so
  /// nothing writes into the buffers afterwards.
  std::uint64_t run(stream_view v, setup_meter* meter, pre_copy_hook before = {}) {
    const std::size_t count = units_.size();
    if (count == 0) {
      before();
      return 0;
    }
    prev_.assign(count, no_buffer);
    std::fill(last_in_run_.begin(), last_in_run_.end(), no_buffer);
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t b = units_[k].buffer;
      if (b == no_buffer) continue;
      prev_[k] = last_in_run_[b];
      last_in_run_[b] = k;
    }
    const bool gated = !tasks_.empty();
    if (gated) pool_->start_gated(tasks_, count);
    next_open_ = 0;
    file_reads_.clear();
    std::uint64_t copies = 0;
    try {
      open_ahead(0, false);
      before();
      for (std::size_t k = 0; k < count; ++k) {
        open_ahead(k, false);
        const unit& u = units_[k];
        if (u.fill) {
          if (next_open_ <= k) open_ahead(k, true);
          if (!pool_->wait_batch(k)) break;  // a filling thread failed: finish() throws it
          if (meter != nullptr && u.file_bytes != 0) meter->advance(setup_phase::reading, u.file_bytes);
        }
        if (batched_device_read(u)) {
          file_reads_.push_back({dst_base_ + u.device_read->slot_offset,
                                 &(*files_)[u.device_read->file]->path(),
                                 u.device_read->file_offset, u.device_read->bytes});
        } else {
          issue(u, v, meter);
        }
        ++copies;
      }
      issue_file_reads(v, meter);
    } catch (...) {
      if (gated) {
        try {
          pool_->finish(true);
        } catch (...) {  // the copy's failure is the one reported
        }
      }
      throw;
    }
    if (gated) pool_->finish();
    return copies;
  }

  /// Frees the events and stops the threads; call after the streams were synchronized.
  void release() noexcept {
    free_.clear();
    buffers_.clear();
    reader_seq_.clear();
    ring_ = 0;
    pool_.reset();
  }

 private:
  struct unit {
    std::uint64_t dst_offset = 0;
    const std::byte* src = nullptr;  // the copy's host source
    std::uint64_t bytes = 0;         // the copy's length
    std::size_t buffer = no_buffer;  // the buffer the copy reads
    bool fill = false;               // the tasks of batch <this unit's index> fill it first
    std::uint64_t weight_bytes = 0;  // weight bytes delivered (without gaps), for the meter
    std::uint64_t file_bytes = 0;    // of which read from files
    const staged_piece* device_read = nullptr;
  };

  void add_task(std::byte* dst, std::uint64_t bytes, const staged_piece& p, const std::byte* host,
                std::uint64_t done) {
    read_task task;
    task.dst = dst;
    task.bytes = bytes;
    task.batch = units_.size() - 1;
    if (host != nullptr) {
      task.src = host + done;
    } else {
      task.file = (*files_)[p.file].get();
      task.file_offset = p.file_offset + done;
      units_.back().file_bytes += bytes;
    }
    units_.back().weight_bytes += bytes;
    tasks_.push_back(task);
  }

  /// Lets the threads fill units from next_open_ on while their buffers are free. Without
  /// @p force it stops at a buffer whose last copy is the most recently issued one (waiting for
  /// it would leave the copy engine nothing queued) or is not issued yet; with @p force it opens
  /// through unit @p k, waiting as long as needed.
  void open_ahead(std::size_t k, bool force) {
    while (next_open_ < units_.size() && (!force || next_open_ <= k)) {
      const std::size_t j = next_open_;
      const unit& u = units_[j];
      if (!u.fill) {
        ++next_open_;
        continue;
      }
      if (prev_[j] != no_buffer && prev_[j] >= k) return;  // its buffer's reader is not issued
      const std::uint64_t reader = reader_seq_[u.buffer];
      if (reader != 0) {
        if (!force && reader == issued_) return;
        t_->synchronize(free_[u.buffer]);
      }
      pool_->open_through(j);
      ++next_open_;
    }
  }

  /// Whether @p u is a file piece the transport reads with the run's others, in one batch
  /// after the run's copies (transport_with_batched_file_reads): the pinned copies are then
  /// queued while the disk reads, and the disk's queue stays full from piece to piece.
  [[nodiscard]] static bool batched_device_read(const unit& u) noexcept {
    return transport_with_batched_file_reads<T> && u.device_read != nullptr;
  }

  void issue_file_reads(stream_view v, setup_meter* meter) {
    if constexpr (transport_with_batched_file_reads<T>) {
      if (file_reads_.empty()) return;
      t_->read_files_to_device(std::span<const device_file_read>(file_reads_), v);
      if (meter != nullptr)
        for (const auto& r : file_reads_) {
          meter->advance(setup_phase::reading, r.bytes);
          meter->advance(setup_phase::uploading, r.bytes);
        }
    }
  }

  void issue(const unit& u, stream_view v, setup_meter* meter) {
    auto& t = *t_;
    if (u.device_read != nullptr) {
      if constexpr (transport_with_file_reads<T>) {
        const staged_piece& p = *u.device_read;
        t.read_file_to_device(dst_base_ + p.slot_offset, (*files_)[p.file]->path(), p.file_offset,
                              p.bytes, v);
        if (meter != nullptr) meter->advance(setup_phase::reading, p.bytes);
      }
    } else {
      t.copy_to_device(dst_base_ + u.dst_offset, u.src, u.bytes, v);
    }
    ++issued_;
    if (u.buffer != no_buffer) {
      t.record(free_[u.buffer], v);
      reader_seq_[u.buffer] = issued_;
    }
    if (meter != nullptr) meter->advance(setup_phase::uploading, u.weight_bytes);
  }

  T* t_ = nullptr;
  const source_files* files_ = nullptr;
  std::unique_ptr<parallel_reader> pool_;

  // The buffer set and its state across runs.
  std::vector<std::byte*> buffers_;
  std::vector<event> free_;                // per buffer: recorded after the copy that last read it
  std::vector<std::uint64_t> reader_seq_;  // per buffer: issued_ at that copy (0: none yet)
  std::size_t ring_ = 0;
  std::uint64_t ring_bytes_ = 0;
  std::size_t ring_next_ = 0;
  std::uint64_t issued_ = 0;  // copies issued so far

  // The run being planned or run (capacity kept: planning allocates only while it grows).
  std::byte* dst_base_ = nullptr;
  std::vector<unit> units_;
  std::vector<read_task> tasks_;
  std::vector<device_file_read> file_reads_;  // batched_device_read units, in order
  std::vector<std::size_t> prev_;         // per unit: the earlier unit of this run reading its buffer
  std::vector<std::size_t> last_in_run_;  // per buffer, while prev_ is built
  bool open_ = false;                     // a ring chunk is open for more bytes
  std::uint64_t chunk_start_ = 0;
  std::size_t next_open_ = 0;
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo
