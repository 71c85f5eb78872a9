// SPDX-License-Identifier: Apache-2.0
#include "ddo/core/format_bytes.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <random>
#include <string>

TEST_SUITE("core") {
  TEST_CASE("format_bytes picks the largest binary unit with fixed decimals") {
    CHECK(ddo::format_bytes(0) == "0 B");
    CHECK(ddo::format_bytes(17) == "17 B");
    CHECK(ddo::format_bytes(12 * ddo::kib) == "12.0 KiB");
    CHECK(ddo::format_bytes(216 * ddo::mib) == "216.00 MiB");
    CHECK(ddo::format_bytes(3 * ddo::gib / 2) == "1.50 GiB");
  }

  TEST_CASE("format_bytes_exact keeps the exact count beside the readable one") {
    std::mt19937_64 rng(std::random_device{}());
    const std::uint64_t bytes = ddo::gib + rng() % (64 * ddo::gib);
    CAPTURE(bytes);
    CHECK(ddo::format_bytes_exact(bytes) ==
          std::to_string(bytes) + " bytes (" + ddo::format_bytes(bytes) + ")");
    CHECK(ddo::format_bytes_exact(100) == "100 bytes");
  }

  TEST_CASE("format_decimal_gb uses 1e9 bytes per GB") {
    std::mt19937_64 rng(std::random_device{}());
    const std::uint64_t bytes = rng() % (1ull << 40);
    char expected[64];
    std::snprintf(expected, sizeof expected, "%.2f GB", static_cast<double>(bytes) / 1e9);
    CHECK(ddo::format_decimal_gb(bytes) == expected);
    CHECK(ddo::format_decimal_gb(1'610'612'736) == "1.61 GB");
  }

  TEST_CASE("format_size: a fixed unit (GB or GiB), the number alone for table cells") {
    CHECK(ddo::format_size(3 * ddo::gib / 2, ddo::size_unit::gib) == "1.50 GiB");
    CHECK(ddo::format_size(1'610'612'736, ddo::size_unit::gb, 1) == "1.6 GB");
    CHECK(ddo::format_size_number(3 * ddo::gib / 2, ddo::size_unit::gib) == "1.50");
    CHECK(ddo::format_size_number(2'500'000'000, ddo::size_unit::gb) == "2.50");
    CHECK(ddo::format_size(ddo::mib, ddo::size_unit::gib) == "0.00 GiB");  // fixed unit, no switch
  }
}
