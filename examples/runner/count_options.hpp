// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The command-line types of ddo-run's and ddo-flux's counts and sizes: each read through
/// ddo::bounded_integer (the one checked conversion of ddo/cli/bounded_integer.hpp), so "-1",
/// "2147483648" or "1e3" is refused with the option's name and range instead of wrapping, and
/// ranges narrow enough that the arithmetic on them cannot overflow: the step loop's
/// warm-up + steps fits an int (issue 37 item 5: `--steps 2147483647` wrapped it and ran no
/// step). Example code.

#include <climits>
#include <cstdint>

#include "ddo/cli/bounded_integer.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

using steps_option = bounded_integer<int, 1, 1'000'000>;    ///< --steps
using warmup_option = bounded_integer<int, 0, 100>;         ///< --warmup
using images_option = bounded_integer<int, 1, 100'000>;     ///< --images
using devices_option = bounded_integer<int, 1, 64>;         ///< --devices
using tokens_option = bounded_integer<std::int64_t, 1, std::int64_t{1} << 20>;  ///< --tokens

static_assert(static_cast<long long>(steps_option::max) + warmup_option::max <= INT_MAX,
              "the step loop counts warm-up + steps in an int");
static_assert(static_cast<long long>(steps_option::max) * (warmup_option::max + 1) <= INT_MAX,
              "--pipeline runs steps per image in an int");

}  // namespace runner
}  // namespace v0
}  // namespace ddo
