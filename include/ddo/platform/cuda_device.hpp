// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief CUDA device queries: the non-throwing probes (query_cuda_availability,
/// probe_cuda_device) that work on a machine without a GPU, and the throwing per-device queries
/// (memory, name) for code that already knows a device is there.

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

/// @brief What ddo::probe_cuda_device found out about one device.
struct cuda_device_probe {
  bool available = false;        ///< the device exists and its properties and memory were read
  int device = 0;                ///< the ordinal probed
  int device_count = 0;          ///< devices the runtime reports (0 when CUDA is unusable)
  std::string name;              ///< e.g. "NVIDIA H200"; empty when unavailable
  std::uint64_t free_bytes = 0;  ///< cudaMemGetInfo, at the time of the probe
  std::uint64_t total_bytes = 0;  ///< cudaMemGetInfo
  std::string reason;  ///< empty when available; otherwise what failed, for a person
};

/// @brief The one GPU probe: whether device @p device is usable, its name and its free and total
/// memory, without throwing. A machine with no GPU or no driver gives `available == false` and a
/// reason naming the CUDA error (the reason of ddo::query_cuda_availability); an ordinal CUDA
/// does not have gives a reason saying how many devices it sees. Examples, benchmarks and tests
/// use this (or query_cuda_availability) rather than calling cudaGetDeviceCount themselves.
/// @note The device is made current for the memory query and the previous one restored.
[[nodiscard]] inline cuda_device_probe probe_cuda_device(int device = 0) noexcept {
  cuda_device_probe result;
  result.device = device;
  const cuda_availability availability = query_cuda_availability();
  result.device_count = availability.device_count;
  if (!availability.available) {
    result.reason = availability.reason;
    return result;
  }
  if (device < 0 || device >= availability.device_count) {
    result.reason = "CUDA sees " + std::to_string(availability.device_count) +
                    " device(s); device " + std::to_string(device) + " was asked for";
    return result;
  }
  const auto failed = [&](const char* call, cudaError_t status) {
    (void)cudaGetLastError();
    const char* name = cudaGetErrorName(status);
    result.reason = "device " + std::to_string(device) + " unusable: " + call + " returned " +
                    (name ? name : "unknown");
  };
  cudaDeviceProp prop{};
  if (const cudaError_t status = cudaGetDeviceProperties(&prop, device); status != cudaSuccess) {
    failed("cudaGetDeviceProperties", status);
    return result;
  }
  int previous = 0;
  if (const cudaError_t status = cudaGetDevice(&previous); status != cudaSuccess) {
    failed("cudaGetDevice", status);
    return result;
  }
  if (previous != device)
    if (const cudaError_t status = cudaSetDevice(device); status != cudaSuccess) {
      failed("cudaSetDevice", status);
      return result;
    }
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  const cudaError_t status = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (previous != device) (void)cudaSetDevice(previous);
  if (status != cudaSuccess) {
    failed("cudaMemGetInfo", status);
    return result;
  }
  result.available = true;
  result.name = prop.name;
  result.free_bytes = free_bytes;
  result.total_bytes = total_bytes;
  return result;
}

/// @brief The device's marketing name, e.g. "NVIDIA H200". @throws cuda_error.
[[nodiscard]] inline std::string query_device_name(int device) {
  cudaDeviceProp prop{};
  DDO_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

}  // namespace v0
}  // namespace ddo
