// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux's `--trace FILE.json`: one Chrome trace (Perfetto) of the streamed run, the
/// runtime's spans (each group's load on the copy stream's track; stalls and each group's compute
/// on the compute stream's; leases on the runtime's) through the runner's trace_adapter, shared
/// with ddo-run, and the Euler loop's host phases (flux::host_phases: each step, each stage's
/// enqueueing, the synchronize, the velocity's read, the Euler update) on the host track. Times
/// count from the end of ddo's setup, as the runtime's do. Example code (examples/flux/).

#include <chrono>
#include <string>
#include <string_view>
#include <utility>

#include "ddo/runtime/runtime_options.hpp"
#include "flux/flux_engine.hpp"
#include "runner/chrome_trace.hpp"
#include "runner/trace_adapter.hpp"

namespace flux {

/// @brief A run's trace: the runtime's spans and the host phases into one chrome_trace.
class run_trace final : public host_phases {
 public:
  run_trace() = default;
  run_trace(const run_trace&) = delete;
  run_trace& operator=(const run_trace&) = delete;

  /// @brief @p base with the runtime's spans sent here: metrics (device spans come from timing
  /// events) and time_compute (each group's compute on the engine's stream: two more events per
  /// acquire).
  [[nodiscard]] ddo::runtime_options runtime_options(ddo::runtime_options base) {
    base.metrics = true;
    base.time_compute = true;
    base.trace = &adapter_;
    return base;
  }
  /// @brief The sink a calibration_recorder forwards the runtime's spans to (--calibrate).
  [[nodiscard]] ddo::trace_sink& sink() noexcept { return adapter_; }

  /// @brief Call when the offloader's setup finished: the runtime's spans count from there.
  void setup_finished() { trace_.reset_origin(); }

  void phase(std::string name, std::string_view category, clock::time_point start,
             clock::time_point end) override {
    trace_.add(std::move(name), std::string(category), trace_.to_us(start),
               std::chrono::duration<double, std::micro>(end - start).count(),
               ddo::runner::chrome_trace::host);
  }

  /// @brief Writes the trace to @p path and prints where, with its event count.
  void write(const std::string& path) const { ddo::runner::write_trace(trace_, path); }

 private:
  ddo::runner::chrome_trace trace_;
  ddo::runner::trace_adapter adapter_{trace_};
};

}  // namespace flux
