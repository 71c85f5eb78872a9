// SPDX-License-Identifier: Apache-2.0
#include "ddo/plan/smallest_cover.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace smallest_cover_test {

/// The fewest bytes any subset of @p sizes that leaves at most @p cap streaming keeps (every
/// subset: the sets here have at most 14 weights).
inline std::uint64_t least_kept(const std::vector<std::uint64_t>& sizes, std::uint64_t cap) {
  std::uint64_t total = 0;
  for (std::uint64_t b : sizes) total += b;
  std::uint64_t least = total;
  for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << sizes.size()); ++mask) {
    std::uint64_t kept = 0;
    for (std::size_t k = 0; k < sizes.size(); ++k)
      if (mask >> k & 1) kept += sizes[k];
    if (total - kept <= cap) least = std::min(least, kept);
  }
  return least;
}

}  // namespace smallest_cover_test

TEST_SUITE("plan") {
  TEST_CASE("smallest_cover: a block's two smaller weights, not its largest (seed 2027's cause)") {
    // A 5.88 GiB block of 3.92, 1.31 and 0.65 GiB weights at a 3.96 GiB slot: 1.92 GiB above it.
    // The smallest single weight that covers that is the 3.92 GiB one; the 1.31 and 0.65 GiB
    // weights cover it with 1.96 GiB kept.
    const std::uint64_t mib = 1024 * 1024;
    const std::vector<std::uint64_t> sizes{3920 * mib, 1310 * mib, 650 * mib};
    const auto c = ddo::smallest_cover(sizes, 3960 * mib);
    CHECK(c.kept == std::vector<std::size_t>{1, 2});
    CHECK(c.kept_bytes == 1960 * mib);
    CHECK(ddo::smallest_cover(sizes, 6000 * mib).kept.empty());
    CHECK(ddo::smallest_cover(sizes, 0).kept_bytes == 5880 * mib);
  }

  TEST_CASE("smallest_cover: the least bytes of every subset, deterministic") {
    std::mt19937_64 rng(38);
    for (int round = 0; round < 3000; ++round) {
      std::vector<std::uint64_t> sizes(rng() % 15);
      const std::uint64_t spread = 1 + rng() % 3 * 400;  // 1: all equal; else mixed sizes
      for (auto& b : sizes) b = 1 + rng() % spread;
      std::sort(sizes.begin(), sizes.end(), std::greater<>());
      std::uint64_t total = 0;
      for (std::uint64_t b : sizes) total += b;
      const std::uint64_t cap = total == 0 ? 0 : rng() % (total + 1);
      const auto c = ddo::smallest_cover(sizes, cap);
      INFO("round " << round << ", " << sizes.size() << " weights, cap " << cap);
      std::uint64_t kept = 0;
      for (std::size_t k : c.kept) kept += sizes.at(k);
      CHECK(kept == c.kept_bytes);
      CHECK(total - kept <= cap);
      CHECK(kept == smallest_cover_test::least_kept(sizes, cap));
      CHECK(ddo::smallest_cover(sizes, cap).kept == c.kept);
    }
  }

  TEST_CASE("smallest_cover: a group past the search's steps keeps no more than the greedy") {
    // 60 distinct weights: the search stops at smallest_cover_nodes; what it found still
    // streams at most the slot and keeps at most the greedy's bytes.
    std::vector<std::uint64_t> sizes;
    for (std::uint64_t k = 0; k < 60; ++k) sizes.push_back(1000003 - k * 7919);
    std::uint64_t total = 0;
    for (std::uint64_t b : sizes) total += b;
    const std::uint64_t cap = total / 2 + 12345;
    const auto c = ddo::smallest_cover(sizes, cap);
    CHECK(total - c.kept_bytes <= cap);
    std::uint64_t greedy_bytes = 0;
    const auto keep = ddo::detail::greedy_cover(sizes, cap, total);
    for (std::size_t k = 0; k < sizes.size(); ++k)
      if (keep[k]) greedy_bytes += sizes[k];
    CHECK(greedy_bytes != 0);
    CHECK(c.kept_bytes <= greedy_bytes);
  }
}
