// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::choose_overlap_residency: which execution groups to keep resident under a byte
/// budget so that the predicted step (plan/step_predictor.hpp) is shortest, with the reason for
/// every group; ddo::smallest_budget_within: the least budget whose best plan is within a
/// slowdown of all-resident.
///
/// The objective is not additive — a resident group helps only where its compute lets the
/// copies after it catch up — so the search works on the predicted timeline:
///  1. everything fits: everything resident (the all-resident step is the fastest there is);
///  2. up to overlap_exhaustive_limit (12) candidate groups: every placement that fits;
///  3. otherwise, from each of four starts (nothing, and the `first`, `spread` and `largest`
///     selections of plan/selectors.hpp, so the result is never predicted slower than those),
///     greedy: add the group whose residency shortens the step most per byte, while any does;
///     then fill what is left of the budget (groups whose copy is longest against their compute
///     first: resident is never slower, and it keeps a margin against misprediction);
///  4. local search: swap a resident group for streamed ones (then fill) while the step gets
///     shorter;
///  5. the best of the four and of the three selections themselves (so the answer never ranks
///     below first, spread or largest), then polished by the tie-break (overlap_search::polish).
/// Ties on the step — common where every placement hides its copies — are broken by physical
/// measures, never by the order placements were visited (overlap_search::better): the largest
/// copy slowdown the placement tolerates before its step grows (overlap_choice::
/// tolerated_slowdown), then fewer loads per step, less copy time, more resident bytes, and only
/// for placements equal in all of these, earlier residents in execution order.
/// Placements are compared by their step with every copy `transfer_margin` (5%) slower than
/// measured: a plan whose copies only just hide behind compute predicts the all-resident step
/// but stalls on the GPU when a copy runs a little slow (measured on the H200: such a plan 1.4%
/// slower than one with slack), so the search prefers slack where it costs nothing. The
/// prediction it reports is the nominal one (measured times); robust_step_ms is the other.
/// Each greedy round tries the 24 streamed groups under the most stall pressure (their own wait
/// and that of the streamed groups after them), each swap pass the 10 resident groups whose
/// streaming costs least against the 10 streamed ones under the most pressure, and the work is
/// capped (at most ~2·10^7 simulated group visits, about a second), so planning stays in milliseconds for a
/// model's groups and bounded for any input. Tests compare the result
/// with an exhaustive search on up to 12 groups.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "ddo/plan/plan_context.hpp"
#include "ddo/plan/selectors.hpp"
#include "ddo/plan/step_predictor.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One execution group for the search: the bytes residency would cost (its managed
/// bytes; 0: nothing to decide, it never streams) and its times (milliseconds).
struct overlap_candidate {
  std::uint64_t bytes = 0;
  double compute_ms = 0.0;
  double transfer_ms = 0.0;  ///< one load of its bytes when streamed
  double lead_in_ms = 0.0;   ///< the engine's own stream time before its compute (group_timing)
};

/// @brief The search's answer.
struct overlap_choice {
  std::vector<char> resident;        ///< per group: 1 = keep resident (0 for bytes == 0 groups)
  std::vector<std::string> reasons;  ///< per group: why resident or streamed
  std::uint64_t resident_bytes = 0;
  std::uint64_t budget_bytes = 0;
  step_prediction prediction;        ///< of the chosen residency, at the measured times
  double robust_step_ms = 0.0;       ///< its step with every copy transfer_margin slower
  /// The largest factor (up to 16) by which every copy may run slower than measured before its
  /// step grows: 1 when a copy already stalls the step (how ties between plans are broken).
  double tolerated_slowdown = 1.0;
  double all_resident_ms = 0.0;      ///< every candidate resident (the floor)
  double none_resident_ms = 0.0;     ///< every candidate streamed
};

namespace detail {

inline std::string ms_text(double ms) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", ms);
  return b;
}

/// What the search knows of the best placement so far, beyond its robust step: the measures a
/// placement that ties with it is compared by (overlap_search::better, in this order).
struct placement_rank {
  double nominal_ms = 0.0;           ///< the step at the measured times: smaller wins
  double tolerated_slowdown = 1.0;   ///< the largest copy slowdown before the step grows: larger wins
  std::size_t loads = 0;             ///< loads issued per step: fewer wins
  double transfer_ms = 0.0;          ///< copy-stream time per step: less wins
  std::uint64_t resident_bytes = 0;  ///< more wins (the rest of the budget is idle either way)
};

/// Placements equal in every measure of placement_rank (alike groups): the one whose resident
/// groups come earlier in execution order, so the answer does not depend on the search's path.
inline bool earlier_residents(const std::vector<char>& a, const std::vector<char>& b) {
  for (std::size_t g = 0; g < a.size(); ++g)
    if (a[g] != b[g]) return a[g] > b[g];
  return false;
}

class overlap_search {
 public:
  overlap_search(std::span<const overlap_candidate> groups, std::uint64_t budget, ring_shape ring,
                 std::size_t exhaustive_limit, double transfer_margin)
      : groups_(groups), budget_(budget), ring_(ring), loads_(groups.size()),
        exhaustive_limit_(exhaustive_limit) {
    for (std::size_t g = 0; g < groups.size(); ++g) {
      loads_[g].compute_ms = groups[g].compute_ms;
      loads_[g].transfer_ms = groups[g].transfer_ms * (1.0 + transfer_margin);
      loads_[g].lead_in_ms = groups[g].lead_in_ms;
      if (groups[g].bytes > 0) cands_.push_back(g);
    }
    nominal_ = loads_;
    for (std::size_t g = 0; g < groups.size(); ++g) nominal_[g].transfer_ms = groups[g].transfer_ms;
    // A cap on simulated group visits keeps the search bounded on any input.
    const std::uint64_t per_eval = 4 * static_cast<std::uint64_t>(std::max<std::size_t>(groups.size(), 1)) *
                                   std::max<std::size_t>(std::min(ring.slots, groups.size()), 1);
    max_evals_ = std::max<std::uint64_t>(16, 20'000'000 / per_eval);
  }

  /// The step the search compares placements by (copies transfer_margin slower).
  double eval(const std::vector<char>& r) { return eval_on(loads_, r); }
  /// The step at the measured times (what is reported).
  double eval_nominal(const std::vector<char>& r) { return eval_on(nominal_, r); }
  /// The timeline at the measured times, or with the margin (@p robust).
  step_prediction predict(const std::vector<char>& r, bool robust = false) {
    ++evals_;
    auto& loads = robust ? loads_ : nominal_;
    for (std::size_t g = 0; g < groups_.size(); ++g)
      loads[g].streamed = groups_[g].bytes > 0 && !r[g];
    return predict_step(loads, ring_);
  }
  std::uint64_t bytes_of(const std::vector<char>& r) const {
    std::uint64_t b = 0;
    for (std::size_t g : cands_)
      if (r[g]) b += groups_[g].bytes;
    return b;
  }
  bool out_of_work() const noexcept { return evals_ >= max_evals_; }

  /// Whether the step of @p r grows above @p nominal_ms (its step at the measured times) when
  /// every copy runs @p factor times slower than measured.
  bool grows_at(const std::vector<char>& r, double nominal_ms, double factor) {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      scaled_[g] = nominal_[g];
      scaled_[g].transfer_ms = nominal_[g].transfer_ms * factor;
    }
    return eval_on(scaled_, r) > nominal_ms + eps(nominal_ms);
  }

  /// The largest factor, up to max_tolerated_copy_slowdown, by which every copy may run slower
  /// than measured before the step of @p r grows (tolerated_copy_slowdown, on this search's
  /// buffers).
  double tolerated_slowdown(const std::vector<char>& r, double nominal_ms) {
    return detail::bisect_tolerated_slowdown(
        [&](double factor) { return grows_at(r, nominal_ms, factor); });
  }

  placement_rank rank(const std::vector<char>& r) {
    placement_rank k;
    const auto p = predict(r);
    k.nominal_ms = p.step_ms;
    k.loads = p.loads;
    k.transfer_ms = p.transfer_ms;
    k.resident_bytes = bytes_of(r);
    k.tolerated_slowdown = tolerated_slowdown(r, p.step_ms);
    return k;
  }

  /// Whether @p r (robust step @p t) ranks better than @p best (robust step @p best_t; its
  /// measures @p best_rank, computed here when first needed). Lexicographic: the robust step,
  /// the nominal step (both within 1e-9 relative), the tolerated copy slowdown (within 1e-4
  /// relative: two predictions of @p r decide it, no bisection), the loads per step, the copy
  /// time per step, the resident bytes, and last execution order (earlier residents), so the
  /// answer never depends on the order placements were visited. Every path of the search
  /// compares through here, so the exhaustive and the heuristic answers break ties alike.
  bool better(const std::vector<char>& r, double t, const std::vector<char>& best, double best_t,
              std::optional<placement_rank>& best_rank) {
    if (t < best_t - eps(best_t)) return true;
    if (t > best_t + eps(best_t)) return false;
    if (!best_rank) best_rank = rank(best);
    const auto& b = *best_rank;
    const auto p = predict(r);
    if (p.step_ms < b.nominal_ms - eps(b.nominal_ms)) return true;
    if (p.step_ms > b.nominal_ms + eps(b.nominal_ms)) return false;
    const double above = b.tolerated_slowdown * (1.0 + 1e-4);
    if (above < max_tolerated_copy_slowdown && !grows_at(r, p.step_ms, above)) return true;
    if (b.tolerated_slowdown > 1.0 && grows_at(r, p.step_ms, b.tolerated_slowdown * (1.0 - 1e-4)))
      return false;
    if (p.loads != b.loads) return p.loads < b.loads;
    if (p.transfer_ms < b.transfer_ms - eps(b.transfer_ms)) return true;
    if (p.transfer_ms > b.transfer_ms + eps(b.transfer_ms)) return false;
    const std::uint64_t bytes = bytes_of(r);
    if (bytes != b.resident_bytes) return bytes > b.resident_bytes;
    return earlier_residents(r, best);
  }

  /// The streamed candidates to try: all, or the @p limit under the most stall pressure.
  std::vector<std::size_t> streamed_to_try(const std::vector<char>& r, std::size_t limit) {
    std::vector<std::size_t> out;
    for (std::size_t g : cands_)
      if (!r[g]) out.push_back(g);
    if (out.size() <= limit) return out;
    const auto p = predict(r, true);
    std::vector<double> pressure(groups_.size(), 0.0);
    // A group's copy delays its own compute and, through the copy stream, the streamed groups
    // after it: its pressure is the stall of the next few streamed groups.
    const std::size_t reach = std::max<std::size_t>(ring_.slots, 1) + 1;
    for (std::size_t i = 0; i < out.size(); ++i)
      for (std::size_t k = i; k < std::min(out.size(), i + reach); ++k)
        pressure[out[i]] += p.groups[out[k]].stall_ms;
    std::stable_sort(out.begin(), out.end(), [&](std::size_t a, std::size_t b) {
      if (pressure[a] != pressure[b]) return pressure[a] > pressure[b];
      return ratio(a) > ratio(b);
    });
    out.resize(limit);
    return out;
  }

  double ratio(std::size_t g) const {
    return groups_[g].transfer_ms / std::max(groups_[g].compute_ms + groups_[g].lead_in_ms, 1e-9);
  }

  /// Greedy: add the group that shortens the step most per byte while one does.
  void greedy(std::vector<char>& r, double& t) {
    std::uint64_t used = bytes_of(r);
    while (!out_of_work()) {
      std::size_t best = groups_.size();
      double best_gain = 0.0, best_t = t;
      for (std::size_t g : streamed_to_try(r, greedy_width)) {
        if (groups_[g].bytes > budget_ - used) continue;
        r[g] = 1;
        const double tg = eval(r);
        r[g] = 0;
        const double gain = (t - tg) / static_cast<double>(groups_[g].bytes);
        if (t - tg > eps(t) && gain > best_gain) {
          best = g;
          best_gain = gain;
          best_t = tg;
        }
      }
      if (best == groups_.size()) return;
      r[best] = 1;
      used += groups_[best].bytes;
      t = best_t;
    }
  }

  /// Fills what is left of the budget: longest copy against compute first.
  void fill(std::vector<char>& r) const {
    std::uint64_t used = bytes_of(r);
    std::vector<std::size_t> order;
    for (std::size_t g : cands_)
      if (!r[g]) order.push_back(g);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return ratio(a) > ratio(b); });
    for (std::size_t g : order)
      if (groups_[g].bytes <= budget_ - used) {
        r[g] = 1;
        used += groups_[g].bytes;
      }
  }

  /// The @p width resident groups of @p r (step @p t) whose streaming costs least, cheapest
  /// first (each costed by one prediction; stops early when the search is out of work).
  std::vector<std::size_t> cheapest_residents(std::vector<char>& r, double t, std::size_t width) {
    std::vector<std::pair<double, std::size_t>> resident;
    for (std::size_t g : cands_)
      if (r[g] && !out_of_work()) {
        r[g] = 0;
        resident.push_back({eval(r) - t, g});
        r[g] = 1;
      }
    std::stable_sort(resident.begin(), resident.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    if (resident.size() > width) resident.resize(width);
    std::vector<std::size_t> out;
    for (const auto& [cost, g] : resident) out.push_back(g);
    return out;
  }

  /// Tries swaps in order — the groups of one set in @p outs streamed, one of @p ins made
  /// resident, then fill — and takes the first that @p accept(trial, its step) approves into
  /// @p r / @p t. @p r and @p t are unchanged until then, so @p accept may compare against them.
  /// False when none did or the search ran out of work.
  template <class Accept>
  bool take_first_swap(std::vector<char>& r, double& t, const std::vector<std::vector<std::size_t>>& outs,
                       const std::vector<std::size_t>& ins, Accept&& accept) {
    const std::uint64_t used = bytes_of(r);
    for (const auto& out : outs) {
      std::uint64_t freed = 0;
      for (std::size_t g : out) freed += groups_[g].bytes;
      for (std::size_t in : ins) {
        if (out_of_work()) return false;
        if (groups_[in].bytes > budget_ - (used - freed)) continue;
        std::vector<char> trial = r;
        for (std::size_t g : out) trial[g] = 0;
        trial[in] = 1;
        fill(trial);
        const double tt = eval(trial);
        if (accept(trial, tt)) {
          r = std::move(trial);
          t = tt;
          return true;
        }
      }
    }
    return false;
  }

  /// Swaps a resident group for a streamed one (then fills) while the step gets shorter: the
  /// swap_width resident groups whose streaming costs least against the swap_width streamed
  /// groups under the most pressure.
  void local_search(std::vector<char>& r, double& t) {
    for (int pass = 0; pass < 16 && !out_of_work(); ++pass) {
      std::vector<std::vector<std::size_t>> outs;
      for (std::size_t g : cheapest_residents(r, t, swap_width)) outs.push_back({g});
      const auto streamed = streamed_to_try(r, swap_width);
      if (!take_first_swap(r, t, outs, streamed,
                           [&](const std::vector<char>&, double tt) { return tt < t - eps(t); }))
        return;
    }
  }

  /// Improves @p r by the tie-breaking measures where the step cannot improve (better()):
  /// one or two of the polish_width resident groups whose streaming costs least out, one of the
  /// swap_width streamed groups under the most pressure in, then fill; the first swap that
  /// ranks better is taken, for at most polish_passes passes. Where every placement hides its
  /// copies (a large budget on compute-bound groups) the step ties everywhere and this is what
  /// picks the plan with slack; the step itself never gets worse. Bounded by the search's
  /// budget of simulated visits like every other pass: unbounded, it took plan_scale_bench's
  /// 35,717-group plan 115 s (its target is 2 s).
  void polish(std::vector<char>& r, double& t) {
    for (int pass = 0; pass < polish_passes && !out_of_work(); ++pass) {
      const auto resident = cheapest_residents(r, t, polish_width);
      std::vector<std::vector<std::size_t>> outs;
      for (std::size_t i = 0; i < resident.size(); ++i) {
        outs.push_back({resident[i]});
        for (std::size_t j = i + 1; j < resident.size(); ++j) outs.push_back({resident[i], resident[j]});
      }
      const auto streamed = streamed_to_try(r, swap_width);
      std::optional<placement_rank> r_rank;  // r's rank, computed once per pass by better()
      if (!take_first_swap(r, t, outs, streamed, [&](const std::vector<char>& trial, double tt) {
            return better(trial, tt, r, t, r_rank);
          }))
        return;
    }
  }

  static constexpr std::size_t greedy_width = 24;  ///< streamed groups tried per greedy round
  static constexpr std::size_t swap_width = 10;    ///< each side of a swap pass
  static constexpr std::size_t polish_width = 6;   ///< resident groups a polish pass takes out
  static constexpr int polish_passes = 8;

  static double eps(double t) { return 1e-9 * std::max(1.0, t); }

  /// The choice for a given residency, with its prediction and reasons.
  overlap_choice describe(std::span<const char> resident) {
    overlap_choice c;
    c.budget_bytes = budget_;
    std::vector<char> all(groups_.size(), 0), none(groups_.size(), 0);
    std::uint64_t total = 0;
    for (std::size_t g : cands_) {
      all[g] = 1;
      total += groups_[g].bytes;
    }
    c.all_resident_ms = eval_nominal(all);
    c.none_resident_ms = eval_nominal(none);
    c.resident.assign(resident.begin(), resident.end());
    for (std::size_t g = 0; g < groups_.size(); ++g)
      if (groups_[g].bytes == 0) c.resident[g] = 0;
    c.resident_bytes = bytes_of(c.resident);
    c.prediction = predict(c.resident);
    c.robust_step_ms = eval(c.resident);
    c.tolerated_slowdown = tolerated_slowdown(c.resident, c.prediction.step_ms);
    explain(c, total <= budget_ && c.resident == all);
    return c;
  }

  overlap_choice run() {
    const std::size_t n = groups_.size();
    overlap_choice c;
    c.budget_bytes = budget_;
    std::vector<char> all(n, 0), none(n, 0);
    std::uint64_t total = 0;
    for (std::size_t g : cands_) {
      all[g] = 1;
      total += groups_[g].bytes;
    }
    c.all_resident_ms = eval_nominal(all);
    c.none_resident_ms = eval_nominal(none);
    const bool everything_fits = total <= budget_;
    if (everything_fits) {
      c.resident = all;
    } else if (cands_.size() <= exhaustive_limit_) {
      c.resident = exhaustive();
    } else {
      std::vector<selection_candidate> sel;
      for (std::size_t g : cands_) sel.push_back({groups_[g].bytes});
      std::vector<std::vector<char>> starts(1, none);
      for (const auto& winners : {first_selector{}.select(sel, budget_),
                                  spread_selector{}.select(sel, budget_),
                                  largest_selector{}.select(sel, budget_)}) {
        std::vector<char> r(n, 0);
        for (std::size_t w : winners) r[cands_[w]] = 1;
        starts.push_back(std::move(r));
      }
      // The selections themselves compete too: the answer never ranks below first, spread or
      // largest at the same budget.
      const std::vector<std::vector<char>> seeds(starts.begin() + 1, starts.end());
      double best_t = 0.0;
      std::optional<placement_rank> best_rank;
      bool have = false;
      const auto consider = [&](const std::vector<char>& r, double t) {
        if (!have || better(r, t, c.resident, best_t, best_rank)) {
          c.resident = r;
          best_t = t;
          best_rank.reset();
          have = true;
        }
      };
      for (auto& r : starts) {
        double t = eval(r);
        greedy(r, t);
        fill(r);
        t = eval(r);
        local_search(r, t);
        consider(r, t);
      }
      for (const auto& r : seeds) consider(r, eval(r));
      polish(c.resident, best_t);
    }
    c.resident_bytes = bytes_of(c.resident);
    c.prediction = predict(c.resident);
    c.robust_step_ms = eval(c.resident);
    c.tolerated_slowdown = tolerated_slowdown(c.resident, c.prediction.step_ms);
    explain(c, everything_fits);
    return c;
  }

  /// Every placement that fits (2^candidates predictions); ties broken by placement_rank.
  std::vector<char> exhaustive() {
    const std::size_t k = cands_.size();
    std::vector<char> r(groups_.size(), 0), best = r;
    double best_t = 0.0;
    std::optional<placement_rank> best_rank;
    bool have = false;
    for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << k); ++mask) {
      std::uint64_t b = 0;
      bool fits = true;
      for (std::size_t i = 0; i < k; ++i) {
        r[cands_[i]] = static_cast<char>((mask >> i) & 1);
        if (r[cands_[i]]) {
          if (groups_[cands_[i]].bytes > budget_ - b) fits = false;
          else b += groups_[cands_[i]].bytes;
        }
      }
      if (!fits) continue;
      const double t = eval(r);
      if (!have || better(r, t, best, best_t, best_rank)) {
        best = r;
        best_t = t;
        best_rank.reset();
        have = true;
      }
    }
    return best;
  }

  void explain(overlap_choice& c, bool everything_fits) {
    const std::size_t n = groups_.size();
    c.reasons.assign(n, std::string());
    const double t = c.prediction.step_ms;
    const bool deltas = n <= 512;  // one more prediction per group
    const std::uint64_t left = budget_ - std::min(budget_, c.resident_bytes);
    for (std::size_t g = 0; g < n; ++g) {
      const auto& gr = groups_[g];
      const auto& tl = c.prediction.groups[g];
      if (gr.bytes == 0) {
        c.reasons[g] = "overlap: no managed bytes (nothing to stream)";
        continue;
      }
      if (c.resident[g]) {
        if (everything_fits) {
          c.reasons[g] = "overlap: resident, every group fits the budget";
          continue;
        }
        double delta = 0.0;
        if (deltas) {
          c.resident[g] = 0;
          delta = eval_nominal(c.resident) - t;
          c.resident[g] = 1;
        }
        c.reasons[g] = delta > eps(t)
                           ? "overlap: resident, streaming it would add " + ms_text(delta) +
                                 " to the step (its " + ms_text(gr.transfer_ms) +
                                 " copy outruns the compute it could hide behind)"
                           : "overlap: resident, budget left over (streaming it is predicted free; "
                             "resident is never slower)";
        continue;
      }
      if (tl.stall_ms <= eps(t)) {
        const double slack = tl.compute_start_ms - tl.copy_end_ms;
        c.reasons[g] = "overlap: streamed, its " + ms_text(gr.transfer_ms) +
                       " copy hides behind the compute since its slot became free (slack " +
                       ms_text(std::max(0.0, slack)) + ")";
        continue;
      }
      double gain = 0.0;
      if (deltas) {
        c.resident[g] = 1;
        gain = t - eval_nominal(c.resident);
        c.resident[g] = 0;
      }
      c.reasons[g] = "overlap: streamed, the step waits " + ms_text(tl.stall_ms) +
                     " for its copy; resident it would save " + ms_text(std::max(0.0, gain)) +
                     (gr.bytes > left ? " but needs " + format_bytes(gr.bytes) + " and the budget has " +
                                            format_bytes(left) + " left"
                                      : " (a swap elsewhere costs more)");
    }
  }

 private:
  double eval_on(std::vector<group_load>& loads, const std::vector<char>& r) {
    ++evals_;
    for (std::size_t g = 0; g < groups_.size(); ++g)
      loads[g].streamed = groups_[g].bytes > 0 && !r[g];
    detail::predict_into(replay_, loads, ring_, scratch_);
    return scratch_.step_ms;
  }

  std::span<const overlap_candidate> groups_;
  std::uint64_t budget_;
  ring_shape ring_;
  std::vector<group_load> loads_;    // copies transfer_margin slower: what the search compares
  std::vector<group_load> nominal_;  // the measured times: what is reported
  std::vector<group_load> scaled_ = std::vector<group_load>(groups_.size());  // tolerated_slowdown's
  ring_replay replay_;
  step_prediction scratch_;
  std::vector<std::size_t> cands_;
  std::size_t exhaustive_limit_ = 0;
  std::uint64_t evals_ = 0;
  std::uint64_t max_evals_ = 0;
};

}  // namespace detail

/// @brief How much slower than measured the search assumes every copy runs when it compares
/// placements (see this header's description).
inline constexpr double overlap_transfer_margin = 0.05;

/// @brief Up to this many candidate groups, the search tries every placement (4,096 predictions
/// of a dozen groups: about a millisecond).
inline constexpr std::size_t overlap_exhaustive_limit = 12;

/// @brief Picks the groups to keep resident under @p budget_bytes that minimise the predicted
/// step on @p ring (see this header's description). Deterministic.
/// @param exhaustive_limit candidate counts up to which every placement is tried (0: always the
/// heuristic search; tests compare the two).
/// @param transfer_margin how much slower than measured copies are assumed when comparing
/// placements (0: compare at the measured times).
/// @throws usage_error for negative or non-finite times or margin.
[[nodiscard]] inline overlap_choice choose_overlap_residency(
    std::span<const overlap_candidate> groups, std::uint64_t budget_bytes, ring_shape ring = {},
    std::size_t exhaustive_limit = overlap_exhaustive_limit,
    double transfer_margin = overlap_transfer_margin) {
  for (std::size_t g = 0; g < groups.size(); ++g)
    DDO_EXPECTS(groups[g].compute_ms >= 0.0 && groups[g].transfer_ms >= 0.0 &&
                    groups[g].lead_in_ms >= 0.0 && groups[g].compute_ms < 1e12 &&
                    groups[g].transfer_ms < 1e12 && groups[g].lead_in_ms < 1e12,
                "choose_overlap_residency: group " + std::to_string(g) +
                    " has a negative or non-finite compute, transfer or lead-in time");
  DDO_EXPECTS(ring.slots >= 1, "choose_overlap_residency: ring_shape::slots must be at least 1");
  DDO_EXPECTS(exhaustive_limit <= 20, "choose_overlap_residency: exhaustive_limit above 20 "
                                      "(2^20 predictions) would take minutes");
  DDO_EXPECTS(transfer_margin >= 0.0 && transfer_margin <= 10.0,
              "choose_overlap_residency: transfer_margin must be in [0, 10], got " +
                  std::to_string(transfer_margin));
  return detail::overlap_search(groups, budget_bytes, ring, exhaustive_limit, transfer_margin).run();
}

/// @brief The prediction and the per-group reasons of a given residency (e.g. the plan another
/// selection made), under @p budget_bytes (named in the reasons of stalled streamed groups).
[[nodiscard]] inline overlap_choice explain_residency(std::span<const overlap_candidate> groups,
                                                     std::span<const char> resident,
                                                     std::uint64_t budget_bytes,
                                                     ring_shape ring = {}) {
  DDO_EXPECTS(resident.size() == groups.size(),
              "explain_residency: one resident flag per group is needed");
  return detail::overlap_search(groups, budget_bytes, ring, 0, overlap_transfer_margin).describe(resident);
}

/// @brief The predicted step of a given residency (@p resident per group; groups of 0 bytes
/// never stream).
[[nodiscard]] inline step_prediction predict_residency(std::span<const overlap_candidate> groups,
                                                       std::span<const char> resident,
                                                       ring_shape ring = {}) {
  DDO_EXPECTS(resident.size() == groups.size(),
              "predict_residency: one resident flag per group is needed");
  std::vector<group_load> loads(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g)
    loads[g] = {groups[g].compute_ms, groups[g].transfer_ms, groups[g].bytes > 0 && !resident[g],
                groups[g].lead_in_ms};
  return predict_step(loads, ring);
}

/// @brief The answer of smallest_budget_within.
struct budget_for_slowdown {
  std::uint64_t budget_bytes = 0;  ///< the least resident budget found (a multiple of the step)
  overlap_choice choice;           ///< the plan at that budget
};

/// @brief The least resident budget whose overlap-aware plan is predicted within
/// @p max_slowdown × the all-resident step (e.g. 1.02) even with every copy @p transfer_margin
/// slower than measured (the promise should survive a slightly slow copy: on the H200 a plan
/// predicted at 1.018x at the measured times ran at 1.032x), found by bisection over the budget
/// to @p granularity_bytes (the plan's step may not be monotone in the budget at finer scales).
/// @throws usage_error when max_slowdown < 1 or is not finite.
[[nodiscard]] inline budget_for_slowdown smallest_budget_within(
    std::span<const overlap_candidate> groups, double max_slowdown, ring_shape ring = {},
    std::uint64_t granularity_bytes = 1024 * 1024, double transfer_margin = overlap_transfer_margin) {
  DDO_EXPECTS(max_slowdown >= 1.0 && max_slowdown < 1e6,
              "smallest_budget_within: max_slowdown must be a factor >= 1 (1.02 = 2% slower than "
              "all-resident), got " + std::to_string(max_slowdown));
  std::uint64_t total = 0;
  for (const auto& g : groups) total += g.bytes;
  const std::uint64_t step = std::max<std::uint64_t>(granularity_bytes, 1);
  budget_for_slowdown out;
  const auto choose = [&](std::uint64_t budget) {
    return choose_overlap_residency(groups, budget, ring, overlap_exhaustive_limit, transfer_margin);
  };
  out.choice = choose(0);
  const double target = out.choice.all_resident_ms * max_slowdown;
  if (out.choice.robust_step_ms <= target + 1e-9) return out;
  std::uint64_t lo = 0, hi = (total + step - 1) / step;  // lo fails, hi (everything) meets it
  overlap_choice hi_choice = choose(hi * step);
  while (hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    auto c = choose(mid * step);
    if (c.robust_step_ms <= target + 1e-9) {
      hi = mid;
      hi_choice = std::move(c);
    } else {
      lo = mid;
    }
  }
  out.budget_bytes = std::min(hi * step, total);
  out.choice = std::move(hi_choice);
  return out;
}

/// @brief The winners of selector @p S (first_selector, spread_selector, largest_selector) over
/// @p groups' candidates (bytes > 0, in order) under @p budget_bytes, as resident flags.
template <weight_selector S>
[[nodiscard]] std::vector<char> selection_residency(std::span<const overlap_candidate> groups,
                                                    std::uint64_t budget_bytes) {
  std::vector<std::size_t> index;
  std::vector<selection_candidate> sel;
  for (std::size_t g = 0; g < groups.size(); ++g)
    if (groups[g].bytes > 0) {
      index.push_back(g);
      sel.push_back({groups[g].bytes});
    }
  std::vector<char> r(groups.size(), 0);
  for (std::size_t w : S{}.select(sel, budget_bytes)) r[index[w]] = 1;
  return r;
}

/// @brief The least budget (bisected to @p granularity_bytes) at which selector @p S's plan is
/// predicted within @p max_slowdown × all-resident with copies @p transfer_margin slower: what a
/// position-based selection needs, to compare with smallest_budget_within.
template <weight_selector S>
[[nodiscard]] std::uint64_t smallest_selection_budget_within(
    std::span<const overlap_candidate> groups, double max_slowdown, ring_shape ring = {},
    std::uint64_t granularity_bytes = 1024 * 1024, double transfer_margin = overlap_transfer_margin) {
  DDO_EXPECTS(max_slowdown >= 1.0 && max_slowdown < 1e6,
              "smallest_selection_budget_within: max_slowdown must be a factor >= 1, got " +
                  std::to_string(max_slowdown));
  std::uint64_t total = 0;
  std::vector<char> all(groups.size(), 1);
  std::vector<overlap_candidate> slower(groups.begin(), groups.end());
  for (auto& g : slower) {
    total += g.bytes;
    g.transfer_ms *= 1.0 + transfer_margin;
  }
  const double target = predict_residency(groups, all, ring).step_ms * max_slowdown + 1e-9;
  const auto meets = [&](std::uint64_t budget) {
    return predict_residency(slower, selection_residency<S>(groups, budget), ring).step_ms <= target;
  };
  const std::uint64_t step = std::max<std::uint64_t>(granularity_bytes, 1);
  if (meets(0)) return 0;
  std::uint64_t lo = 0, hi = (total + step - 1) / step;
  while (hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    (meets(mid * step) ? hi : lo) = mid;
  }
  return std::min(hi * step, total);
}

}  // namespace v0
}  // namespace ddo
