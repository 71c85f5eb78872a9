// SPDX-License-Identifier: Apache-2.0
#pragma once
// ddo's merge kernel (ddo/adapter/lora_merge_cuda.cuh) as the GPU suite gets it: compiled by nvcc
// in lora_merge_kernel.cu, handed to the host-compiled cases as a launcher.
#include "ddo/adapter/lora_merge.hpp"

namespace ddo_test {

/// ddo::launch_lora_merge_cuda.
ddo::lora_merge_launcher lora_merge_launcher();

/// The one-thread-per-element kernel launch_lora_merge_cuda falls back to (more than 8M rows).
ddo::lora_merge_launcher lora_merge_elementwise_launcher();

}  // namespace ddo_test
