// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::linear_transport: CUDA asynchronous copies into device buffers (the runtime's ring
/// of slots), on streams created with cudaStreamNonBlocking and ordered by events created with
/// cudaEventDisableTiming (timing events only where metrics ask for them).
///
/// The transport accounts for its device, pinned and registered bytes in an allocation_ledger
/// (transport/allocation_ledger.hpp). In checked builds (ledger_checks_copies) a copy outside a
/// device allocation is a usage_error before it reaches the driver; release builds skip that
/// lookup, so the copy path takes no lock. Every CUDA call is checked: a failure is a
/// ddo::cuda_error naming it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include <cuda_runtime_api.h>

#include "ddo/core/error.hpp"
#include "ddo/platform/cuda_device.hpp"
#include "ddo/platform/cuda_driver.hpp"
#include "ddo/transport/allocation_ledger.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/limited_ledger.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Settings of the linear transport.
struct linear_options {
  int device = 0;  ///< CUDA device ordinal; made current by the constructor
  /// Hard cap on device bytes this transport may allocate (0: only what the device has).
  std::uint64_t device_limit_bytes = 0;
};

namespace detail {
struct linear_state {
  explicit linear_state(const linear_options& o)
      : options(o),
        memory("linear",
               {.device = o.device_limit_bytes != 0 ? o.device_limit_bytes : unlimited_bytes},
               "the transport's device limit") {}
  linear_options options;
  limited_ledger memory;  // device_limit_bytes checked and the ledger updated as one step
  std::once_flag memory_ops_once;  // the stream memory operations, fetched at first use
  std::unique_ptr<stream_memory_api> memory_ops;
};

/// Switches the calling thread's stream-capture mode to relaxed while alive, so that a pinned
/// allocation made while the engine captures in global mode is not refused as unsafe
/// (cudaThreadExchangeStreamCaptureMode, meant for libraries), and so that a teardown while the
/// engine's capture is still open (an exception left it so) can still synchronize and free.
/// Never throws: the exchange fails only for an invalid mode, and the calls it lets through
/// report their own errors.
class relaxed_capture_mode {
 public:
  relaxed_capture_mode() noexcept
      : exchanged_(cudaThreadExchangeStreamCaptureMode(&mode_) == cudaSuccess) {}
  ~relaxed_capture_mode() {
    if (exchanged_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  relaxed_capture_mode(const relaxed_capture_mode&) = delete;
  relaxed_capture_mode& operator=(const relaxed_capture_mode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool exchanged_;
};
}  // namespace detail

/// @brief The CUDA linear transport. Copies of the object share the allocation table.
class linear_transport {
 public:
  using transport_category = transport_tag;

  /// @brief A non-owning stream: converts from the engine's cudaStream_t.
  struct stream_view {
    cudaStream_t handle = nullptr;
    stream_view() = default;
    stream_view(cudaStream_t h) noexcept : handle(h) {}  // NOLINT: implicit on purpose
    friend bool operator==(stream_view, stream_view) = default;
  };

  /// @brief An owning non-blocking stream.
  class stream {
   public:
    stream() = default;
    stream(stream&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
    stream& operator=(stream&& o) noexcept {
      if (this != &o) {
        reset();
        handle_ = std::exchange(o.handle_, nullptr);
      }
      return *this;
    }
    ~stream() { reset(); }
    [[nodiscard]] cudaStream_t get() const noexcept { return handle_; }

   private:
    friend class linear_transport;
    void reset() noexcept {
      if (handle_ != nullptr) DDO_CUDA_TRY_NOTHROW(cudaStreamDestroy(handle_));
      handle_ = nullptr;
    }
    cudaStream_t handle_ = nullptr;
  };

  /// @brief An owning event (cudaEventDisableTiming unless created for timing).
  class event {
   public:
    event() = default;
    event(event&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
    event& operator=(event&& o) noexcept {
      if (this != &o) {
        reset();
        handle_ = std::exchange(o.handle_, nullptr);
      }
      return *this;
    }
    ~event() { reset(); }
    [[nodiscard]] cudaEvent_t get() const noexcept { return handle_; }

   private:
    friend class linear_transport;
    void reset() noexcept {
      if (handle_ != nullptr) DDO_CUDA_TRY_NOTHROW(cudaEventDestroy(handle_));
      handle_ = nullptr;
    }
    cudaEvent_t handle_ = nullptr;
  };

  /// @brief Makes @p options.device current. @throws cuda_error (e.g. no device).
  explicit linear_transport(linear_options options = {})
      : state_(std::make_shared<detail::linear_state>(options)) {
    DDO_CUDA_TRY(cudaSetDevice(options.device));
  }

  [[nodiscard]] std::string_view name() const noexcept { return "linear"; }
  /// @brief Makes the transport's device current on the calling thread; the runtime calls it
  /// first on each of its own threads (staging, binding, pinning). Their capture mode becomes
  /// thread-local: they never capture, and their host waits (a binder's event synchronize) must
  /// not be refused, nor invalidate the capture, while an engine captures in global mode.
  void bind_thread() {
    DDO_CUDA_TRY(cudaSetDevice(state_->options.device));
    cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
    DDO_CUDA_TRY(cudaThreadExchangeStreamCaptureMode(&mode));
  }
  [[nodiscard]] int device() const noexcept { return state_->options.device; }

  [[nodiscard]] stream make_stream() {
    stream s;
    DDO_CUDA_TRY(cudaStreamCreateWithFlags(&s.handle_, cudaStreamNonBlocking));
    return s;
  }
  [[nodiscard]] static stream_view view(stream& s) noexcept { return {s.get()}; }

  [[nodiscard]] event make_event(bool timing) {
    event e;
    DDO_CUDA_TRY(cudaEventCreateWithFlags(&e.handle_, timing ? cudaEventDefault
                                                             : cudaEventDisableTiming));
    return e;
  }

  /// @brief Whether @p s is being captured into a CUDA graph (cudaStreamIsCapturing).
  [[nodiscard]] static bool capturing(stream_view s) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    DDO_CUDA_TRY(cudaStreamIsCapturing(s.handle, &status));
    return status == cudaStreamCaptureStatusActive;
  }
  /// @brief The id of the capture @p s takes part in (cudaStreamGetCaptureInfo): the same for the
  /// stream that began it and every stream forked into it; 0 when @p s is not capturing.
  [[nodiscard]] static std::uint64_t capture_id(stream_view s) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    DDO_CUDA_TRY(cudaStreamGetCaptureInfo(s.handle, &status, &id));
    return status == cudaStreamCaptureStatusActive ? static_cast<std::uint64_t>(id) : 0;
  }
  /// @brief Records @p e on @p s. On a stream being captured into a CUDA graph the record
  /// becomes an event record node (cudaEventRecordExternal): each launch of the graph records
  /// @p e, so ddo's release events cover a replayed graph's reads.
  void record(event& e, stream_view s) {
    if (capturing(s))
      DDO_CUDA_TRY(cudaEventRecordWithFlags(e.handle_, s.handle, cudaEventRecordExternal));
    else
      DDO_CUDA_TRY(cudaEventRecord(e.handle_, s.handle));
  }
  /// @brief Makes @p s wait for @p e's most recent record. On a stream being captured the wait
  /// becomes an event wait node (cudaEventWaitExternal), which waits on the record @p e has when
  /// the graph is launched (docs/transports.md, "CUDA graphs").
  void wait(stream_view s, const event& e) {
    DDO_CUDA_TRY(cudaStreamWaitEvent(s.handle, e.handle_, capturing(s) ? cudaEventWaitExternal : 0));
  }
  // --- graph streaming (issue 29; docs/transports.md, "CUDA graphs") -------------------------
  /// @brief Inside one capture, an edge between two of its streams (fork or join): a plain
  /// cudaEventRecord on @p s, which a later wait_edge on another stream turns into a dependency
  /// of the graph (not a node). A @p s that is not capturing records as usual.
  void record_edge(event& e, stream_view s) { DDO_CUDA_TRY(cudaEventRecord(e.handle_, s.handle)); }
  /// @brief Makes @p s depend on @p e's record_edge in the same capture; a stream not yet
  /// capturing joins the capture (a fork). Unlike wait(), never an external wait node.
  void wait_edge(stream_view s, const event& e) {
    DDO_CUDA_TRY(cudaStreamWaitEvent(s.handle, e.handle_, 0));
  }
  using graph_exec = cudaGraphExec_t;
  /// @brief cudaGraphLaunch of @p g on @p s.
  void launch_graph(const graph_exec& g, stream_view s) { DDO_CUDA_TRY(cudaGraphLaunch(g, s.handle)); }
  /// @brief A guard that relaxes the calling thread's capture mode while graph streaming makes
  /// its flags and events inside an engine's (possibly global-mode) capture.
  [[nodiscard]] static detail::relaxed_capture_mode relaxed_capture() { return {}; }
  /// @brief Fetches the 32-bit stream memory operations. @throws usage_error naming the entry
  /// point the driver lacks (every CUDA 12 driver has both).
  void check_graph_streaming() { (void)memory_ops(); }
  /// @brief @p count zeroed 32-bit flags in mapped pinned host memory: the device waits on them,
  /// the host may write them (teardown). Counted as pinned memory.
  [[nodiscard]] std::uint32_t* allocate_flags(std::size_t count) {
    DDO_EXPECTS(count > 0, "linear_transport::allocate_flags: zero flags requested");
    const std::size_t bytes = count * sizeof(std::uint32_t);
    auto* p = state_->memory.allocate(ledger_kind::pinned, bytes, "linear_transport::allocate_flags", [&] {
      void* h = nullptr;
      DDO_CUDA_TRY(cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
      void* d = nullptr;
      try {
        DDO_CUDA_TRY(cudaHostGetDevicePointer(&d, h, 0));
      } catch (...) {
        (void)cudaFreeHost(h);  // not in the ledger yet: nobody else frees it
        throw;
      }
      if (d != h) {
        (void)cudaFreeHost(h);
        throw usage_error("linear_transport::allocate_flags: mapped host memory has another "
                          "device address (no unified addressing); graph streaming needs UVA");
      }
      return static_cast<std::byte*>(h);
    });
    std::memset(p, 0, bytes);
    return reinterpret_cast<std::uint32_t*>(p);
  }
  void free_flags(std::uint32_t* flags, std::size_t count) {
    free_pinned(reinterpret_cast<std::byte*>(flags), count * sizeof(std::uint32_t));
  }
  /// @brief Later work on @p s waits until `*flag == value` (cuStreamWaitValue32, EQ); captured,
  /// a batch memory-operation node holding @p value.
  void wait_value(stream_view s, std::uint32_t* flag, std::uint32_t value) {
    const auto& api = memory_ops();
    DDO_CU_TRY(api, api.wait_value(s.handle, reinterpret_cast<std::uintptr_t>(flag), value));
  }
  /// @brief Writes `*flag = value` after the work before it on @p s (cuStreamWriteValue32).
  void write_value(stream_view s, std::uint32_t* flag, std::uint32_t value) {
    const auto& api = memory_ops();
    DDO_CU_TRY(api, api.write_value(s.handle, reinterpret_cast<std::uintptr_t>(flag), value));
  }

  [[nodiscard]] bool ready(const event& e) {
    const cudaError_t status = cudaEventQuery(e.handle_);
    if (status == cudaSuccess) return true;
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    DDO_CUDA_TRY(status);
    return false;
  }
  void synchronize(const event& e) { DDO_CUDA_TRY(cudaEventSynchronize(e.handle_)); }
  void synchronize(stream_view s) { DDO_CUDA_TRY(cudaStreamSynchronize(s.handle)); }
  /// @brief Milliseconds between two timing events; waits for both to complete first.
  [[nodiscard]] double elapsed_ms(const event& start, const event& end) {
    DDO_CUDA_TRY(cudaEventSynchronize(start.handle_));
    DDO_CUDA_TRY(cudaEventSynchronize(end.handle_));
    float ms = 0.0f;
    DDO_CUDA_TRY(cudaEventElapsedTime(&ms, start.handle_, end.handle_));
    return ms;
  }

  [[nodiscard]] std::byte* allocate_device(std::size_t bytes) {
    DDO_EXPECTS(bytes > 0, "linear_transport::allocate_device: zero bytes requested");
    return state_->memory.allocate(ledger_kind::device, bytes, "linear_transport::allocate_device", [&] {
      void* p = nullptr;
      const cudaError_t status = cudaMalloc(&p, bytes);
      if (status == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        std::size_t free_b = 0, total_b = 0;
        (void)cudaMemGetInfo(&free_b, &total_b);
        throw out_of_memory(memory_tier::device, bytes, free_b,
                            "linear: cudaMalloc of " + std::to_string(bytes) + " bytes failed with " +
                                std::to_string(free_b) + " bytes free of " + std::to_string(total_b));
      }
      DDO_CUDA_TRY(status);
      return static_cast<std::byte*>(p);
    });
  }

  void free_device(std::byte* p, std::size_t bytes) {
    state_->memory.remove(ledger_kind::device, p, bytes, "linear_transport::free_device");
    DDO_CUDA_TRY(cudaFree(p));
  }

  [[nodiscard]] std::byte* allocate_pinned(std::size_t bytes) {
    DDO_EXPECTS(bytes > 0, "linear_transport::allocate_pinned: zero bytes requested");
    return state_->memory.allocate(ledger_kind::pinned, bytes, "linear_transport::allocate_pinned", [&] {
      void* p = nullptr;
      DDO_CUDA_TRY(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
      return static_cast<std::byte*>(p);
    });
  }

  void free_pinned(std::byte* p, std::size_t bytes) {
    state_->memory.remove(ledger_kind::pinned, p, bytes, "linear_transport::free_pinned");
    DDO_CUDA_TRY(cudaFreeHost(p));
  }

  /// @brief cudaHostRegister; false (error cleared) when the driver refuses.
  [[nodiscard]] bool register_host(void* p, std::size_t bytes) {
    DDO_EXPECTS(p != nullptr && bytes > 0,
                "linear_transport::register_host: null pointer or zero bytes");
    // Portable: the pages count as pinned for every device's context, not only the current one.
    const cudaError_t status = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    state_->memory.add(ledger_kind::registered, p, bytes, "linear_transport::register_host");
    return true;
  }

  void unregister_host(void* p) {
    state_->memory.remove(ledger_kind::registered, p, 0, "linear_transport::unregister_host");
    DDO_CUDA_TRY(cudaHostUnregister(p));
  }

  /// @brief cudaMemcpyAsync host → device on @p s. The source must be pinned or registered and
  /// stay unchanged until the copy completed (record an event after it).
  void copy_to_device(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s) {
    if constexpr (ledger_checks_copies) check_device_range(dst, bytes, "copy_to_device");
    DDO_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s.handle));
  }
  /// @brief cudaMemcpyAsync device → host on @p s.
  void copy_to_host(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s) {
    if constexpr (ledger_checks_copies) check_device_range(src, bytes, "copy_to_host");
    DDO_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s.handle));
  }
  /// @brief cudaMemsetAsync on @p s (poisoning).
  void fill_device(std::byte* dst, int value, std::size_t bytes, stream_view s) {
    if constexpr (ledger_checks_copies) check_device_range(dst, bytes, "fill_device");
    DDO_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, s.handle));
  }

  /// @brief Free and total device memory (cudaMemGetInfo), capped by device_limit_bytes.
  [[nodiscard]] device_memory_info device_memory() const {
    auto info = query_device_memory(state_->options.device);
    const auto& memory = state_->memory;
    info.free_bytes = std::min<std::uint64_t>(info.free_bytes, memory.available(ledger_kind::device));
    info.total_bytes = std::min<std::uint64_t>(info.total_bytes, memory.limit_of(ledger_kind::device));
    return info;
  }

  /// @brief The shared account of this transport's allocations.
  [[nodiscard]] const allocation_ledger& ledger() const noexcept { return state_->memory.ledger(); }
  [[nodiscard]] std::uint64_t device_bytes_in_use() const {
    return state_->memory.ledger().in_use(ledger_kind::device);
  }
  [[nodiscard]] std::uint64_t peak_device_bytes() const {
    return state_->memory.ledger().peak(ledger_kind::device);
  }
  [[nodiscard]] std::uint64_t pinned_bytes_in_use() const {
    return state_->memory.ledger().in_use(ledger_kind::pinned) +
           state_->memory.ledger().in_use(ledger_kind::registered);
  }
  [[nodiscard]] std::uint64_t registered_bytes_in_use() const {
    return state_->memory.ledger().in_use(ledger_kind::registered);
  }

 private:
  const stream_memory_api& memory_ops() {
    std::call_once(state_->memory_ops_once,
                   [&] { state_->memory_ops = std::make_unique<stream_memory_api>(); });
    if (const char* absent = state_->memory_ops->missing())
      throw usage_error(std::string("linear_transport: graph streaming needs the driver's 32-bit "
                                    "stream memory operations; this driver lacks ") +
                        absent + " (docs/transports.md, CUDA graphs)");
    return *state_->memory_ops;
  }
  void check_device_range(const std::byte* p, std::size_t bytes, const char* what) const {
    if (!state_->memory.ledger().contains(ledger_kind::device, p, bytes))
      throw usage_error(std::string("linear_transport::") + what + ": range of " +
                        std::to_string(bytes) +
                        " bytes is not inside one device allocation of this transport");
  }
  std::shared_ptr<detail::linear_state> state_;
};

static_assert(transport<linear_transport>);
static_assert(transport_with_ledger<linear_transport>);
static_assert(transport_with_thread_binding<linear_transport>);
static_assert(transport_with_graph_streaming<linear_transport>);

}  // namespace v0
}  // namespace ddo
