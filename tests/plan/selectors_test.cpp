// SPDX-License-Identifier: Apache-2.0
#include "ddo/plan/selectors.hpp"

#include <doctest/doctest.h>

#include <random>
#include <vector>

namespace {

std::vector<ddo::selection_candidate> random_candidates(std::mt19937_64& rng, std::size_t n) {
  std::vector<ddo::selection_candidate> c(n);
  for (auto& x : c) x.bytes = 1 + rng() % 1000;
  return c;
}

std::vector<ddo::selection_candidate> equal(std::size_t n, std::uint64_t bytes) {
  return std::vector<ddo::selection_candidate>(n, ddo::selection_candidate{bytes});
}

}  // namespace

TEST_SUITE("plan") {
  TEST_CASE_TEMPLATE_DEFINE("selector invariants: budget kept, deterministic, maximal", S,
                            selector_invariants) {
    static_assert(ddo::weight_selector<S>);
    std::mt19937_64 rng(1234);
    const S selector{};
    for (int round = 0; round < 400; ++round) {
      const std::size_t n = rng() % 40;
      const auto candidates = random_candidates(rng, n);
      std::uint64_t total = 0;
      for (const auto& c : candidates) total += c.bytes;
      const std::uint64_t budget = total == 0 ? rng() % 10 : rng() % (total + total / 4 + 1);
      const auto chosen = selector.select(candidates, budget);
      // Ascending, unique, in range, within budget.
      std::uint64_t used = 0;
      for (std::size_t k = 0; k < chosen.size(); ++k) {
        REQUIRE(chosen[k] < n);
        if (k > 0) REQUIRE(chosen[k - 1] < chosen[k]);
        used += candidates[chosen[k]].bytes;
      }
      CHECK(used <= budget);
      // Deterministic.
      CHECK(selector.select(candidates, budget) == chosen);
      // Maximal: nothing left out would still fit.
      std::vector<char> taken(n, 0);
      for (auto i : chosen) taken[i] = 1;
      for (std::size_t i = 0; i < n; ++i)
        if (!taken[i]) CHECK(candidates[i].bytes > budget - used);
      // Everything when everything fits; nothing for a zero budget.
      if (budget >= total) CHECK(chosen.size() == n);
      CHECK(selector.select(candidates, 0).empty());
    }
  }
  TEST_CASE_TEMPLATE_INVOKE(selector_invariants, ddo::first_selector, ddo::spread_selector,
                            ddo::largest_selector);

  TEST_CASE("first takes candidates in execution order and skips one that does not fit") {
    const std::vector<ddo::selection_candidate> c = {{4}, {4}, {9}, {1}, {4}};
    CHECK(ddo::first_selector{}.select(c, 12) == std::vector<std::size_t>{0, 1, 3});
    CHECK(ddo::first_selector{}.select(equal(24, 10), 35) == std::vector<std::size_t>{0, 1, 2});
  }

  TEST_CASE("largest takes the biggest first and breaks ties by execution order") {
    const std::vector<ddo::selection_candidate> c = {{3}, {7}, {5}, {7}, {2}};
    CHECK(ddo::largest_selector{}.select(c, 14) == std::vector<std::size_t>{1, 3});
    CHECK(ddo::largest_selector{}.select(c, 16) == std::vector<std::size_t>{1, 3, 4});
    CHECK(ddo::largest_selector{}.select(equal(6, 5), 10) == std::vector<std::size_t>{0, 1});
  }

  TEST_CASE("spread selection keeps first and last group resident, evenly spaced between") {
    CHECK(ddo::spread_selector{}.select(equal(24, 10), 30) == std::vector<std::size_t>{0, 12, 23});
    CHECK(ddo::spread_selector{}.select(equal(24, 10), 60) ==
          std::vector<std::size_t>{0, 5, 9, 14, 18, 23});
    CHECK(ddo::spread_selector{}.select(equal(10, 1), 4) == std::vector<std::size_t>{0, 3, 6, 9});
    CHECK(ddo::spread_selector{}.select(equal(10, 1), 2) == std::vector<std::size_t>{0, 9});
    CHECK(ddo::spread_selector{}.select(equal(10, 1), 1) == std::vector<std::size_t>{0});
  }

  TEST_CASE("spread positions are strictly increasing for every k up to n") {
    for (std::size_t n = 1; n < 60; ++n)
      for (std::size_t k = 1; k <= n; ++k) {
        CHECK(ddo::spread_selector::position(0, k, n) == 0);
        if (k >= 2) CHECK(ddo::spread_selector::position(k - 1, k, n) == n - 1);
        for (std::size_t j = 1; j < k; ++j)
          REQUIRE(ddo::spread_selector::position(j - 1, k, n) <
                  ddo::spread_selector::position(j, k, n));
      }
  }

  TEST_CASE("spread fills budget left after the evenly spaced pick in execution order") {
    // k=3 ({0,2,4}: 28 bytes) does not fit 21; k=2 ({0,4}: 20 bytes) does; the byte left goes to
    // the first candidate that fits (index 1).
    const std::vector<ddo::selection_candidate> c = {{10}, {1}, {8}, {9}, {10}};
    CHECK(ddo::spread_selector{}.select(c, 21) == std::vector<std::size_t>{0, 1, 4});
    CHECK(ddo::spread_selector{}.select(c, 28) == std::vector<std::size_t>{0, 2, 4});
  }

  TEST_CASE("select_candidates dispatches on the config's selection") {
    const std::vector<ddo::selection_candidate> c = {{1}, {2}, {3}, {4}};
    CHECK(ddo::select_candidates(ddo::selection::first, c, 3) == std::vector<std::size_t>{0, 1});
    CHECK(ddo::select_candidates(ddo::selection::largest, c, 4) == std::vector<std::size_t>{3});
    CHECK(ddo::select_candidates(ddo::selection::spread, c, 5) == std::vector<std::size_t>{0, 3});
    CHECK(ddo::selection_name(ddo::selection::largest) == "largest");
  }

  TEST_CASE("types without the opt-in tag or with the wrong signature are not selectors") {
    struct no_tag {
      std::vector<std::size_t> select(std::span<const ddo::selection_candidate>,
                                      std::uint64_t) const;
    };
    struct wrong_tag {
      using selector_category = ddo::pin_selector_tag;
      std::vector<std::size_t> select(std::span<const ddo::selection_candidate>,
                                      std::uint64_t) const;
    };
    struct wrong_return {
      using selector_category = ddo::weight_selector_tag;
      std::vector<int> select(std::span<const ddo::selection_candidate>, std::uint64_t) const;
    };
    static_assert(!ddo::weight_selector<no_tag>);
    static_assert(!ddo::weight_selector<wrong_tag>);
    static_assert(!ddo::weight_selector<wrong_return>);
    CHECK(ddo::weight_selector<ddo::spread_selector>);
  }
}
