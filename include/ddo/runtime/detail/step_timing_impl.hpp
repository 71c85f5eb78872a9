// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Definitions of step_timing.hpp (not API).

#include <algorithm>

// Part of ddo/runtime/detail/step_timing.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {
namespace detail {

template <class T>
void step_timing<T>::setup(T& t, bool metrics, trace_sink* trace,
                           const std::vector<group_runtime>& groups, staging_worker<T>& worker) {
  t_ = &t;
  metrics_ = metrics;
  trace_ = trace;
  groups_ = &groups;
  worker_ = &worker;
  lease_start_.assign(groups.size(), clock::time_point{});
  compute_start_.assign(groups.size(), none);
  if (!metrics_) return;
  epoch_event_ = t.make_event(true);
  const std::size_t n = std::min<std::size_t>(64 + 8 * groups.size(), 4096);
  free_.reserve(2 * n);  // room for a pool that grows under load, without reallocating
  for (std::size_t i = 0; i < n; ++i) {
    pool_.push_back(std::make_unique<event>(t.make_event(true)));
    free_.push_back(pool_.size() - 1);
  }
}

template <class T>
void step_timing<T>::start_epoch(stream_view v) {
  if (metrics_) {
    t_->record(epoch_event_, v);
    t_->synchronize(epoch_event_);
  }
  epoch_ = clock::now();
}

template <class T>
void step_timing<T>::setup_finished(clock::time_point setup_start) {
  if (!tracing()) return;
  trace_span s{span_kind::setup, "setup", no_group, 0, -micros(epoch_ - setup_start), 0.0, false};
  trace_->on_span(s);
}

template <class T>
step_metrics& step_timing<T>::current() {
  if (steps_.empty()) start_step();
  return steps_.back();
}

template <class T>
void step_timing<T>::note_acquire(std::size_t g) {
  if (explicit_step_) {
    explicit_step_ = false;
  } else {
    if (steps_.empty() || (acquired_any_ && g <= last_group_)) start_step();
    acquired_any_ = true;
  }
  last_group_ = g;
}

template <class T>
void step_timing<T>::begin_step() {
  start_step();
  explicit_step_ = true;
}

template <class T>
void step_timing<T>::start_step() {
  if (tracing() && !steps_.empty()) {
    const std::string name = "step " + std::to_string(steps_.size() - 1);
    trace_span span{span_kind::step, name, no_group, steps_.back().bytes(),
                    micros(step_start_ - epoch_), micros(clock::now() - epoch_), false};
    trace_->on_span(span);
  }
  step_metrics m;
  m.step = steps_.size();
  m.timed = metrics_;
  steps_.push_back(m);
  step_start_ = clock::now();
  if (metrics_) harvest(false);
}

template <class T>
std::size_t step_timing<T>::take() {
  if (free_.empty()) {
    harvest(false);
    if (free_.empty()) {
      pool_.push_back(std::make_unique<event>(t_->make_event(true)));
      return pool_.size() - 1;
    }
  }
  const std::size_t i = free_.back();
  free_.pop_back();
  return i;
}

template <class T>
void step_timing<T>::add_pending(span_kind kind, std::size_t g, std::uint64_t bytes,
                                 std::size_t start, std::size_t end, std::uint64_t ticket) {
  pending_.push_back({kind, step_index(), g, bytes, start, end, ticket});
}

template <class T>
void step_timing<T>::harvest(bool wait) {
  if (pending_.empty()) return;
  std::uint64_t recorded = worker_->recorded();
  keep_.clear();
  for (auto& p : pending_) {
    if (p.ticket > recorded) {
      if (!wait) {
        keep_.push_back(p);
        continue;
      }
      if (!worker_->wait_recorded_or_failed(p.ticket)) {  // the job failed: never recorded
        free_.push_back(p.start);
        free_.push_back(p.end);
        continue;
      }
      recorded = worker_->recorded();
    }
    if (!wait && !t_->ready(*pool_[p.end])) {
      keep_.push_back(p);
      continue;
    }
    const double ms = t_->elapsed_ms(*pool_[p.start], *pool_[p.end]);
    auto& step = steps_[p.step];
    if (p.kind == span_kind::copy) {
      step.copy_ms += ms;
      step.timed_bytes += p.bytes;
    } else if (p.kind == span_kind::compute) {
      step.compute_ms += ms;
    } else {
      step.stall_ms += ms;
    }
    if (tracing()) {
      const double a = t_->elapsed_ms(epoch_event_, *pool_[p.start]) * 1000.0;
      trace_span span{p.kind, (*groups_)[p.group].name, p.group, p.bytes, a, a + ms * 1000.0, true};
      trace_->on_span(span);
    }
    free_.push_back(p.start);
    free_.push_back(p.end);
  }
  pending_.swap(keep_);
}

template <class T>
void step_timing<T>::lease_ended(std::size_t g) {
  if (!tracing()) return;
  trace_span span{span_kind::lease, (*groups_)[g].name, g, 0, micros(lease_start_[g] - epoch_),
                  micros(clock::now() - epoch_), false};
  trace_->on_span(span);
}

template <class T>
void step_timing<T>::release() noexcept {
  pool_.clear();
  free_.clear();
  pending_.clear();
  epoch_event_ = event{};
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
