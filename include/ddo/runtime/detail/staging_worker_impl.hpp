// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Definitions of staging_worker.hpp (not API).

#include "ddo/runtime/detail/staging_worker.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

template <class T>
void staging_worker<T>::prepare(T& t, std::uint64_t buffer_bytes, std::size_t copy_threads,
                                const source_files& files) {
  t_ = &t;
  files_ = &files;
  buffer_bytes_ = buffer_bytes;
  stream_ = t.make_stream();
  reader_ = std::make_unique<parallel_reader>(std::max<std::size_t>(1, copy_threads));
}

template <class T>
void staging_worker<T>::ensure_buffers(std::uint64_t bytes) {
  if (has_buffers()) return;
  if (bytes != 0) buffer_bytes_ = bytes;
  for (auto& b : buffers_) b = allocate_pinned_bytes(*t_, buffer_bytes_);
  for (auto& e : buffer_free_) e = t_->make_event(false);
}

template <class T>
void staging_worker<T>::release_buffers() noexcept {
  for (auto& b : buffers_) b = pinned_allocation<T>{};
  for (auto& e : buffer_free_) e = event{};
  buffer_ = 0;
}

template <class T>
std::uint64_t staging_worker<T>::estimate_copies(const std::vector<staged_piece>& pieces) const noexcept {
  if (pieces.empty()) return 0;
  const std::uint64_t span = pieces.back().slot_offset + pieces.back().bytes - pieces.front().slot_offset;
  return (span + buffer_bytes_ - 1) / buffer_bytes_;
}

template <class T>
std::uint64_t staging_worker<T>::stage(std::byte* dst_base, const std::vector<staged_piece>& pieces,
                                       stream_view v, setup_meter* meter) {
  auto& t = *t_;
  const std::uint64_t cap = buffer_bytes_;
  std::uint64_t copies = 0;
  bool filling = false;
  std::uint64_t chunk_start = 0, chunk_end = 0;
  std::uint64_t chunk_weight_bytes = 0;  // weight bytes in the chunk (without alignment gaps)
  std::uint64_t chunk_file_bytes = 0;    // of which read from files
  tasks_.clear();
  auto flush = [&] {
    // Host copies and file reads of the chunk run on the pool's threads in parallel (one thread
    // reads cached file pages at ~7 GB/s, far below PCIe; parallel_reader.hpp).
    reader_->run(tasks_);
    tasks_.clear();
    if (meter != nullptr && chunk_file_bytes != 0) meter->advance(setup_phase::reading, chunk_file_bytes);
    chunk_file_bytes = 0;
    t.copy_to_device(dst_base + chunk_start, buffers_[buffer_].data, chunk_end - chunk_start, v);
    t.record(buffer_free_[buffer_], v);
    if (meter != nullptr) meter->advance(setup_phase::uploading, chunk_weight_bytes);
    chunk_weight_bytes = 0;
    buffer_ ^= 1u;
    filling = false;
    ++copies;
  };
  for (const auto& piece : pieces) {
    if constexpr (transport_with_file_reads<T>) {
      if (piece.host == nullptr) {  // the transport reads the file into the device itself
        if (filling) flush();  // a chunk copy must not span (and overwrite) the piece
        t.read_file_to_device(dst_base + piece.slot_offset, (*files_)[piece.file]->path(),
                              piece.file_offset, piece.bytes, v);
        if (meter != nullptr) {
          meter->advance(setup_phase::reading, piece.bytes);
          meter->advance(setup_phase::uploading, piece.bytes);
        }
        ++copies;
        continue;
      }
    }
    std::uint64_t off = piece.slot_offset;
    std::uint64_t done = 0;
    while (done < piece.bytes) {
      if (filling && off >= chunk_start + cap) flush();
      if (!filling) {
        // The host waits (on this thread) until the copy that last read this buffer is done.
        t.synchronize(buffer_free_[buffer_]);
        chunk_start = chunk_end = off;
        filling = true;
      }
      const std::uint64_t take = std::min(piece.bytes - done, chunk_start + cap - off);
      read_task task;
      task.dst = buffers_[buffer_].data + (off - chunk_start);
      task.bytes = take;
      if (piece.host != nullptr) {
        task.src = piece.host + done;
      } else {
        task.file = (*files_)[piece.file].get();
        task.file_offset = piece.file_offset + done;
        chunk_file_bytes += take;
      }
      tasks_.push_back(task);
      off += take;
      done += take;
      chunk_weight_bytes += take;
      chunk_end = off;
      if (chunk_end - chunk_start == cap) flush();
    }
  }
  if (filling) flush();
  return copies;
}

template <class T>
void staging_worker<T>::start(std::size_t max_outstanding) {
  ring_.assign(std::max<std::size_t>(1, max_outstanding), job{});
  thread_ = std::thread([this] { loop(); });
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
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || queued_ > 0; });
      if (queued_ == 0) return;
      j = ring_[head_];
    }
    std::exception_ptr failure;
    try {
      run(j);
    } catch (...) {
      failure = std::current_exception();
    }
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
void staging_worker<T>::run(const job& j) {
  auto& t = *t_;
  const auto v = stream();
  if constexpr (transport_with_stable_addresses<T>) {
    if (j.bind_group != no_group) {
      // Unmapping needs the previous occupant's readers and copies finished, not merely
      // ordered: the host waits here, on ddo's thread, for those two events only.
      t.synchronize(*j.release);
      t.synchronize(*j.ready);
      t.bind_stable(j.bind_slot, j.bind_group);
    }
  }
  t.wait(v, *j.release);
  t.wait(v, *j.ready);
  if (j.poison_bytes != 0) t.fill_device(j.image, 0xCD, j.poison_bytes, v);
  if (j.timing_start != nullptr) t.record(*j.timing_start, v);
  if (j.block_bytes != 0) {
    const std::uint64_t chunk = j.block_chunk == 0 ? j.block_bytes : j.block_chunk;
    for (std::uint64_t off = 0; off < j.block_bytes; off += chunk)
      t.copy_to_device(j.image + off, j.block + off, std::min(chunk, j.block_bytes - off), v);
  }
  if (j.direct != nullptr)
    for (const auto& piece : *j.direct) t.copy_to_device(j.image + piece.slot_offset, piece.host, piece.bytes, v);
  if (native_ != nullptr)
    native_->stage(j.image, *j.pieces, v);
  else
    stage(j.image, *j.pieces, v);
  if (j.timing_end != nullptr) t.record(*j.timing_end, v);
  t.record(*j.ready, v);
}

template <class T>
void staging_worker<T>::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

template <class T>
void staging_worker<T>::release() noexcept {
  for (auto& e : buffer_free_) e = event{};
  for (auto& b : buffers_) b = pinned_allocation<T>{};
  reader_.reset();
  stream_ = typename T::stream{};
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
