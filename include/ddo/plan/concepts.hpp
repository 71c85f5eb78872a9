// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The planning policies: weight selectors, residency planners and pin selectors.
///
/// Each policy opts in with a member type naming its tag (`selector_category`,
/// `planner_category`, `pin_selector_category`), so nothing models a concept by accident:
/// @code
/// struct my_planner {
///   using planner_category = ddo::residency_planner_tag;
///   ddo::residency_result plan_residency(const ddo::plan_context&) const;
/// };
/// static_assert(ddo::residency_planner<my_planner>);
/// @endcode

#include <concepts>
#include <cstdint>
#include <span>
#include <vector>

#include "ddo/plan/plan_context.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Opt-in tag of a weight selector.
struct weight_selector_tag {};
/// @brief Opt-in tag of a residency planner.
struct residency_planner_tag {};
/// @brief Opt-in tag of a pin selector.
struct pin_selector_tag {};

/// @brief Opt-in tag of by_config_selection (plan/selectors.hpp): the run-time choice.
struct by_config_selection_tag {};
/// @brief Opt-in tag of resident_selection<S> (plan/selectors.hpp), an offloader policy.
struct resident_selection_tag {};
/// @brief Opt-in tag of pin_selection<S> (plan/selectors.hpp), an offloader policy.
struct pin_selection_tag {};

/// @brief Tag instances, for the `_tag` convention.
inline constexpr weight_selector_tag weight_selector_v{};
inline constexpr residency_planner_tag residency_planner_v{};
inline constexpr pin_selector_tag pin_selector_v{};

/// @brief Picks the winners of a byte budget among candidates given in execution order.
///
/// `s.select(candidates, budget)` returns the indices of the winners, ascending, whose bytes sum
/// to at most `budget`; the same input always gives the same output.
template <class S>
concept weight_selector = requires {
  typename S::selector_category;
}
&&std::same_as<typename S::selector_category, weight_selector_tag>&& requires(
    const S& s, std::span<const selection_candidate> candidates, std::uint64_t budget) {
  { s.select(candidates, budget) } -> std::same_as<std::vector<std::size_t>>;
};

/// @brief Decides which weights stay on the GPU for the whole run, and the resident budget.
///
/// `p.plan_residency(context)` returns one residency entry per weight of `context.table`.
template <class P>
concept residency_planner = requires {
  typename P::planner_category;
}
&&std::same_as<typename P::planner_category, residency_planner_tag>&& requires(
    const P& p, const plan_context& context) {
  { p.plan_residency(context) } -> std::same_as<residency_result>;
};

/// @brief Decides which streamed weights get page-locked host memory (and where the rest
/// stream from), and the pin budget.
///
/// `s.select_pinned(context, residency)` returns one placement per weight: gpu_resident exactly
/// where `residency` says resident, else pinned_host, pageable_host or file.
template <class S>
concept pin_selector = requires {
  typename S::pin_selector_category;
}
&&std::same_as<typename S::pin_selector_category, pin_selector_tag>&& requires(
    const S& s, const plan_context& context, const residency_result& residency) {
  { s.select_pinned(context, residency) } -> std::same_as<pin_result>;
};

/// @brief An offloader policy fixing the residency selection (resident_selection<S>).
template <class P>
concept resident_selection_policy = requires { typename P::selection_policy_category; } &&
    std::same_as<typename P::selection_policy_category, resident_selection_tag>;

/// @brief An offloader policy fixing the pin selection (pin_selection<S>).
template <class P>
concept pin_selection_policy = requires { typename P::selection_policy_category; } &&
    std::same_as<typename P::selection_policy_category, pin_selection_tag>;

}  // namespace v0
}  // namespace ddo
