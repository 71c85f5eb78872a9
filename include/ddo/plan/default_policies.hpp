// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The default planning policies, declared: the types `ddo::offloader`'s policy list
/// names when the engine names none (runtime/policy_set.hpp).
///
/// Declared, not defined, so that a translation unit that runs an offloader from a ready plan
/// does not parse or instantiate the planner (docs/development.md, "What including ddo costs").
/// The TUs that plan include their definitions: plan/residency_planner.hpp,
/// plan/pin_selector.hpp, plan/by_profile_planner.hpp (the setup path and plan/planner.hpp do).

#include "ddo/plan/selectors.hpp"

namespace ddo {
inline namespace v0 {

template <selection_choice Selection>
struct basic_residency_planner;  // plan/residency_planner.hpp

template <selection_choice Selection>
struct basic_pin_selector;  // plan/pin_selector.hpp

template <class Fallback>
struct by_profile_planner;  // plan/by_profile_planner.hpp

}  // namespace v0
}  // namespace ddo
