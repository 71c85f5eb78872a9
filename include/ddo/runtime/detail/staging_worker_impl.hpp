// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Definitions of staging_worker.hpp (not API).

// Part of ddo/runtime/detail/staging_worker.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {
namespace detail {

template <class T>
void staging_worker<T>::prepare(T& t, std::uint64_t buffer_bytes, std::size_t copy_threads,
                                const source_files& files) {
  t_ = &t;
  files_ = &files;
  size_ring(buffer_bytes);
  stream_ = t.make_stream();
  pipeline_.prepare(t, copy_threads, files);
}

template <class T>
void staging_worker<T>::size_ring(std::uint64_t buffer_bytes) {
  buffer_bytes_ = buffer_bytes;
  // Each buffer in parts of at most max_ring_bytes, at least two (whole 4 KiB pages where it
  // allows), so the ring has four buffers or more: two copies queued while others fill.
  std::uint64_t parts = std::max<std::uint64_t>(2, (buffer_bytes + max_ring_bytes - 1) / max_ring_bytes);
  if (buffer_bytes / parts < 4096) parts = 1;
  ring_bytes_ = buffer_bytes / parts;
  if (ring_bytes_ >= 4096) ring_bytes_ -= ring_bytes_ % 4096;
}

template <class T>
void staging_worker<T>::ensure_buffers(std::uint64_t bytes) {
  if (has_buffers()) return;
  if (bytes != 0) size_ring(bytes);
  for (auto& b : buffers_) b = allocate_pinned_bytes(*t_, buffer_bytes_);
  std::vector<std::byte*> ring;
  for (auto& b : buffers_)
    for (std::uint64_t off = 0; off + ring_bytes_ <= buffer_bytes_; off += ring_bytes_) ring.push_back(b.data + off);
  // Alternating between the two allocations: neighbours in the ring are in different buffers.
  std::vector<std::byte*> alternating;
  const std::size_t half = ring.size() / 2;
  for (std::size_t i = 0; i < half; ++i) {
    alternating.push_back(ring[i]);
    alternating.push_back(ring[half + i]);
  }
  const std::size_t count = alternating.size();
  pipeline_.set_buffers(std::move(alternating), count, ring_bytes_);
}

template <class T>
void staging_worker<T>::release_buffers() noexcept {
  if (native_ == nullptr) pipeline_.clear_buffers();  // the ring pointed into the buffers
  for (auto& b : buffers_) b = pinned_allocation<T>{};
}

template <class T>
std::uint64_t staging_worker<T>::estimate_copies(const std::vector<staged_piece>& pieces) const noexcept {
  if (pieces.empty()) return 0;
  const std::uint64_t chunk = native_ != nullptr ? native_->chunk_bytes() : ring_bytes_;
  const std::uint64_t span = pieces.back().slot_offset + pieces.back().bytes - pieces.front().slot_offset;
  return (span + chunk - 1) / chunk;
}

template <class T>
std::uint64_t staging_worker<T>::stage(std::byte* dst_base, const std::vector<staged_piece>& pieces,
                                       stream_view v, setup_meter* meter, pre_copy_hook before) {
  if (native_ != nullptr) return native_->stage(pipeline_, dst_base, pieces, v, meter, before);
  pipeline_.begin(dst_base);
  for (const auto& piece : pieces) {
    if constexpr (transport_with_file_reads<T>) {
      if (piece.host == nullptr) {  // the transport reads the file into the device itself
        pipeline_.add_device_read(piece);
        continue;
      }
    }
    pipeline_.add_staged(piece, piece.host);
  }
  return pipeline_.run(v, meter, before);
}

template <class T>
void staging_worker<T>::start(std::size_t max_outstanding) {
  ring_.assign(std::max<std::size_t>(1, max_outstanding), job{});
  if constexpr (transport_with_stable_addresses<T>) {
    bind_errors_.assign(ring_.size(), nullptr);
    binding_ = true;
    binder_ = std::thread([this] { bind_loop(); });
  }
  thread_ = std::thread([this] { loop(); });
}

template <class T>
void staging_worker<T>::reserve_jobs(std::size_t max_outstanding) {
  std::lock_guard lock(mutex_);
  if (max_outstanding <= ring_.size()) return;
  DDO_EXPECTS(queued_ == 0, "staging_worker: the job queue grows only while empty (a ddo bug)");
  ring_.assign(max_outstanding, job{});
  head_ = 0;
  if (binding_) bind_errors_.assign(ring_.size(), nullptr);
}

template <class T>
std::uint64_t staging_worker<T>::submit(const job& j) {
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    DDO_EXPECTS(queued_ < ring_.size(), "staging_worker: more outstanding jobs than slots (a ddo bug)");
    ring_[(head_ + queued_) % ring_.size()] = j;
    ++queued_;
    ticket = ++submitted_;
  }
  cv_.notify_all();
  return ticket;
}

template <class T>
std::uint64_t staging_worker<T>::submit_when_room(const job& j) {
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return queued_ < ring_.size(); });
  }
  return submit(j);  // the engine's thread is the only submitter: the room stays
}

template <class T>
bool staging_worker<T>::settled() const {
  std::lock_guard lock(mutex_);
  return recorded_ >= submitted_ || error_ != nullptr;
}

template <class T>
void staging_worker<T>::wait_drained() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return recorded_ >= submitted_; });
}

template <class T>
bool staging_worker<T>::failed() const {
  std::lock_guard lock(mutex_);
  return error_ != nullptr;
}

template <class T>
double staging_worker<T>::wait_recorded(std::uint64_t t) {
  std::unique_lock lock(mutex_);
  if (recorded_ >= t && !error_) return 0.0;
  const auto start = std::chrono::steady_clock::now();
  cv_.wait(lock, [&] { return recorded_ >= t || error_; });
  if (error_) {
    auto e = error_;
    lock.unlock();
    std::rethrow_exception(e);
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

template <class T>
bool staging_worker<T>::wait_recorded_or_failed(std::uint64_t t) {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return recorded_ >= t || error_; });
  return recorded_ >= t;
}

template <class T>
std::uint64_t staging_worker<T>::recorded() const {
  std::lock_guard lock(mutex_);
  return recorded_;
}

template <class T>
void staging_worker<T>::wait_all() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return recorded_ >= submitted_ || error_ != nullptr; });
}

template <class T>
void staging_worker<T>::rethrow_error() const {
  std::exception_ptr e;
  {
    std::lock_guard lock(mutex_);
    e = error_;
  }
  if (e) std::rethrow_exception(e);
}

template <class T>
void staging_worker<T>::fail(std::exception_ptr e) {
  std::lock_guard lock(mutex_);
  if (!error_) error_ = e;
}

template <class T>
void staging_worker<T>::loop() {
  try {
    bind_runtime_thread(*t_);
  } catch (...) {
    fail(std::current_exception());
  }
  for (;;) {
    job j;
    std::exception_ptr failure;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || queued_ > 0; });
      if (queued_ == 0) return;
      j = ring_[head_];
      // The job's range must be mapped before its copies: wait for the binder to pass it.
      cv_.wait(lock, [&] { return !binding_ || bound_ > recorded_; });
      if (binding_) failure = std::exchange(bind_errors_[head_], nullptr);
    }
    if (!failure && j.after_previous && previous_failed_)
      failure = std::make_exception_ptr(usage_error(
          "staging: a group's side image was not loaded: the load of its mapped part failed"));
    if (!failure) {
      try {
        run(j);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    previous_failed_ = failure != nullptr;
    {
      std::lock_guard lock(mutex_);
      head_ = (head_ + 1) % ring_.size();
      --queued_;
      ++recorded_;
      if (failure && !error_) error_ = failure;
    }
    cv_.notify_all();
  }
}

template <class T>
void staging_worker<T>::bind_loop() {
  std::exception_ptr thread_error;
  try {
    bind_runtime_thread(*t_);
  } catch (...) {
    thread_error = std::current_exception();
  }
  for (;;) {
    job j;
    std::uint64_t ticket = 0;
    {
      std::unique_lock lock(mutex_);
      // At stop, every submitted job is still passed: the worker runs the queue to its end.
      cv_.wait(lock, [&] { return bound_ < submitted_ || stop_; });
      if (bound_ >= submitted_) return;
      ticket = bound_ + 1;
      j = ring_[(ticket - 1) % ring_.size()];
    }
    std::exception_ptr e = thread_error;
    if (!e && j.bind_group != no_group) {
      if constexpr (transport_with_stable_addresses<T>) {
        try {
          // Unmapping needs the previous occupant's readers and copies finished, not merely
          // ordered: the host waits here, on ddo's thread, for those two events only (or, in
          // graph streaming, for the graph's released flag, which follows both).
          if (j.release_flag != nullptr) {
            wait_release_flag(j.release_flag);
          } else {
            t_->synchronize(*j.release);
            t_->synchronize(*j.ready);
          }
          t_->bind_stable(j.bind_slot, j.bind_group);
        } catch (...) {
          e = std::current_exception();
        }
      }
    }
    {
      std::lock_guard lock(mutex_);
      bind_errors_[(ticket - 1) % ring_.size()] = e;
      bound_ = ticket;
    }
    cv_.notify_all();
  }
}

template <class T>
void staging_worker<T>::run(const job& j) {
  auto& t = *t_;
  const auto v = stream();
  // Everything the job's copies must follow. The staging loop runs it once its threads are
  // filling the job's first chunks, so on a stable-address transport the host's wait for the
  // slot's previous readers overlaps the fill instead of preceding it (measured on the H200's
  // native VMM route with a two-slot window: the fill started only after that wait).
  auto before_copies = [&] {
    // On a stable-address transport the binder mapped the job's range before loop() ran it.
    t.wait(v, *j.release);
    t.wait(v, *j.ready);
    if (j.poison_bytes != 0) t.fill_device(j.image, poison_byte, j.poison_bytes, v);
    if (j.timing_start != nullptr) t.record(*j.timing_start, v);
    if (j.block_bytes != 0) {
      const std::uint64_t chunk = j.block_chunk == 0 ? j.block_bytes : j.block_chunk;
      for (std::uint64_t off = 0; off < j.block_bytes; off += chunk)
        t.copy_to_device(j.image + off, j.block + off, std::min(chunk, j.block_bytes - off), v);
    }
    if (j.direct != nullptr)
      for (const auto& piece : *j.direct) t.copy_to_device(j.image + piece.slot_offset, piece.host, piece.bytes, v);
  };
  stage(j.image, *j.pieces, v, nullptr, pre_copy_hook(before_copies));
  if (j.timing_end != nullptr) t.record(*j.timing_end, v);
  t.record(*j.ready, v);
  if constexpr (transport_with_graph_streaming<T>)
    if (j.ready_flag != nullptr) t.write_value(v, j.ready_flag, 1);
}

/// The binder's wait for a captured graph's released flag (host-visible memory the graph writes
/// after a position's kernels): consumed by resetting it, as the graph resets its ready flags.
template <class T>
void staging_worker<T>::wait_release_flag(std::uint32_t* flag) {
  std::atomic_ref<std::uint32_t> released(*flag);
  for (unsigned spins = 0; released.load(std::memory_order_acquire) != 1; ++spins) {
    if (abandon_.load(std::memory_order_acquire))
      throw usage_error(
          "graph streaming: a load was abandoned at teardown: the captured graph did not release "
          "the slot's previous occupant (a load before it failed, or the device stopped)");
    if (spins < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  released.store(0, std::memory_order_release);
}

template <class T>
void staging_worker<T>::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (binder_.joinable()) binder_.join();
}

template <class T>
void staging_worker<T>::release() noexcept {
  pipeline_.release();
  for (auto& b : buffers_) b = pinned_allocation<T>{};
  stream_ = typename T::stream{};
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
