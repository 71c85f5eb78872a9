// SPDX-License-Identifier: Apache-2.0
// The merge kernel for the GPU suite's adapter cases (lora_merge_kernel.hpp).
#include "lora_merge_kernel.hpp"

#include "ddo/adapter/lora_merge_cuda.cuh"

namespace ddo_test {

ddo::lora_merge_launcher lora_merge_launcher() { return &ddo::launch_lora_merge_cuda; }

}  // namespace ddo_test
