// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Samples the device memory in use (cudaMemGetInfo) on its own thread, so a run's peak
/// includes everything the process allocated (ddo's arena and ring, cuBLAS workspaces,
/// activations), not only what ddo's accounting counts. Example code (examples/runner/).

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "ddo/core/error.hpp"
#include "ddo/runtime/device_peak_probe.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief Peak device bytes in use above the level at construction, sampled every @p period.
/// Also a ddo::device_peak_probe (start(), peak_bytes()): the engine's reserve per workload
/// size measured on the GPU (ddo::measure_workload_reserve).
class device_memory_sampler {
 public:
  using probe_category = device_peak_probe_tag;
  /// @brief Starts sampling device @p device. @throws cuda_error when cudaMemGetInfo fails.
  explicit device_memory_sampler(int device = 0,
                                 std::chrono::microseconds period = std::chrono::milliseconds(2))
      : device_(device) {
    DDO_CUDA_TRY(cudaSetDevice(device_));
    std::size_t free = 0, total = 0;
    DDO_CUDA_TRY(cudaMemGetInfo(&free, &total));
    baseline_used_ = total - free;
    span_baseline_ = baseline_used_;
    peak_used_ = baseline_used_;
    thread_ = std::thread([this, period] {
      (void)cudaSetDevice(device_);
      while (!stop_.load(std::memory_order_relaxed)) {
        sample();
        std::this_thread::sleep_for(period);
      }
    });
  }
  device_memory_sampler(const device_memory_sampler&) = delete;
  device_memory_sampler& operator=(const device_memory_sampler&) = delete;
  ~device_memory_sampler() { stop(); }

  /// @brief Stops the thread after one last sample. Idempotent.
  void stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
      sample();
    }
  }

  /// @brief Takes one sample now (also callable from the owner's thread).
  void sample() {
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    const std::uint64_t used = total - free;
    std::uint64_t seen = peak_used_.load();
    while (used > seen && !peak_used_.compare_exchange_weak(seen, used)) {
    }
  }

  /// @brief Starts a new peak from what is in use now (the baseline stays): the peak of one
  /// phase of a run.
  void reset_peak() {
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    peak_used_.store(total - free);
  }

  /// @brief device_peak_probe: a span of work starts: its peak is counted from what is in use
  /// now (reset_peak, with that level as the span's baseline).
  void start() {
    reset_peak();
    span_baseline_ = peak_used_.load();
  }

  /// @brief device_peak_probe: the peak since start() above what was in use then (one sample
  /// taken now, so work that ends holding its memory is counted without waiting a period).
  [[nodiscard]] std::uint64_t peak_bytes() {
    sample();
    const std::uint64_t peak = peak_used_.load();
    return peak > span_baseline_ ? peak - span_baseline_ : 0;
  }

  /// @brief Peak bytes in use on the device (by every allocation of every process).
  [[nodiscard]] std::uint64_t peak_used() const { return peak_used_.load(); }

  /// @brief Peak bytes in use above what was in use when sampling started.
  [[nodiscard]] std::uint64_t peak_above_baseline() const {
    const std::uint64_t peak = peak_used_.load();
    return peak > baseline_used_ ? peak - baseline_used_ : 0;
  }

 private:
  int device_;
  std::uint64_t baseline_used_ = 0;
  std::uint64_t span_baseline_ = 0;
  std::atomic<std::uint64_t> peak_used_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace runner
}  // namespace v0
}  // namespace ddo
