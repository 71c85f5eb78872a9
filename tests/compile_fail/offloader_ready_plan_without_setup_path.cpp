// SPDX-License-Identifier: Apache-2.0
// The ready-plan constructor needs only the umbrella: the settings constructors must not reach
// the setup path unless they are used (the near miss is offloader_settings_without_setup_path).
#include "ddo/ddo.hpp"

int main() {
  ddo::weight_table table;
  ddo::offloader<> offloader(table, ddo::offload_plan{}, {}, ddo::linear_transport{});
  return offloader.settings() == nullptr ? 0 : 1;
}
