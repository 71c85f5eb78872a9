// SPDX-License-Identifier: Apache-2.0
// The fault-injection suite over host_sim (its GPU twin runs over linear in tests/gpu).
#include <doctest/doctest.h>

#include "ddo/transport/fault_injection.hpp"
#include "ddo/transport/host_sim.hpp"
#include "reliability/fault_injection_suite.hpp"

static_assert(ddo::transport<ddo::fault_injection_transport<ddo::host_sim_transport>>);

namespace {
struct host_sim_traits {
  using transport_type = ddo::host_sim_transport;
  static std::string skip_reason() { return {}; }
  static transport_type make() { return transport_type{}; }
};
}  // namespace

TEST_SUITE("reliability") {
  TEST_CASE("every injected fault on host_sim is a clear error and leaves nothing behind") {
    ddo_test::fault_injection_suite<host_sim_traits>(1301);
  }

  TEST_CASE("the injector counts calls per point, fires once at the Nth and refuses the past") {
    ddo::fault_injector f;
    f.fail_nth(ddo::fault_point::allocate_device, 3);
    CHECK(f.hit(ddo::fault_point::allocate_device) == 0);
    CHECK(f.hit(ddo::fault_point::allocate_pinned) == 0);
    CHECK(f.hit(ddo::fault_point::allocate_device) == 0);
    CHECK(f.hit(ddo::fault_point::allocate_device) == 3);
    CHECK(f.hit(ddo::fault_point::allocate_device) == 0);
    CHECK(f.fired(ddo::fault_point::allocate_device) == 1);
    CHECK(f.calls(ddo::fault_point::allocate_device) == 4);
    CHECK_THROWS_AS(f.fail_nth(ddo::fault_point::allocate_device, 2), ddo::usage_error);
    f.fail_nth(ddo::fault_point::file_read, 1, {ddo::file_read_fault::kind::end_of_file, 0});
    CHECK(f.before_read("x", 0, 1).what == ddo::file_read_fault::kind::end_of_file);
    CHECK(f.before_read("x", 0, 1).what == ddo::file_read_fault::kind::none);
  }

  TEST_CASE("the wrapper forwards to the inner transport and keeps its accounting") {
    auto faults = std::make_shared<ddo::fault_injector>();
    ddo::fault_injection_transport t(ddo::host_sim_transport{}, faults);
    auto* d = t.allocate_device(1000);
    CHECK(t.upstream().device_bytes_in_use() == 1000);
    faults->fail_nth(ddo::fault_point::allocate_device, 2);
    CHECK_THROWS_WITH_AS((void)t.allocate_device(10),
                         doctest::Contains("allocate_device call #2"), ddo::out_of_memory);
    CHECK(t.upstream().device_bytes_in_use() == 1000);
    t.free_device(d, 1000);
    CHECK(t.upstream().device_bytes_in_use() == 0);
  }
}

TEST_SUITE("reliability") {
  TEST_CASE("file reads failing on the parallel read threads are clear errors and leave nothing") {
    ddo_test::parallel_read_fault_suite<host_sim_traits>(1409);
  }
}
