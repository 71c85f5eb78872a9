// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Tracing: ddo::trace_sink receives spans (copies, waits, leases, steps) so a runner
/// can write a Chrome trace; ddo::trace_recorder is a ready sink that does. With
/// runtime_options::nvtx the runtime also pushes NVTX ranges (header-only nvtx3 from the
/// toolkit, when present) around acquire, release and setup.
///
/// Times are microseconds since the offloader's setup finished (its epoch). Device spans
/// (copies, stalls) are converted from timing events recorded against an epoch event, so they
/// arrive when the runtime harvests them (at step boundaries and metrics()), not in order.

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/chrome_trace_writer.hpp"
#include "ddo/core/enum_names.hpp"
#include "ddo/core/json_writer.hpp"

namespace ddo {
inline namespace v0 {

/// @brief What a span describes.
enum class span_kind {
  copy,   ///< a group load on a copy stream (device time)
  stall,  ///< a compute stream waiting for a load (device time)
  lease,  ///< acquire → release on the host
  compute,  ///< the engine's stream inside a lease, after its wait (device time; time_compute)
  step,   ///< one pass over the groups (host time)
  setup   ///< the offloader's setup (host time)
};

template <>
struct enum_names<span_kind> {
  static constexpr std::array<std::string_view, 6> values = {"copy",    "stall", "lease",
                                                             "compute", "step",  "setup"};
};

[[nodiscard]] constexpr std::string_view to_string(span_kind k) noexcept {
  return enum_name(k);
}

/// @brief One span. `name` is the group's name (or "step 3", "setup").
struct trace_span {
  span_kind kind = span_kind::copy;
  std::string_view name;
  std::size_t group = 0;
  std::uint64_t bytes = 0;
  double start_us = 0.0;
  double end_us = 0.0;
  bool device = false;  ///< times come from device events
};

/// @brief Receives spans. Called from the engine's thread (inside acquire, release, metrics()).
class trace_sink {
 public:
  virtual ~trace_sink() = default;
  /// @brief One finished span; @p span.name is valid only during the call.
  virtual void on_span(const trace_span& span) = 0;
};

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
    records_.push_back({s.kind, std::string(s.name), s.group, s.bytes, s.start_us, s.end_us, s.device});
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
      const trace_track track = !r.device                ? trace_track::host
                                : r.kind == span_kind::copy ? trace_track::copy_stream
                                                            : trace_track::compute_stream;
      trace.complete(r.name, to_string(r.kind), track, r.start_us, r.end_us - r.start_us,
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
