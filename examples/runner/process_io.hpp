// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The process's own read counters from /proc/self/io: `rchar` (bytes its read calls
/// returned, page cache hits included) and `read_bytes` (bytes the storage layer fetched for it).
/// `ddo-run --models` reports a switch's reads from them rather than inferring them from time:
/// `--ram-gb` states the RAM ddo plans with, not the kernel's page cache, so a model read again
/// may come from the cache (rchar counts it, read_bytes does not). Linux only; elsewhere the
/// counters are absent. Example code (examples/runner/).

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace ddo::runner {
inline namespace v0 {

/// @brief The two read counters of /proc/self/io.
struct process_io {
  std::uint64_t rchar = 0;       ///< bytes returned by read calls (page cache included)
  std::uint64_t read_bytes = 0;  ///< bytes fetched from storage for this process
  /// Bytes of /proc/self/io this reading read: the next reading's rchar counts them, so a
  /// difference of two readings subtracts them (see since()).
  std::uint64_t text_bytes = 0;

  /// @brief The reads between @p earlier and this reading, the earlier reading's own read of
  /// /proc/self/io taken out.
  [[nodiscard]] process_io since(const process_io& earlier) const noexcept {
    const std::uint64_t own = earlier.text_bytes;
    const std::uint64_t r = rchar - earlier.rchar;
    return {r > own ? r - own : 0, read_bytes - earlier.read_bytes, 0};
  }
};

/// @brief The counters in @p text (the format of /proc/PID/io: "name: value" lines); nullopt
/// when either is missing or not a number.
[[nodiscard]] inline std::optional<process_io> parse_process_io(std::string_view text) {
  std::optional<std::uint64_t> rchar, read_bytes;
  std::istringstream in{std::string(text)};
  std::string name;
  std::string value;
  while (in >> name >> value) {
    std::uint64_t n = 0;
    bool digits = !value.empty();
    for (char c : value) {
      if (c < '0' || c > '9') digits = false;
      n = n * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (!digits) continue;
    if (name == "rchar:") rchar = n;
    if (name == "read_bytes:") read_bytes = n;
  }
  if (!rchar || !read_bytes) return std::nullopt;
  return process_io{*rchar, *read_bytes, text.size()};
}

/// @brief This process's counters now; nullopt where /proc/self/io cannot be read.
[[nodiscard]] inline std::optional<process_io> read_process_io(const char* path = "/proc/self/io") {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return parse_process_io(text.str());
}

}  // namespace v0
}  // namespace ddo::runner
