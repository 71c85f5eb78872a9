// SPDX-License-Identifier: Apache-2.0
// Misuse: naming a transport while asking ddo to choose it from `backend`. Must not compile.
#include "ddo/setup/enable_offload.hpp"

int main() {
  const ddo::weight_table table;
  return ddo::with_offload_backend<ddo::linear_transport>(table, std::nullopt, {},
                                                          [](auto& enabled) {
                                                            return static_cast<int>(
                                                                enabled->group_count());
                                                          });
}
