// SPDX-License-Identifier: Apache-2.0
// host_buffer (page-aligned host memory) and pinned_weight_cache (the user-owned cache of
// packed, page-locked groups).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "ddo/memory/host_buffer.hpp"
#include "ddo/memory/pinned_weight_cache.hpp"
#include "ddo/transport/host_sim.hpp"

TEST_SUITE_BEGIN("memory");

TEST_CASE("host_buffer is page-aligned, rounded to pages, and movable") {
  const auto page = ddo::host_page_size();
  ddo::host_buffer a(page + 1);
  CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % page == 0);
  CHECK(a.size() == 2 * page);
  std::memset(a.data(), 0x5A, a.size());
  ddo::host_buffer b = std::move(a);
  CHECK(a.data() == nullptr);
  CHECK(a.size() == 0);
  CHECK(b.data()[2 * page - 1] == std::byte{0x5A});
  ddo::host_buffer empty(0);
  CHECK(empty.data() == nullptr);
}

TEST_CASE("host_buffer reports an impossible allocation as out_of_memory on the host tier") {
  try {
    ddo::host_buffer huge(std::uint64_t{1} << 62);
    FAIL("a 4 EiB mapping succeeded");
  } catch (const ddo::out_of_memory& e) {
    CHECK(e.tier() == ddo::memory_tier::host);
    CHECK(e.requested_bytes() >= (std::uint64_t{1} << 62));
  }
}

TEST_CASE("a pinned block unregisters itself before its memory goes") {
  ddo::host_sim_transport sim;
  {
    auto block = std::make_shared<ddo::pinned_block>(10000);
    CHECK_FALSE(block->registered());
    std::byte* p = block->data();
    REQUIRE(sim.register_host(p, block->size()));
    block->set_registered([sim, p]() mutable { sim.unregister_host(p); });
    CHECK(block->registered());
    CHECK(sim.registered_bytes_in_use() == block->size());
  }
  CHECK(sim.registered_bytes_in_use() == 0);
}

TEST_CASE("the pinned-weight cache keeps blocks alive until cleared and counts their bytes") {
  ddo::host_sim_transport sim;
  ddo::pinned_weight_cache cache;
  std::weak_ptr<ddo::pinned_block> watch;
  {
    auto block = std::make_shared<ddo::pinned_block>(5000);
    std::byte* p = block->data();
    REQUIRE(sim.register_host(p, block->size()));
    block->set_registered([sim, p]() mutable { sim.unregister_host(p); });
    watch = block;
    cache.insert("ns\x1fkey", block);
  }
  CHECK(cache.size() == 1);
  CHECK(cache.bytes() == ddo::host_page_size() * ((5000 + ddo::host_page_size() - 1) / ddo::host_page_size()));
  CHECK(cache.find("ns\x1fkey") != nullptr);
  CHECK(cache.find("other\x1fkey") == nullptr);
  CHECK_FALSE(watch.expired());
  cache.clear();
  CHECK(watch.expired());
  CHECK(sim.registered_bytes_in_use() == 0);
}

TEST_CASE(
    "ranges of a shared pinned block keep it alive, follow its registration and count it once") {
  ddo::host_sim_transport sim;
  ddo::pinned_weight_cache cache;
  std::weak_ptr<ddo::pinned_block> watch;
  {
    auto block = std::make_shared<ddo::pinned_block>(3000);
    watch = block;
    auto a = std::make_shared<ddo::pinned_block>(block, 0, 256);
    auto b = std::make_shared<ddo::pinned_block>(block, 256, 100);
    CHECK(b->data() == block->data() + 256);
    CHECK(b->size() == 100);
    CHECK(&b->mapping() == block.get());
    CHECK_FALSE(b->registered());
    std::byte* p = block->data();
    REQUIRE(sim.register_host(p, block->size()));
    block->set_registered([sim, p]() mutable { sim.unregister_host(p); });
    CHECK(a->registered());
    CHECK(b->registered());
    // A range is registered through its block; one outside the block is refused.
    CHECK_THROWS_AS(b->set_registered([] {}), ddo::usage_error);
    CHECK_THROWS_AS(ddo::pinned_block(block, block->size() - 8, 16), ddo::usage_error);
    CHECK_THROWS_AS(ddo::pinned_block(nullptr, 0, 0), ddo::usage_error);
    const std::string ns = "ns\x1f";
    cache.insert(ns + "a", a);
    cache.insert(ns + "b", b);
  }
  CHECK_FALSE(watch.expired());  // the ranges hold their block
  CHECK(cache.size() == 2);
  CHECK(cache.bytes() == ddo::host_page_size());  // one page mapped, counted once
  CHECK(sim.registered_bytes_in_use() == cache.bytes());
  cache.clear();
  CHECK(watch.expired());
  CHECK(sim.registered_bytes_in_use() == 0);
}

TEST_SUITE_END();
