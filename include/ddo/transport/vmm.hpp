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

/// @brief The CUDA VMM transport (see the file comment): a linear_transport it owns for streams,
/// events, copies and residents, and the stable-address window over the CUDA driver.
class vmm_transport : public detail::stable_addresses<detail::cuda_vmm_driver> {
 public:
  using transport_category = transport_tag;
  using stream = linear_transport::stream;
  using stream_view = linear_transport::stream_view;
  using event = linear_transport::event;

  /// @throws cuda_error (no device, driver entry points missing), usage_error (no VMM support).
  explicit vmm_transport(vmm_options options = {})
      : stable_addresses(options.window, current_device(options.device.device)),
        linear_(options.device) {}

  [[nodiscard]] std::string_view name() const noexcept { return "vmm"; }
  /// @brief The linear transport under the window (residents, streams, events).
  [[nodiscard]] linear_transport& linear() noexcept { return linear_; }

  // --- the linear transport's operations ----------------------------------------------------------
  void bind_thread() { linear_.bind_thread(); }
  [[nodiscard]] int device() const noexcept { return linear_.device(); }
  [[nodiscard]] stream make_stream() { return linear_.make_stream(); }
  [[nodiscard]] static stream_view view(stream& s) noexcept { return linear_transport::view(s); }
  [[nodiscard]] event make_event(bool timing) { return linear_.make_event(timing); }
  [[nodiscard]] static bool capturing(stream_view s) { return linear_transport::capturing(s); }
  [[nodiscard]] static std::uint64_t capture_id(stream_view s) {
    return linear_transport::capture_id(s);
  }
  void record(event& e, stream_view s) { linear_.record(e, s); }
  void wait(stream_view s, const event& e) { linear_.wait(s, e); }
  [[nodiscard]] bool ready(const event& e) { return linear_.ready(e); }
  void synchronize(const event& e) { linear_.synchronize(e); }
  void synchronize(stream_view s) { linear_.synchronize(s); }
  [[nodiscard]] double elapsed_ms(const event& a, const event& b) { return linear_.elapsed_ms(a, b); }
  [[nodiscard]] std::byte* allocate_device(std::size_t n) { return linear_.allocate_device(n); }
  void free_device(std::byte* p, std::size_t n) { linear_.free_device(p, n); }
  [[nodiscard]] std::byte* allocate_pinned(std::size_t n) { return linear_.allocate_pinned(n); }
  void free_pinned(std::byte* p, std::size_t n) { linear_.free_pinned(p, n); }
  [[nodiscard]] bool register_host(void* p, std::size_t n) { return linear_.register_host(p, n); }
  void unregister_host(void* p) { linear_.unregister_host(p); }
  [[nodiscard]] device_memory_info device_memory() const { return linear_.device_memory(); }
  [[nodiscard]] const allocation_ledger& ledger() const noexcept { return linear_.ledger(); }
  [[nodiscard]] std::uint64_t peak_device_bytes() const { return linear_.peak_device_bytes(); }
  [[nodiscard]] std::uint64_t pinned_bytes_in_use() const { return linear_.pinned_bytes_in_use(); }
  [[nodiscard]] std::uint64_t registered_bytes_in_use() const {
    return linear_.registered_bytes_in_use();
  }

  // --- graph streaming (docs/cuda-graphs.md, the VMM legacy route): the linear transport's ------
  // Used only once an engine captures a step over a window smaller than the streamed groups;
  // the eager path calls none of them.
  using graph_exec = linear_transport::graph_exec;
  void launch_graph(const graph_exec& g, stream_view s) { linear_.launch_graph(g, s); }
  [[nodiscard]] static detail::relaxed_capture_mode relaxed_capture() {
    return linear_transport::relaxed_capture();
  }
  void record_edge(event& e, stream_view s) { linear_.record_edge(e, s); }
  void wait_edge(stream_view s, const event& e) { linear_.wait_edge(s, e); }
  /// @brief The linear transport's check, and: this route's loads are issued after the launch
  /// whose memory waits consume them, so the graph and ddo's staging stream must not share a
  /// hardware queue; with CUDA_DEVICE_MAX_CONNECTIONS=1 they do and the first wait would block
  /// the load behind it forever (measured: the H200's one-connection run deadlocked).
  void check_graph_streaming() {
    linear_.check_graph_streaming();
    if (const char* c = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"); c != nullptr && std::string_view(c) == "1")
      throw usage_error(
          "graph streaming on the legacy VMM route needs two or more hardware queues: "
          "CUDA_DEVICE_MAX_CONNECTIONS=1 puts the graph's memory waits and ddo's loads, issued "
          "after the launch, in one queue, where a wait would block its own load. Unset it (or set "
          "2..32), or run the linear route (execution_mode = linear_runtime), whose replays "
          "load inside the graph");
  }
  [[nodiscard]] std::uint32_t* allocate_flags(std::size_t n) { return linear_.allocate_flags(n); }
  void free_flags(std::uint32_t* flags, std::size_t n) { linear_.free_flags(flags, n); }
  void wait_value(stream_view s, std::uint32_t* flag, std::uint32_t v) {
    linear_.wait_value(s, flag, v);
  }
  void write_value(stream_view s, std::uint32_t* flag, std::uint32_t v) {
    linear_.write_value(s, flag, v);
  }

  // --- the window -----------------------------------------------------------------------------
  [[nodiscard]] std::uint64_t vmm_granularity() const noexcept { return vmm_driver().granularity(); }
  /// @brief ddo's device bytes: cudaMalloc'd (residents) plus physical handles.
  [[nodiscard]] std::uint64_t device_bytes_in_use() const {
    return linear_.device_bytes_in_use() + vmm_driver().ledger().in_use(ledger_kind::device);
  }

  // --- copies: the reservation is device memory while mapped (the runtime orders that) ---------
  void copy_to_device(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s) {
    if (!reserved(dst, bytes)) return linear_.copy_to_device(dst, src, bytes, s);
    DDO_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s.handle));
  }
  void copy_to_host(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s) {
    if (!reserved(src, bytes)) return linear_.copy_to_host(dst, src, bytes, s);
    DDO_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s.handle));
  }
  void fill_device(std::byte* dst, int value, std::size_t bytes, stream_view s) {
    if (!reserved(dst, bytes)) return linear_.fill_device(dst, value, bytes, s);
    DDO_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, s.handle));
  }

 private:
  // The device is made current before the driver probes it (as the linear transport does).
  static int current_device(int ordinal) {
    DDO_CUDA_TRY(cudaSetDevice(ordinal));
    return ordinal;
  }
  linear_transport linear_;
};

static_assert(transport<vmm_transport>);
static_assert(transport_with_stable_addresses<vmm_transport>);
static_assert(transport_with_window_sizing<vmm_transport>);
static_assert(transport_with_thread_binding<vmm_transport>);
static_assert(transport_with_ledger<vmm_transport>);
static_assert(transport_with_graph_streaming<vmm_transport>);

}  // namespace v0
}  // namespace ddo
