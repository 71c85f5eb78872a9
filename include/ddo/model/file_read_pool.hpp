// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::file_read_pool: a small pool of threads that reads byte ranges of files with
/// positional reads (pread), many requests in flight at once, into memory the caller owns.
///
/// Why threads and pread (not io_uring): the core keeps std + POSIX; on the GPU machine's disk
/// four O_DIRECT readers already reach the disk's ceiling and 8–16 buffered readers the page
/// cache's (docs/transports.md, "The file route"), which is what the pool needs to deliver.
///
/// Every read goes through one loop that continues short reads, retries EINTR and turns a
/// failure into an io_error naming the file and the offset: an error number from the kernel (EIO
/// from a failing disk), or an end of file before the requested bytes (a file truncated while
/// ddo streams it). A file_fault_hook, when given, is consulted before every pread, so tests can
/// inject errors, short counts and early ends.
///
/// O_DIRECT: a request made with a direct descriptor must have an aligned offset, address and
/// length (direct_io_alignment); short reads that leave the position unaligned continue on the
/// buffered descriptor, and a direct read may end at the end of the file once `required` bytes
/// have arrived (the tail of the last block).

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/model/file_fault_hook.hpp"
#include "ddo/model/file_reader.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One range to read: [offset, offset + bytes) of a file into dst.
struct file_read_request {
  const std::string* path = nullptr;  ///< for messages and the fault hook; must outlive the read
  int fd = -1;                        ///< the descriptor read first (O_DIRECT or buffered)
  int buffered_fd = -1;               ///< continues unaligned remainders when fd is O_DIRECT
  bool direct = false;                ///< fd has O_DIRECT: offset, dst, bytes are aligned
  std::uint64_t offset = 0;
  std::byte* dst = nullptr;
  std::uint64_t bytes = 0;
  /// Bytes that must arrive; the rest (an O_DIRECT request widened past the end of the file)
  /// may be cut short by the end of the file. Equal to `bytes` for buffered requests.
  std::uint64_t required = 0;
};

/// @brief Reads one request on the calling thread (see the file comment).
/// @throws io_error naming the file and the offset on a read error or an early end of file.
inline void read_fully(const file_read_request& r, file_fault_hook* faults) {
  std::uint64_t done = 0;
  while (done < r.bytes) {
    const std::uint64_t at = r.offset + done;
    // A direct descriptor needs an aligned position; after an odd short read the rest goes
    // through the buffered descriptor (same file, same bytes).
    const bool aligned = at % direct_io_alignment == 0 &&
                         reinterpret_cast<std::uintptr_t>(r.dst + done) % direct_io_alignment == 0;
    const int fd = (!r.direct || aligned) ? r.fd : r.buffered_fd;
    // Linux moves at most 0x7ffff000 bytes per call; 1 GiB keeps the count aligned.
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(r.bytes - done, 0x40000000ull));
    long got = 0;
    bool injected = false;
    if (faults != nullptr) {
      const file_read_fault f = faults->before_read(*r.path, at, n);
      switch (f.what) {
        case file_read_fault::kind::error:
          errno = f.error_number;
          got = -1;
          injected = true;
          break;
        case file_read_fault::kind::end_of_file:
          got = 0;
          injected = true;
          break;
        case file_read_fault::kind::short_count:
          // Half, kept aligned on a direct descriptor (a real short read need not be: the
          // buffered descriptor takes over then).
          n = n > 1 ? n / 2 : n;
          if (fd == r.fd && r.direct) n = std::max<std::size_t>(direct_io_alignment, n & ~(direct_io_alignment - 1));
          break;
        case file_read_fault::kind::none:
          break;
      }
    }
    if (!injected) got = static_cast<long>(::pread(fd, r.dst + done, n, static_cast<off_t>(at)));
    if (got < 0) {
      const int e = errno;
      if (e == EINTR) continue;
      throw io_error(*r.path, e,
                     "read of " + std::to_string(r.bytes - done) + " bytes at offset " +
                         std::to_string(at) + " of '" + *r.path + "' failed: " + std::strerror(e));
    }
    if (got == 0) {
      if (done >= r.required) return;  // the widened tail of an O_DIRECT read past the end
      throw io_error(*r.path, EIO,
                     "unexpected end of file at offset " + std::to_string(at) + " of '" + *r.path +
                         "': " + std::to_string(r.required - done) +
                         " more bytes were expected (was the file truncated while ddo streamed it?)");
    }
    done += static_cast<std::uint64_t>(got);
  }
}

/// @brief A pool of reader threads (see the file comment). Not copyable; one read_all() at a
/// time (callers serialize).
class file_read_pool {
 public:
  /// @brief Starts @p threads - 1 helper threads (the caller of read_all() is the last reader).
  /// @param split requests longer than this are cut into pieces of this size (a multiple of
  /// direct_io_alignment, at least 64 KiB), so one long range keeps every thread busy.
  /// @param faults consulted before every pread (not owned; may be null).
  explicit file_read_pool(std::size_t threads, std::uint64_t split = 8ull << 20,
                           file_fault_hook* faults = nullptr)
      : split_(split), faults_(faults) {
    DDO_EXPECTS(threads >= 1 && threads <= 256,
                "file_read_pool: threads must be 1..256, got " + std::to_string(threads));
    DDO_EXPECTS(split >= (64u << 10) && split % direct_io_alignment == 0,
                "file_read_pool: split must be a multiple of " + std::to_string(direct_io_alignment) +
                    " of at least 64 KiB, got " + std::to_string(split));
    helpers_.reserve(threads - 1);
    try {
      for (std::size_t i = 0; i + 1 < threads; ++i) helpers_.emplace_back([this] { helper(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  file_read_pool(const file_read_pool&) = delete;
  file_read_pool& operator=(const file_read_pool&) = delete;
  ~file_read_pool() { stop(); }

  /// @brief Threads reading, the caller included.
  [[nodiscard]] std::size_t threads() const noexcept { return helpers_.size() + 1; }
  /// @brief The size requests are cut into.
  [[nodiscard]] std::uint64_t split() const noexcept { return split_; }

  /// @brief Reads every request, in parallel, and returns when all are done.
  /// @param split cut requests into pieces of this size for this call (0: the pool's split;
  /// otherwise a multiple of direct_io_alignment of at least 64 KiB).
  /// @throws io_error: the first failure (the other reads still finish before it is thrown, so
  /// no thread writes into the caller's memory afterwards).
  void read_all(std::span<const file_read_request> requests, std::uint64_t split = 0) {
    if (split == 0) split = split_;
    DDO_EXPECTS(split >= (64u << 10) && split % direct_io_alignment == 0,
                "file_read_pool::read_all: split must be a multiple of " +
                    std::to_string(direct_io_alignment) + " of at least 64 KiB, got " +
                    std::to_string(split));
    std::unique_lock lock(mutex_);
    // A helper that woke late for the previous batch may still be looking at work_.
    done_cv_.wait(lock, [&] { return busy_ == 0; });
    work_.clear();
    for (const auto& r : requests) {
      for (std::uint64_t off = 0; off < r.bytes; off += split) {
        file_read_request part = r;
        part.offset = r.offset + off;
        part.dst = r.dst + off;
        part.bytes = std::min(split, r.bytes - off);
        // Only the part holding the request's last required byte may end early.
        part.required = r.required <= off ? 0 : std::min(part.bytes, r.required - off);
        work_.push_back(part);
      }
    }
    next_.store(0, std::memory_order_relaxed);
    remaining_ = work_.size();
    error_ = nullptr;
    ++generation_;
    lock.unlock();
    cv_.notify_all();
    drain();
    lock.lock();
    done_cv_.wait(lock, [&] { return remaining_ == 0 && busy_ == 0; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Takes parts until none is left; records the first failure.
  void drain() {
    for (;;) {
      const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= work_.size()) return;
      std::exception_ptr failure;
      try {
        read_fully(work_[i], faults_);
      } catch (...) {
        failure = std::current_exception();
      }
      std::lock_guard lock(mutex_);
      if (failure && !error_) error_ = failure;
      if (--remaining_ == 0) done_cv_.notify_all();
    }
  }

  void helper() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        ++busy_;
      }
      drain();
      std::lock_guard lock(mutex_);
      if (--busy_ == 0) done_cv_.notify_all();
    }
  }

  void stop() noexcept {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : helpers_)
      if (t.joinable()) t.join();
  }

  std::uint64_t split_;
  file_fault_hook* faults_;
  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable cv_;       // new work or stop
  std::condition_variable done_cv_;  // a batch finished
  std::vector<file_read_request> work_;  // capacity kept between batches
  std::atomic<std::size_t> next_{0};
  std::size_t remaining_ = 0;
  std::size_t busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace v0
}  // namespace ddo
