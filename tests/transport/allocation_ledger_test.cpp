// SPDX-License-Identifier: Apache-2.0
// The allocation ledger every transport accounts in: counts, peaks, leaks and misuse.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/transport/allocation_ledger.hpp"
#include "ddo/transport/host_sim.hpp"

using ddo::ledger_kind;

TEST_SUITE_BEGIN("transport");

TEST_CASE("the ledger counts bytes, peaks and live allocations per kind") {
  ddo::allocation_ledger ledger;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::uint64_t> size(1, 1 << 20);
  std::vector<std::vector<std::byte>> blocks;
  std::uint64_t total = 0, peak = 0;
  for (int i = 0; i < 16; ++i) {
    blocks.emplace_back(size(rng));
    ledger.add(ledger_kind::device, blocks.back().data(), blocks.back().size(), "test");
    total += blocks.back().size();
    peak = total;
  }
  CHECK(ledger.in_use(ledger_kind::device) == total);
  CHECK(ledger.peak(ledger_kind::device) == peak);
  CHECK(ledger.in_use(ledger_kind::pinned) == 0);
  for (int i = 0; i < 8; ++i) {
    CHECK(ledger.remove(ledger_kind::device, blocks[i].data(), blocks[i].size(), "test") ==
          blocks[i].size());
    total -= blocks[i].size();
  }
  const auto c = ledger.counts(ledger_kind::device);
  CHECK(c.in_use == total);
  CHECK(c.peak == peak);
  CHECK(c.allocations == 16);
  CHECK(c.frees == 8);
  CHECK(c.live() == 8);
  CHECK(c.bytes_allocated - c.bytes_freed == c.in_use);
  ledger.reset_peak(ledger_kind::device);
  CHECK(ledger.peak(ledger_kind::device) == total);
  // The second half: a registration freed by pointer alone (unregister_host takes no size).
  for (int i = 8; i < 16; ++i)
    CHECK(ledger.remove(ledger_kind::device, blocks[i].data(), 0, "test") == blocks[i].size());
  CHECK(ledger.counts(ledger_kind::device).live() == 0);
  CHECK(ledger.in_use(ledger_kind::device) == 0);
}

TEST_CASE("the ledger answers range questions and refuses misuse") {
  ddo::allocation_ledger ledger;
  std::vector<std::byte> a(4096), b(64);
  ledger.add(ledger_kind::pinned, a.data(), a.size(), "test");
  CHECK(ledger.contains(ledger_kind::pinned, a.data() + 100, 3996));
  CHECK_FALSE(ledger.contains(ledger_kind::pinned, a.data() + 100, 3997));
  CHECK_FALSE(ledger.contains(ledger_kind::device, a.data(), 1));
  CHECK(ledger.overlaps(ledger_kind::pinned, a.data() + 4095, 10));
  CHECK_FALSE(ledger.overlaps(ledger_kind::pinned, b.data(), b.size()));
  CHECK_THROWS_AS(ledger.add(ledger_kind::pinned, a.data() + 8, 8, "test"), ddo::usage_error);
  CHECK_THROWS_AS(ledger.remove(ledger_kind::pinned, b.data(), 64, "test"), ddo::usage_error);
  CHECK_THROWS_AS(ledger.remove(ledger_kind::pinned, a.data(), 17, "test"), ddo::usage_error);
  CHECK_THROWS_AS(ledger.remove(ledger_kind::device, a.data(), 4096, "test"), ddo::usage_error);
  CHECK(ledger.in_use(ledger_kind::pinned) == 4096);  // failed calls change nothing
  ledger.remove(ledger_kind::pinned, a.data(), 4096, "test");
  CHECK(ledger.counts(ledger_kind::pinned).live() == 0);
}

TEST_CASE("the ledger stays exact under concurrent allocations and frees") {
  ddo::allocation_ledger ledger;
  constexpr int threads = 4, per_thread = 200;
  std::vector<std::vector<std::byte>> mem(threads * per_thread);
  for (std::size_t i = 0; i < mem.size(); ++i) mem[i].resize(16 + i % 97);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        auto& m = mem[static_cast<std::size_t>(t * per_thread + i)];
        ledger.add(ledger_kind::registered, m.data(), m.size(), "test");
        if (i % 2 == 0) ledger.remove(ledger_kind::registered, m.data(), 0, "test");
      }
    });
  for (auto& th : pool) th.join();
  std::uint64_t expected = 0;
  for (int t = 0; t < threads; ++t)
    for (int i = 1; i < per_thread; i += 2) expected += mem[static_cast<std::size_t>(t * per_thread + i)].size();
  const auto c = ledger.counts(ledger_kind::registered);
  CHECK(c.in_use == expected);
  CHECK(c.allocations == threads * per_thread);
  CHECK(c.frees == threads * per_thread / 2);
  CHECK(c.peak >= expected);
}

TEST_CASE("host_sim accounts in its ledger: a run's leaks show as live allocations") {
  ddo::host_sim_transport t;
  auto* d = t.allocate_device(1 << 16);
  auto* p = t.allocate_pinned(1 << 12);
  std::vector<std::byte> host(1 << 14);
  REQUIRE(t.register_host(host.data(), host.size()));
  const auto& ledger = t.ledger();
  CHECK(ledger.counts(ledger_kind::device).live() == 1);
  CHECK(t.pinned_bytes_in_use() == (1 << 12) + (1 << 14));
  auto copy = t;  // copies share the account
  copy.free_device(d, 1 << 16);
  copy.free_pinned(p, 1 << 12);
  copy.unregister_host(host.data());
  for (auto k : {ledger_kind::device, ledger_kind::pinned, ledger_kind::registered}) {
    CHECK(ledger.counts(k).live() == 0);
    CHECK(ledger.in_use(k) == 0);
  }
  CHECK(ledger.peak(ledger_kind::device) == (1 << 16));
  CHECK(t.peak_device_bytes() == (1 << 16));
}

TEST_SUITE_END();
