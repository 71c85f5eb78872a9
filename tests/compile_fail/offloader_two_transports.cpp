// SPDX-License-Identifier: Apache-2.0
// Misuse: two transports. Must not compile.
#include "ddo/runtime/offloader.hpp"

int main() {
  using bad = ddo::offloader<ddo::host_sim_transport, ddo::linear_transport>;
  return sizeof(bad::planner_type) > 0 ? 0 : 1;
}
