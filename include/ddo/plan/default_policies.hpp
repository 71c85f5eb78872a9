// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The default planning policies, declared: the types `ddo::offloader`'s policy list
/// names when the engine names none (runtime/policy_set.hpp).
///
/// Declared, not defined, so that a translation unit that runs an offloader from a ready plan
/// does not parse or instantiate the planner (docs/development.md, "What including ddo costs").
/// The TUs that plan include their definitions: plan/residency_planner.hpp,
/// plan/pin_selector.hpp, plan/by_profile_planner.hpp (the setup path and plan/planner.hpp do);
/// an engine naming a selection policy (`ddo::resident_selection<ddo::spread_selector>`)
/// includes plan/selectors.hpp.

#include <concepts>

#include "ddo/plan/concepts.hpp"

namespace ddo {
inline namespace v0 {

struct by_config_selection;  // plan/selectors.hpp

/// @brief A selection fixed at compile time (first_selector, spread_selector, largest_selector
/// or an engine's own weight_selector), or by_config_selection. Here, not in plan/selectors.hpp,
/// so that the planners can be declared without the selectors' bodies.
template <class S>
concept selection_choice = weight_selector<S> || std::same_as<S, by_config_selection>;

template <selection_choice Selection>
struct basic_residency_planner;  // plan/residency_planner.hpp

template <selection_choice Selection>
struct basic_pin_selector;  // plan/pin_selector.hpp

template <class Fallback>
struct by_profile_planner;  // plan/by_profile_planner.hpp

}  // namespace v0
}  // namespace ddo
