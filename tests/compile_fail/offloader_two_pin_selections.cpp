// SPDX-License-Identifier: Apache-2.0
// Misuse: a bare selector (both selections) and pin_selection<S>. Must not compile.
#include "ddo/plan/selectors.hpp"
#include "ddo/runtime/offloader.hpp"

int main() {
  using bad = ddo::offloader<ddo::host_sim_transport, ddo::spread_selector,
                             ddo::pin_selection<ddo::first_selector>>;
  return sizeof(bad::planner_type) > 0 ? 0 : 1;
}
