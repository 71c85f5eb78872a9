// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The slot ring's policy (not API): which group occupies which slot, which slot a miss
/// evicts and which groups prefetch loads next. Host logic only, shared by the runtime
/// (runtime/detail/slot_ring.hpp, which adds the slots' device side) and the step predictor
/// (plan/step_predictor.hpp, which replays it with times) — one policy, so a prediction follows
/// what the runtime does.
///
/// Eviction: the slot whose occupant is needed latest (cyclic distance from the group the
/// engine is expected to acquire next; an empty slot counts as never needed) among slots no
/// lease holds. Prefetch keeps the next prefetch_depth streamed groups (cyclically: the next
/// step's first groups follow the last) loaded, never evicting a held slot or one holding a
/// group of that window. Every call is allocation-free (scratch sized once in reset()).

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

namespace ddo {
inline namespace v0 {
namespace detail {

class ring_schedule {
 public:
  /// occupant() of a slot that holds nothing.
  static constexpr std::size_t no_group = std::numeric_limits<std::size_t>::max();

  /// @param group_count groups of the plan; @p streamed_order the streamed ones, plan order.
  /// Reuses its buffers: the step predictor resets one schedule per placement it predicts.
  void reset(std::size_t group_count, std::size_t slot_count,
             const std::vector<std::size_t>& streamed_order, std::size_t prefetch_depth);

  [[nodiscard]] std::size_t slot_count() const noexcept { return occupant_.size(); }
  /// Slot holding group @p g, or -1.
  [[nodiscard]] int slot_of(std::size_t g) const noexcept { return where_[g]; }
  /// Group in slot @p s, or no_group.
  [[nodiscard]] std::size_t occupant(std::size_t s) const noexcept { return occupant_[s]; }
  [[nodiscard]] int leases(std::size_t s) const noexcept { return leases_[s]; }
  void hold(std::size_t s) noexcept { ++leases_[s]; }
  void drop(std::size_t s) noexcept { --leases_[s]; }

  /// The engine acquired @p g: it is expected to acquire the group after it next.
  void acquired(std::size_t g) noexcept { next_expected_ = (g + 1) % group_count_; }
  /// Group @p g now occupies slot @p s (its previous occupant, if any, is evicted).
  void assign(std::size_t g, std::size_t s) noexcept;
  /// Slot @p s holds nothing (a load into it failed part-way).
  void vacate(std::size_t s) noexcept {
    if (occupant_[s] != no_group) where_[occupant_[s]] = -1;
    occupant_[s] = no_group;
  }

  /// The slot a miss on @p g loads into (no lease holds it), or -1 when every slot is held.
  [[nodiscard]] int victim_for_miss(std::size_t g) const noexcept;

  /// Prefetch decisions: calls load(g, s) for each window group not loaded, with the slot it
  /// evicts; load must assign(g, s). Returns false when a window group found no slot to evict
  /// (a deferred prefetch), true otherwise.
  template <class Load>
  bool prefetch(Load&& load);

 private:
  /// Cyclic distance of @p g from the group expected after @p expected_next.
  [[nodiscard]] std::size_t distance(std::size_t g, std::size_t expected) const noexcept {
    return (g + group_count_ - expected) % group_count_;
  }
  [[nodiscard]] int farthest_unprotected(std::size_t expected) const noexcept;

  std::size_t group_count_ = 1;
  std::size_t prefetch_depth_ = 0;
  std::size_t next_expected_ = 0;
  std::vector<std::size_t> streamed_order_;
  std::vector<std::size_t> streamed_pos_;  // first streamed group at or after g (position)
  std::vector<int> where_;                 // per group
  std::vector<std::size_t> occupant_;      // per slot
  std::vector<int> leases_;                // per slot
  mutable std::vector<char> protect_;      // per slot, scratch
};

// --- implementation -----------------------------------------------------------------------------

inline void ring_schedule::reset(std::size_t group_count, std::size_t slot_count,
                                 const std::vector<std::size_t>& streamed_order,
                                 std::size_t prefetch_depth) {
  group_count_ = std::max<std::size_t>(group_count, 1);
  prefetch_depth_ = std::min(prefetch_depth, slot_count);
  next_expected_ = 0;
  streamed_order_.assign(streamed_order.begin(), streamed_order.end());
  streamed_pos_.assign(group_count_, 0);
  if (!streamed_order_.empty()) {
    std::size_t pos = 0;
    for (std::size_t g = 0; g < group_count_; ++g) {
      while (pos < streamed_order_.size() && streamed_order_[pos] < g) ++pos;
      streamed_pos_[g] = pos % streamed_order_.size();
    }
  }
  where_.assign(group_count_, -1);
  occupant_.assign(slot_count, no_group);
  leases_.assign(slot_count, 0);
  protect_.assign(slot_count, 0);
}

inline void ring_schedule::assign(std::size_t g, std::size_t s) noexcept {
  if (occupant_[s] != no_group) where_[occupant_[s]] = -1;
  occupant_[s] = g;
  where_[g] = static_cast<int>(s);
}

inline int ring_schedule::farthest_unprotected(std::size_t expected) const noexcept {
  int best = -1;
  std::size_t best_distance = 0;
  for (std::size_t s = 0; s < occupant_.size(); ++s) {
    if (protect_[s]) continue;
    const std::size_t d = occupant_[s] == no_group ? group_count_ : distance(occupant_[s], expected);
    if (best < 0 || d > best_distance) {
      best = static_cast<int>(s);
      best_distance = d;
    }
  }
  return best;
}

inline int ring_schedule::victim_for_miss(std::size_t g) const noexcept {
  for (std::size_t s = 0; s < occupant_.size(); ++s) protect_[s] = leases_[s] > 0;
  return farthest_unprotected((g + 1) % group_count_);
}

template <class Load>
bool ring_schedule::prefetch(Load&& load) {
  if (prefetch_depth_ == 0 || streamed_order_.empty()) return true;
  for (std::size_t s = 0; s < occupant_.size(); ++s) protect_[s] = leases_[s] > 0;
  const std::size_t count = streamed_order_.size();
  const std::size_t first = streamed_pos_[next_expected_];
  const std::size_t window = std::min(prefetch_depth_, count);
  for (std::size_t k = 0; k < window; ++k) {
    const std::size_t g = streamed_order_[(first + k) % count];
    if (where_[g] >= 0) {
      protect_[static_cast<std::size_t>(where_[g])] = 1;
      continue;
    }
    const int victim = farthest_unprotected(next_expected_);
    if (victim < 0) return false;
    const auto s = static_cast<std::size_t>(victim);
    load(g, s);
    protect_[s] = 1;
  }
  return true;
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
