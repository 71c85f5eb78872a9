// SPDX-License-Identifier: Apache-2.0
// The transport's allocation ledger seen through an offloader's lifetime: what setup allocates
// is accounted, and teardown leaves no live allocation behind (the leak check engines can run).
#include <doctest/doctest.h>

#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/host_sim.hpp"
#include "runtime_fixtures.hpp"

using ddo::ledger_kind;

TEST_SUITE_BEGIN("runtime");

TEST_CASE("an offloader's allocations are in the ledger and none outlives it") {
  for (bool in_place : {false, true}) {
    ddo_test::model_spec spec;
    spec.seed = in_place ? 71 : 72;
    auto m = ddo_test::make_model(spec);
    ddo::host_sim_transport sim;
    const auto& ledger = sim.ledger();
    {
      ddo::runtime_options o;
      o.pin_in_place = in_place;
      ddo::basic_offloader<ddo::host_sim_transport> off(sim, m->table, m->plan, o);
      const auto metrics = off.metrics();
      CHECK(ledger.in_use(ledger_kind::device) == metrics.device_bytes);
      CHECK(ledger.counts(ledger_kind::device).live() == 2);  // resident arena + ring
      CHECK(ledger.in_use(ledger_kind::pinned) == metrics.staging_bytes);
      CHECK(ledger.in_use(ledger_kind::registered) == metrics.pinned_bytes);
      auto stream = sim.make_stream();
      for (std::size_t g = 0; g < off.group_count(); ++g) (void)off.acquire(g, decltype(sim)::view(stream));
      off.synchronize();
    }
    for (auto k : {ledger_kind::device, ledger_kind::pinned, ledger_kind::registered}) {
      CHECK(ledger.counts(k).live() == 0);
      CHECK(ledger.in_use(k) == 0);
    }
    CHECK(ledger.counts(ledger_kind::device).allocations == 2);  // nothing allocated after setup
    CHECK(ledger.peak(ledger_kind::device) > 0);
  }
}

TEST_SUITE_END();
