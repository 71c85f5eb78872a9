// SPDX-License-Identifier: Apache-2.0
// Class 7 of the reliability issue (correctness side; the timing is bench/plan): the spread
// selector's faster search gives the definition's answer — the largest k whose evenly spaced
// k-subset fits — checked against a brute-force reference on random candidate lists.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "ddo/plan/selectors.hpp"

namespace {
std::vector<std::size_t> reference_spread(const std::vector<ddo::selection_candidate>& c,
                                          std::uint64_t budget) {
  const std::size_t n = c.size();
  std::vector<char> taken(n, 0);
  std::uint64_t used = 0;
  for (std::size_t k = n; k >= 1; --k) {
    std::uint64_t sum = 0;
    bool fits = true;
    for (std::size_t j = 0; j < k && fits; ++j) {
      const auto b = c[ddo::spread_selector::position(j, k, n)].bytes;
      fits = b <= budget - sum;
      sum += fits ? b : 0;
    }
    if (!fits) continue;
    for (std::size_t j = 0; j < k; ++j) taken[ddo::spread_selector::position(j, k, n)] = 1;
    used = sum;
    break;
  }
  for (std::size_t i = 0; i < n; ++i)
    if (!taken[i] && c[i].bytes <= budget - used) {
      taken[i] = 1;
      used += c[i].bytes;
    }
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < n; ++i)
    if (taken[i]) out.push_back(i);
  return out;
}
}  // namespace

TEST_SUITE("reliability") {
  TEST_CASE("spread's pruned search agrees with the definition on random candidates") {
    std::mt19937_64 rng(4242);
    for (int round = 0; round < 400; ++round) {
      const std::size_t n = 1 + rng() % 300;
      std::vector<ddo::selection_candidate> c(n);
      std::uint64_t total = 0;
      const bool equal = round % 4 == 0;
      for (auto& x : c) {
        x.bytes = equal ? 64 : 1 + rng() % (round % 2 ? 1000 : 10);
        total += x.bytes;
      }
      const std::uint64_t budget = rng() % (total + 2);
      INFO("round " << round << " n " << n << " budget " << budget);
      CHECK(ddo::spread_selector{}.select(c, budget) == reference_spread(c, budget));
    }
  }

  TEST_CASE("spread over 200,000 equal candidates picks the evenly spaced subset at once") {
    std::vector<ddo::selection_candidate> c(200000);
    for (auto& x : c) x.bytes = 100;
    const auto picked = ddo::spread_selector{}.select(c, 100 * 1000);
    REQUIRE(picked.size() == 1000);
    CHECK(picked.front() == 0);
    CHECK(picked.back() == 199999);
  }
}
