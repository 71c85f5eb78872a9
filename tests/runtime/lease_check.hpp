// SPDX-License-Identifier: Apache-2.0
// What several runtime suites check on host_sim: every acquired weight's device bytes equal the
// expected bytes, compared on the engine's stream after the copies it waited for.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstring>
#include <vector>

#include "ddo/transport/host_sim.hpp"

namespace ddo_test {

/// Runs @p steps steps of every group of @p off on host_sim (@p sim: host_sim or an adaptor over
/// it) and returns the weights whose device
/// bytes differed from @p expected (indexed by weight).
template <class Offloader, class Sim>
std::size_t count_mismatches(Offloader& off, Sim& sim,
                             const std::vector<std::vector<std::byte>>& expected, int steps) {
  auto s = sim.make_stream();
  std::atomic<std::size_t> bad{0};
  for (int step = 0; step < steps; ++step)
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, sim.view(s));
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::byte* p = lease.data(i);
        const auto& e = expected[lease.weight_index(i)];
        ddo::host_sim_device(sim).enqueue(sim.view(s), [p, &e, &bad] {
          if (std::memcmp(p, e.data(), e.size()) != 0) ++bad;
        });
      }
    }
  sim.synchronize(sim.view(s));
  return bad;
}

}  // namespace ddo_test
