// SPDX-License-Identifier: Apache-2.0
#pragma once
// The smallest emulated card on which a streamed step stays within a slowdown of the
// all-resident step, found by measurement (ddo-flux --smallest-card): a bisection over a grid of
// card sizes, each trial a fresh offloader on that card and a few measured steps. Kept apart
// from the GPU code so that the search itself is tested on the CPU (tests/runner/flux_test.cpp).
// Example code (examples/runner/).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddo/core/error.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// One measured card.
struct card_trial {
  std::uint64_t card_bytes = 0;
  double step_ms = 0.0;       ///< the streamed step's median on it
  double ratio = 0.0;         ///< step_ms over the all-resident step
  bool within = false;        ///< ratio <= the slowdown allowed
  double predicted_ms = 0.0;  ///< what a capacity profile predicts for the plan (0: none)
};

/// What the search found.
struct card_search {
  std::uint64_t smallest_bytes = 0;  ///< the smallest card within (0: none, not even the largest)
  card_trial at;                     ///< the trial on it (on the largest card when none was)
  std::vector<card_trial> trials;    ///< in the order measured
};

/// The grid the search runs on: cards first, first + step, ..., last (bytes, multiples of
/// @p step): @p smallest_bytes (what the card must hold besides resident weights: the context,
/// the engine's reserve, the ring, ddo's reserve) rounded up, to @p largest_bytes (that plus
/// every weight resident) rounded up.
struct card_grid {
  std::uint64_t step = 0;
  std::uint64_t first = 0, last = 0;
  [[nodiscard]] std::uint64_t cards() const { return (last - first) / step + 1; }
};

/// @p step_bytes > 0 (ddo-flux --card-step-gb, checked there), @p smallest_bytes <= @p
/// largest_bytes.
[[nodiscard]] inline card_grid make_card_grid(std::uint64_t smallest_bytes,
                                              std::uint64_t largest_bytes,
                                              std::uint64_t step_bytes) {
  DDO_EXPECTS(step_bytes > 0 && smallest_bytes <= largest_bytes,
              "make_card_grid: a step > 0 and smallest <= largest");
  const auto up = [&](std::uint64_t bytes) {
    return std::max((bytes + step_bytes - 1) / step_bytes, std::uint64_t{1}) * step_bytes;
  };
  return {step_bytes, up(smallest_bytes), up(largest_bytes)};
}

/// Bisects @p grid for the smallest card on which @p measure(card_bytes) (a card_trial) is
/// within. The largest card (every weight resident) is taken to be within without measuring
/// it unless the search ends there; the predicate is assumed monotone (a larger card keeps more
/// resident), so ceil(log2(cards)) trials find it, plus one when it ends on the largest card.
/// A measurement noisier than the slowdown's margin can make the answer one step off either way.
template <class Measure>
[[nodiscard]] card_search smallest_card_within(const card_grid& grid, Measure&& measure) {
  DDO_EXPECTS(grid.step > 0 && grid.first <= grid.last && grid.first % grid.step == 0 &&
                  grid.last % grid.step == 0,
              "smallest_card_within: a card grid from make_card_grid");
  card_search out;
  // Invariant: index lo fails (−1: below the grid), index hi is within (the largest card is
  // assumed to be until measured).
  std::int64_t lo = -1, hi = static_cast<std::int64_t>(grid.cards()) - 1;
  std::optional<card_trial> at_hi;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    card_trial t = measure(grid.first + static_cast<std::uint64_t>(mid) * grid.step);
    out.trials.push_back(t);
    if (t.within) {
      hi = mid;
      at_hi = t;
    } else {
      lo = mid;
    }
  }
  if (!at_hi) {  // ended on the largest card: measure it too
    at_hi = measure(grid.first + static_cast<std::uint64_t>(hi) * grid.step);
    out.trials.push_back(*at_hi);
  }
  out.at = *at_hi;
  out.smallest_bytes = at_hi->within ? at_hi->card_bytes : 0;
  return out;
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
