// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The selectors `first`, `spread` and `largest`, shared by the residency budget and the
/// pin budget.
///
/// A selector gets candidates in execution order (index 0 runs first) and a byte budget, and
/// returns the winners' indices in ascending order. Every selector is deterministic, never
/// exceeds the budget, and takes every candidate when all of them fit.
///
/// - first_selector: walks the candidates in execution order and takes each one that still fits
///   in what is left of the budget (first fit: a candidate too large for the rest is skipped
///   and the walk goes on). Ties: none possible, the order is total.
/// - largest_selector: walks the candidates by size, largest first, taking each that fits (first
///   fit). Ties between equal sizes: the earlier in execution order first.
/// - spread_selector: evenly spaced over execution order. With n candidates, the k-subset is
///   positions p_j = round(j·(n−1)/(k−1)), j = 0..k−1 (halves round up; k = 1 gives position 0),
///   so k ≥ 2 always includes the first and the last candidate. The selector takes the largest k
///   (from n down) whose subset fits the budget; any budget left after that is filled first fit
///   in execution order from the candidates not yet taken. The search starts at the largest k
///   whose k smallest candidates fit (no larger k can) and is exact up to a work cap of
///   8n + 4,000,000 additions (milliseconds; every list of up to 2,000 candidates is exact); past it (very many irregular candidates) the rest of the range is bisected,
///   which gives the same k whenever the subset sums grow with k. Cost: O(n log n). For equal-sized candidates the filling
///   never adds anything, so the result is exactly the evenly spaced k-subset.

#include <algorithm>
#include <concepts>
#include <string>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/enum_names.hpp"
#include "ddo/plan/concepts.hpp"
#include "ddo/plan/default_policies.hpp"
#include "ddo/plan/plan_context.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {
/// First fit over @p order (candidate indices), starting from @p taken / @p used.
inline void first_fit(std::span<const selection_candidate> candidates,
                      std::span<const std::size_t> order, std::uint64_t budget,
                      std::vector<char>& taken, std::uint64_t& used) {
  for (std::size_t i : order) {
    if (taken[i]) continue;
    if (candidates[i].bytes <= budget - used) {
      taken[i] = 1;
      used += candidates[i].bytes;
    }
  }
}

[[nodiscard]] inline std::vector<std::size_t> taken_indices(const std::vector<char>& taken) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < taken.size(); ++i)
    if (taken[i]) out.push_back(i);
  return out;
}
}  // namespace detail

/// @brief Candidates in execution order, first fit.
struct first_selector {
  using selector_category = weight_selector_tag;
  static constexpr selection kind = selection::first;  ///< the config value it stands for
  [[nodiscard]] std::vector<std::size_t> select(std::span<const selection_candidate> candidates,
                                                std::uint64_t budget) const {
    std::vector<std::size_t> order(candidates.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::vector<char> taken(candidates.size(), 0);
    std::uint64_t used = 0;
    detail::first_fit(candidates, order, budget, taken, used);
    return detail::taken_indices(taken);
  }
};
static_assert(weight_selector<first_selector>);

/// @brief Largest candidates first (ties: execution order), first fit.
struct largest_selector {
  using selector_category = weight_selector_tag;
  static constexpr selection kind = selection::largest;  ///< the config value it stands for
  [[nodiscard]] std::vector<std::size_t> select(std::span<const selection_candidate> candidates,
                                                std::uint64_t budget) const {
    std::vector<std::size_t> order(candidates.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    // Ties keep execution order: compare (bytes desc, index asc), a strict total order.
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return candidates[a].bytes != candidates[b].bytes ? candidates[a].bytes > candidates[b].bytes
                                                        : a < b;
    });
    std::vector<std::size_t> chosen;
    std::uint64_t used = 0;
    for (std::size_t i : order)
      if (candidates[i].bytes <= budget - used) {
        chosen.push_back(i);
        used += candidates[i].bytes;
      }
    std::sort(chosen.begin(), chosen.end());
    return chosen;
  }
};
static_assert(weight_selector<largest_selector>);

/// @brief Evenly spaced over execution order (see this header's description).
struct spread_selector {
  using selector_category = weight_selector_tag;
  static constexpr selection kind = selection::spread;  ///< the config value it stands for

  /// @brief Position j of the evenly spaced k-subset of n candidates (k ≥ 1, j < k ≤ n).
  [[nodiscard]] static constexpr std::size_t position(std::size_t j, std::size_t k,
                                                      std::size_t n) noexcept {
    if (k <= 1) return 0;
    return (2 * j * (n - 1) + (k - 1)) / (2 * (k - 1));
  }

  [[nodiscard]] std::vector<std::size_t> select(std::span<const selection_candidate> candidates,
                                                std::uint64_t budget) const {
    const std::size_t n = candidates.size();
    std::vector<char> taken(n, 0);
    std::uint64_t used = 0;
    // The k-subset's sum is at least the sum of the k smallest candidates: every k above the
    // largest k whose k smallest fit cannot fit, so the downward search starts there instead of
    // at n (checking each k costs up to k additions: starting at n made a large model's plan
    // quadratic — 100,000 equal tensors took seconds). For equal sizes the first k checked fits.
    std::vector<std::uint64_t> sizes(n);
    for (std::size_t i = 0; i < n; ++i) sizes[i] = candidates[i].bytes;
    std::sort(sizes.begin(), sizes.end());
    std::size_t k_max = 0;
    for (std::uint64_t sum = 0; k_max < n && sizes[k_max] <= budget - sum; ++k_max)
      sum += sizes[k_max];
    // Sum of the k-subset, or nullopt when it exceeds the budget (stops adding there).
    std::uint64_t work = 0;
    const auto subset_sum = [&](std::size_t k) -> std::optional<std::uint64_t> {
      std::uint64_t sum = 0;
      for (std::size_t j = 0; j < k; ++j) {
        ++work;
        const std::uint64_t b = candidates[position(j, k, n)].bytes;
        if (b > budget - sum) return std::nullopt;
        sum += b;
      }
      return sum;
    };
    std::size_t chosen_k = 0;
    std::uint64_t chosen_sum = 0;
    // Exact downward search while it is cheap; on irregular sizes where many k between k_max
    // and the answer would each need a long sum, after work_cap additions the rest of the range
    // is bisected instead (a k whose subset fits while k + 1's does not): deterministic, and
    // the same answer whenever the subset sums grow with k (equal sizes, repeating blocks).
    const std::uint64_t work_cap = 8 * static_cast<std::uint64_t>(n) + 4000000;
    std::size_t k = k_max;
    for (; k >= 1 && work < work_cap; --k)
      if (const auto sum = subset_sum(k)) {
        chosen_k = k;
        chosen_sum = *sum;
        break;
      }
    if (chosen_k == 0 && k >= 1) {
      std::size_t lo = 0, hi = k;  // invariant: lo fits (0 trivially), everything tried above hi did not
      while (lo < hi) {
        const std::size_t mid = lo + (hi - lo + 1) / 2;
        if (const auto sum = subset_sum(mid)) {
          lo = mid;
          chosen_sum = *sum;
        } else {
          hi = mid - 1;
        }
      }
      chosen_k = lo;
      if (chosen_k > 0) chosen_sum = *subset_sum(chosen_k);
    }
    if (chosen_k > 0) {
      for (std::size_t j = 0; j < chosen_k; ++j) taken[position(j, chosen_k, n)] = 1;
      used = chosen_sum;
    }
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    detail::first_fit(candidates, order, budget, taken, used);
    return detail::taken_indices(taken);
  }
};
static_assert(weight_selector<spread_selector>);

/// @brief Runs the selector a config names (`resident_module_selection`,
/// `pin_weight_selection`).
[[nodiscard]] inline std::vector<std::size_t> select_candidates(
    selection which, std::span<const selection_candidate> candidates, std::uint64_t budget) {
  switch (which) {
    case selection::first:
      return first_selector{}.select(candidates, budget);
    case selection::largest:
      return largest_selector{}.select(candidates, budget);
    case selection::spread:
      break;
  }
  return spread_selector{}.select(candidates, budget);
}

/// @brief "first", "spread" or "largest" (named so as not to collide with the config area's
/// enum printers).
[[nodiscard]] constexpr std::string_view selection_name(selection which) noexcept {
  return enum_name(which);
}

/// @brief The selection a config field names, chosen at run time: the default of the planning
/// policies, so `resident_module_selection` / `pin_weight_selection` keep working.
struct by_config_selection {
  using selector_category = by_config_selection_tag;
};

/// @brief A selection fixed at compile time (first_selector, spread_selector, largest_selector
/// or an engine's own weight_selector), or by_config_selection.

/// @brief Policy argument of ddo::offloader: the residency budget's winners are picked by @p S
/// whatever `resident_module_selection` says (e.g. `ddo::resident_selection<ddo::spread_selector>`).
template <class S>
struct resident_selection {
  static_assert(weight_selector<S>,
                "ddo::resident_selection<S>: S must model ddo::weight_selector (first_selector, "
                "spread_selector, largest_selector or your own; see ddo/plan/concepts.hpp)");
  using selection_policy_category = resident_selection_tag;
  using selector = S;
};

/// @brief Policy argument of ddo::offloader: the pin budget's winners are picked by @p S whatever
/// `pin_weight_selection` says (e.g. `ddo::pin_selection<ddo::first_selector>`).
template <class S>
struct pin_selection {
  static_assert(weight_selector<S>,
                "ddo::pin_selection<S>: S must model ddo::weight_selector (first_selector, "
                "spread_selector, largest_selector or your own; see ddo/plan/concepts.hpp)");
  using selection_policy_category = pin_selection_tag;
  using selector = S;
};

/// @brief What a selection run picked, and the name the plan reports for the selection.
struct selection_outcome {
  std::vector<std::size_t> winners;
  std::string_view name;
};

/// @brief The name the plan reports for selection @p S ("first", "spread", "largest", "custom");
/// for by_config_selection, the name of @p configured.
template <selection_choice S>
[[nodiscard]] constexpr std::string_view selection_label(selection configured) noexcept {
  if constexpr (std::same_as<S, by_config_selection>) {
    return selection_name(configured);
  } else if constexpr (requires { S::kind; }) {
    return selection_name(S::kind);
  } else {
    return "custom";
  }
}

/// @brief Runs @p S (or, for by_config_selection, the selector @p configured names) over
/// @p candidates under @p budget.
template <selection_choice S>
[[nodiscard]] selection_outcome run_selection(selection configured,
                                              std::span<const selection_candidate> candidates,
                                              std::uint64_t budget) {
  if constexpr (std::same_as<S, by_config_selection>)
    return {select_candidates(configured, candidates, budget), selection_label<S>(configured)};
  else
    return {S{}.select(candidates, budget), selection_label<S>(configured)};
}

}  // namespace v0
}  // namespace ddo
