// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The offload profile summary `show_profile` asks for: the totals of an offloader's
/// metrics as a few lines of text. The offloader writes them through
/// runtime_options::profile_summary (the setup log) when it is destroyed; an engine can also
/// format them from offloader.metrics() whenever it likes.

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ddo/core/format_bytes.hpp"
#include "ddo/runtime/metrics.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The summary of @p m, one line per entry, each starting "ddo: profile: ".
[[nodiscard]] inline std::vector<std::string> profile_summary_lines(const offload_metrics& m) {
  const step_metrics& t = m.totals;
  const auto number = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", v);
    return std::string(text);
  };
  std::vector<std::string> lines;
  lines.push_back("ddo: profile: route " + std::string(to_string(m.route)) + " on the " +
                  m.transport + " transport, " + std::to_string(m.steps.size()) + " step(s)");
  std::string moved = "ddo: profile: moved " + format_bytes(t.bytes()) + " (pinned " +
                      format_bytes(t.bytes(transfer_source::pinned)) + ", staged " +
                      format_bytes(t.bytes(transfer_source::pageable_staged)) + ", file " +
                      format_bytes(t.bytes(transfer_source::file)) + ") in " +
                      std::to_string(t.copies) + " copies, " + std::to_string(t.group_loads) +
                      " group loads; " + std::to_string(t.hits) + "/" + std::to_string(t.acquires) +
                      " acquires prefetched";
  if (t.timed)
    moved += "; copy " + number(t.copy_ms) + " ms (" + number(*t.achieved_gbps()) +
             " GB/s), stall " + number(t.stall_ms) + " ms, overlap " +
             number(*t.overlap_ratio() * 100.0) + "%";
  else
    moved += "; copy, stall and overlap not timed (runtime_options::metrics off)";
  lines.push_back(std::move(moved));
  lines.push_back("ddo: profile: resident " + format_bytes(m.resident_bytes) + ", pinned " +
                  format_bytes(m.pinned_bytes) + " (fallback to staging " +
                  format_bytes(m.pin_fallback_bytes) + "), staging buffers " +
                  format_bytes(m.staging_bytes) + ", peak device " +
                  format_bytes(m.peak_device_bytes));
  return lines;
}

}  // namespace v0
}  // namespace ddo
