// SPDX-License-Identifier: Apache-2.0
// Compiled by nvcc: an engine written in CUDA C++ must be able to include ddo/ddo.hpp.
#include "ddo/ddo.hpp"

#include <cstdio>

__global__ void touch(unsigned char* data) { data[threadIdx.x] = 1; }

int main() {
  const ddo::weight_table table;
  std::printf("nvcc check: ddo/ddo.hpp compiled by nvcc, %zu weights, %llu bytes per GiB\n",
              table.size(), static_cast<unsigned long long>(ddo::gib));
  return table.empty() ? 0 : 1;
}
