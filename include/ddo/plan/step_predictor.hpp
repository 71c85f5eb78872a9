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
  /// The engine's compute for the group, on its stream (from a format 4 profile: timed back
  /// to back, at the clock the GPU sustains under its power limit).
  double compute_ms = 0.0;
  double transfer_ms = 0.0;  ///< one load of its streamed bytes (ignored when not streamed)
  bool streamed = false;     ///< loaded into a ring slot every step (else resident)
  /// The engine's own time on its stream between the previous group's release and this
  /// group's acquire (its work between groups); copies run under it as under compute.
  double lead_in_ms = 0.0;
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
  double compute_ms = 0.0;   ///< the groups' compute and lead-ins (the all-resident step)
  double transfer_ms = 0.0;  ///< the sum of the loads issued in the step
  double stall_ms = 0.0;     ///< step_ms - compute_ms
  std::size_t loads = 0;     ///< loads issued in the step (streamed groups that the ring did not keep)
  std::vector<group_timeline> groups;  ///< per group, in execution order
};

namespace detail {

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

/// predict_step without its checks, into reused buffers (the search's inner loop).
inline void predict_into(ring_replay& replay, std::span<const group_load> groups, ring_shape ring,
                         step_prediction& out) {
  out.compute_ms = 0.0;
  for (const auto& g : groups) out.compute_ms += g.compute_ms + g.lead_in_ms;
  replay.reset(groups, ring);
  replay.run(4, out);
  out.stall_ms = std::max(0.0, out.step_ms - out.compute_ms);
}

}  // namespace detail

/// @brief Predicts the steady-state step of @p groups (execution order) on @p ring (see this
/// header's description).
/// @throws usage_error for a negative or non-finite time.
[[nodiscard]] inline step_prediction predict_step(std::span<const group_load> groups,
                                                  ring_shape ring = {}) {
  for (std::size_t g = 0; g < groups.size(); ++g)
    DDO_EXPECTS(groups[g].compute_ms >= 0.0 && groups[g].transfer_ms >= 0.0 &&
                    groups[g].lead_in_ms >= 0.0 && groups[g].compute_ms < 1e12 &&
                    groups[g].transfer_ms < 1e12 && groups[g].lead_in_ms < 1e12,
                "predict_step: group " + std::to_string(g) +
                    " has a negative or non-finite compute, transfer or lead-in time");
  DDO_EXPECTS(ring.slots >= 1, "predict_step: ring_shape::slots must be at least 1");
  step_prediction out;
  detail::ring_replay replay;
  detail::predict_into(replay, groups, ring, out);
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
  return detail::bisect_tolerated_slowdown([&](double factor) {
    for (std::size_t g = 0; g < groups.size(); ++g) scaled[g].transfer_ms = groups[g].transfer_ms * factor;
    detail::predict_into(replay, scaled, ring, out);
    return out.step_ms > base + 1e-9 * std::max(1.0, base);
  });
}

}  // namespace v0
}  // namespace ddo
