// SPDX-License-Identifier: Apache-2.0
// Planning from settings needs the setup path (setup/setup.hpp); the umbrella alone must stop
// at the static_assert that names the header, not at an incomplete type.
#include "ddo/ddo.hpp"

int main() {
  ddo::weight_table table;
  ddo::dynamic_offload_settings settings;
  ddo::offloader<> offloader(table, settings);
  return offloader.settings() != nullptr ? 0 : 1;
}
