// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::vmm_window_stats: what a VMM window (transport/vmm.hpp, host_sim_vmm.hpp) did
/// since setup — driver calls, retries, and the host time they took (steady clock around each
/// cuMemMap / cuMemSetAccess / cuMemUnmap on ddo's staging thread). A value header: the runtime's
/// metrics carry it (offload_metrics::vmm) without including the window.

#include <cstddef>
#include <cstdint>

namespace ddo {
inline namespace v0 {

/// @brief Counters of a VMM window (host time in the driver calls, calls, retries). All zero on
/// a transport without one.
struct vmm_window_stats {
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
  std::uint64_t access_calls = 0;
  std::uint64_t retries = 0;
  std::uint64_t binds = 0;
  std::uint64_t bytes_mapped = 0;    ///< bytes of group ranges mapped by bind (sum over binds)
  double map_ms = 0, access_ms = 0, unmap_ms = 0;  ///< host time in those calls (after setup)
  std::uint64_t handle_bytes = 0;    ///< one handle
  std::uint64_t handle_count = 0;
  std::uint64_t reserved_bytes = 0;  ///< the address reservation
  std::size_t slots = 0;

  /// @brief Host milliseconds in map, set-access and unmap since setup.
  [[nodiscard]] double host_ms() const noexcept { return map_ms + access_ms + unmap_ms; }
  /// @brief host_ms() per GB (1e9 bytes) of @p loaded_bytes (e.g. offload_metrics::totals.bytes());
  /// 0 when nothing was loaded.
  [[nodiscard]] double host_ms_per_gb(std::uint64_t loaded_bytes) const noexcept {
    return loaded_bytes == 0 ? 0.0 : host_ms() / (static_cast<double>(loaded_bytes) / 1e9);
  }
  /// @brief Physical bytes of the window's handles (the mapped budget's window part).
  [[nodiscard]] std::uint64_t physical_bytes() const noexcept { return handle_bytes * handle_count; }
};

}  // namespace v0
}  // namespace ddo
