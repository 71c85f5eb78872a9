// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::trace_recorder: a ready trace_sink (runtime/trace.hpp) that keeps every span and
/// writes them as a Chrome trace (core/chrome_trace_writer.hpp). A header of its own: the
/// runtime core includes trace.hpp for the sink it calls, and an engine that does not record a
/// trace does not compile the JSON writer.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "ddo/core/chrome_trace_writer.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/runtime/trace.hpp"

namespace ddo {
inline namespace v0 {

/// @brief A sink that keeps every span and writes the Chrome trace-event JSON format.
class trace_recorder final : public trace_sink {
 public:
  /// @brief A stored span (owns its name).
  struct record {
    span_kind kind;
    std::string name;
    std::size_t group;
    std::uint64_t bytes;
    double start_us;
    double end_us;
    bool device;
  };

  void on_span(const trace_span& s) override {
    std::lock_guard lock(mutex_);
    records_.push_back(
        {s.kind, std::string(s.name), s.group, s.bytes, s.start_us, s.end_us, s.device});
  }

  /// @brief A copy of the spans so far.
  [[nodiscard]] std::vector<record> records() const {
    std::lock_guard lock(mutex_);
    return records_;
  }

  /// @brief Writes the spans as a Chrome trace (core/chrome_trace_writer.hpp): one complete
  /// event per span, leases and steps on the host track, copies on the copy-stream track,
  /// stalls and compute on the compute-stream track; the group and bytes as args.
  void write_chrome_trace(std::ostream& out) const {
    std::lock_guard lock(mutex_);
    chrome_trace_writer trace;
    for (const auto& r : records_) {
      const trace_track track = !r.device                   ? trace_track::host
                                : r.kind == span_kind::copy ? trace_track::copy_stream
                                                            : trace_track::compute_stream;
      trace.complete(
          r.name, to_string(r.kind), track, r.start_us, r.end_us - r.start_us,
          [&](json_writer& args) { args.member("group", r.group).member("bytes", r.bytes); });
    }
    out << trace.finish();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<record> records_;
};

}  // namespace v0
}  // namespace ddo
