// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Step timing, metrics and trace (not API): per-step counters, timing events recorded
/// around loads and stalls and harvested later (never a host sync on the hot path), and the
/// spans handed to a trace_sink. Steps start at begin_step() or when the engine acquires a group
/// whose index is not above the previous one.
///
/// Timing events live each in a block of its own (the pool holds their pointers) so that
/// references handed to the staging worker stay valid when the pool grows (not a std::deque:
/// <deque> is 14k tokens in every TU including the runtime; docs/development.md).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddo/core/chrono.hpp"
#include "ddo/runtime/detail/group_layout.hpp"
#include "ddo/runtime/detail/staging_worker.hpp"
#include "ddo/runtime/metrics.hpp"
#include "ddo/runtime/trace.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

template <class T>
class step_timing {
 public:
  using clock = std::chrono::steady_clock;
  using event = typename T::event;
  using stream_view = typename T::stream_view;
  static constexpr std::size_t none = no_group;

  /// @param metrics record timing events; @p trace receives spans (null: none).
  void setup(T& t, bool metrics, trace_sink* trace, const std::vector<group_runtime>& groups,
             staging_worker<T>& worker);
  /// Sets the epoch: records the epoch event on @p v and waits for it (setup only).
  void start_epoch(stream_view v);
  /// Emits the setup span (trace) from @p setup_start to the epoch.
  void setup_finished(clock::time_point setup_start);

  [[nodiscard]] bool timing() const noexcept { return metrics_; }
  [[nodiscard]] bool tracing() const noexcept { return trace_ != nullptr; }
  [[nodiscard]] const std::vector<step_metrics>& steps() const noexcept { return steps_; }
  /// The current step (started on first use).
  step_metrics& current();
  [[nodiscard]] std::size_t step_index() { current(); return steps_.size() - 1; }
  /// The engine acquires group @p g: starts a step when its index is not above the last.
  void note_acquire(std::size_t g);
  /// Whether an acquire of group @p g would start a step (note_acquire's rule).
  [[nodiscard]] bool starts_step(std::size_t g) const noexcept {
    return !explicit_step_ && (steps_.empty() || (acquired_any_ && g <= last_group_));
  }
  /// Starts a step now; the next acquire does not start another.
  void begin_step();

  /// A free timing event's index (harvests or grows the pool when none is free).
  std::size_t take();
  [[nodiscard]] event& at(std::size_t i) noexcept { return *pool_[i]; }
  /// Times [start, end) as a @p kind span of group @p g; @p ticket: the staging job that records
  /// the events (0: recorded on the engine's thread).
  void add_pending(span_kind kind, std::size_t g, std::uint64_t bytes, std::size_t start,
                   std::size_t end, std::uint64_t ticket);
  /// Folds finished timings into their steps; with @p wait, waits for all (a host sync).
  void harvest(bool wait);

  void lease_started(std::size_t g) { if (tracing()) lease_start_[g] = clock::now(); }
  /// The engine's compute for group @p g starts at timing event @p e (time_compute).
  void compute_started(std::size_t g, std::size_t e) { compute_start_[g] = e; }
  /// The compute of @p g ended at timing event @p e: a compute span (none when it never started).
  void compute_ended(std::size_t g, std::size_t e) {
    if (compute_start_[g] == none) {
      free_.push_back(e);
      return;
    }
    add_pending(span_kind::compute, g, 0, compute_start_[g], e, 0);
    compute_start_[g] = none;
  }
  void lease_ended(std::size_t g);
  /// Drops every event (teardown, after the streams were synchronized).
  void release() noexcept;

 private:
  struct pending_timing {
    span_kind kind;
    std::size_t step;
    std::size_t group;
    std::uint64_t bytes;
    std::size_t start;
    std::size_t end;
    std::uint64_t ticket;
  };
  static double micros(clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
  void start_step();

  T* t_ = nullptr;
  bool metrics_ = false;
  trace_sink* trace_ = nullptr;
  const std::vector<group_runtime>* groups_ = nullptr;
  staging_worker<T>* worker_ = nullptr;
  std::vector<step_metrics> steps_;
  std::vector<std::unique_ptr<event>> pool_;
  std::vector<std::size_t> free_;
  std::vector<pending_timing> pending_;
  std::vector<pending_timing> keep_;  // harvest scratch
  event epoch_event_;
  clock::time_point epoch_{};
  clock::time_point step_start_{};
  std::vector<clock::time_point> lease_start_;
  std::vector<std::size_t> compute_start_;  // per group: its open compute span's start event
  std::size_t last_group_ = 0;
  bool acquired_any_ = false;
  bool explicit_step_ = false;
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo

#include "ddo/runtime/detail/step_timing_impl.hpp"
