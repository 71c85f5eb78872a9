// SPDX-License-Identifier: Apache-2.0
// A tiny engine-side program: proves a consumer finds ddo's headers and the CUDA runtime through
// the way it was built (Meson subproject, pkg-config, or CMake find_package).
#include <ddo/ddo.hpp>

#include <cstdio>
#include <vector>

int main() {
  std::vector<std::byte> bytes(64 * 64 * 2, std::byte{7});
  ddo::weight_table table;
  table.add({.name = "blocks.0.proj.weight",
             .module_name = "",
             .kind = ddo::module_kind::linear,
             .type = ddo::dtype::bf16,
             .shape = {64, 64},
             .bytes = 0,
             .source = ddo::host_source{bytes.data()}});
  // The library's GPU probe: links the CUDA runtime and says why there is no device.
  const auto gpu = ddo::query_cuda_availability();
  std::printf("consumer: %zu weight(s), %llu bytes; CUDA devices: %d (%s)\n", table.size(),
              static_cast<unsigned long long>(table.total_bytes()), gpu.device_count,
              gpu.available ? "available" : gpu.reason.c_str());
  return table.total_bytes() == bytes.size() ? 0 : 1;
}
