// SPDX-License-Identifier: Apache-2.0
#include "ddo/core/units.hpp"

#include <doctest/doctest.h>

#include <limits>

TEST_SUITE("core") {
  TEST_CASE("gib_to_bytes follows the reference's GiB meaning of _gb and saturates") {
    CHECK(ddo::gib_to_bytes(1.0) == 1073741824ull);
    CHECK(ddo::gib_to_bytes(0.625) == 671088640ull);
    CHECK(ddo::gib_to_bytes(0.0) == 0);
    CHECK(ddo::gib_to_bytes(-3.0) == 0);
    CHECK(ddo::gib_to_bytes(std::numeric_limits<double>::quiet_NaN()) == 0);
    CHECK(ddo::gib_to_bytes(1e30) == std::numeric_limits<std::uint64_t>::max());
    CHECK(ddo::bytes_to_gib(ddo::gib) == doctest::Approx(1.0));
  }
  TEST_CASE("round_up rounds to the next multiple") {
    CHECK(ddo::round_up(0, 4096) == 0);
    CHECK(ddo::round_up(1, 4096) == 4096);
    CHECK(ddo::round_up(4096, 4096) == 4096);
    CHECK(ddo::round_up(4097, 2 * ddo::mib) == 2 * ddo::mib);
  }
}
