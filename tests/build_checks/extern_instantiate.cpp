// SPDX-License-Identifier: Apache-2.0
// The instantiating TU of the extern-template check: the only one holding the offloader's
// runtime core for the shipped transports. extern_use.cpp uses the offloader without it.
#include <cstdio>

#include "ddo/runtime/instantiate_offloaders.hpp"

long run_extern_use();

int main() {
  const long mismatches = run_extern_use();
  if (mismatches != 0) {
    std::fprintf(stderr, "extern-template check: %ld (-1: nothing checked)\n", mismatches);
    return 1;
  }
  std::puts("extern-template check: two TUs, one instantiation, every byte delivered");
  return 0;
}
