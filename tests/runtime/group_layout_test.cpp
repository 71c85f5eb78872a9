// SPDX-License-Identifier: Apache-2.0
// Group layout and the runtime's budget check: pure host logic, no transport.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "ddo/runtime/detail/budget_check.hpp"
#include "ddo/runtime/detail/group_layout.hpp"
#include "ddo/runtime/device_footprint.hpp"
#include "runtime_fixtures.hpp"

using ddo::placement;

TEST_SUITE_BEGIN("runtime");

TEST_CASE("layout puts packed pinned weights first, then in-place, then staged, each aligned") {
  for (std::uint32_t seed : {3u, 17u, 29u}) {
    for (bool in_place : {false, true}) {
      ddo_test::model_spec spec;
      spec.seed = seed;
      spec.groups = 7;
      auto m = ddo_test::make_model(spec);
      ddo::runtime_options o;
      o.alignment = 512;
      o.pin_in_place = in_place;
      const auto l = ddo::detail::make_group_layout(m->table, m->plan, o);
      REQUIRE(l.groups.size() == spec.groups);
      std::uint64_t largest = 0;
      for (const auto& gr : l.groups) {
        std::vector<std::size_t> streamed;
        std::uint64_t last_pass = 0, last_offset = 0;
        for (std::size_t i = 0; i < gr.weights.size(); ++i) {
          const std::size_t w = gr.weights[i];
          const auto where = m->plan.decisions[w].where;
          if (where == placement::gpu_resident) {
            CHECK(gr.slot_offset[i] == ddo::detail::not_streamed);
            CHECK(l.resident_offset[w] % o.alignment == 0);
            continue;
          }
          streamed.push_back(w);
          CHECK(gr.slot_offset[i] % o.alignment == 0);
          CHECK(gr.slot_offset[i] + m->table[w].bytes <= gr.slot_bytes);
          const bool packed = ddo::detail::group_layout::packed(m->table, o, w);
          const std::uint64_t pass = where != placement::pinned_host ? 2 : (packed ? 0 : 1);
          if (pass == 0) CHECK(gr.slot_offset[i] + m->table[w].bytes <= gr.pinned_bytes);
          else CHECK(gr.slot_offset[i] >= gr.pinned_bytes);
          // within one pass, plan order; passes in order
          if (pass == last_pass) CHECK(gr.slot_offset[i] >= last_offset);
          last_pass = std::max(last_pass, pass);
          last_offset = gr.slot_offset[i];
        }
        CHECK(gr.slot_bytes == ddo::slot_bytes_for(m->table, streamed, o.alignment));
        largest = std::max(largest, gr.slot_bytes);
        std::uint64_t by_source = 0;
        for (auto b : gr.bytes_by_source) by_source += b;
        std::uint64_t expected = 0;
        for (std::size_t w : streamed) expected += m->table[w].bytes;
        CHECK(by_source == expected);
        for (std::size_t k = 1; k < gr.staged.size(); ++k)
          CHECK(gr.staged[k - 1].slot_offset < gr.staged[k].slot_offset);
        if (!in_place) CHECK(gr.in_place.empty());
      }
      CHECK(l.slot_bytes == largest);
      CHECK(l.slot_count == std::min<std::size_t>(o.slot_count, l.streamed_order.size()));
      CHECK(ddo::detail::runtime_device_bytes(l) ==
            l.resident_bytes + ddo::ring_bytes_for(l.slot_bytes, l.slot_count));
    }
  }
}

TEST_CASE("layout refuses plans that do not fit the table, naming the weight or option") {
  ddo_test::model_spec spec;
  auto m = ddo_test::make_model(spec);
  ddo::runtime_options o;
  auto twice = m->plan;
  twice.groups[1].weights.push_back(twice.groups[0].weights[0]);
  try {
    (void)ddo::detail::make_group_layout(m->table, twice, o);
    FAIL("a weight in two groups was accepted");
  } catch (const ddo::usage_error& e) {
    CHECK(std::string(e.what()).find("two groups") != std::string::npos);
  }
  auto orphan = m->plan;
  const std::size_t w = orphan.groups[0].weights[0];
  orphan.groups[0].weights.erase(orphan.groups[0].weights.begin());
  orphan.decisions[w].where = placement::pinned_host;
  CHECK_THROWS_WITH_AS((void)ddo::detail::make_group_layout(m->table, orphan, o),
                       doctest::Contains("belongs to no group"), ddo::usage_error);
  ddo::runtime_options bad = o;
  bad.alignment = 384;
  CHECK_THROWS_WITH_AS((void)ddo::detail::make_group_layout(m->table, m->plan, bad),
                       doctest::Contains("power of two"), ddo::usage_error);
  bad = o;
  bad.staging_buffer_bytes = 100;
  CHECK_THROWS_WITH_AS((void)ddo::detail::make_group_layout(m->table, m->plan, bad),
                       doctest::Contains("staging_buffer_bytes"), ddo::usage_error);
}

TEST_CASE("the budget check uses resident + ring_bytes_for and reports the numbers") {
  ddo_test::model_spec spec;
  spec.seed = 77;
  auto m = ddo_test::make_model(spec);
  ddo::runtime_options o;
  const auto l = ddo::detail::make_group_layout(m->table, m->plan, o);
  const std::uint64_t need = l.resident_bytes + ddo::ring_bytes_for(l.slot_bytes, l.slot_count);
  CHECK_NOTHROW(ddo::detail::check_runtime_budgets(l, m->plan, o, need));
  try {
    ddo::detail::check_runtime_budgets(l, m->plan, o, need - 1);
    FAIL("one byte short was accepted");
  } catch (const ddo::out_of_memory& e) {
    CHECK(e.requested_bytes() == need);
    CHECK(e.available_bytes() == need - 1);
  }
  o.device_budget_bytes = need - 1;
  CHECK_THROWS_AS(ddo::detail::check_runtime_budgets(l, m->plan, o, need), ddo::out_of_memory);
  o.device_budget_bytes = need;
  CHECK_NOTHROW(ddo::detail::check_runtime_budgets(l, m->plan, o, need));
  o.pinned_budget_bytes = l.pinned_weight_bytes() - 1;
  CHECK_THROWS_AS(ddo::detail::check_runtime_budgets(l, m->plan, o, need), ddo::out_of_memory);
}

TEST_SUITE_END();
