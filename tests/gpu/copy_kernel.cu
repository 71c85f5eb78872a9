// SPDX-License-Identifier: Apache-2.0
// A byte-copy kernel for the GPU suite's graph-streaming cases (copy_kernel.hpp says why a kernel).
#include "copy_kernel.hpp"

namespace {

__global__ void copy_bytes_kernel(unsigned char* dst, const unsigned char* src, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = src[i];
}

}  // namespace

namespace ddo_test {

cudaError_t copy_bytes_on_device(void* dst, const void* src, std::size_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  constexpr unsigned threads = 256;
  const std::size_t wanted = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 1024 ? wanted : 1024);
  copy_bytes_kernel<<<blocks, threads, 0, s>>>(static_cast<unsigned char*>(dst),
                                                static_cast<const unsigned char*>(src), n);
  return cudaGetLastError();
}

}  // namespace ddo_test
