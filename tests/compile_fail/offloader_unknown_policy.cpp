// SPDX-License-Identifier: Apache-2.0
// Misuse: a template argument that models no policy. Must not compile.
#include "ddo/runtime/offloader.hpp"

struct not_a_policy {};

int main() {
  using bad = ddo::offloader<ddo::host_sim_transport, not_a_policy>;
  return sizeof(bad::planner_type) > 0 ? 0 : 1;
}
