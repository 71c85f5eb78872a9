// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::native_vmm_options: the settings of the native VMM route (`vmm_fast_runtime`,
/// `--ddo-backend vmm --ddo-preset auto`), how they come from the config
/// (native_vmm_options_from), which VMM route a config selects (vmm_route_name), and the
/// counters the route reports (native_vmm_stats). docs/transports.md ("The native route") says
/// how ddo reads each field.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/units.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One native window and one retained-source registration segment: 64 MiB (the
/// reference's segment; also the VMM handle size measured best on the H200).
inline constexpr std::uint64_t native_window_bytes = 64 * mib;

/// @brief Settings of the native VMM route's host side (runtime_options::native_vmm).
struct native_vmm_options {
  /// The route runs natively: vmm_native_transport, or a positive vmm_source_cache_gb (source
  /// retention selects the native transport, as the reference says).
  bool enabled = false;
  /// One registered host window (native_window_bytes; tests use smaller ones).
  std::uint64_t window_bytes = native_window_bytes;
  /// vmm_staging_buffer_gb: the TOTAL host staging, rounded down to whole windows (at least two,
  /// refused otherwise): a ceiling. Registered once at setup; pageable and file pieces go
  /// through them.
  std::uint64_t staging_total_bytes = 0;
  /// The most of that total ddo registers and cycles (whole windows, at least two): the staging
  /// loop refills a small ring while it is still in the CPU's cache. Measured on the H200's host
  /// (300 MiB L3), 8 threads copying pageable memory into pinned memory beside a running H2D
  /// stream: 51 GB/s into 128 MiB, 34 GB/s into 256 MiB, 29 GB/s into 1.25 GiB — a ring of the
  /// whole 1.25 GiB total ran the route at 1.9x the PCIe bound (docs/transports.md).
  std::uint64_t window_cap_bytes = 2 * native_window_bytes;
  /// vmm_source_cache_gb: ceiling of host storage retaining file-sourced weights after their
  /// first read (0: no retention).
  std::uint64_t source_cache_bytes = 0;
  /// vmm_source_registered_gb: the part of the storage registered, whole segments of
  /// segment_bytes (0: the whole storage).
  std::uint64_t source_registered_bytes = 0;
  /// Registration segment of the retained storage (native_window_bytes; tests use smaller).
  std::uint64_t segment_bytes = native_window_bytes;
  /// vmm_native_source_cache_slot_mb / _slots: the slot micro-cache (both 0: off).
  std::uint64_t micro_cache_slot_bytes = 0;
  std::size_t micro_cache_slots = 0;
  /// vmm_component_tensor_ownership: the route owns every tensor of the component (plan rewrite,
  /// runtime/component_ownership.hpp).
  bool component_tensor_ownership = false;
  /// vmm_component_buffer_limit_mb: ceiling of the payload copied once to the device under
  /// component ownership.
  std::uint64_t component_buffer_limit_bytes = 1 * mib;
};

/// @brief What the native route did (offload_metrics::native).
struct native_vmm_stats {
  bool enabled = false;
  std::size_t windows = 0;                  ///< registered host windows (≤ window_cap_bytes)
  std::size_t windows_allowed = 0;          ///< whole windows in vmm_staging_buffer_gb
  std::uint64_t window_bytes = 0;           ///< one window
  std::uint64_t retained_capacity = 0;      ///< retained storage allocated (≤ the ceiling)
  std::uint64_t retained_registered = 0;    ///< of it, registered
  std::uint64_t retained_bytes = 0;         ///< file bytes read into the storage (first reads)
  std::uint64_t retained_direct_bytes = 0;  ///< copied straight from registered storage
  std::uint64_t retained_staged_bytes = 0;  ///< copied from unregistered storage via the windows
  std::uint64_t registration_fallbacks = 0; ///< storage segments the driver refused (staged)
  std::uint64_t window_bytes_staged = 0;    ///< bytes through the windows
  std::uint64_t micro_cache_hits = 0;
  std::uint64_t micro_cache_misses = 0;
};

/// @brief Whether @p c selects the native route: vmm_runtime with vmm_native_transport or a
/// positive vmm_source_cache_gb.
[[nodiscard]] inline bool native_vmm_selected(const dynamic_offload_config& c) noexcept {
  return c.execution_mode == exec_mode::vmm_runtime &&
         (c.vmm_native_transport || c.vmm_source_cache_gb > 0.0);
}

/// @brief The VMM route @p c selects: "vmm_fast_runtime" (native), "vmm_runtime" (legacy) or
/// "" (not a VMM route).
[[nodiscard]] inline std::string_view vmm_route_name(const dynamic_offload_config& c) noexcept {
  if (c.execution_mode != exec_mode::vmm_runtime) return {};
  return native_vmm_selected(c) ? "vmm_fast_runtime" : "vmm_runtime";
}

/// @brief The native route's settings from a resolved config (disabled unless
/// native_vmm_selected).
[[nodiscard]] inline native_vmm_options native_vmm_options_from(const dynamic_offload_config& c) {
  native_vmm_options o;
  o.enabled = native_vmm_selected(c);
  o.staging_total_bytes = gib_to_bytes(c.vmm_staging_buffer_gb);
  o.source_cache_bytes = gib_to_bytes(c.vmm_source_cache_gb);
  o.source_registered_bytes = gib_to_bytes(c.vmm_source_registered_gb);
  o.micro_cache_slot_bytes = c.vmm_native_source_cache_slot_mb * mib;
  o.micro_cache_slots = static_cast<std::size_t>(c.vmm_native_source_cache_slots);
  o.component_tensor_ownership = c.vmm_component_tensor_ownership;
  o.component_buffer_limit_bytes = c.vmm_component_buffer_limit_mb * mib;
  return o;
}

}  // namespace v0
}  // namespace ddo
