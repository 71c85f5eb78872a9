// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::file_reader: reads byte ranges of a model file through the backend that
/// `load_safetensors_backend` chooses (mmap or pread), and page-aligned ranges for O_DIRECT.
///
/// The reader is safe to share between threads: every read is positional (pread) or a copy out
/// of a read-only mapping, so no file offset is shared.
///
/// A file that shrinks while it is open is an io_error naming the file and the offset, never a
/// signal: copies out of the mapping go through the kernel (process_vm_readv on the process
/// itself), which reports a page past the file's new end as EFAULT where a plain memcpy would
/// raise SIGBUS. Special files (FIFOs, devices, directories) are refused before anything can
/// block on them: the open is non-blocking and only a regular file is accepted.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "ddo/core/error.hpp"
#include "ddo/core/linkage.hpp"
#include "ddo/core/safetensors_backend.hpp"
#include "ddo/core/units.hpp"
#include "ddo/model/file_fault_hook.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The alignment O_DIRECT reads need on Linux for offset, length and buffer address.
/// 4096 covers every common logical block size (512 B and 4 KiB devices).
inline constexpr std::uint64_t direct_io_alignment = 4096;

/// @brief A byte range widened to whole aligned blocks, for O_DIRECT reads.
///
/// Reading [offset, offset + length) with O_DIRECT means reading
/// [aligned_offset, aligned_offset + aligned_length) into an aligned buffer and using the bytes
/// from `head` on: `buffer + head` holds the first requested byte.
struct aligned_range {
  std::uint64_t aligned_offset = 0;  ///< offset rounded down to the alignment
  std::uint64_t aligned_length = 0;  ///< length covering the request, a multiple of the alignment
  std::uint64_t head = 0;            ///< offset - aligned_offset: bytes to skip in the buffer
};

/// @brief Widens [offset, offset + length) to @p alignment (a power of two) for O_DIRECT.
/// @throws usage_error when @p alignment is not a power of two or the range overflows.
[[nodiscard]] inline aligned_range align_range(std::uint64_t offset, std::uint64_t length,
                                               std::uint64_t alignment = direct_io_alignment) {
  DDO_EXPECTS(alignment != 0 && (alignment & (alignment - 1)) == 0,
              "align_range: alignment must be a power of two, got " + std::to_string(alignment));
  DDO_EXPECTS(length <= UINT64_MAX - alignment && offset <= UINT64_MAX - length - alignment,
              "align_range: range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                  ") overflows");
  aligned_range r;
  r.aligned_offset = offset & ~(alignment - 1);
  r.head = offset - r.aligned_offset;
  r.aligned_length = round_up(r.head + length, alignment);
  return r;
}

/// @brief Options for opening a file_reader beyond the backend.
struct file_reader_options {
  /// Also open a second descriptor with O_DIRECT for read_direct(). Where the file system
  /// refuses O_DIRECT (tmpfs, some overlay file systems) the descriptor falls back to buffered
  /// reads and direct_io_active() says so; reads keep working.
  bool direct_io = false;
  /// Consulted before every read (fault-injection tests); not owned, must outlive the reader.
  file_fault_hook* faults = nullptr;
  /// mmap backend: advise the mapping sequential and, after each read, drop the pages it copied
  /// (MADV_DONTNEED on the whole pages inside the range), so a caller that copies each byte once
  /// into its final home holds no mapped page beside that copy (the runtime's
  /// load_safetensors_backend = mmap).
  bool drop_mapped_pages = false;
};

/// @brief Reads byte ranges of one file. Move-only; closes (and unmaps) on destruction.
///
/// Backends: `safetensors_backend::pread` reads with a pread loop; `safetensors_backend::mmap`
/// maps the file read-only once and copies out of the mapping; `library_default` is mmap (what
/// the safetensors library itself does), falling back to pread where the file cannot be mapped
/// (an empty file, a file system without mmap support).
class file_reader {
 public:
  /// @brief Opens @p path. @throws io_error naming the path and errno when it cannot be opened,
  /// stat'ed or (backend mmap) mapped, or is not a regular file (a FIFO, a device, a directory:
  /// refused without blocking).
  explicit file_reader(std::string path,
                       safetensors_backend backend = safetensors_backend::library_default,
                       file_reader_options options = {});
  ~file_reader();
  file_reader(const file_reader&) = delete;
  file_reader& operator=(const file_reader&) = delete;
  file_reader(file_reader&& other) noexcept;
  file_reader& operator=(file_reader&& other) noexcept;

  /// @brief Copies the bytes [offset, offset + dst.size()) into @p dst.
  /// @throws io_error naming the path when the range is outside the file or a read fails
  /// (including the file having shrunk since it was opened: the message names the offset).
  void read(std::uint64_t offset, std::span<std::byte> dst) const;

  /// @brief Reads [offset, offset + dst.size()) through the O_DIRECT descriptor (opened with
  /// file_reader_options::direct_io). offset, dst.data() and dst.size() must be multiples of
  /// direct_io_alignment (use align_range). Reading past the end of the file is allowed once the
  /// first @p required bytes arrived: the return value is the number of bytes actually read
  /// (short only at end of file). A short read that leaves the position unaligned continues on
  /// the buffered descriptor (same bytes); the fault hook is consulted before every read.
  /// @throws usage_error when misaligned or not opened for direct I/O; io_error naming the file
  /// and offset on a read failure or an end of file before @p required bytes.
  std::uint64_t read_direct(std::uint64_t offset, std::span<std::byte> dst, std::uint64_t required = 0) const;

  /// @brief The file size in bytes at open time.
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  /// @brief The path given at construction.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// @brief The backend in use: mmap or pread (library_default resolved).
  [[nodiscard]] safetensors_backend backend() const noexcept { return backend_; }
  /// @brief The read-only mapping of the whole file (mmap backend), nullptr otherwise.
  [[nodiscard]] const std::byte* mapped_data() const noexcept { return map_; }
  /// @brief The buffered descriptor (valid while the reader lives).
  [[nodiscard]] int native_handle() const noexcept { return fd_; }
  /// @brief The descriptor opened for direct I/O (O_DIRECT, or buffered after a fallback);
  /// -1 unless file_reader_options::direct_io. Valid while the reader lives.
  [[nodiscard]] int direct_handle() const noexcept { return direct_fd_; }
  /// @brief Whether the direct descriptor really has O_DIRECT (false after a fallback).
  [[nodiscard]] bool direct_io_active() const noexcept { return direct_active_; }

 private:
  void close_all() noexcept;
  /// One positional read of at most @p n bytes: >= 0 bytes read, or -1 with errno set.
  [[nodiscard]] long read_some(std::uint64_t offset, std::byte* dst, std::size_t n) const;
  /// The same through the direct descriptor (aligned; an injected short count stays aligned).
  [[nodiscard]] long read_direct_some(std::uint64_t offset, std::byte* dst, std::size_t n) const;
  /// The fault hook's verdict on a read of @p n bytes at @p offset: true with @p result set (-1
  /// and errno for an error, 0 for an early end) when the read must not happen; otherwise false,
  /// with @p n halved for a short count (kept a multiple of @p granule when above 1).
  [[nodiscard]] bool injected_fault(std::uint64_t offset, std::size_t& n, std::size_t granule,
                                    long& result) const;
  [[noreturn]] void fail(int error_number, const std::string& what) const {
    throw io_error(path_, error_number, what + " '" + path_ + "': " + std::strerror(error_number));
  }

  std::string path_;
  int fd_ = -1;
  int direct_fd_ = -1;
  bool direct_active_ = false;
  std::uint64_t size_ = 0;
  safetensors_backend backend_ = safetensors_backend::pread;
  std::byte* map_ = nullptr;
  file_fault_hook* faults_ = nullptr;
  bool drop_mapped_pages_ = false;
};

}  // namespace v0
}  // namespace ddo

#if DDO_HEADER_ONLY
#include "ddo/model/detail/file_reader_impl.hpp"
#endif
