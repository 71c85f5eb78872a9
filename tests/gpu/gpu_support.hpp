// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by the GPU suite: the skip rule (no device: print why and pass) and a stream stall
// that needs no kernel (a host function enqueued on the stream sleeps).
#include <chrono>
#include <string>
#include <thread>

#include <cuda_runtime_api.h>

#include "ddo/platform/cuda_device.hpp"
#include "ddo/platform/cuda_driver.hpp"
#include "ddo/transport/linear.hpp"

namespace ddo_test {

/// Empty when a CUDA device is usable; otherwise the reason, e.g. no driver.
inline std::string gpu_skip_reason() {
  const auto a = ddo::query_cuda_availability();
  return a.available ? std::string() : "no CUDA device: " + a.reason;
}

inline void CUDART_CB sleep_host_fn(void* ms) {
  std::this_thread::sleep_for(std::chrono::microseconds(reinterpret_cast<std::uintptr_t>(ms)));
}

/// Stalls @p s for @p microseconds (cudaLaunchHostFunc): later work on the stream waits.
inline void stall_stream(cudaStream_t s, std::uintptr_t microseconds) {
  DDO_CUDA_TRY(cudaLaunchHostFunc(s, sleep_host_fn, reinterpret_cast<void*>(microseconds)));
}

struct linear_traits {
  using transport_type = ddo::linear_transport;
  static std::string skip_reason() { return gpu_skip_reason(); }
  static transport_type make(std::uint64_t limit) {
    ddo::linear_options o;
    o.device_limit_bytes = limit;
    return transport_type(o);
  }
  static void delay(transport_type&, transport_type::stream_view s, int ms) {
    stall_stream(s.handle, static_cast<std::uintptr_t>(ms) * 1000);
  }
};

}  // namespace ddo_test

#define DDO_SKIP_WITHOUT_GPU()                                   \
  do {                                                           \
    const std::string ddo_gpu_skip_ = ddo_test::gpu_skip_reason(); \
    if (!ddo_gpu_skip_.empty()) {                                \
      MESSAGE("skipped: " << ddo_gpu_skip_);                     \
      return;                                                    \
    }                                                            \
  } while (0)
