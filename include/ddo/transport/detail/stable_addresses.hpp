// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The stable-address capability (not API): transport_with_stable_addresses over a VMM
/// window and its driver, written once for both VMM transports (the CUDA one, transport/vmm.hpp,
/// and host_sim's VMM mode, transport/host_sim_vmm.hpp). A transport derives from
/// stable_addresses<Driver> to gain the capability's members; what a copy into the reservation
/// does stays the transport's own (a CUDA copy, or a checked host memcpy).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/detail/vmm_window.hpp"
#include "ddo/transport/vmm_stats.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// The window, its driver and the lock that orders them, shared by copies of a transport.
template <class Driver>
struct stable_address_state {
  template <class... DriverArgs>
  explicit stable_address_state(const vmm_window_options& w, DriverArgs&&... args)
      : window_options(w), driver(std::forward<DriverArgs>(args)...) {}
  vmm_window_options window_options;
  Driver driver;
  std::mutex mutex;  // window calls: setup/teardown on the engine thread, binds on ddo's
  vmm_window<Driver> window;
};

/// transport_with_stable_addresses' members over a vmm_window<Driver> (see the file comment).
template <class Driver>
class stable_addresses {
 public:
  std::size_t prepare_stable_addresses(const stable_address_request& r) {
    std::lock_guard lock(state_->mutex);
    return state_->window.prepare(state_->driver, state_->window_options, r);
  }
  [[nodiscard]] std::byte* stable_address(std::size_t g) { return state_->window.address(g); }
  void bind_stable(std::size_t slot, std::size_t g) {
    std::lock_guard lock(state_->mutex);
    state_->window.bind(slot, g);
  }
  void release_stable_addresses() {
    std::lock_guard lock(state_->mutex);
    state_->window.release();
  }
  /// @brief Raises the window's staging check (vmm_staging_buffer_gb) to at least @p bytes
  /// before setup: the file route over a VMM transport grows its slots when the size came from a
  /// preset (nvme_transport::grow_staging_slot) and stages each group through them, so the check
  /// that a group fits its staging follows the grown slot. No effect on the native route (no
  /// check: 0). @throws usage_error once the window is prepared.
  void grow_staging_buffer(std::uint64_t bytes) {
    std::lock_guard lock(state_->mutex);
    DDO_EXPECTS(!state_->window.prepared(),
                "grow_staging_buffer: the VMM window is already prepared");
    auto& check = state_->window_options.staging_buffer_bytes;
    if (check != 0) check = std::max(check, bytes);
  }
  /// @brief The window's staging check in bytes (vmm_staging_buffer_gb, grown or not; 0: none,
  /// the native route).
  [[nodiscard]] std::uint64_t staging_buffer_bytes() const {
    std::lock_guard lock(state_->mutex);
    return state_->window_options.staging_buffer_bytes;
  }
  /// @brief transport_with_window_sizing: the legacy route stages a group's pageable bytes
  /// through one of two pinned buffers of vmm_staging_buffer_gb, and the window refuses a group
  /// that stages more (FLUX.1's 648 MiB double blocks against the default 640 MiB): a preset's or
  /// the default size grows to the largest group that may stream, as the file route's slots do; a
  /// size the user set is honoured or refused by the window. The native route stages through its
  /// own windows: nothing to size.
  window_sizing size_window(const window_sizing_request& r) {
    window_sizing a;
    if (!r.streams || r.native_route) return a;
    if (!r.staging_stated && r.largest_group_bytes > staging_buffer_bytes()) {
      grow_staging_buffer(r.largest_group_bytes);
      a.grown = true;
    }
    a.staging_bytes = staging_buffer_bytes();
    share_resident_budget(r, a);
    return a;
  }
  /// The legacy route maps resident weights and its window inside vmm_resident_weight_budget_gb:
  /// @p a gets one window slot of it. The handle as vmm_window_options::handle_bytes picks it
  /// (vmm_page_mb, else 64 MiB or the largest group in 2 MiB pages when that is smaller).
  static void share_resident_budget(const window_sizing_request& r, window_sizing& a) {
    if (!r.streams || r.native_route || r.resident_budget_bytes == 0) return;
    a.shares_resident_budget = true;
    a.window_slot_bytes =
        round_up(r.slot_bytes, vmm_handle_bytes(r.page_bytes, r.slot_bytes, 2 * mib));
  }
  /// @brief Whether the window is prepared (held by an offloader until it releases it): one
  /// window per transport object, so a second offloader on it must wait for the release.
  [[nodiscard]] bool stable_addresses_prepared() const {
    std::lock_guard lock(state_->mutex);
    return state_->window.prepared();
  }
  [[nodiscard]] vmm_window_stats vmm_stats() const {
    std::lock_guard lock(state_->mutex);
    return state_->window.stats();
  }
  /// @brief Bytes of physical handles (the window part of the mapped budget).
  [[nodiscard]] std::uint64_t vmm_physical_bytes() const {
    std::lock_guard lock(state_->mutex);
    return state_->window.physical_bytes();
  }
  [[nodiscard]] std::size_t live_handles() const { return state_->driver.live_handles(); }

 protected:
  template <class... DriverArgs>
  explicit stable_addresses(const vmm_window_options& w, DriverArgs&&... args)
      : state_(
            std::make_shared<stable_address_state<Driver>>(w, std::forward<DriverArgs>(args)...)) {}

  /// Whether [p, p + n) lies inside the window's reservation (a copy there is the driver's).
  [[nodiscard]] bool reserved(const std::byte* p, std::size_t n) const {
    std::lock_guard lock(state_->mutex);
    return state_->window.reserves(p, n);
  }
  [[nodiscard]] Driver& vmm_driver() const noexcept { return state_->driver; }

 private:
  std::shared_ptr<stable_address_state<Driver>> state_;
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo
