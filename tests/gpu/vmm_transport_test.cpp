// SPDX-License-Identifier: Apache-2.0
// The VMM conformance suite (tests/transport/vmm_conformance.hpp) on the CUDA VMM transport, with
// device memory sampled by cudaMemGetInfo: back to its starting level after teardown and after
// a setup failure. Skips with a message where no CUDA device (or no VMM support) is present.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "ddo/transport/vmm.hpp"
#include "gpu_support.hpp"
#include "vmm_support.hpp"
#include "transport/vmm_conformance.hpp"

namespace {

struct vmm_traits {
  using transport_type = ddo::vmm_transport;
  static std::string skip_reason() { return ddo_test::vmm_skip_reason(); }
  static transport_type make(const ddo::vmm_window_options& w) {
    ddo::vmm_options o;
    o.window = w;
    return transport_type(o);
  }
  static void delay(transport_type&, transport_type::stream_view s, int microseconds) {
    ddo_test::stall_stream(s.handle, static_cast<std::uintptr_t>(microseconds));
  }
  static std::size_t cycles() { return 10000; }
  /// Sampled device memory in use (total − free), so the driver's own view is what is checked.
  static std::uint64_t device_used(transport_type& t) {
    DDO_CUDA_TRY(cudaDeviceSynchronize());  // test-only: settle frees before sampling
    const auto info = ddo::query_device_memory(t.device());
    return info.total_bytes - info.free_bytes;
  }
  static std::uint64_t tolerance() { return 4 * ddo::mib; }
  static std::size_t live_handles(transport_type& t) { return t.live_handles(); }
  static std::size_t live_mappings(transport_type& t) { return t.vmm_physical_bytes() == 0 ? 0 : 1; }
};

}  // namespace

TEST_SUITE_BEGIN("gpu");

TEST_CASE_TEMPLATE_INVOKE(vmm_prefetch_readback, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_random_orders, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_compute_only, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_leak_cycles, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_setup_failure, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_refusals, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_uncovered_side_image, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_poison_released, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_not_ready, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_staging_from_plan, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_metrics, vmm_traits);
// The native route (vmm_fast_runtime): windows, retained sources, micro-cache, refusals.
TEST_CASE_TEMPLATE_INVOKE(vmm_native_readback, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_native_random_orders, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_native_setup_failure, vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_native_refusals, vmm_traits);

TEST_CASE("vmm: the driver's VMM support and granularity are probed") {
  const std::string skip = ddo_test::gpu_skip_reason();
  if (!skip.empty()) {
    MESSAGE("skipped: " << skip);
    return;
  }
  try {
    ddo::detail::cuda_vmm_driver d(0);
    CHECK(d.granularity() > 0);
    CHECK((64 * ddo::mib) % d.granularity() == 0);
  } catch (const ddo::usage_error& e) {
    MESSAGE("device without VMM, refused clearly: " << e.what());
    CHECK(std::string(e.what()).find("virtual-memory-management") != std::string::npos);
  }
}

TEST_SUITE_END();
