// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The process's peak resident set (VmHWM), and resetting it between the variants of
/// `ddo-run --compare` so each row reports its own peak. A tiny helper of the compare table's
/// own; the runner's fuller memory report (RSS, PSS, MemAvailable) is the host-memory work's.
/// Linux only; elsewhere, or where /proc/self/clear_refs cannot be written, the peak is not
/// reset and the table says the figures are cumulative. Example code (examples/runner/).

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief Parses the `VmHWM:` line of a /proc/<pid>/status text, in bytes.
[[nodiscard]] inline std::optional<std::uint64_t> parse_vm_hwm(const std::string& status) {
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    std::uint64_t kib = 0;
    std::string unit;
    if (!(fields >> kib >> unit) || unit != "kB") return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

/// @brief The peak resident set of this process since it started or since the last
/// reset_peak_rss(); nullopt where /proc/self/status has no VmHWM.
[[nodiscard]] inline std::optional<std::uint64_t> peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return parse_vm_hwm(text.str());
}

/// @brief Resets the peak to the current resident set (Linux 4.0+: "5" to clear_refs). Returns
/// whether it was reset.
inline bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
