// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::vmm_transport: the legacy CUDA VMM route (`execution_mode = vmm_runtime`). Every
/// streamed group has one device address for the whole run (one cuMemAddressReserve per
/// offloader, each group a contiguous range); only the planned mapped budget
/// (`vmm_resident_weight_budget_gb`: resident set + a window of physical handles) is backed by
/// memory. The window's handles are created at setup and rotate through the streamed groups
/// ahead of use (the runtime's ring schedule), each load mapped and copied on ddo's staging
/// thread once the previous occupant's release event completed (detail/vmm_window.hpp).
///
/// Everything else is a linear transport the VMM transport owns: streams, events, copies,
/// residents (cudaMalloc).
/// The driver API is reached through cudaGetDriverEntryPointByVersion (no link to libcuda), and
/// every driver call is checked. A device without VMM support is refused at construction.
/// One offloader per transport object: make one transport per component.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

#include "ddo/core/error.hpp"
#include "ddo/platform/cuda_driver.hpp"
#include "ddo/transport/allocation_ledger.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/detail/stable_addresses.hpp"
#include "ddo/transport/detail/transport_adaptor.hpp"
#include "ddo/transport/detail/vmm_window.hpp"
#include "ddo/transport/linear.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Settings of the VMM transport.
struct vmm_options {
  linear_options device;      ///< device ordinal and device limit (residents, staging)
  vmm_window_options window;  ///< budget, handle size, staging check, fault injection
};

namespace detail {

/// The CUDA driver behind a vmm_window: entry points probed once, handles accounted in its own
/// ledger (a handle has no address: keys are synthetic, one range per handle).
class cuda_vmm_driver {
 public:
  using handle_type = vmm_driver_api::handle;
  static constexpr driver_result not_ready = vmm_driver_api::not_ready;

  explicit cuda_vmm_driver(int ordinal) : ordinal_(ordinal) {
    int device = 0;
    DDO_CU_TRY(api_, api_.device_get(&device, ordinal));
    int supported = 0;
    DDO_CU_TRY(api_, api_.device_attribute(&supported, vmm_driver_api::attribute_vmm_supported, device));
    if (supported == 0)
      throw usage_error("vmm: CUDA device " + std::to_string(ordinal) +
                        " reports no virtual-memory-management support "
                        "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0); use "
                        "backend = linear (execution_mode = linear_runtime)");
    prop_.location.id = device;
    access_.location.id = device;
    std::size_t g = 0;
    DDO_CU_TRY(api_, api_.granularity(&g, prop_, vmm_driver_api::granularity_minimum));
    granularity_ = g;
  }

  [[nodiscard]] std::uint64_t granularity() const noexcept { return granularity_; }
  driver_result reserve(std::byte** p, std::uint64_t bytes, std::uint64_t alignment) {
    vmm_driver_api::device_ptr d = 0;
    const driver_result r = api_.address_reserve(&d, bytes, alignment);
    if (r == 0) *p = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(d));
    return r;
  }
  driver_result free_reservation(std::byte* p, std::uint64_t bytes) {
    return api_.address_free(ptr(p), bytes);
  }
  driver_result create(handle_type* h, std::uint64_t bytes) {
    const driver_result r = api_.create(h, bytes, prop_);
    if (r == 0) {
      std::lock_guard lock(mutex_);
      key_[*h] = next_key_;
      ledger_.add(ledger_kind::device, reinterpret_cast<const void*>(next_key_), bytes, "vmm handle");
      next_key_ += bytes;
    }
    return r;
  }
  driver_result release(handle_type h, std::uint64_t bytes) {
    const driver_result r = api_.release(h);
    if (r == 0) {
      std::lock_guard lock(mutex_);
      ledger_.remove(ledger_kind::device, reinterpret_cast<const void*>(key_.at(h)), bytes, "vmm handle");
      key_.erase(h);
    }
    return r;
  }
  driver_result map(std::byte* p, std::uint64_t bytes, handle_type h) { return api_.map(ptr(p), bytes, h); }
  driver_result unmap(std::byte* p, std::uint64_t bytes) { return api_.unmap(ptr(p), bytes); }
  driver_result set_access(std::byte* p, std::uint64_t bytes) {
    return api_.set_access(ptr(p), bytes, access_);
  }
  [[noreturn]] void fail(driver_result r, const char* call) const {
    detail::throw_cu_error(api_, r, call, __FILE__, __LINE__);
  }

  /// Physical handles alive (bytes in the handle ledger).
  [[nodiscard]] const allocation_ledger& ledger() const noexcept { return ledger_; }
  [[nodiscard]] std::size_t live_handles() const {
    std::lock_guard lock(mutex_);
    return key_.size();
  }
  [[nodiscard]] int ordinal() const noexcept { return ordinal_; }

 private:
  static vmm_driver_api::device_ptr ptr(std::byte* p) {
    return static_cast<vmm_driver_api::device_ptr>(reinterpret_cast<std::uintptr_t>(p));
  }
  vmm_driver_api api_;
  int ordinal_;
  vmm_driver_api::allocation_prop prop_{};
  vmm_driver_api::access_desc access_{};
  std::uint64_t granularity_ = 0;
  mutable std::mutex mutex_;
  allocation_ledger ledger_;
  std::map<handle_type, std::uintptr_t> key_;
  std::uintptr_t next_key_ = 0x10000;
};

}  // namespace detail

/// @brief The CUDA VMM transport (see the file comment): an adaptor over a linear_transport it
/// holds (streams, events, copies and residents; detail::transport_adaptor), with the
/// stable-address window over the CUDA driver.
class vmm_transport : public detail::transport_adaptor<linear_transport>,
                      public detail::stable_addresses<detail::cuda_vmm_driver> {
  using adaptor = detail::transport_adaptor<linear_transport>;
  using window = detail::stable_addresses<detail::cuda_vmm_driver>;

 public:
  /// @throws cuda_error (no device, driver entry points missing), usage_error (no VMM support).
  explicit vmm_transport(vmm_options options = {})
      : adaptor(linear_transport(options.device)),
        window(options.window, current_device(options.device.device)) {}

  [[nodiscard]] std::string_view name() const noexcept { return "vmm"; }

  // Both bases declare the window's operations (the adaptor forwards them where its upstream
  // has them): the window's.
  using window::bind_stable;
  using window::prepare_stable_addresses;
  using window::release_stable_addresses;
  using window::size_window;
  using window::stable_address;

  /// @brief The linear transport's check, and: this route's loads are issued after the launch
  /// whose memory waits consume them, so the graph and ddo's staging stream must not share a
  /// hardware queue; with CUDA_DEVICE_MAX_CONNECTIONS=1 they do and the first wait would block
  /// the load behind it forever (measured: the H200's one-connection run deadlocked). Graph
  /// streaming is used only once an engine captures a step over a window smaller than the
  /// streamed groups (docs/cuda-graphs.md, the VMM legacy route).
  void check_graph_streaming() {
    upstream().check_graph_streaming();
    if (const char* c = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"); c != nullptr && std::string_view(c) == "1")
      throw usage_error(
          "graph streaming on the legacy VMM route needs two or more hardware queues: "
          "CUDA_DEVICE_MAX_CONNECTIONS=1 puts the graph's memory waits and ddo's loads, issued "
          "after the launch, in one queue, where a wait would block its own load. Unset it (or set "
          "2..32), or run the linear route (execution_mode = linear_runtime), whose replays "
          "load inside the graph");
  }

  // --- the window -----------------------------------------------------------------------------
  [[nodiscard]] std::uint64_t vmm_granularity() const noexcept { return vmm_driver().granularity(); }
  /// @brief ddo's device bytes: cudaMalloc'd (residents) plus physical handles.
  [[nodiscard]] std::uint64_t device_bytes_in_use() const {
    return upstream().device_bytes_in_use() + vmm_driver().ledger().in_use(ledger_kind::device);
  }

  // --- copies: the reservation is device memory while mapped (the runtime orders that) ---------
  void copy_to_device(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s) {
    if (!reserved(dst, bytes)) return upstream().copy_to_device(dst, src, bytes, s);
    DDO_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s.handle));
  }
  void copy_to_host(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s) {
    if (!reserved(src, bytes)) return upstream().copy_to_host(dst, src, bytes, s);
    DDO_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s.handle));
  }
  void fill_device(std::byte* dst, int value, std::size_t bytes, stream_view s) {
    if (!reserved(dst, bytes)) return upstream().fill_device(dst, value, bytes, s);
    DDO_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, s.handle));
  }

 private:
  // The device is made current before the driver probes it (as the linear transport does).
  static int current_device(int ordinal) {
    DDO_CUDA_TRY(cudaSetDevice(ordinal));
    return ordinal;
  }
};

static_assert(transport<vmm_transport>);
static_assert(transport_with_stable_addresses<vmm_transport>);
static_assert(transport_with_window_sizing<vmm_transport>);
static_assert(transport_with_thread_binding<vmm_transport>);
static_assert(transport_with_ledger<vmm_transport>);
static_assert(transport_with_graph_streaming<vmm_transport>);

}  // namespace v0
}  // namespace ddo
