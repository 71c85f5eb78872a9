// SPDX-License-Identifier: Apache-2.0
// The ready-plan constructor needs only the umbrella: the offloader never reaches the setup path
// (setup/setup.hpp), which plans from settings.
#include "ddo/ddo.hpp"

int main() {
  ddo::weight_table table;
  ddo::offloader<> offloader(table, ddo::offload_plan{}, {}, ddo::linear_transport{});
  return offloader.group_count() == 0 ? 0 : 1;
}
