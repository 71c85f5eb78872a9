// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The command-line types of the synthetic-model options shared by ddo-make-model and
/// ddo-run: ranges wide enough for any real model and narrow enough that the byte arithmetic
/// cannot overflow ("-1" is refused instead of wrapping to 4294967295); a model that is merely
/// too large for the disk is refused with the numbers before anything is written. Example code.

#include <cstdint>

#include "ddo/cli/bounded_integer.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

using blocks_option = bounded_integer<std::uint32_t, 1, 4096>;     ///< --blocks
using hidden_option = bounded_integer<std::uint32_t, 1, 65536>;    ///< --hidden
using mlp_ratio_option = bounded_integer<std::uint32_t, 1, 64>;    ///< --mlp-ratio
using shards_option = bounded_integer<std::uint32_t, 1, 1024>;     ///< --shards
using seed_option = bounded_integer<std::uint64_t>;                ///< --seed

}  // namespace runner
}  // namespace v0
}  // namespace ddo
