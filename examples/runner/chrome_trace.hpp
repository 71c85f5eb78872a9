// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief A Chrome trace (the JSON "Trace Event Format" that chrome://tracing and Perfetto load)
/// collected in memory and written once (atomically), for ddo-run's and ddo-flux's
/// `--trace FILE.json` (the runtime's spans arrive through trace_adapter.hpp).
///
/// Complete events ("ph":"X") carry a name, a category ("step", "copy", "wait", "lease",
/// "compute", "setup"), a start and a duration in microseconds since the trace began, and a
/// track (tid): the runner puts host-side work, the copy stream and the compute stream on
/// separate tracks so overlap is visible. Thread-safe: the runtime's hooks may report from its
/// copy thread. Example code (examples/runner/).

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/core/atomic_file.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/chrome_trace_writer.hpp"
#include "ddo/core/json_writer.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief One complete event.
struct trace_event {
  std::string name;
  std::string category;
  double start_us = 0;
  double duration_us = 0;
  int track = 0;
  std::vector<std::pair<std::string, std::string>> args;  ///< shown in the event's details
};

/// @brief Collects events and writes them as Chrome trace JSON.
class chrome_trace {
 public:
  /// @brief Track numbers and the names shown for them.
  enum track : int {
    host = static_cast<int>(trace_track::host),
    copy_stream = static_cast<int>(trace_track::copy_stream),
    compute_stream = static_cast<int>(trace_track::compute_stream),
    runtime = static_cast<int>(trace_track::runtime)
  };

  chrome_trace() : origin_(std::chrono::steady_clock::now()) {}

  /// @brief Restarts the trace's clock at now (events already added keep their times), e.g. to
  /// line the runner's own spans up with the runtime's, which count from the end of setup.
  void reset_origin() {
    std::lock_guard lock(mutex_);
    origin_ = std::chrono::steady_clock::now();
  }

  /// @brief Microseconds since the trace began (the clock events use).
  [[nodiscard]] double now_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_)
        .count();
  }
  /// @brief Microseconds since the trace began of a steady_clock time point.
  [[nodiscard]] double to_us(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  }

  /// @brief Adds a complete event.
  void add(trace_event event) {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }

  /// @brief Adds a complete event from its parts.
  void add(std::string name, std::string category, double start_us, double duration_us,
           int track_id, std::vector<std::pair<std::string, std::string>> args = {}) {
    add(trace_event{std::move(name), std::move(category), start_us, duration_us, track_id,
                    std::move(args)});
  }

  /// @brief Number of events so far.
  [[nodiscard]] std::size_t size() const {
    std::lock_guard lock(mutex_);
    return events_.size();
  }

  /// @brief The whole trace as JSON text (ddo's one Chrome-trace writer,
  /// core/chrome_trace_writer.hpp).
  [[nodiscard]] std::string json() const {
    std::lock_guard lock(mutex_);
    chrome_trace_writer out;
    for (const auto& e : events_)
      out.complete(e.name, e.category, static_cast<trace_track>(e.track), e.start_us,
                   e.duration_us, [&](json_writer& args) {
                     for (const auto& [k, v] : e.args) args.member(k, v);
                   });
    return out.finish();
  }

  /// @brief Writes json() to @p path atomically (written aside, then renamed: a failed write
  /// leaves a previous trace untouched). @throws io_error when the file cannot be written.
  void write(const std::string& path) const { write_file_atomically(path, json()); }

 private:
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<trace_event> events_;
};

}  // namespace runner
}  // namespace v0
}  // namespace ddo
