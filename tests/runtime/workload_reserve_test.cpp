// SPDX-License-Identifier: Apache-2.0
// The engine's reserve per workload size (issue 41, item 2): workload_reserve's reading (stated
// sizes, the line between two, refusal outside) and measure_workload_reserve over host_sim's
// ledger (the engine's peak at each size, what was in use before each size not counted).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ddo/setup/workload_reserve.hpp"
#include "ddo/transport/host_sim.hpp"

namespace workload_reserve_test {

/// The message of what @p f throws as @p E ("" when it throws nothing).
template <class E, class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace workload_reserve_test

TEST_SUITE("runtime") {
  TEST_CASE("workload_reserve: stated sizes exactly, the line between two rounded up") {
    const ddo::workload_reserve r("tokens", {{16384, 4000}, {4096, 1000}, {1, 0}, {3, 1}});
    CHECK(r.unit() == "tokens");
    REQUIRE(r.points().size() == 4);
    CHECK(r.points().front().size == 1);  // sorted
    CHECK(r.points().back().size == 16384);
    CHECK(r.bytes_at(4096) == 1000);
    CHECK(r.bytes_at(16384) == 4000);
    CHECK(r.bytes_at(10240) == 2500);  // halfway
    CHECK(r.bytes_at(4097) == 1001);   // 1000.24..., rounded up: never below the line
    CHECK(r.bytes_at(2) == 1);         // 0.5 rounded up
    CHECK(r.bytes_at(1) == 0);
    const ddo::workload_reserve one("frames", {{49, 7ull << 30}});
    CHECK(one.bytes_at(49) == (7ull << 30));
    CHECK(one.covers(49));
    CHECK_FALSE(one.covers(50));
  }

  TEST_CASE("workload_reserve: a size outside the stated ones is refused, naming the range") {
    using workload_reserve_test::thrown;
    const ddo::workload_reserve r("tokens", {{4096, 1000}, {16384, 4000}});
    for (const std::int64_t bad : {std::int64_t{4095}, std::int64_t{16385}, std::int64_t{0}}) {
      const auto what = thrown<ddo::config_error>([&] { (void)r.bytes_at(bad); });
      CHECK(what.find("4096..16384 tokens, not for " + std::to_string(bad)) != std::string::npos);
      CHECK(what.find("measure_workload_reserve") != std::string::npos);
    }
    const ddo::workload_reserve one("frames", {{49, 1}});
    CHECK(thrown<ddo::config_error>([&] {
            (void)one.bytes_at(121);
          }).find("known for 49 frames, not for 121") != std::string::npos);
  }

  TEST_CASE("workload_reserve: no sizes, a size below 1 or one stated twice is refused") {
    using workload_reserve_test::thrown;
    using P = std::vector<ddo::reserve_point>;
    CHECK(thrown<ddo::usage_error>([] {
            ddo::workload_reserve("tokens", P{});
          }).find("no sizes given") != std::string::npos);
    CHECK(thrown<ddo::usage_error>([] {
            ddo::workload_reserve("batch", P{{0, 1}, {2, 2}});
          }).find("size 0 is not a size") != std::string::npos);
    CHECK(thrown<ddo::usage_error>([] {
            ddo::workload_reserve("batch", P{{2, 1}, {2, 2}});
          }).find("size 2 stated twice") != std::string::npos);
    CHECK(thrown<ddo::usage_error>([] {
            ddo::workload_reserve("", P{{2, 1}});
          }).find("unit") != std::string::npos);
  }

  TEST_CASE("measure_workload_reserve: host_sim's ledger sees the forward's peak at each size") {
    ddo::host_sim_transport sim({.device_capacity_bytes = 64 * ddo::mib});
    // Something already on the device (ddo's own bytes, the engine's weights): not the reserve.
    std::byte* held = sim.allocate_device(3 * ddo::mib);
    ddo::ledger_peak_probe probe(sim);
    static_assert(ddo::device_peak_probe<decltype(probe)>);
    std::vector<std::int64_t> seen;
    // The forward: activations of 1 KiB a unit for the whole forward, a workspace of 512 B a
    // unit for a moment (the peak), all freed before it returns.
    const auto forward = [&](std::int64_t size) {
      seen.push_back(size);
      const auto n = static_cast<std::size_t>(size);
      std::byte* act = sim.allocate_device(1024 * n);
      std::byte* work = sim.allocate_device(512 * n);
      sim.free_device(work, 512 * n);
      sim.free_device(act, 1024 * n);
    };
    const std::vector<std::int64_t> sizes{2048, 64, 1024, 64};
    const auto r = ddo::measure_workload_reserve("tokens", sizes, probe, forward);
    CHECK(seen == std::vector<std::int64_t>{64, 1024, 2048});  // each once, smallest first
    REQUIRE(r.points().size() == 3);
    for (const auto& p : r.points()) CHECK(p.bytes == 1536 * static_cast<std::uint64_t>(p.size));
    CHECK(r.bytes_at(1536) == 1536 * 1536);
    CHECK(sim.device_bytes_in_use() == 3 * ddo::mib);
    sim.free_device(held, 3 * ddo::mib);
    CHECK_THROWS_AS(
        (void)ddo::measure_workload_reserve("tokens", std::vector<std::int64_t>{}, probe, forward),
        ddo::usage_error);
  }
}
