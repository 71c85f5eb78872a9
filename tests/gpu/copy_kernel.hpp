// SPDX-License-Identifier: Apache-2.0
#pragma once
// A device byte copy as a kernel (copy_kernel.cu, built by nvcc). A captured step on the legacy
// VMM route must read weights through kernels: a memcpy node's pointers are validated when it is
// captured, and a streamed group's stable range is mapped only while a replay holds it, so a
// captured cudaMemcpyAsync from it fails with cudaErrorInvalidValue (H200, 5 Dec 2026). A kernel's
// arguments are not checked at capture, which is how an engine's GEMMs read the weights.
#include <cstddef>

#include <cuda_runtime_api.h>

namespace ddo_test {

/// Enqueues a copy of @p n bytes from @p src to @p dst on @p s; the launch's error.
cudaError_t copy_bytes_on_device(void* dst, const void* src, std::size_t n, cudaStream_t s);

}  // namespace ddo_test
