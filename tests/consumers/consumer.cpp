// SPDX-License-Identifier: Apache-2.0
// A tiny engine-side program: proves a consumer finds ddo's headers and the CUDA runtime through
// the way it was built (Meson subproject, pkg-config, or CMake find_package), header-only or
// compiled once (DDO_EXTERN_TEMPLATES with consumer_instantiate.cpp; tools/check-consumers).
#include <ddo/ddo.hpp>
#include <ddo/model/execution_groups.hpp>  // infer_execution_groups: not in the umbrella

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
  // A function whose body a program compiling ddo once takes from its instantiating TU.
  const auto groups = ddo::infer_execution_groups(table);
  // The library's GPU probe: links the CUDA runtime and says why there is no device.
  const auto gpu = ddo::query_cuda_availability();
  std::printf("consumer: %zu weight(s), %llu bytes, %zu group(s); CUDA devices: %d (%s)\n",
              table.size(), static_cast<unsigned long long>(table.total_bytes()), groups.size(),
              gpu.device_count, gpu.available ? "available" : gpu.reason.c_str());
  return table.total_bytes() == bytes.size() && groups.size() == 1 ? 0 : 1;
}
