// SPDX-License-Identifier: Apache-2.0
// Misuse: resident_selection<S> with an S that is no weight selector. Must not compile.
#include "ddo/plan/selectors.hpp"
#include "ddo/runtime/offloader.hpp"

struct not_a_selector {};

int main() {
  using bad = ddo::offloader<ddo::host_sim_transport, ddo::resident_selection<not_a_selector>>;
  return sizeof(bad::planner_type) > 0 ? 0 : 1;
}
