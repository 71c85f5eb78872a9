// SPDX-License-Identifier: Apache-2.0
// detail::transport_adaptor: every adaptor models exactly its upstream's capabilities plus its
// own, forwards to the upstream it holds, and host_sim_device() finds the host_sim under a chain.
#include <doctest/doctest.h>

#include <cstddef>

#include "ddo/transport/fault_injection.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/host_sim_vmm.hpp"
#include "ddo/transport/nvme.hpp"

namespace transport_adaptor_test {

using ddo::fault_injection_transport;
using ddo::host_sim_transport;
using ddo::host_sim_vmm_transport;
using ddo::nvme_transport;

/// The capabilities @p T models, as one bit each (compared between an adaptor and its upstream).
template <class T>
constexpr unsigned capabilities() {
  return (ddo::transport_with_thread_binding<T> ? 1u : 0u) |
         (ddo::transport_with_slot_binding<T> ? 2u : 0u) |
         (ddo::transport_with_file_reads<T> ? 4u : 0u) |
         (ddo::transport_with_batched_file_reads<T> ? 8u : 0u) |
         (ddo::transport_with_file_staging<T> ? 16u : 0u) |
         (ddo::transport_with_ledger<T> ? 32u : 0u) |
         (ddo::transport_with_stable_addresses<T> ? 64u : 0u) |
         (ddo::transport_with_window_sizing<T> ? 128u : 0u) |
         (ddo::transport_with_graph_streaming<T> ? 256u : 0u) |
         (ddo::transport_with_simulated_device<T> ? 512u : 0u);
}
constexpr unsigned file_route = 4u | 8u | 16u | 128u;  // what nvme_transport adds

// Fault injection adds nothing and drops nothing.
static_assert(capabilities<fault_injection_transport<host_sim_transport>>() ==
              capabilities<host_sim_transport>());
static_assert(capabilities<fault_injection_transport<host_sim_vmm_transport>>() ==
              capabilities<host_sim_vmm_transport>());
static_assert(capabilities<fault_injection_transport<nvme_transport<host_sim_vmm_transport>>>() ==
              capabilities<nvme_transport<host_sim_vmm_transport>>());
// The file route adds file staging (and window sizing) to whatever it feeds.
static_assert(capabilities<nvme_transport<host_sim_transport>>() ==
              (capabilities<host_sim_transport>() | file_route));
static_assert(capabilities<nvme_transport<host_sim_vmm_transport>>() ==
              (capabilities<host_sim_vmm_transport>() | file_route));
// host_sim's VMM mode adds the stable-address window to host_sim.
static_assert(capabilities<host_sim_vmm_transport>() ==
              (capabilities<host_sim_transport>() | 64u | 128u));
static_assert(ddo::transport_with_simulated_device<nvme_transport<host_sim_vmm_transport>>);

TEST_CASE("an adaptor forwards to the upstream it holds; host_sim_device finds the bottom") {
  fault_injection_transport<nvme_transport<host_sim_vmm_transport>> t(
      nvme_transport<host_sim_vmm_transport>{});
  host_sim_transport& sim = ddo::host_sim_device(t);
  CHECK(&sim == &t.upstream().upstream().upstream());
  CHECK(t.name() == "fault_injection");
  CHECK(t.upstream().name() == "nvme");
  CHECK(t.upstream().upstream().name() == "host_sim_vmm");

  // A device allocation through the chain lands in the host_sim's ledger, and is seen (the
  // forwarded accounting) at every level.
  std::byte* p = t.allocate_device(4096);
  CHECK(sim.device_bytes_in_use() == 4096);
  CHECK(t.ledger().in_use(ddo::ledger_kind::device) == 4096);
  // A fault at the top fails there; the upstream is untouched.
  t.faults().fail_nth(ddo::fault_point::allocate_device, 2);
  CHECK_THROWS_AS((void)t.allocate_device(4096), ddo::out_of_memory);
  CHECK(sim.device_bytes_in_use() == 4096);
  t.free_device(p, 4096);
  CHECK(sim.device_bytes_in_use() == 0);

  // The stand-in engine's work goes to the host_sim at the bottom, on the adaptor's streams.
  auto s = t.make_stream();
  int ran = 0;
  sim.enqueue(t.view(s), [&ran] { ++ran; });
  t.synchronize(t.view(s));
  CHECK(ran == 1);
}

}  // namespace transport_adaptor_test
