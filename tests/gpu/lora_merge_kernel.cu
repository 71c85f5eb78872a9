// SPDX-License-Identifier: Apache-2.0
// The merge kernel for the GPU suite's adapter cases (lora_merge_kernel.hpp).
#include "lora_merge_kernel.hpp"

#include "ddo/adapter/lora_merge_cuda.cuh"

namespace ddo_test {

ddo::lora_merge_launcher lora_merge_launcher() { return &ddo::launch_lora_merge_cuda; }

ddo::lora_merge_launcher lora_merge_elementwise_launcher() {
  return [](const ddo::lora_merge_job& job, void* stream) {
    ddo::detail::launch_lora_merge_elementwise(job, static_cast<cudaStream_t>(stream));
    DDO_CUDA_TRY(cudaGetLastError());
  };
}

}  // namespace ddo_test
