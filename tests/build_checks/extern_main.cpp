// SPDX-License-Identifier: Apache-2.0
// main() of the compile-ddo-once check. extern_use.cpp uses ddo's non-template functions, the
// runtime core and the setup path for the shipped transports without compiling them; the only
// copy is src/ddo_instantiate.cpp's (ddo/instantiate.hpp), in the library this program links.
#include <cstdio>

#ifndef DDO_EXTERN_TEMPLATES
#error "extern_main.cpp must be compiled with DDO_EXTERN_TEMPLATES"
#endif

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
