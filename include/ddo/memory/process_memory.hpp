// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Host memory of this process and of the machine, as the kernel counts it: RSS and its
/// peak (split into anonymous and file-backed pages), PSS, and MemTotal − MemAvailable. ddo-run
/// and the benchmarks print them next to the weight bytes (docs/runner.md says how to read them).
///
/// Why three figures: RSS counts a file's pages once per mapping and counts pages shared with
/// other processes in full; PSS splits shared pages between their users; MemTotal − MemAvailable
/// is what the machine actually lost (page cache that can be dropped is "available"). A packed,
/// page-locked copy of the weights shows in all three; file pages read with pread show in none
/// (they are page cache); file pages read through a mapping show in RSS and PSS but not in
/// MemTotal − MemAvailable.

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "ddo/memory/system_probe.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Where process_memory reads from; the defaults are the real kernel interfaces (tests
/// point them at prepared files).
struct process_memory_paths {
  std::string status = "/proc/self/status";              ///< VmRSS, VmHWM, RssAnon, RssFile
  std::string smaps_rollup = "/proc/self/smaps_rollup";  ///< Pss (Linux 4.14+)
  std::string meminfo = "/proc/meminfo";                 ///< MemTotal, MemAvailable
  std::string clear_refs = "/proc/self/clear_refs";      ///< "5" resets VmHWM (Linux 4.0+)
};

/// @brief One reading. A figure the kernel does not provide is 0 and its `has_` flag false.
struct process_memory {
  std::uint64_t rss_bytes = 0;       ///< VmRSS: resident now
  std::uint64_t peak_rss_bytes = 0;  ///< VmHWM: the most resident since start or the last reset
  std::uint64_t rss_anon_bytes = 0;  ///< RssAnon: anonymous pages (heap, packed blocks)
  std::uint64_t rss_file_bytes = 0;  ///< RssFile: mapped file pages
  std::uint64_t pss_bytes = 0;       ///< Pss from smaps_rollup
  bool has_pss = false;
  std::uint64_t mem_total_bytes = 0;      ///< MemTotal
  std::uint64_t mem_available_bytes = 0;  ///< MemAvailable
  /// @brief MemTotal − MemAvailable: memory the machine cannot hand out without swapping.
  [[nodiscard]] std::uint64_t mem_used_bytes() const noexcept {
    return mem_total_bytes > mem_available_bytes ? mem_total_bytes - mem_available_bytes : 0;
  }
};

namespace detail {

/// "VmRSS:    1234 kB" style fields (status, smaps_rollup, meminfo) → bytes, 0 when missing.
inline std::uint64_t kb_field(const std::optional<std::string>& text, std::string_view key) {
  if (!text) return 0;
  return meminfo_value(*text, key).value_or(0);
}

}  // namespace detail

/// @brief Reads this process's memory figures and the machine's MemTotal/MemAvailable.
/// @note Reading smaps_rollup walks the process's mappings: milliseconds for a large process, so
/// take readings between phases, not in a hot loop.
[[nodiscard]] inline process_memory read_process_memory(const process_memory_paths& paths = {}) {
  process_memory m;
  const auto status = detail::read_text_file(paths.status);
  m.rss_bytes = detail::kb_field(status, "VmRSS");
  m.peak_rss_bytes = detail::kb_field(status, "VmHWM");
  m.rss_anon_bytes = detail::kb_field(status, "RssAnon");
  m.rss_file_bytes = detail::kb_field(status, "RssFile");
  const auto rollup = detail::read_text_file(paths.smaps_rollup);
  if (rollup) {
    if (const auto pss = detail::meminfo_value(*rollup, "Pss")) {
      m.pss_bytes = *pss;
      m.has_pss = true;
    }
  }
  const auto meminfo = detail::read_text_file(paths.meminfo);
  m.mem_total_bytes = detail::kb_field(meminfo, "MemTotal");
  m.mem_available_bytes = detail::kb_field(meminfo, "MemAvailable");
  return m;
}

/// @brief Resets the peak RSS (VmHWM) to the current RSS, so a phase's own peak can be read
/// afterwards. @return false when the kernel refuses (older than 4.0, or no write access).
inline bool reset_peak_rss(const process_memory_paths& paths = {}) {
  const int fd = ::open(paths.clear_refs.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

/// @brief The figures of a phase: taken at start(), updated by sample(), read by peak-aware
/// accessors. MemTotal − MemAvailable is sampled (the kernel keeps no peak of it): its growth is
/// the largest seen at a sample() since start().
class memory_watch {
 public:
  explicit memory_watch(process_memory_paths paths = {}) : paths_(std::move(paths)) {}

  /// @brief Takes the baseline now; resets the peak RSS when @p reset_peak (and says whether the
  /// kernel allowed it in peak_reset()).
  void start(bool reset_peak = false) {
    peak_reset_ = reset_peak && reset_peak_rss(paths_);
    start_ = read_process_memory(paths_);
    last_ = start_;
    max_used_ = start_.mem_used_bytes();
  }
  /// @brief Reads the figures now and keeps the largest MemTotal − MemAvailable.
  const process_memory& sample() {
    last_ = read_process_memory(paths_);
    if (last_.mem_used_bytes() > max_used_) max_used_ = last_.mem_used_bytes();
    return last_;
  }
  /// @brief Reads MemTotal − MemAvailable alone (one read of /proc/meminfo) and keeps the
  /// largest: for a loop between steps. sample() also reads smaps_rollup, whose PSS walk over a
  /// process holding tens of GB of pinned pages took ~90 ms (ddo-run's 22 GiB model, H100 host):
  /// time the copy stream idles once the ring is full, inside every step's interval.
  void sample_used() {
    const auto meminfo = detail::read_text_file(paths_.meminfo);
    const std::uint64_t total = detail::kb_field(meminfo, "MemTotal");
    const std::uint64_t available = detail::kb_field(meminfo, "MemAvailable");
    const std::uint64_t used = total > available ? total - available : 0;
    if (used > max_used_) max_used_ = used;
  }
  [[nodiscard]] const process_memory& at_start() const noexcept { return start_; }
  [[nodiscard]] const process_memory& last() const noexcept { return last_; }
  [[nodiscard]] bool peak_reset() const noexcept { return peak_reset_; }
  /// @brief Largest MemTotal − MemAvailable seen by sample() minus the value at start() (0 when
  /// it never grew).
  [[nodiscard]] std::uint64_t used_growth_bytes() const noexcept {
    const std::uint64_t base = start_.mem_used_bytes();
    return max_used_ > base ? max_used_ - base : 0;
  }

 private:
  process_memory_paths paths_;
  process_memory start_, last_;
  std::uint64_t max_used_ = 0;
  bool peak_reset_ = false;
};

}  // namespace v0
}  // namespace ddo
