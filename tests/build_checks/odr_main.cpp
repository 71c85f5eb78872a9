// SPDX-License-Identifier: Apache-2.0
#include <cstdint>
#include <cstdio>

std::uint64_t odr_from_a();
std::uint64_t odr_from_b();

int main() {
  if (odr_from_a() != odr_from_b()) {
    std::puts("ODR check: the two translation units disagree");
    return 1;
  }
  std::puts("ODR check: two translation units including ddo/ddo.hpp link into one program");
  return 0;
}
