// SPDX-License-Identifier: Apache-2.0
// Pinning on host_sim: packed blocks hold the weights' bytes, in-place page ranges are merged
// and registered once, and refused registrations fall back to staging (or fail setup).
#include <doctest/doctest.h>

#include <cstring>
#include <variant>

#include "ddo/memory/host_buffer.hpp"
#include "ddo/runtime/detail/pinning.hpp"
#include "ddo/transport/host_sim.hpp"
#include "runtime_fixtures.hpp"

using sim = ddo::host_sim_transport;

TEST_SUITE_BEGIN("runtime");

TEST_CASE("in-place page ranges cover every piece, whole pages, merged and sorted") {
  ddo::detail::group_layout l;
  l.groups.resize(2);
  std::vector<std::byte> mem(64 * 1024);
  const std::uintptr_t page = 4096;
  auto piece = [&](std::size_t off, std::size_t bytes) {
    ddo::detail::staged_piece p;
    p.host = mem.data() + off;
    p.bytes = bytes;
    return p;
  };
  l.groups[0].in_place = {piece(5000, 100), piece(100, 10)};
  l.groups[1].in_place = {piece(5100, 9000), piece(40000, 1)};
  const auto r = ddo::detail::in_place_page_ranges(l, page);
  const auto base = reinterpret_cast<std::uintptr_t>(mem.data());
  for (std::size_t i = 0; i < r.size(); ++i) {
    CHECK(r[i].begin % page == 0);
    CHECK(r[i].end % page == 0);
    if (i > 0) CHECK(r[i].begin > r[i - 1].end);  // merged: disjoint, not adjacent
  }
  for (const auto& gr : l.groups)
    for (const auto& p : gr.in_place) {
      const auto a = reinterpret_cast<std::uintptr_t>(p.host);
      bool inside = false;
      for (const auto& x : r) inside = inside || (a >= x.begin && a + p.bytes <= x.end);
      CHECK(inside);
    }
  // [100,110) and [5000,14100) touch pages 0..3 of mem when mem is page aligned; 40000 is apart
  CHECK(r.size() <= 3);
  CHECK(r.back().begin <= base + 40000);
}

TEST_CASE("packed blocks hold the pinned weights at their slot offsets, page-locked") {
  ddo_test::model_spec spec;
  spec.seed = 515;
  auto m = ddo_test::make_model(spec);
  sim t;
  ddo::runtime_options o;
  o.pin_workers = 2;
  auto l = ddo::detail::make_group_layout(m->table, m->plan, o);
  auto files = ddo::detail::open_source_files(m->table, l);
  ddo::detail::setup_meter meter;
  ddo::detail::group_pinning<sim> pinning;
  pinning.pin(t, l, m->table, m->plan, o, files, meter);
  std::uint64_t blocks = 0;
  for (const auto& gr : l.groups) {
    if (gr.pinned_bytes == 0) {
      CHECK_FALSE(gr.block);
      continue;
    }
    REQUIRE(gr.block);
    CHECK(gr.block->registered());
    CHECK_FALSE(gr.pinned_staged);
    blocks += gr.block->size();
    for (std::size_t i = 0; i < gr.weights.size(); ++i) {
      const std::size_t w = gr.weights[i];
      if (m->plan.decisions[w].where != ddo::placement::pinned_host) continue;
      CHECK(std::memcmp(gr.block->data() + gr.slot_offset[i], m->expected[w].data(),
                        m->expected[w].size()) == 0);
    }
  }
  CHECK(pinning.pinned_bytes() == blocks);
  CHECK(t.registered_bytes_in_use() == blocks);
  CHECK(pinning.fallback_bytes() == 0);
  for (auto& gr : l.groups) gr.block.reset();  // blocks unregister themselves
  pinning.release(t);
  CHECK(t.registered_bytes_in_use() == 0);
}

TEST_CASE("refused registration stages the block (fallback) or fails naming the group") {
  ddo_test::model_spec spec;
  spec.seed = 616;
  spec.where = [](std::size_t, std::size_t i) {
    return i % 2 == 0 ? ddo::placement::pinned_host : ddo::placement::gpu_resident;
  };
  auto m = ddo_test::make_model(spec);
  ddo::host_sim_options so;
  so.fail_host_registration = true;
  sim t(so);
  ddo::runtime_options o;
  auto l = ddo::detail::make_group_layout(m->table, m->plan, o);
  auto files = ddo::detail::open_source_files(m->table, l);
  for (const auto& gr : l.groups) CHECK(gr.staged.empty());
  ddo::detail::setup_meter meter;
  ddo::detail::group_pinning<sim> pinning;
  pinning.pin(t, l, m->table, m->plan, o, files, meter);
  CHECK(l.staging_needed);
  std::uint64_t planned_pinned = 0;
  for (const auto& gr : l.groups) {
    planned_pinned += gr.packed_weight_bytes;
    if (gr.pinned_bytes == 0) continue;
    CHECK(gr.pinned_staged);
    REQUIRE(gr.staged.size() == 1);
    CHECK(gr.staged[0].host == gr.block->data());
    CHECK(gr.bytes_by_source[static_cast<std::size_t>(ddo::transfer_source::pinned)] == 0);
  }
  CHECK(pinning.fallback_bytes() == planned_pinned);
  CHECK(pinning.pinned_bytes() == 0);
  auto strict = o;
  strict.allow_pin_fallback = false;
  auto l2 = ddo::detail::make_group_layout(m->table, m->plan, strict);
  ddo::detail::group_pinning<sim> failing;
  CHECK_THROWS_WITH_AS(failing.pin(t, l2, m->table, m->plan, strict, files, meter),
                       doctest::Contains("allow_pin_memory_fallback is false"), ddo::out_of_memory);
}

TEST_SUITE_END();
