// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Tracing: ddo::trace_sink receives spans (copies, waits, leases, steps) so a runner
/// can write a Chrome trace; ddo::trace_recorder (runtime/trace_recorder.hpp, apart so that the
/// runtime core, which only calls the sink, does not compile the JSON writer) is a ready sink
/// that does. With
/// runtime_options::nvtx the runtime also pushes NVTX ranges (header-only nvtx3 from the
/// toolkit, when present) around acquire, release and setup.
///
/// Times are microseconds since the offloader's setup finished (its epoch). Device spans
/// (copies, stalls) are converted from timing events recorded against an epoch event, so they
/// arrive when the runtime harvests them (at step boundaries and metrics()), not in order.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ddo/core/enum_names.hpp"

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

}  // namespace v0
}  // namespace ddo
