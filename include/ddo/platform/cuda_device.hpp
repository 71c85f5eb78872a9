// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief CUDA device queries that never throw on a machine without a GPU: whether CUDA is usable
/// (and why not), device count, name, free and total VRAM.

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "ddo/core/error.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Whether CUDA can be used in this process, and if not, a sentence saying why.
struct cuda_availability {
  bool available = false;  ///< at least one device and the runtime initialised
  int device_count = 0;    ///< devices the runtime reports (0 when unavailable)
  std::string reason;      ///< empty when available; otherwise what failed, for a person
};

/// @brief Asks the CUDA runtime for its devices without throwing.
/// @note Works on machines with no driver: cudaGetDeviceCount then returns an error, which is
/// reported in `reason` (e.g. "cudaGetDeviceCount returned cudaErrorNoDevice (no CUDA-capable
/// device is detected)").
[[nodiscard]] inline cuda_availability query_cuda_availability() noexcept {
  cuda_availability result;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    const char* name = cudaGetErrorName(status);
    const char* text = cudaGetErrorString(status);
    result.reason = std::string("cudaGetDeviceCount returned ") + (name ? name : "unknown") +
                    " (" + (text ? text : "") + ")";
    return result;
  }
  if (count <= 0) {
    result.reason = "cudaGetDeviceCount found no CUDA device";
    return result;
  }
  result.available = true;
  result.device_count = count;
  return result;
}

/// @brief Free and total memory of one device, in bytes.
struct device_memory_info {
  std::uint64_t free_bytes = 0;
  std::uint64_t total_bytes = 0;
};

/// @brief cudaMemGetInfo on @p device (made current for the call, then restored).
/// @throws cuda_error naming the failing call.
[[nodiscard]] inline device_memory_info query_device_memory(int device) {
  int previous = 0;
  DDO_CUDA_TRY(cudaGetDevice(&previous));
  if (previous != device) DDO_CUDA_TRY(cudaSetDevice(device));
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  const cudaError_t status = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (previous != device) DDO_CUDA_TRY_NOTHROW(cudaSetDevice(previous));
  DDO_CUDA_TRY(status);
  return {free_bytes, total_bytes};
}

/// @brief The device's marketing name, e.g. "NVIDIA H200". @throws cuda_error.
[[nodiscard]] inline std::string query_device_name(int device) {
  cudaDeviceProp prop{};
  DDO_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

}  // namespace v0
}  // namespace ddo
