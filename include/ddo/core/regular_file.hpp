// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::read_regular_file: reads a whole small file (a TOML config, a profile, an index)
/// safely — a FIFO, a device (/dev/zero), a directory or a socket is refused before anything
/// could block on it or read without end, and a file larger than the caller's limit is refused
/// with both numbers before it is read.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "ddo/core/error.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Words for a file type, for "is not a regular file" messages.
[[nodiscard]] inline const char* describe_file_type(mode_t mode) noexcept {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

/// @brief Reads all of @p path, a regular file of at most @p max_bytes. @p what names the file
/// in messages ("config file", "capacity profile").
/// @throws io_error naming the path: cannot open or read, not a regular file (never blocks: the
/// open is non-blocking and the type is checked before reading), larger than @p max_bytes, or
/// changed size while read.
[[nodiscard]] inline std::string read_regular_file(const std::string& path, std::uint64_t max_bytes,
                                                   std::string_view what) {
  const std::string label = std::string(what) + " '" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    throw io_error(path, e, "cannot read " + label + ": " + std::strerror(e));
  }
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_on_exit{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    throw io_error(path, e, "cannot read " + label + ": " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode))
    throw io_error(path, EINVAL,
                   "cannot read " + label + ": it is " + describe_file_type(st.st_mode) +
                       ", not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes)
    throw io_error(path, EFBIG,
                   "cannot read " + label + ": it has " + std::to_string(size) +
                       " bytes, more than the limit of " + std::to_string(max_bytes));
  std::string text(static_cast<std::size_t>(size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      throw io_error(path, e, "cannot read " + label + ": " + std::strerror(e));
    }
    if (n == 0) {
      text.resize(done);  // the file shrank while read: what is there is what it says
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  return text;
}

}  // namespace v0
}  // namespace ddo
