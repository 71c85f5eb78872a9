// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::predict_step: the time of one steady-state step for a given residency, from
/// per-group compute and transfer times, modelling the runtime's slot ring.
///
/// The model is the runtime's protocol (docs/transports.md), replayed on two clocks:
/// - the engine's stream runs the groups in order; a streamed group's compute starts when the
///   compute before it ended and its load is ready;
/// - the copy stream runs loads one after the other, in the order the host issues them; a load
///   into a slot starts when the copy stream is free and the slot's previous occupant was
///   released (its compute ended: the release event);
/// - which load is issued when, and into which slot, is the runtime's ring policy, driven here
///   as the runtime drives it (ring_schedule, core/detail/ring_schedule.hpp): after every
///   acquire and release, the next `prefetch_depth` streamed groups are loaded, each into the
///   unheld slot whose occupant is needed latest; a miss loads into such a slot on acquire. The host is assumed to run ahead
///   of the device (acquire and release never block it), as it does when the engine enqueues
///   asynchronously.
/// So a streamed group's copy can only overlap the compute issued after its slot became free:
/// a run of streamed groups whose copies take longer than the compute before them stalls, and a
/// resident group in the run gives the copies of the next ones its compute time to hide behind.
///
/// Steps repeat (the next step's first groups are prefetched during this one's last), so the
/// prediction is the steady state: the length of the last of a few simulated steps. Pageable and
/// file loads go through the staging worker on its own stream; the model puts them on the one
/// copy stream with their measured time (they share the bus), a simplification that holds when
/// one route dominates. Cost: O(steps · groups · slots).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/detail/ring_schedule.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One execution group as the predictor sees it (milliseconds).
struct group_load {
  /// The engine's compute for the group, on its stream, when the stream runs its groups back to
  /// back (the clock the GPU sustains under its power limit; see streaming_compute_ms).
  double compute_ms = 0.0;
  double transfer_ms = 0.0;  ///< one load of its streamed bytes (ignored when not streamed)
  bool streamed = false;     ///< loaded into a ring slot every step (else resident)
  /// The engine's own time on its stream between the previous group's release and this
  /// group's acquire (its work between groups); copies run under it as under compute.
  double lead_in_ms = 0.0;
  /// The same compute measured while streaming with nothing resident, when the stream idled
  /// between groups and the GPU ran at a higher clock; 0: not measured (compute_ms is used
  /// whatever the duty cycle). See clock_model.
  double streaming_compute_ms = 0.0;
};

/// @brief The ring the runtime runs (runtime_options::slot_count, prefetch_depth).
struct ring_shape {
  std::size_t slots = 3;  ///< reduced to the number of streamed groups when there are fewer
  std::size_t prefetch_depth = std::numeric_limits<std::size_t>::max();  ///< bounded by the ring
};

/// @brief The predicted timeline of one group in the steady-state step (milliseconds from the
/// start of that step on the engine's stream).
struct group_timeline {
  double compute_start_ms = 0.0;
  double compute_end_ms = 0.0;
  double copy_start_ms = 0.0;  ///< streamed groups: when its load started on the copy stream
  double copy_end_ms = 0.0;
  double slot_free_ms = 0.0;   ///< when the slot it loads into was released (may be negative:
                               ///< the previous step)
  double stall_ms = 0.0;       ///< the engine's stream waited this long for its load
  bool streamed = false;
};

/// @brief A predicted step.
struct step_prediction {
  double step_ms = 0.0;      ///< steady-state step time
  /// The groups' compute (at the clock of this plan's duty cycle) and lead-ins: the step if no
  /// copy stalled it (the all-resident step, for a plan that hides its copies).
  double compute_ms = 0.0;
  double transfer_ms = 0.0;  ///< the sum of the loads issued in the step
  double stall_ms = 0.0;     ///< step_ms - compute_ms
  std::size_t loads = 0;     ///< loads issued in the step (streamed groups that the ring did not keep)
  /// The engine's stream computing, as a fraction of the step (lead-ins not counted).
  double compute_duty = 0.0;
  /// Where the plan's compute lies between the two calibrated clocks (detail::clock_model): 1
  /// at the sustained clock of back-to-back compute, 0 at the streaming calibration's; 1 when
  /// the times have no streaming compute.
  double clock_blend = 1.0;
  std::vector<group_timeline> groups;  ///< per group, in execution order
};

namespace detail {

/// A time the predictor takes: not negative, finite (NaN fails both comparisons).
[[nodiscard]] constexpr bool valid_time(double ms) noexcept { return ms >= 0.0 && ms < 1e12; }

/// Whether every time of a group is one the predictor takes (valid_time).
template <class Group>
[[nodiscard]] constexpr bool valid_times(const Group& g) noexcept {
  return valid_time(g.compute_ms) && valid_time(g.transfer_ms) && valid_time(g.lead_in_ms) &&
         valid_time(g.streaming_compute_ms);
}

/// The runtime's ring policy (ring_schedule, the same object the runtime drives) replayed with
/// times: the schedule decides which load is issued when and into which slot, this class keeps
/// the two clocks.
class ring_replay {
 public:
  /// Prepares a replay of @p groups; the buffers are reused across calls (a search predicts
  /// thousands of placements).
  void reset(std::span<const group_load> groups, ring_shape ring) {
    groups_ = groups;
    const std::size_t n = groups.size();
    streamed_.clear();
    for (std::size_t g = 0; g < n; ++g)
      if (groups[g].streamed) streamed_.push_back(g);
    schedule_.reset(n, std::min(ring.slots, streamed_.size()), streamed_, ring.prefetch_depth);
    copy_free_ = 0.0;
    released_at_.assign(schedule_.slot_count(), 0.0);
    ready_at_.assign(n, 0.0);
    load_start_.assign(n, 0.0);
    load_slot_free_.assign(n, 0.0);
  }

  /// Runs @p steps steps; fills @p out with the last one.
  void run(std::size_t steps, step_prediction& out) {
    const std::size_t n = groups_.size();
    out.groups.assign(n, group_timeline{});
    out.step_ms = 0.0;
    out.transfer_ms = 0.0;
    out.loads = 0;
    const auto load = [this](std::size_t g, std::size_t s) { this->load(g, s); };
    double engine = 0.0;  // the engine's stream: end of the last compute
    double step_start = 0.0;
    for (std::size_t step = 0; step < steps; ++step) {
      const bool last = step + 1 == steps;
      step_start = engine;
      loads_in_step_ = 0;
      transfer_in_step_ = 0.0;
      for (std::size_t g = 0; g < n; ++g) {
        const group_load& gl = groups_[g];
        engine += gl.lead_in_ms;  // the engine's work before it acquires g
        double start = engine;
        int slot = -1;
        if (gl.streamed) {  // acquire, as runtime/detail/offloader_core_impl.hpp does
          slot = schedule_.slot_of(g);
          if (slot < 0) {
            slot = schedule_.victim_for_miss(g);
            DDO_EXPECTS(slot >= 0, "predict_step: the ring has no unheld slot (slots must be >= 1)");
            load(g, static_cast<std::size_t>(slot));
          }
          start = std::max(start, ready_at_[g]);
          schedule_.hold(static_cast<std::size_t>(slot));
        }
        schedule_.acquired(g);
        schedule_.prefetch(load);
        const double end = start + gl.compute_ms;
        if (last) {
          auto& t = out.groups[g];
          t.streamed = gl.streamed;
          t.compute_start_ms = start - step_start;
          t.compute_end_ms = end - step_start;
          t.stall_ms = start - engine;
          if (gl.streamed) {  // the load this acquire used (maybe issued in the step before)
            t.copy_start_ms = load_start_[g] - step_start;
            t.copy_end_ms = ready_at_[g] - step_start;
            t.slot_free_ms = load_slot_free_[g] - step_start;
          }
        }
        engine = end;
        if (slot >= 0) {  // release: recorded after the compute on the engine's stream
          released_at_[static_cast<std::size_t>(slot)] = end;
          schedule_.drop(static_cast<std::size_t>(slot));
        }
        schedule_.prefetch(load);
      }
      if (last) {
        out.step_ms = engine - step_start;
        out.loads = loads_in_step_;
        out.transfer_ms = transfer_in_step_;
      }
    }
  }

 private:
  /// A load of group @p g into slot @p s, issued now: it starts when the copy stream is free and
  /// the slot's occupant was released.
  void load(std::size_t g, std::size_t s) {
    schedule_.assign(g, s);
    const double start = std::max(copy_free_, released_at_[s]);
    copy_free_ = start + groups_[g].transfer_ms;
    ready_at_[g] = copy_free_;
    load_start_[g] = start;
    load_slot_free_[g] = released_at_[s];
    ++loads_in_step_;
    transfer_in_step_ += groups_[g].transfer_ms;
  }

  std::span<const group_load> groups_;
  std::vector<std::size_t> streamed_;
  ring_schedule schedule_;
  std::vector<double> released_at_;     // per slot: its occupant's release
  std::vector<double> ready_at_;        // per group: its latest load's end
  double copy_free_ = 0.0;
  std::vector<double> load_start_;      // per group: its latest load's start
  std::vector<double> load_slot_free_;  // per group: when that load's slot was released
  std::size_t loads_in_step_ = 0;
  double transfer_in_step_ = 0.0;
};

/// The replay of @p groups at their compute_ms, into reused buffers (no checks, no clock).
inline void predict_into(ring_replay& replay, std::span<const group_load> groups, ring_shape ring,
                         step_prediction& out) {
  out.compute_ms = 0.0;
  double compute = 0.0;
  for (const auto& g : groups) {
    out.compute_ms += g.compute_ms + g.lead_in_ms;
    compute += g.compute_ms;
  }
  replay.reset(groups, ring);
  replay.run(4, out);
  out.stall_ms = std::max(0.0, out.step_ms - out.compute_ms);
  out.compute_duty = out.step_ms > 0.0 ? compute / out.step_ms : 0.0;
  out.clock_blend = 1.0;
}

/// The GPU's clock under its power limit, as the predictor models it. A power-limited GPU runs
/// compute that keeps its stream busy at a lower clock than the same compute with idle gaps
/// between groups (measured on the H200: back to back at its 700 W cap, the SM clock at
/// 1455-1530 MHz; streaming at a low token count, 1980 MHz). Calibration times each group's
/// compute both ways: while streaming with nothing resident (streaming_compute_ms; the stream
/// busy a fraction `streaming duty` of that step) and back to back with the copies skipped
/// (compute_ms; busy `sustained duty`, compute over compute and lead-ins). A plan's compute is
/// interpolated between the two, linearly in its own duty cycle (compute / step) between those
/// two duty cycles — and its duty cycle depends on its compute, so the prediction is the fixed
/// point, found by iteration (the map contracts: a faster clock shortens the step by less than
/// the compute it saves).
class clock_model {
 public:
  /// Takes the two calibrated duty cycles from @p groups' times: the streaming one from the
  /// step predicted with every group that has a transfer time streamed (as calibration ran
  /// them). Inactive when no group has a streaming compute time, or when the two duty cycles
  /// are within 1% (the streaming run kept the stream as busy as back-to-back compute).
  void reset(std::span<const group_load> groups, ring_shape ring, ring_replay& replay,
             step_prediction& scratch) {
    active_ = false;
    double sustained = 0.0, lead_ins = 0.0, streaming = 0.0;
    bool measured = false;
    clocked_.assign(groups.begin(), groups.end());
    for (auto& g : clocked_) {
      sustained += g.compute_ms;
      lead_ins += g.lead_in_ms;
      measured = measured || g.streaming_compute_ms > 0.0;
      g.compute_ms = g.streaming_compute_ms > 0.0 ? g.streaming_compute_ms : g.compute_ms;
      streaming += g.compute_ms;
      g.streamed = g.transfer_ms > 0.0;
    }
    if (!measured || sustained <= 0.0) return;
    predict_into(replay, clocked_, ring, scratch);
    if (scratch.step_ms <= 0.0) return;
    streaming_duty_ = streaming / scratch.step_ms;
    sustained_duty_ = sustained / (sustained + lead_ins);
    active_ = sustained_duty_ - streaming_duty_ > 0.01;
  }
  [[nodiscard]] bool active() const noexcept { return active_; }
  [[nodiscard]] double streaming_duty() const noexcept { return streaming_duty_; }
  [[nodiscard]] double sustained_duty() const noexcept { return sustained_duty_; }

  /// Predicts @p groups (their streamed flags as given) at the clock of their fixed point;
  /// returns the number of replays that took (1 for a plan that keeps its stream busy).
  std::size_t predict(ring_replay& replay, std::span<const group_load> groups, ring_shape ring,
                      step_prediction& out) {
    predict_into(replay, groups, ring, out);  // at the sustained clock
    std::size_t replays = 1;
    if (!active_ || out.compute_duty >= sustained_duty_) return replays;
    clocked_.assign(groups.begin(), groups.end());
    double blend = 1.0;
    for (int i = 0; i < 12; ++i) {
      const double next = std::clamp(
          (out.compute_duty - streaming_duty_) / (sustained_duty_ - streaming_duty_), 0.0, 1.0);
      if (next - blend < 1e-4 && blend - next < 1e-4) break;
      blend = next;
      for (std::size_t g = 0; g < groups.size(); ++g) {
        const double s = groups[g].streaming_compute_ms;
        clocked_[g].compute_ms =
            s > 0.0 ? s + (groups[g].compute_ms - s) * blend : groups[g].compute_ms;
      }
      predict_into(replay, clocked_, ring, out);
      ++replays;
    }
    out.clock_blend = blend;
    return replays;
  }

 private:
  double streaming_duty_ = 0.0;
  double sustained_duty_ = 1.0;
  bool active_ = false;
  std::vector<group_load> clocked_;
};

}  // namespace detail

/// @brief Predicts the steady-state step of @p groups (execution order) on @p ring (see this
/// header's description).
/// @throws usage_error for a negative or non-finite time.
[[nodiscard]] inline step_prediction predict_step(std::span<const group_load> groups,
                                                  ring_shape ring = {}) {
  for (std::size_t g = 0; g < groups.size(); ++g)
    DDO_EXPECTS(detail::valid_times(groups[g]),
                "predict_step: group " + std::to_string(g) +
                    " has a negative or non-finite compute, transfer or lead-in time");
  DDO_EXPECTS(ring.slots >= 1, "predict_step: ring_shape::slots must be at least 1");
  step_prediction out;
  detail::ring_replay replay;
  detail::clock_model clock;
  clock.reset(groups, ring, replay, out);
  clock.predict(replay, groups, ring, out);
  return out;
}

/// @brief Where the tolerated copy slowdown stops looking: copies 16x slower than measured.
inline constexpr double max_tolerated_copy_slowdown = 16.0;

namespace detail {

/// The largest factor in [1, max_tolerated_copy_slowdown] for which @p grows (whether the step
/// grows with every copy that many times slower) is false, by bisection to 2^-20 of the range:
/// the step never shrinks when copies slow down, so @p grows is monotone.
template <class Grows>
double bisect_tolerated_slowdown(Grows&& grows) {
  if (!grows(max_tolerated_copy_slowdown)) return max_tolerated_copy_slowdown;
  double lo = 1.0, hi = max_tolerated_copy_slowdown;
  for (int i = 0; i < 20; ++i) {
    const double mid = 0.5 * (lo + hi);
    (grows(mid) ? hi : lo) = mid;
  }
  return lo;
}

}  // namespace detail

/// @brief The largest factor (1 to 16) by which every copy of @p groups may run slower than
/// given before the predicted step grows: the slack a placement keeps against slow copies (1:
/// a copy already stalls the step). The overlap search breaks ties between placements by it.
/// @throws usage_error as predict_step.
[[nodiscard]] inline double tolerated_copy_slowdown(std::span<const group_load> groups,
                                                    ring_shape ring = {}) {
  const double base = predict_step(groups, ring).step_ms;
  std::vector<group_load> scaled(groups.begin(), groups.end());
  step_prediction out;
  detail::ring_replay replay;
  detail::clock_model clock;  // the calibrated duty cycles are those of the measured copies
  clock.reset(groups, ring, replay, out);
  return detail::bisect_tolerated_slowdown([&](double factor) {
    for (std::size_t g = 0; g < groups.size(); ++g) scaled[g].transfer_ms = groups[g].transfer_ms * factor;
    clock.predict(replay, scaled, ring, out);
    return out.step_ms > base + 1e-9 * std::max(1.0, base);
  });
}

}  // namespace v0
}  // namespace ddo
