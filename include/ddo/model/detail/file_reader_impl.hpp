// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Implementation of ddo::file_reader (POSIX: open, fstat, pread, mmap).

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "ddo/core/regular_file.hpp"
// Part of ddo/model/file_reader.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {

DDO_INLINE file_reader::file_reader(std::string path, safetensors_backend backend,
                                    file_reader_options options)
    : path_(std::move(path)) {
  faults_ = options.faults;
  // O_NONBLOCK: opening a FIFO for reading would otherwise block until a writer appears, before
  // any check could run. Regular files ignore the flag; it is cleared anyway below.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail(errno, "cannot open model file");
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    close_all();
    fail(e, "cannot stat model file");
  }
  if (!S_ISREG(st.st_mode)) {
    close_all();
    throw io_error(path_, EINVAL,
                   "'" + path_ + "' is " + describe_file_type(st.st_mode) +
                       ", not a regular file: ddo reads models, shards and indexes only from "
                       "regular files");
  }
  if (const int fl = ::fcntl(fd_, F_GETFL); fl >= 0) (void)::fcntl(fd_, F_SETFL, fl & ~O_NONBLOCK);
  size_ = static_cast<std::uint64_t>(st.st_size);

  backend_ = backend == safetensors_backend::pread ? safetensors_backend::pread
                                                   : safetensors_backend::mmap;
  if (backend_ == safetensors_backend::mmap) {
    void* p = size_ == 0
                  ? MAP_FAILED
                  : ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) {
      const int e = size_ == 0 ? EINVAL : errno;
      if (backend == safetensors_backend::mmap) {
        // An explicit mmap request that cannot be honoured is an error: the user measured and
        // chose it. The library default quietly falls back to pread.
        close_all();
        fail(e, "cannot mmap model file");
      }
      backend_ = safetensors_backend::pread;
    } else {
      map_ = static_cast<std::byte*>(p);
      drop_mapped_pages_ = options.drop_mapped_pages;
      if (drop_mapped_pages_)
        (void)::madvise(map_, static_cast<std::size_t>(size_), MADV_SEQUENTIAL);
    }
  }

  if (options.direct_io) {
#ifdef O_DIRECT
    direct_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_DIRECT);
    direct_active_ = direct_fd_ >= 0;
#endif
    if (direct_fd_ < 0) direct_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (direct_fd_ < 0) {
      const int e = errno;
      close_all();
      fail(e, "cannot open model file for direct I/O");
    }
    // The path could have been replaced (by a FIFO, say) since the first open.
    struct stat direct_st {};
    if (::fstat(direct_fd_, &direct_st) != 0 || direct_st.st_dev != st.st_dev ||
        direct_st.st_ino != st.st_ino) {
      close_all();
      fail(ESTALE, "model file changed while it was being opened:");
    }
    if (const int fl = ::fcntl(direct_fd_, F_GETFL); fl >= 0)
      (void)::fcntl(direct_fd_, F_SETFL, fl & ~O_NONBLOCK);
  }
}

DDO_INLINE file_reader::~file_reader() {
  close_all();
}

DDO_INLINE file_reader::file_reader(file_reader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      direct_fd_(std::exchange(other.direct_fd_, -1)),
      direct_active_(std::exchange(other.direct_active_, false)),
      size_(std::exchange(other.size_, 0)),
      backend_(other.backend_),
      map_(std::exchange(other.map_, nullptr)),
      faults_(std::exchange(other.faults_, nullptr)),
      drop_mapped_pages_(std::exchange(other.drop_mapped_pages_, false)) {}

DDO_INLINE file_reader& file_reader::operator=(file_reader&& other) noexcept {
  if (this != &other) {
    close_all();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    direct_fd_ = std::exchange(other.direct_fd_, -1);
    direct_active_ = std::exchange(other.direct_active_, false);
    size_ = std::exchange(other.size_, 0);
    backend_ = other.backend_;
    map_ = std::exchange(other.map_, nullptr);
    faults_ = std::exchange(other.faults_, nullptr);
    drop_mapped_pages_ = std::exchange(other.drop_mapped_pages_, false);
  }
  return *this;
}

DDO_INLINE void file_reader::close_all() noexcept {
  if (map_ != nullptr) ::munmap(map_, static_cast<std::size_t>(size_));
  map_ = nullptr;
  if (direct_fd_ >= 0) ::close(direct_fd_);
  direct_fd_ = -1;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

DDO_INLINE void file_reader::read(std::uint64_t offset, std::span<std::byte> dst) const {
  const std::uint64_t length = dst.size();
  if (offset > size_ || length > size_ - offset)
    throw io_error(path_, EINVAL,
                   "read of bytes [" + std::to_string(offset) + ", " + std::to_string(offset) +
                       " + " + std::to_string(length) + ") is outside model file '" + path_ +
                       "' of " + std::to_string(size_) + " bytes");
  if (length == 0) return;
  std::uint64_t done = 0;
  while (done < length) {
    // Linux transfers at most 0x7ffff000 bytes per call; ask for no more so the loop is the
    // only place short reads are handled.
    const std::size_t chunk =
        static_cast<std::size_t>(std::min<std::uint64_t>(length - done, 0x40000000ull));
    const long n = read_some(offset + done, dst.data() + done, chunk);
    if (n < 0) {
      const int e = errno;
      if (e == EINTR) continue;
      if (e == EFAULT && map_ != nullptr) {
        struct stat st {};
        const std::string now = ::fstat(fd_, &st) == 0
                                    ? std::to_string(static_cast<std::uint64_t>(st.st_size))
                                    : std::string("unknown");
        throw io_error(path_, EIO,
                       "model file '" + path_ + "' shrank while it was mapped: the bytes at offset " +
                           std::to_string(offset + done) + " are gone (opened with " +
                           std::to_string(size_) + " bytes, now " + now + ")");
      }
      fail(e, "read failed at offset " + std::to_string(offset + done) + " of");
    }
    if (n == 0)
      fail(EIO, "unexpected end of file at offset " + std::to_string(offset + done) +
                    " (file shrank while open?) in");
    done += static_cast<std::uint64_t>(n);
  }
}

DDO_INLINE bool file_reader::injected_fault(std::uint64_t offset, std::size_t& n,
                                            std::size_t granule, long& result) const {
  if (faults_ == nullptr) return false;
  const file_read_fault f = faults_->before_read(path_, offset, n);
  switch (f.what) {
    case file_read_fault::kind::error:
      errno = f.error_number;
      result = -1;
      return true;
    case file_read_fault::kind::end_of_file:
      result = 0;
      return true;
    case file_read_fault::kind::short_count:
      n = n > 1 ? n / 2 : n;
      if (granule > 1) n = std::max(granule, n & ~(granule - 1));
      return false;
    case file_read_fault::kind::none:
      return false;
  }
  return false;
}

DDO_INLINE long file_reader::read_some(std::uint64_t offset, std::byte* dst, std::size_t n) const {
  if (long injected = 0; injected_fault(offset, n, 1, injected)) return injected;
  if (map_ != nullptr) {
    // A copy through the kernel: a page past the end of a file that shrank is EFAULT here,
    // where memcpy would be killed by SIGBUS.
    iovec local{dst, n};
    iovec remote{map_ + offset, n};
    const ssize_t got = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
    if (got > 0 && drop_mapped_pages_) {
      // The copy is in its final home: drop the whole pages it came from (the partial pages at
      // either end may hold a neighbour's bytes still to be read; at most two stay mapped).
      const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
      const std::uint64_t first = (offset + page - 1) / page * page;
      const std::uint64_t last = (offset + static_cast<std::uint64_t>(got)) / page * page;
      if (last > first)
        (void)::madvise(map_ + first, static_cast<std::size_t>(last - first), MADV_DONTNEED);
    }
    if (got >= 0 || errno == EFAULT || errno == EINTR) return static_cast<long>(got);
    // process_vm_readv not permitted here (seccomp, ENOSYS): positional reads are just as safe.
  }
  return static_cast<long>(::pread(fd_, dst, n, static_cast<off_t>(offset)));
}

DDO_INLINE long file_reader::read_direct_some(std::uint64_t offset, std::byte* dst,
                                              std::size_t n) const {
  if (long injected = 0; injected_fault(offset, n, direct_io_alignment, injected)) return injected;
  return static_cast<long>(::pread(direct_fd_, dst, n, static_cast<off_t>(offset)));
}

DDO_INLINE std::uint64_t file_reader::read_direct(std::uint64_t offset, std::span<std::byte> dst,
                                                  std::uint64_t required) const {
  DDO_EXPECTS(direct_fd_ >= 0, "file_reader::read_direct: '" + path_ +
                                   "' was not opened with file_reader_options::direct_io");
  const auto address = reinterpret_cast<std::uintptr_t>(dst.data());
  DDO_EXPECTS(offset % direct_io_alignment == 0 && dst.size() % direct_io_alignment == 0 &&
                  address % direct_io_alignment == 0,
              "file_reader::read_direct: offset " + std::to_string(offset) + ", length " +
                  std::to_string(dst.size()) + " and buffer address must be multiples of " +
                  std::to_string(direct_io_alignment) + " (use align_range)");
  std::uint64_t done = 0;
  while (done < dst.size()) {
    const std::uint64_t at = offset + done;
    // Linux moves at most 0x7ffff000 bytes per call; 1 GiB keeps the count aligned.
    const std::size_t chunk =
        static_cast<std::size_t>(std::min<std::uint64_t>(dst.size() - done, 0x40000000ull));
    const bool aligned = at % direct_io_alignment == 0 &&
                         reinterpret_cast<std::uintptr_t>(dst.data() + done) % direct_io_alignment == 0;
    const long n = aligned ? read_direct_some(at, dst.data() + done, chunk)
                           : read_some(at, dst.data() + done, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(errno, "direct read failed at offset " + std::to_string(at) + " of");
    }
    if (n == 0) {
      if (done >= required) break;  // end of file: the caller asked for whole blocks past it
      fail(EIO, "unexpected end of file at offset " + std::to_string(at) + ": " +
                    std::to_string(required - done) +
                    " more bytes were expected (was the file truncated while ddo streamed it?) in");
    }
    done += static_cast<std::uint64_t>(n);
  }
  return done;
}

}  // namespace v0
}  // namespace ddo
