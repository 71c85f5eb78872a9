// SPDX-License-Identifier: Apache-2.0
// Misuse: a config source as an offloader template argument (it would be an inert slot: sources
// are consulted through resolution, in the reference's precedence). Must not compile.
#include "ddo/config/env_source.hpp"
#include "ddo/runtime/offloader.hpp"

int main() {
  using bad = ddo::offloader<ddo::host_sim_transport, ddo::env_source>;
  return sizeof(bad::planner_type) > 0 ? 0 : 1;
}
