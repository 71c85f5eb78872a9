// SPDX-License-Identifier: Apache-2.0
// The instantiating TU of the compile-ddo-once check: the only one holding ddo's non-template
// functions, the runtime core and the setup path for the shipped transports. extern_use.cpp
// uses them without compiling them.
#include <cstdio>

#include "ddo/instantiate.hpp"

long run_extern_use();
long run_extern_setup();

int main() {
  const long ready_plan = run_extern_use();
  const long from_settings = run_extern_setup();
  if (ready_plan != 0 || from_settings != 0) {
    std::fprintf(stderr,
                 "compile-once check: mismatched bytes: ready plan %ld, planned from settings %ld "
                 "(-1: nothing checked)\n",
                 ready_plan, from_settings);
    return 1;
  }
  std::puts(
      "compile-once check: two TUs, one copy of ddo, every byte delivered (ready plan and "
      "planned from settings)");
  return 0;
}
