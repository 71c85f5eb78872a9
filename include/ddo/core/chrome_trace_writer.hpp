// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::chrome_trace_writer: the one writer of Chrome's trace-event JSON (what
/// chrome://tracing and Perfetto load), used by the runtime's trace_recorder
/// (runtime/trace.hpp) and by ddo-run's `--trace` (examples/runner/chrome_trace.hpp).
///
/// Layout: {"displayTimeUnit": "ms", "traceEvents": [ one event per line ]}. The four tracks
/// (tid) are named by metadata events first, so host work, the copy stream, the compute stream
/// and the runtime's own spans show as separate rows; then one complete event ("ph": "X") per
/// span, times in microseconds with three decimals (nanoseconds, at any trace length).

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "ddo/core/json_writer.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The tracks of a ddo trace (Chrome's tid).
enum class trace_track : int { host = 1, copy_stream = 2, compute_stream = 3, runtime = 4 };

/// @brief Writes one Chrome trace (see the file comment): construct, add events, finish().
class chrome_trace_writer {
 public:
  chrome_trace_writer() {
    w_.begin_object(json_layout::spaced).member("displayTimeUnit", "ms");
    w_.key("traceEvents").begin_array(json_layout::lines);
    constexpr std::array<std::pair<trace_track, std::string_view>, 4> names = {{
        {trace_track::host, "host"},
        {trace_track::copy_stream, "copy stream"},
        {trace_track::compute_stream, "compute stream"},
        {trace_track::runtime, "ddo runtime"},
    }};
    for (const auto& [track, label] : names) {
      w_.begin_object(json_layout::spaced).member("ph", "M").member("pid", 1);
      w_.member("tid", static_cast<int>(track)).member("name", "thread_name");
      w_.key("args").begin_object(json_layout::spaced).member("name", label).end_object();
      w_.end_object();
    }
  }

  /// @brief One complete event; @p write_args(json_writer&) writes the members of its "args"
  /// object (none: no "args"). A negative duration is written as 0.
  template <class WriteArgs>
  void complete(std::string_view name, std::string_view category, trace_track track,
                double start_us, double duration_us, WriteArgs&& write_args) {
    w_.begin_object(json_layout::spaced).member("ph", "X").member("pid", 1);
    w_.member("tid", static_cast<int>(track)).member("name", name).member("cat", category);
    w_.member("ts", start_us, 3).member("dur", duration_us < 0 ? 0.0 : duration_us, 3);
    w_.key("args").begin_object(json_layout::spaced);
    static_cast<WriteArgs&&>(write_args)(w_);
    w_.end_object().end_object();
  }

  /// @brief Closes the document and returns it (ends with a newline).
  [[nodiscard]] std::string finish() {
    w_.end_array().end_object();
    return w_.take() + "\n";
  }

 private:
  json_writer w_;
};

}  // namespace v0
}  // namespace ddo
