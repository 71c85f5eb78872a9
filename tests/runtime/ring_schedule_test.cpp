// SPDX-License-Identifier: Apache-2.0
// The slot ring's policy: eviction and prefetch decisions, host logic only.
#include <doctest/doctest.h>

#include <random>
#include <set>
#include <vector>

#include "ddo/runtime/detail/slot_ring.hpp"

using ddo::detail::no_group;
using ddo::detail::ring_schedule;

TEST_SUITE_BEGIN("runtime");

TEST_CASE("prefetch fills the ring with the next groups, cyclically, skipping resident ones") {
  ring_schedule r;
  // groups 0..5, group 2 is not streamed
  r.reset(6, 3, {0, 1, 3, 4, 5}, 8);
  std::vector<std::pair<std::size_t, std::size_t>> loads;
  auto load = [&](std::size_t g, std::size_t s) {
    loads.emplace_back(g, s);
    r.assign(g, s);
  };
  CHECK(r.prefetch(load));
  REQUIRE(loads.size() == 3);
  CHECK(loads[0].first == 0);
  CHECK(loads[1].first == 1);
  CHECK(loads[2].first == 3);
  loads.clear();
  r.acquired(4);  // the engine jumped to 4: expects 5, then 0, 1
  CHECK(r.prefetch(load));
  std::set<std::size_t> loaded;
  for (std::size_t s = 0; s < r.slot_count(); ++s) loaded.insert(r.occupant(s));
  CHECK(loaded == std::set<std::size_t>{5, 0, 1});
  CHECK(loads.size() == 1);  // only 5 was missing; 3 (needed latest) was evicted
  CHECK(loads[0].first == 5);
  CHECK(r.slot_of(3) == -1);
}

TEST_CASE("a held slot is never evicted, and a full ring defers prefetch") {
  ring_schedule r;
  r.reset(4, 2, {0, 1, 2, 3}, 2);
  auto load = [&](std::size_t g, std::size_t s) { r.assign(g, s); };
  CHECK(r.prefetch(load));
  const int s0 = r.slot_of(0), s1 = r.slot_of(1);
  REQUIRE(s0 >= 0);
  REQUIRE(s1 >= 0);
  r.hold(static_cast<std::size_t>(s0));
  r.hold(static_cast<std::size_t>(s1));
  CHECK(r.victim_for_miss(2) == -1);  // every slot held
  r.acquired(1);                      // expects 2 and 3: no slot to evict
  CHECK_FALSE(r.prefetch(load));
  r.drop(static_cast<std::size_t>(s0));
  CHECK(r.victim_for_miss(2) == s0);
  CHECK_FALSE(r.prefetch(load));  // 2 goes into the free slot; 3 still finds none
  CHECK(r.slot_of(2) == s0);
  CHECK(r.slot_of(3) == -1);
  CHECK(r.slot_of(1) == s1);  // still held
}

TEST_CASE("random schedules keep the ring's invariants") {
  std::mt19937 rng(4242);
  for (int trial = 0; trial < 50; ++trial) {
    const std::size_t groups = 2 + rng() % 10;
    std::vector<std::size_t> streamed;
    for (std::size_t g = 0; g < groups; ++g)
      if (rng() % 4 != 0) streamed.push_back(g);
    if (streamed.empty()) streamed.push_back(0);
    const std::size_t slots = 1 + rng() % std::min<std::size_t>(4, streamed.size());
    ring_schedule r;
    r.reset(groups, slots, streamed, 1 + rng() % 5);
    std::vector<int> held(slots, 0);
    auto load = [&](std::size_t g, std::size_t s) {
      CHECK(held[s] == 0);  // never into a held slot
      CHECK(r.slot_of(g) == -1);
      r.assign(g, s);
    };
    for (int op = 0; op < 200; ++op) {
      const std::size_t g = streamed[rng() % streamed.size()];
      int s = r.slot_of(g);
      if (s < 0) {
        s = r.victim_for_miss(g);
        if (s < 0) {
          for (int h : held) CHECK(h > 0);
        } else {
          load(g, static_cast<std::size_t>(s));
        }
      }
      if (s >= 0 && rng() % 3 == 0) {
        r.hold(static_cast<std::size_t>(s));
        ++held[static_cast<std::size_t>(s)];
      }
      r.acquired(g);
      (void)r.prefetch(load);
      for (std::size_t k = 0; k < slots; ++k) {
        if (held[k] > 0 && rng() % 2 == 0) {
          r.drop(k);
          --held[k];
        }
        CHECK(r.leases(k) == held[k]);
        const std::size_t occ = r.occupant(k);
        if (occ != no_group) CHECK(r.slot_of(occ) == static_cast<int>(k));
      }
    }
  }
}

TEST_SUITE_END();
