// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::dynamic_offload_config: every field of the configuration reference's config tables,
/// with the dataclass defaults.
///
/// Field names are the reference's. Sizes keep the unit their name says: `*_gb` in GiB, `*_mb` in
/// MiB, `*_bytes` in bytes. Validation lives in config/validate.hpp; this header is plain data.

#include <cstdint>
#include <string>
#include <vector>

#include "ddo/core/module_kind.hpp"
#include "ddo/core/safetensors_backend.hpp"

namespace ddo {
inline namespace v0 {

/// @brief plan builds the placement plan only; linear_runtime streams through the linear
/// transport; vmm_runtime streams through CUDA virtual-memory mappings.
enum class exec_mode { plan, linear_runtime, vmm_runtime };

/// @brief functional: plain leases. swap: the engine's bound tensor pointers are rewritten to the
/// device copy for the lease and restored after.
enum class runtime_strategy { functional, swap };

/// @brief How a budget picks its winners among candidates in execution order.
enum class selection { first, spread, largest };

/// @brief off: budgets only as given. balanced: derive the resident budget from free VRAM.
enum class budget_policy { off, balanced };

/// @brief Which transport moves non-resident weights (`--ddo-backend`, `DDO_BACKEND`).
/// auto_select ("auto") follows execution_mode: vmm_runtime gives vmm, anything else linear;
/// resolution replaces it with the concrete backend. host_sim stands host memory in for the device.
enum class offload_backend { auto_select, linear, vmm, nvme, host_sim };

/// @brief The configuration of one offloaded module (a model component).
struct dynamic_offload_config {
  // --- general table -------------------------------------------------------------------------
  std::string execution_device = "cuda:0";
  std::string offload_device = "cpu";
  std::vector<module_kind> target_module_classes = {module_kind::linear, module_kind::embedding};
  std::vector<std::string> skip_modules_pattern = {};
  std::vector<std::string> always_resident_modules_pattern = {};
  std::uint64_t small_tensor_threshold_bytes = 16 * 1024;
  exec_mode execution_mode = exec_mode::plan;
  runtime_strategy linear_runtime_strategy = runtime_strategy::functional;
  double vmm_resident_weight_budget_gb = 0.0;
  double vmm_staging_buffer_gb = 0.625;
  bool pin_cpu_memory = false;
  bool allow_pin_memory_fallback = true;
  int pin_cpu_workers = 1;
  bool cache_plan = true;
  bool cache_pinned_weights = false;
  std::string pinned_weight_cache_namespace = "";
  double pinned_weight_cache_budget_gb = 0.0;  // the process's weight registry (ddo addition)
  budget_policy auto_budget_policy = budget_policy::off;
  double max_resident_module_budget_gb = 6.0;
  double auto_vram_headroom_gb = 0.0;
  double profile_vram_headroom_gb = 1.0;
  std::string profile_name = "";
  bool build_profile = false;
  double auto_full_pin_min_model_to_vram_ratio = 4.0;
  double max_pin_weight_budget_gb = 0.0;
  double available_system_ram_gb = 0.0;
  double system_ram_headroom_gb = 6.0;
  double pin_weight_budget_gb = 0.0;
  double pin_weight_budget_ratio = 0.0;
  selection pin_weight_selection = selection::spread;
  double resident_module_budget_gb = 0.0;
  /// Regex patterns naming execution blocks; the single entry "auto" infers common patterns.
  std::vector<std::string> resident_module_patterns = {};
  selection resident_module_selection = selection::spread;
  safetensors_backend load_safetensors_backend = safetensors_backend::library_default;
  bool verbose = false;
  bool show_profile = true;

  // --- native VMM table ----------------------------------------------------------------------
  bool vmm_native_transport = false;
  double vmm_source_cache_gb = 0.0;
  double vmm_source_registered_gb = 0.0;
  std::string vmm_module_pattern = ".*";
  std::uint64_t vmm_page_mb = 0;
  double vmm_dxgi_local_headroom_gb = 0.0;
  double vmm_dxgi_shared_headroom_gb = 0.0;
  double vmm_dxgi_system_headroom_gb = 0.0;
  bool vmm_component_tensor_ownership = false;
  std::uint64_t vmm_component_buffer_limit_mb = 1;
  std::uint64_t vmm_native_source_cache_slot_mb = 0;
  std::uint64_t vmm_native_source_cache_slots = 0;

  // --- legacy VMM route ----------------------------------------------------------------------
  /// The older CPU-source registration cache (DDO_VMM_HOST_CACHE_GB).
  double vmm_host_cache_gb = 0.0;
  /// Register (pin) the CPU source weights of the legacy VMM route (not CPU pinning).
  bool vmm_pin_source_weights = false;

  // --- ddo additions -------------------------------------------------------------------------
  /// The transport (`--ddo-backend`); `--ddo-backend vmm --ddo-preset auto` selects
  /// vmm_fast_runtime. Resolution turns auto_select into the concrete backend.
  offload_backend backend = offload_backend::auto_select;
  /// enable_pipeline_offload's shared device budget in GiB: ddo's device bytes in any phase,
  /// its 64 MiB runtime reserve included (setup/pipeline_budget.hpp). 0: not shared. Read
  /// from the pipeline's settings (no component); a component policy does not change it.
  double pipeline_device_budget_gb = 0.0;
  /// enable_pipeline_offload's shared pinned-host budget in GiB: page-locked weight bytes of
  /// all components together. 0: each component keeps its own pin budget.
  double pipeline_pinned_budget_gb = 0.0;
  /// The disk's read rate in GB/s (10^9 bytes/s), stated: the plan's step bound divides the
  /// file tier by it (plan/tier_bound.hpp) instead of a capacity profile's measurement or the
  /// assumed 1.6 GB/s. 0: not stated.
  double disk_read_gb_per_s = 0.0;
  /// Debug mode for engine authors (runtime_options::poison_released_slots): poison each slot as
  /// soon as its lease is released, so a use after release reads 0xCD bytes.
  bool debug_poison_released_slots = false;

  friend bool operator==(const dynamic_offload_config&, const dynamic_offload_config&) = default;
};

}  // namespace v0
}  // namespace ddo
