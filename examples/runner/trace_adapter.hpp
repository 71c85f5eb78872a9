// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The runtime's spans (ddo::trace_sink: copies, stalls, compute, leases, steps) forwarded
/// into a runner's Chrome trace (chrome_trace.hpp) on tracks by kind, and the line a program
/// prints once it wrote the file: ddo-run's and ddo-flux's `--trace FILE.json`. Example code
/// (examples/runner/).

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "ddo/runtime/trace.hpp"
#include "runner/chrome_trace.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief Forwards the runtime's spans into @p trace: loads on the copy stream's track, stalls
/// and the engine's compute (runtime_options::time_compute) on the compute stream's, the rest
/// (leases, the runtime's own steps, setup) on the runtime's. Thread-safe as chrome_trace is.
class trace_adapter final : public trace_sink {
 public:
  explicit trace_adapter(chrome_trace& trace) : trace_(trace) {}
  void on_span(const trace_span& s) override {
    int track = chrome_trace::runtime;
    if (s.kind == span_kind::copy) track = chrome_trace::copy_stream;
    if (s.kind == span_kind::stall || s.kind == span_kind::compute)
      track = chrome_trace::compute_stream;
    std::vector<std::pair<std::string, std::string>> args;
    if (s.bytes != 0) args.emplace_back("bytes", std::to_string(s.bytes));
    args.emplace_back("clock", s.device ? "device" : "host");
    trace_.add(std::string(s.name), std::string(to_string(s.kind)), s.start_us,
               s.end_us - s.start_us, track, std::move(args));
  }

 private:
  chrome_trace& trace_;
};

/// @brief Writes @p trace to @p path (atomically) and prints where, with its event count.
/// @throws io_error when the file cannot be written.
inline void write_trace(const chrome_trace& trace, const std::string& path) {
  trace.write(path);
  std::printf("  trace: %s (%zu events; open in https://ui.perfetto.dev)\n", path.c_str(),
              trace.size());
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
