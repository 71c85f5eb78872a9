// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Writing files so that a reader never sees half of one: every file ddo writes (models,
/// traces, profiles, the runner's model cache) is written aside under a temporary name in the
/// target's directory, flushed, and renamed over the target. A failure or an interruption
/// leaves the previous file (if any) untouched.
///
/// Temporary names have one shape, `.<name>.tmp-<pid>-<unique>` (a directory for a multi-file
/// output: `<name>.tmp-<pid>`), so the next start of any ddo program can find the debris of a
/// process that was killed (SIGKILL, power loss) and remove it: remove_stale_temporaries()
/// removes those whose process no longer exists. Signal handling (removing the temporaries of
/// the current process on SIGINT/SIGTERM) belongs to the programs, not to this library.

#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>

#include "ddo/core/chrono.hpp"
#include "ddo/core/error.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The marker between a target's name and the owning process id in temporary names.
inline constexpr std::string_view temporary_marker = ".tmp-";

/// @brief A fresh temporary path next to @p target: `<dir>/.<name>.tmp-<pid>-<unique>`.
[[nodiscard]] inline std::filesystem::path temporary_path_for(const std::filesystem::path& target) {
  const auto unique = static_cast<std::uint64_t>(
                          std::chrono::steady_clock::now().time_since_epoch().count()) ^
                      reinterpret_cast<std::uintptr_t>(&target);
  auto name = "." + target.filename().string() + std::string(temporary_marker) +
              std::to_string(::getpid()) + "-" + std::to_string(unique % 1000000007ull);
  return target.parent_path() / name;
}

/// @brief The process id a temporary name (file or directory) belongs to, or 0 when @p name is
/// not a ddo temporary name.
[[nodiscard]] inline pid_t temporary_owner(std::string_view name) noexcept {
  const auto at = name.rfind(temporary_marker);
  if (at == std::string_view::npos) return 0;
  std::string_view rest = name.substr(at + temporary_marker.size());
  pid_t pid = 0;
  std::size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9' && digits < 10) {
    pid = pid * 10 + (rest[digits] - '0');
    ++digits;
  }
  if (digits == 0 || (digits < rest.size() && rest[digits] != '-')) return 0;
  return pid;
}

/// @brief Removes the temporaries in @p dir (not recursive) left by processes that no longer
/// exist. Those of live processes, including this one, are kept. Errors are ignored (a
/// directory that cannot be listed has nothing to clean that we could clean).
/// @return the number of entries removed.
inline std::size_t remove_stale_temporaries(const std::filesystem::path& dir) {
  std::size_t removed = 0;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const pid_t owner = temporary_owner(it->path().filename().string());
    if (owner <= 0 || owner == ::getpid()) continue;
    if (::kill(owner, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code rm;
    if (std::filesystem::remove_all(it->path(), rm) > 0 && !rm) ++removed;
  }
  return removed;
}

/// @brief The kind of special file at @p target ("a character device", "a FIFO", ...), or ""
/// for a regular file, a directory or nothing. Renaming a temporary over a special file replaces
/// the node itself: as root, `--trace /dev/full` turned /dev/full into a regular file.
[[nodiscard]] inline std::string special_file_kind(const std::filesystem::path& target) {
  std::error_code ec;
  const auto st = std::filesystem::status(target, ec);
  if (ec) return {};
  switch (st.type()) {
    case std::filesystem::file_type::character:
      return "a character device";
    case std::filesystem::file_type::block:
      return "a block device";
    case std::filesystem::file_type::fifo:
      return "a FIFO";
    case std::filesystem::file_type::socket:
      return "a socket";
    default:
      return {};
  }
}

/// @brief Checks, before any work, that @p target can be written: its directory exists and is
/// writable and @p target is not a directory or a special file (device, FIFO, socket). @p what
/// names the file for the message
/// ("trace file", "model").
/// @throws io_error naming the path and the reason.
inline void check_output_path(const std::filesystem::path& target, std::string_view what) {
  const std::filesystem::path dir =
      target.parent_path().empty() ? std::filesystem::path(".") : target.parent_path();
  std::error_code ec;
  const auto dir_status = std::filesystem::status(dir, ec);
  if (ec || !std::filesystem::is_directory(dir_status))
    throw io_error(target.string(), ENOENT,
                   "cannot write the " + std::string(what) + " '" + target.string() +
                       "': its directory '" + dir.string() + "' does not exist");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    const int e = errno;
    throw io_error(target.string(), e,
                   "cannot write the " + std::string(what) + " '" + target.string() +
                       "': its directory '" + dir.string() + "' is not writable (" +
                       std::strerror(e) + ")");
  }
  if (std::filesystem::is_directory(target, ec))
    throw io_error(target.string(), EISDIR,
                   "cannot write the " + std::string(what) + " '" + target.string() +
                       "': it is a directory");
  if (const auto kind = special_file_kind(target); !kind.empty())
    throw io_error(target.string(), EINVAL,
                   "cannot write the " + std::string(what) + " '" + target.string() + "': it is " +
                       kind +
                       ", not a regular file (ddo writes files aside and renames them "
                       "into place)");
}

/// @brief Checks, before any work, that files can be written in @p dir, a directory created on
/// first use (profiles, the model cache): it is a writable directory, or it does not exist yet and
/// its nearest existing ancestor is one. @p what names it ("profile directory"). A profile
/// directory that was a file used to be found only after the calibration had run.
/// @throws io_error naming the path and the reason.
inline void check_output_directory(const std::filesystem::path& dir, std::string_view what) {
  std::error_code ec;
  std::filesystem::path probe = dir.empty() ? std::filesystem::path(".") : dir;
  const auto refuse = [&](int e, const std::string& why) {
    throw io_error(dir.string(), e,
                   "cannot write the " + std::string(what) + " '" + dir.string() + "': " + why);
  };
  for (;;) {
    const auto st = std::filesystem::status(probe, ec);
    if (!ec && std::filesystem::exists(st)) {
      if (!std::filesystem::is_directory(st))
        refuse(ENOTDIR, (probe == dir ? std::string("it is") : "'" + probe.string() + "' is") +
                            " not a directory");
      if (::access(probe.c_str(), W_OK | X_OK) != 0) {
        const int e = errno;
        refuse(e, "'" + probe.string() + "' is not writable (" + std::strerror(e) + ")");
      }
      return;
    }
    const auto parent = probe.parent_path();
    if (parent == probe || probe == ".") refuse(ENOENT, "no existing directory above it");
    probe = parent.empty() ? std::filesystem::path(".") : parent;
  }
}

/// @brief Refuses, before writing, an output of @p bytes that the file system holding @p dir
/// cannot take. @throws io_error with both numbers.
inline void require_free_space(const std::filesystem::path& dir, std::uint64_t bytes,
                               std::string_view what) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return;  // unknown: let the writes tell
  const std::uint64_t blocks = fs.f_bavail, block = fs.f_frsize == 0 ? 1 : fs.f_frsize;
  const std::uint64_t free = blocks > UINT64_MAX / block ? UINT64_MAX : blocks * block;
  if (free >= bytes) return;
  throw io_error(dir.string(), ENOSPC,
                 "refusing to write the " + std::string(what) + ": it needs " +
                     std::to_string(bytes) + " bytes but only " +
                     std::to_string(free) + " are free in '" +
                     dir.string() + "'");
}

/// @brief Renames @p temporary over @p target (same directory, so atomic on POSIX).
/// @throws io_error; @p temporary is removed on failure.
inline void commit_temporary(const std::filesystem::path& temporary,
                             const std::filesystem::path& target) {
  std::error_code ec;
  if (const auto kind = special_file_kind(target); !kind.empty()) {
    std::filesystem::remove_all(temporary, ec);
    throw io_error(target.string(), EINVAL,
                   "cannot write '" + target.string() + "': it is " + kind +
                       ", not a regular file; it is left as it is");
  }
  std::filesystem::rename(temporary, target, ec);
  if (ec) {
    std::error_code ignore;
    std::filesystem::remove_all(temporary, ignore);
    throw io_error(target.string(), ec.value(),
                   "cannot move '" + temporary.string() + "' into place as '" + target.string() +
                       "': " + ec.message());
  }
}

/// @brief Writes @p target atomically: @p write_to receives the temporary path to create and
/// fill; then the file is flushed to disk (fsync) and renamed over @p target. On any failure
/// (including an exception from @p write_to) the temporary is removed and @p target keeps its
/// previous content.
/// @throws io_error naming @p target; rethrows what @p write_to throws.
inline void write_atomically(const std::filesystem::path& target,
                             const std::function<void(const std::filesystem::path&)>& write_to) {
  const auto temporary = temporary_path_for(target);
  try {
    write_to(temporary);
    const int fd = ::open(temporary.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      const int e = errno;
      if (fd >= 0) ::close(fd);
      throw io_error(target.string(), e,
                     "cannot flush '" + temporary.string() + "': " + std::strerror(e));
    }
    ::close(fd);
  } catch (...) {
    std::error_code ignore;
    std::filesystem::remove(temporary, ignore);
    throw;
  }
  commit_temporary(temporary, target);
}

/// @brief Writes @p bytes to @p target atomically (see write_atomically).
/// @throws io_error naming @p target and the reason (ENOSPC, EACCES, ...).
inline void write_file_atomically(const std::filesystem::path& target, std::string_view bytes) {
  write_atomically(target, [&](const std::filesystem::path& temporary) {
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int e = errno;
      throw io_error(target.string(), e,
                     "cannot write '" + target.string() + "': " + std::strerror(e));
    }
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = n < 0 ? errno : EIO;
        ::close(fd);
        throw io_error(target.string(), e,
                       "cannot write '" + target.string() + "' (" + std::to_string(done) + " of " +
                           std::to_string(bytes.size()) + " bytes written): " + std::strerror(e));
      }
      done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0) {
      const int e = errno;
      throw io_error(target.string(), e,
                     "cannot write '" + target.string() + "': " + std::strerror(e));
    }
  });
}

}  // namespace v0
}  // namespace ddo
