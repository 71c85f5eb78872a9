// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::host_sim_vmm_transport: host_sim's VMM mode. The CUDA virtual-memory calls are
/// simulated with the operating system's own virtual memory, so the VMM route's whole logic runs
/// in CI under the sanitizers:
/// - an address reservation is an inaccessible anonymous mapping (reads of it fault);
/// - a physical handle is a memfd of the handle's size, accounted as simulated device memory
///   (the capacity of host_sim_options applies);
/// - map places the handle's pages at an address of a reservation (MAP_FIXED of the memfd), so
///   the bytes live in the handle and follow it when it is mapped elsewhere, exactly like
///   cuMemMap; set-access makes the range readable and writable; unmap puts the inaccessible
///   reservation back.
///
/// The ordering rules of the driver are enforced (a usage_error names the broken one): mapping
/// a handle that is still mapped elsewhere, mapping over a mapped range, mapping outside a
/// reservation or off the granularity, unmapping what was not mapped as one piece, setting
/// access on a range with holes, releasing a mapped handle, freeing a reservation that still
/// has mappings, and copying into or out of a range that is not mapped and accessible. A kernel
/// ("engine task") that reads a range after it was unmapped faults.
///
/// Linux only (memfd_create). One offloader per transport object (one window); make one
/// transport per component.

#if defined(__linux__)

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/detail/stable_addresses.hpp"
#include "ddo/transport/detail/transport_adaptor.hpp"
#include "ddo/transport/detail/vmm_window.hpp"
#include "ddo/transport/host_sim.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Settings of host_sim's VMM mode.
struct host_sim_vmm_options {
  host_sim_options device;      ///< the simulated device (capacity applies to physical handles)
  vmm_window_options window;    ///< budget, handle size, staging check, fault injection
  std::uint64_t granularity = 2 * mib;  ///< simulated allocation granularity (page multiple)
  bool vmm_supported = true;    ///< false: construction refuses, as on a device without VMM
};

namespace detail {

/// The simulated driver: reservations, handles and mappings with the driver's rules.
class host_sim_vmm_driver {
 public:
  using handle_type = std::uint64_t;
  static constexpr driver_result not_ready = 600;  // CUDA_ERROR_NOT_READY

  host_sim_vmm_driver(host_sim_transport device, std::uint64_t granularity)
      : device_(std::move(device)), granularity_(granularity) {}
  host_sim_vmm_driver(const host_sim_vmm_driver&) = delete;
  host_sim_vmm_driver& operator=(const host_sim_vmm_driver&) = delete;
  ~host_sim_vmm_driver() {
    for (auto& [p, m] : mappings_) (void)remap_reserved(p, m.bytes);
    for (auto& [id, h] : handles_) {
      ::close(h.fd);
      ::munmap(h.key, h.bytes);
    }
    for (auto& [p, r] : reservations_) ::munmap(r.raw, r.raw_bytes);
  }

  [[nodiscard]] std::uint64_t granularity() const noexcept { return granularity_; }

  driver_result reserve(std::byte** p, std::uint64_t bytes, std::uint64_t alignment) {
    std::lock_guard lock(mutex_);
    require(bytes > 0 && bytes % granularity_ == 0, "reserve: size is not a positive granularity multiple");
    const std::uint64_t raw_bytes = bytes + alignment;
    void* raw = ::mmap(nullptr, raw_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return 2;
    auto* base = static_cast<std::byte*>(raw);
    const auto addr = reinterpret_cast<std::uintptr_t>(base);
    auto* aligned = base + (alignment - addr % alignment) % alignment;
    reservations_[aligned] = {base, raw_bytes, bytes};
    *p = aligned;
    return 0;
  }

  driver_result free_reservation(std::byte* p, std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    auto it = reservations_.find(p);
    require(it != reservations_.end() && it->second.bytes == bytes,
            "free_reservation: no reservation of this size starts here");
    for (const auto& [m, info] : mappings_)
      require(!(m >= p && m < p + bytes), "free_reservation: the reservation still has mappings");
    ::munmap(it->second.raw, it->second.raw_bytes);
    reservations_.erase(it);
    return 0;
  }

  driver_result create(handle_type* h, std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    require(bytes > 0 && bytes % granularity_ == 0, "create: size is not a positive granularity multiple");
    // The key range gives the handle a place in the device ledger (and costs no memory).
    void* key = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (key == MAP_FAILED) return 2;
    try {
      device_.add_device_range(key, bytes, "host_sim VMM handle");
    } catch (const out_of_memory&) {
      ::munmap(key, bytes);
      return 2;  // CUDA_ERROR_OUT_OF_MEMORY
    }
    const int fd = ::memfd_create("ddo_host_sim_vmm", 0);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      if (fd >= 0) ::close(fd);
      device_.remove_device_range(key, bytes, "host_sim VMM handle");
      ::munmap(key, bytes);
      return 2;
    }
    *h = ++next_handle_;
    handles_[*h] = {fd, bytes, static_cast<std::byte*>(key), nullptr};
    return 0;
  }

  driver_result release(handle_type h, std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    auto it = handles_.find(h);
    require(it != handles_.end() && it->second.bytes == bytes, "release: unknown handle");
    require(it->second.mapped_at == nullptr, "release: the handle is still mapped (unmap it first)");
    ::close(it->second.fd);
    device_.remove_device_range(it->second.key, bytes, "host_sim VMM handle");
    ::munmap(it->second.key, bytes);
    handles_.erase(it);
    return 0;
  }

  driver_result map(std::byte* p, std::uint64_t bytes, handle_type h) {
    std::lock_guard lock(mutex_);
    auto it = handles_.find(h);
    require(it != handles_.end(), "map: unknown handle");
    require(it->second.mapped_at == nullptr,
            "map: the handle is still mapped at another range (a range that was not released and "
            "unmapped first)");
    // As cuMemMap: a handle is mapped whole (offset 0, size = the handle's size); anything
    // else is CUDA_ERROR_NOT_SUPPORTED on the device.
    require(bytes == it->second.bytes,
            "map: the size differs from the handle's (the driver maps whole handles only)");
    require(reinterpret_cast<std::uintptr_t>(p) % granularity_ == 0, "map: address off the granularity");
    require(inside_reservation(p, bytes), "map: the range is not inside one reservation");
    require(!overlaps_mapping(p, bytes), "map: the range overlaps a mapped range (unmap it first)");
    void* r = ::mmap(p, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, it->second.fd, 0);
    if (r == MAP_FAILED) return 2;
    it->second.mapped_at = p;
    mappings_[p] = {bytes, h, false};
    return 0;
  }

  driver_result unmap(std::byte* p, std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    auto it = mappings_.find(p);
    require(it != mappings_.end() && it->second.bytes == bytes,
            "unmap: no mapping of this size starts here");
    if (!remap_reserved(p, bytes)) return 2;
    handles_[it->second.handle].mapped_at = nullptr;
    mappings_.erase(it);
    return 0;
  }

  driver_result set_access(std::byte* p, std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    std::byte* at = p;
    std::vector<mapping*> covered;
    while (at < p + bytes) {
      auto it = mappings_.find(at);
      require(it != mappings_.end(), "set_access: the range has an unmapped hole");
      covered.push_back(&it->second);
      at += it->second.bytes;
    }
    require(at == p + bytes, "set_access: the range ends inside a mapping");
    if (::mprotect(p, bytes, PROT_READ | PROT_WRITE) != 0) return 1;
    for (auto* m : covered) m->accessible = true;
    return 0;
  }

  /// Whether [p, p + n) is mapped and accessible throughout (copies check it).
  [[nodiscard]] bool accessible(const std::byte* p, std::uint64_t n) const {
    std::lock_guard lock(mutex_);
    auto it = mappings_.upper_bound(const_cast<std::byte*>(p));
    if (it == mappings_.begin()) return false;
    --it;
    const std::byte* at = p;
    while (at < p + n) {
      if (it == mappings_.end() || !it->second.accessible || it->first > at ||
          it->first + it->second.bytes <= at)
        return false;
      at = it->first + it->second.bytes;
      ++it;
    }
    return true;
  }

  [[noreturn]] void fail(driver_result r, const char* call) const {
    detail::throw_driver_error(r, r == not_ready ? "CUDA_ERROR_NOT_READY" : r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUresult",
                       call, __FILE__, __LINE__);
  }

  [[nodiscard]] std::size_t live_handles() const { std::lock_guard lock(mutex_); return handles_.size(); }
  [[nodiscard]] std::size_t live_mappings() const { std::lock_guard lock(mutex_); return mappings_.size(); }
  [[nodiscard]] std::size_t live_reservations() const { std::lock_guard lock(mutex_); return reservations_.size(); }

 private:
  struct reservation { std::byte* raw; std::uint64_t raw_bytes; std::uint64_t bytes; };
  struct handle { int fd; std::uint64_t bytes; std::byte* key; std::byte* mapped_at; };
  struct mapping { std::uint64_t bytes; handle_type handle; bool accessible; };

  static void require(bool ok, const char* what) {
    if (!ok) throw usage_error(std::string("host_sim VMM: ") + what);
  }
  static bool remap_reserved(std::byte* p, std::uint64_t bytes) {
    return ::mmap(p, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != MAP_FAILED;
  }
  [[nodiscard]] bool inside_reservation(const std::byte* p, std::uint64_t n) const {
    for (const auto& [base, r] : reservations_)
      if (p >= base && p + n <= base + r.bytes) return true;
    return false;
  }
  [[nodiscard]] bool overlaps_mapping(const std::byte* p, std::uint64_t n) const {
    for (const auto& [m, info] : mappings_)
      if (m < p + n && p < m + info.bytes) return true;
    return false;
  }

  host_sim_transport device_;
  std::uint64_t granularity_;
  mutable std::mutex mutex_;
  std::map<std::byte*, reservation> reservations_;
  std::map<handle_type, handle> handles_;
  std::map<std::byte*, mapping> mappings_;
  handle_type next_handle_ = 0;
};

}  // namespace detail

/// @brief host_sim with stable addresses through simulated VMM (see the file comment): an adaptor
/// over the host_sim_transport it holds (detail::transport_adaptor), with the stable-address
/// window over the simulated driver.
class host_sim_vmm_transport
    : public detail::transport_adaptor<host_sim_transport>,
      public detail::stable_addresses<detail::host_sim_vmm_driver> {
  using adaptor = detail::transport_adaptor<host_sim_transport>;
  using window = detail::stable_addresses<detail::host_sim_vmm_driver>;

 public:
  /// @throws usage_error when the simulated device has no VMM support.
  explicit host_sim_vmm_transport(host_sim_vmm_options options = {})
      : adaptor(host_sim_transport(checked(options).device)),
        window(options.window, upstream(), options.granularity) {}

  [[nodiscard]] std::string_view name() const noexcept { return "host_sim_vmm"; }

  // Both bases declare the window's operations (the adaptor forwards them where its upstream
  // has them): the window's.
  using window::bind_stable;
  using window::prepare_stable_addresses;
  using window::release_stable_addresses;
  using window::size_window;
  using window::stable_address;

  [[nodiscard]] std::size_t live_mappings() const { return vmm_driver().live_mappings(); }
  [[nodiscard]] std::size_t live_reservations() const { return vmm_driver().live_reservations(); }
  /// @brief The simulated driver (tests of its ordering rules).
  [[nodiscard]] detail::host_sim_vmm_driver& driver() noexcept { return vmm_driver(); }

  /// @brief Whether a simulated kernel may read [p, p + n): outside the reservation, or mapped
  /// and accessible (tests: a read of an unmapped range would fault the process).
  [[nodiscard]] bool readable(const std::byte* p, std::size_t n) const {
    return !reserved(p, n) || vmm_driver().accessible(p, n);
  }

  // --- copies: mapped ranges are device memory while mapped and accessible -----------------------
  // Never captured into a graph: CUDA checks a memcpy node's range when it is captured and a
  // memset node's when the graph is instantiated (cudaErrorInvalidValue on the H200 for a range
  // not mapped then), and a range mapped then may hold another group at a replay. Graph streaming
  // therefore loads stable ranges on ddo's staging stream and captures no fill of them.
  void copy_to_device(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s) {
    if (!reserved(dst, bytes)) return upstream().copy_to_device(dst, src, bytes, s);
    checked_task(s, dst, bytes, "copy_to_device",
                 [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  void copy_to_host(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s) {
    if (!reserved(src, bytes)) return upstream().copy_to_host(dst, src, bytes, s);
    checked_task(s, src, bytes, "copy_to_host",
                 [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  void fill_device(std::byte* dst, int value, std::size_t bytes, stream_view s) {
    if (!reserved(dst, bytes)) return upstream().fill_device(dst, value, bytes, s);
    checked_task(s, dst, bytes, "fill_device",
                 [dst, value, bytes] { std::memset(dst, value, bytes); });
  }

 private:
  static const host_sim_vmm_options& checked(const host_sim_vmm_options& options) {
    if (!options.vmm_supported)
      throw usage_error("host_sim VMM: the simulated device reports no virtual-memory-management "
                        "support; use the linear route (backend = host_sim) instead");
    DDO_EXPECTS(options.granularity > 0 && options.granularity % 4096 == 0,
                "host_sim_vmm_options::granularity must be a positive multiple of 4096");
    return options;
  }
  static void require_mapped(const detail::host_sim_vmm_driver& d, const std::byte* p,
                             std::size_t n, const char* what) {
    if (!d.accessible(p, n))
      throw usage_error(std::string("host_sim_vmm_transport::") + what + ": " + std::to_string(n) +
                        " bytes of the VMM reservation are not mapped and accessible (a copy "
                        "issued before its range was mapped, or after it was unmapped)");
  }
  /// Issues @p task on @p s after checking [p, p + n) is mapped; refused on a capturing stream
  /// (see above).
  template <class F>
  void checked_task(stream_view s, const std::byte* p, std::size_t n, const char* what, F task) {
    if (host_sim_transport::capturing(s))
      throw usage_error(std::string("host_sim_vmm_transport::") + what + ": " + std::to_string(n) +
                        " bytes of the VMM reservation in a stream being captured; CUDA refuses "
                        "a copy or fill node on a range not mapped at capture or instantiation, "
                        "and the range may hold another group at a replay: read stable "
                        "addresses from kernels only");
    require_mapped(vmm_driver(), p, n, what);
    upstream().enqueue(s, std::move(task));
  }
};

static_assert(transport<host_sim_vmm_transport>);
static_assert(transport_with_stable_addresses<host_sim_vmm_transport>);
static_assert(transport_with_window_sizing<host_sim_vmm_transport>);
static_assert(transport_with_ledger<host_sim_vmm_transport>);
static_assert(transport_with_graph_streaming<host_sim_vmm_transport>);

}  // namespace v0
}  // namespace ddo

#endif  // __linux__
