// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief CUDA driver-API entry points fetched through cudaGetDriverEntryPointByVersion, so that
/// no ddo program links libcuda, and DDO_CU_TRY for checking their results.
///
/// The driver types are declared here as the opaque integers and handles the driver ABI uses:
/// ddo never includes <cuda.h> in the core, so an engine that does is not affected.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

#include "ddo/core/error.hpp"

namespace ddo {
inline namespace v0 {

/// @brief A driver result (CUresult) as a plain int; 0 is CUDA_SUCCESS.
using driver_result = int;

/// @brief Looks up a driver function by name and minimum CUDA version (e.g. 12000), without
/// linking libcuda.
/// @tparam Fn the function pointer type, spelled with ddo's driver_result return type.
/// @returns nullptr when the driver does not have the symbol at that version.
/// @throws cuda_error when the runtime itself cannot answer (no driver installed).
template <class Fn>
[[nodiscard]] Fn driver_entry_point(const char* symbol, unsigned version = 12000) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  DDO_CUDA_TRY(
      cudaGetDriverEntryPointByVersion(symbol, &function, version, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess) return nullptr;
  return reinterpret_cast<Fn>(function);
}

/// @brief The subset of the driver API ddo uses for error names (cuGetErrorName); the VMM
/// transport adds its own entry points on top.
class driver_api {
 public:
  /// @brief Fetches the entry points. @throws cuda_error when the driver cannot be reached.
  driver_api() {
    get_error_name_ =
        driver_entry_point<driver_result (*)(driver_result, const char**)>("cuGetErrorName");
  }

  /// @brief The driver's name for @p status ("CUDA_ERROR_OUT_OF_MEMORY"), or "CUresult".
  [[nodiscard]] const char* error_name(driver_result status) const noexcept {
    const char* name = nullptr;
    if (get_error_name_ != nullptr && get_error_name_(status, &name) == 0 && name != nullptr)
      return name;
    return "CUresult";
  }

 private:
  driver_result (*get_error_name_)(driver_result, const char**) = nullptr;
};

/// @brief The driver's virtual-memory-management entry points (cuMemAddressReserve and
/// friends), fetched through driver_entry_point, with ABI-compatible declarations of the few
/// driver structures they take (cuda.h's CUmemAllocationProp_v1 and CUmemAccessDesc_v1).
class vmm_driver_api : public driver_api {
 public:
  using device_ptr = unsigned long long;     ///< CUdeviceptr
  using handle = unsigned long long;         ///< CUmemGenericAllocationHandle
  struct mem_location {                      ///< CUmemLocation
    int type = 1;                            ///< CU_MEM_LOCATION_TYPE_DEVICE
    int id = 0;
  };
  struct allocation_prop {                   ///< CUmemAllocationProp_v1
    int type = 1;                            ///< CU_MEM_ALLOCATION_TYPE_PINNED
    int requested_handle_types = 0;          ///< CU_MEM_HANDLE_TYPE_NONE
    mem_location location;
    void* win32_handle_meta_data = nullptr;
    unsigned char compression_type = 0;
    unsigned char gpu_direct_rdma_capable = 0;
    unsigned short usage = 0;
    unsigned char reserved[4] = {};
  };
  struct access_desc {                       ///< CUmemAccessDesc_v1
    mem_location location;
    int flags = 3;                           ///< CU_MEM_ACCESS_FLAGS_PROT_READWRITE
  };
  static constexpr int attribute_vmm_supported = 102;  ///< CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  static constexpr int granularity_minimum = 0;        ///< CU_MEM_ALLOC_GRANULARITY_MINIMUM
  static constexpr int granularity_recommended = 1;    ///< CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
  static constexpr driver_result not_ready = 600;      ///< CUDA_ERROR_NOT_READY

  /// @brief Fetches the entry points. @throws cuda_error naming the first one the driver lacks.
  vmm_driver_api() {
    fetch(device_get_, "cuDeviceGet");
    fetch(device_get_attribute_, "cuDeviceGetAttribute");
    fetch(granularity_, "cuMemGetAllocationGranularity");
    fetch(address_reserve_, "cuMemAddressReserve");
    fetch(address_free_, "cuMemAddressFree");
    fetch(create_, "cuMemCreate");
    fetch(release_, "cuMemRelease");
    fetch(map_, "cuMemMap");
    fetch(unmap_, "cuMemUnmap");
    fetch(set_access_, "cuMemSetAccess");
  }

  driver_result device_get(int* device, int ordinal) const { return device_get_(device, ordinal); }
  driver_result device_attribute(int* value, int attribute, int device) const {
    return device_get_attribute_(value, attribute, device);
  }
  driver_result granularity(std::size_t* g, const allocation_prop& p, int option) const {
    return granularity_(g, &p, option);
  }
  driver_result address_reserve(device_ptr* p, std::size_t bytes, std::size_t alignment) const {
    return address_reserve_(p, bytes, alignment, 0, 0);
  }
  driver_result address_free(device_ptr p, std::size_t bytes) const { return address_free_(p, bytes); }
  driver_result create(handle* h, std::size_t bytes, const allocation_prop& p) const {
    return create_(h, bytes, &p, 0);
  }
  driver_result release(handle h) const { return release_(h); }
  driver_result map(device_ptr p, std::size_t bytes, handle h) const { return map_(p, bytes, 0, h, 0); }
  driver_result unmap(device_ptr p, std::size_t bytes) const { return unmap_(p, bytes); }
  driver_result set_access(device_ptr p, std::size_t bytes, const access_desc& d) const {
    return set_access_(p, bytes, &d, 1);
  }

 private:
  template <class Fn>
  static void fetch(Fn& into, const char* symbol) {
    into = driver_entry_point<Fn>(symbol);
    if (into == nullptr)
      detail::throw_driver_error(500, "CUDA_ERROR_NOT_FOUND", symbol, __FILE__, __LINE__);
  }
  driver_result (*device_get_)(int*, int) = nullptr;
  driver_result (*device_get_attribute_)(int*, int, int) = nullptr;
  driver_result (*granularity_)(std::size_t*, const allocation_prop*, int) = nullptr;
  driver_result (*address_reserve_)(device_ptr*, std::size_t, std::size_t, device_ptr,
                                    unsigned long long) = nullptr;
  driver_result (*address_free_)(device_ptr, std::size_t) = nullptr;
  driver_result (*create_)(handle*, std::size_t, const allocation_prop*, unsigned long long) = nullptr;
  driver_result (*release_)(handle) = nullptr;
  driver_result (*map_)(device_ptr, std::size_t, std::size_t, handle, unsigned long long) = nullptr;
  driver_result (*unmap_)(device_ptr, std::size_t) = nullptr;
  driver_result (*set_access_)(device_ptr, std::size_t, const access_desc*, std::size_t) = nullptr;
};

static_assert(sizeof(vmm_driver_api::allocation_prop) == 32, "CUmemAllocationProp_v1 is 32 bytes");
static_assert(sizeof(vmm_driver_api::access_desc) == 12, "CUmemAccessDesc_v1 is 12 bytes");

/// @brief The 32-bit stream memory operations (cuStreamWaitValue32, cuStreamWriteValue32) that
/// graph streaming captures as batch memory-operation nodes (docs/transports.md, "CUDA graphs").
/// A driver without them leaves missing() naming the first one absent; the caller refuses.
class stream_memory_api : public driver_api {
 public:
  using device_ptr = unsigned long long;  ///< CUdeviceptr
  static constexpr unsigned wait_equal = 1;     ///< CU_STREAM_WAIT_VALUE_EQ
  static constexpr unsigned write_default = 0;  ///< CU_STREAM_WRITE_VALUE_DEFAULT (with a fence)

  stream_memory_api() {
    wait_ = driver_entry_point<fn>("cuStreamWaitValue32");
    write_ = driver_entry_point<fn>("cuStreamWriteValue32");
  }
  /// @brief The first entry point the driver lacks, or nullptr.
  [[nodiscard]] const char* missing() const noexcept {
    return wait_ == nullptr ? "cuStreamWaitValue32" : write_ == nullptr ? "cuStreamWriteValue32" : nullptr;
  }
  /// @brief Later work on @p s waits until the 32-bit word at @p address equals @p value.
  driver_result wait_value(cudaStream_t s, device_ptr address, std::uint32_t value) const {
    return wait_(s, address, value, wait_equal);
  }
  /// @brief Writes @p value at @p address after the work before it on @p s (memory fence first).
  driver_result write_value(cudaStream_t s, device_ptr address, std::uint32_t value) const {
    return write_(s, address, value, write_default);
  }

 private:
  using fn = driver_result (*)(cudaStream_t, device_ptr, std::uint32_t, unsigned);
  fn wait_ = nullptr;
  fn write_ = nullptr;
};

namespace detail {
[[noreturn]] inline void throw_cu_error(const driver_api& api, driver_result status,
                                        const char* call, const char* file, int line) {
  throw_driver_error(status, api.error_name(status), call, file, line);
}
}  // namespace detail

/// @brief Whether device @p device supports CUDA virtual memory management (the attribute the
/// VMM transport checks at construction), without throwing: nullopt where CUDA, the driver or
/// the device cannot answer (no GPU). Preset `auto` reads it (resolve_inputs::vmm_supported):
/// the entry points that resolve settings for a device (enable_offload, ddo-run, ddo-plan) pass
/// it, so auto never chooses a VMM route on a device that has none.
[[nodiscard]] inline std::optional<bool> probe_vmm_supported(int device = 0) noexcept {
  try {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
      (void)cudaGetLastError();
      return std::nullopt;
    }
    const auto get = driver_entry_point<driver_result (*)(int*, int)>("cuDeviceGet");
    const auto attribute =
        driver_entry_point<driver_result (*)(int*, int, int)>("cuDeviceGetAttribute");
    int handle = 0;
    int value = 0;
    if (get == nullptr || attribute == nullptr || get(&handle, device) != 0 ||
        attribute(&value, vmm_driver_api::attribute_vmm_supported, handle) != 0)
      return std::nullopt;
    return value != 0;
  } catch (...) {  // the runtime could not reach a driver: nothing known
    return std::nullopt;
  }
}

}  // namespace v0
}  // namespace ddo

/// Runs a driver call (through a pointer from driver_entry_point) and throws ddo::cuda_error
/// naming the call and the driver's error name when it does not return CUDA_SUCCESS.
/// @p api is a ddo::driver_api used to look up the error name.
#define DDO_CU_TRY(api, call)                                                       \
  do {                                                                              \
    const ::ddo::driver_result ddo_cu_status_ = (call);                             \
    if (ddo_cu_status_ != 0)                                                        \
      ::ddo::detail::throw_cu_error((api), ddo_cu_status_, #call, __FILE__, __LINE__); \
  } while (0)
