// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief CUDA driver-API entry points fetched through cudaGetDriverEntryPointByVersion, so that
/// no ddo program links libcuda, and DDO_CU_TRY for checking their results.
///
/// The driver types are declared here as the opaque integers and handles the driver ABI uses:
/// ddo never includes <cuda.h> in the core, so an engine that does is not affected.

#include <cstdint>
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

namespace detail {
[[noreturn]] inline void throw_cu_error(const driver_api& api, driver_result status,
                                        const char* call, const char* file, int line) {
  throw_driver_error(status, api.error_name(status), call, file, line);
}
}  // namespace detail

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
