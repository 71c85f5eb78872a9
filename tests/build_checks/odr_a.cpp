// SPDX-License-Identifier: Apache-2.0
// One of two translation units that include the umbrella header: the ODR check links them into
// one program, which fails if any non-template function in a header is not inline.
#include "ddo/ddo.hpp"

#include <cstdint>

std::uint64_t odr_from_a() { return ddo::gib_to_bytes(1.0) + ddo::round_up(3, 4); }
