// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::flush_standard_output: a program's last check that everything it printed reached
/// standard output. A write to a full disk (`ddo-plan --format json > plan.json` on a full file
/// system, or `> /dev/full`) fails inside stdio's buffer and is otherwise silent: the program
/// exits 0 with its output truncated. The ddo programs call this before they report success.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "ddo/core/error.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Flushes std::cout and C's stdout and checks that no write to either failed.
/// @throws io_error naming "standard output" and the reason (e.g. "No space left on device"),
/// or "an earlier write failed" where the failure happened before and its reason is gone.
inline void flush_standard_output() {
  // A write that failed inside an earlier flush left its reason in errno, unless a later call
  // replaced it; errors only writes produce are taken as that reason.
  const int earlier = errno;
  const bool write_error = earlier == ENOSPC || earlier == EDQUOT || earlier == EFBIG ||
                           earlier == EIO || earlier == EPIPE || earlier == EBADF;
  errno = 0;
  std::cout.flush();
  int reason = errno;
  const bool flushed = std::fflush(stdout) == 0;
  if (!flushed) reason = errno;
  if (flushed && !std::ferror(stdout) && std::cout.good()) return;
  if (reason == 0 && write_error) reason = earlier;
  const std::string why = reason != 0 ? std::strerror(reason) : "an earlier write failed";
  throw io_error("standard output", reason != 0 ? reason : EIO,
                 "cannot write standard output: " + why);
}

}  // namespace v0
}  // namespace ddo
