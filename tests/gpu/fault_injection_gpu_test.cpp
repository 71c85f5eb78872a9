// SPDX-License-Identifier: Apache-2.0
// The fault-injection suite (tests/reliability/fault_injection_suite.hpp) over the linear CUDA
// transport: the same faults as on host_sim, with real device memory, pinned memory and streams.
// Skips with a message where no CUDA device is usable.
#include <doctest/doctest.h>

#include "ddo/transport/fault_injection.hpp"
#include "ddo/transport/linear.hpp"
#include "gpu/gpu_support.hpp"
#include "reliability/fault_injection_suite.hpp"

static_assert(ddo::transport<ddo::fault_injection_transport<ddo::linear_transport>>);
static_assert(ddo::transport_with_thread_binding<ddo::fault_injection_transport<ddo::linear_transport>>);

namespace {
struct linear_fault_traits {
  using transport_type = ddo::linear_transport;
  static std::string skip_reason() { return ddo_test::gpu_skip_reason(); }
  static transport_type make() { return transport_type(ddo::linear_options{}); }
};
}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("every injected fault on linear is a clear error and leaves nothing behind") {
    ddo_test::fault_injection_suite<linear_fault_traits>(1302);
  }
  TEST_CASE("file reads failing on the parallel read threads are clear errors and leave nothing (linear)") {
    ddo_test::parallel_read_fault_suite<linear_fault_traits>(1410);
  }
}
