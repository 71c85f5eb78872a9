// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The one list of config fields, as an X-macro: DDO_CONFIG_FIELDS(X) calls
/// X(member, type, env, env_scale, has_flag, unit, allowed, status, status_reason, meaning) once
/// per field of dynamic_offload_config, in declaration order. Not API.
///
/// Two things expand it: ddo::field_id (config/field_id.hpp, the first argument only) and the
/// registry table (config/detail/field_registry_impl.hpp, every argument), so the enum and the
/// table cannot drift apart. This header defines the macro only and includes nothing; the other
/// arguments are evaluated only where the registry expands them (namespace ddo::detail).

// clang-format off
#define DDO_CONFIG_FIELDS(X) \
  X(execution_device, text, "", 1.0, false, "", no_choices, active, "", \
    "Device where active compute runs (cuda or cuda:N).") \
  X(offload_device, text, "", 1.0, false, "", no_choices, single_value, \
    "ddo keeps inactive weights in host memory: \"cpu\" is the one value validate accepts, and " \
    "nothing else reads the field", \
    "Where inactive weights are kept; ddo keeps them in host memory (cpu).") \
  X(target_module_classes, kind_list, "", 1.0, false, "", module_kind_names, active, "", \
    "Module kinds eligible for the dynamic runtime.") \
  X(skip_modules_pattern, pattern_list, "", 1.0, false, "", no_choices, active, "", \
    "Regex patterns of modules ddo ignores (left where the engine put them).") \
  X(always_resident_modules_pattern, pattern_list, "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS", 1.0, \
    true, "", no_choices, active, "", \
    "Regex patterns of modules kept resident on the GPU; from_env() supplies " \
    "projection, embedding and normalization patterns unless overridden.") \
  X(small_tensor_threshold_bytes, count, "DDO_SMALL_TENSOR_THRESHOLD_KB", 1024.0, true, \
    "bytes", no_choices, active, "", \
    "Tensors at most this large are moved directly, not streamed; the variable is in " \
    "KiB, from_env() resolves 1024 KiB.") \
  X(execution_mode, choice, "DDO_EXECUTION_MODE", 1.0, true, "", enum_values<exec_mode>(), \
    active, "", \
    "plan builds the placement plan; linear_runtime streams through the linear " \
    "transport; vmm_runtime streams through CUDA virtual-memory mappings.") \
  X(linear_runtime_strategy, choice, "DDO_LINEAR_RUNTIME_STRATEGY", 1.0, true, "", \
    enum_values<runtime_strategy>(), active, "", \
    "functional hands out leases; swap rewrites the engine's bound tensor pointers for " \
    "the lease and restores them after.") \
  X(vmm_resident_weight_budget_gb, real, "DDO_VMM_RESIDENT_WEIGHT_BUDGET_GB", 1.0, true, \
    "GiB", no_choices, active, "", \
    "Mapped physical-weight budget of vmm_runtime; must be positive when that route is " \
    "selected.") \
  X(vmm_staging_buffer_gb, real, "DDO_VMM_STAGING_BUFFER_GB", 1.0, true, "GiB", no_choices, \
    active, "", \
    "Total pinned host staging for VMM/NVMe group uploads; must fit the largest " \
    "execution group.") \
  X(pin_cpu_memory, boolean, "DDO_PIN_CPU_MEMORY", 1.0, true, "", no_choices, active, "", \
    "Page-lock host copies of weights when supported and safe.") \
  X(allow_pin_memory_fallback, boolean, "DDO_ALLOW_PIN_MEMORY_FALLBACK", 1.0, true, "", \
    no_choices, active, "", \
    "Fall back to pageable memory cleanly if pinning fails.") \
  X(pin_cpu_workers, integer, "DDO_PIN_CPU_WORKERS", 1.0, true, "", no_choices, active, "", \
    "Threads preparing pinned memory (positive); from_env() resolves 4.") \
  X(cache_plan, boolean, "DDO_CACHE_PLAN", 1.0, true, "", no_choices, active, "", \
    "Cache structural planning in-process.") \
  X(cache_pinned_weights, boolean, "DDO_CACHE_PINNED_WEIGHTS", 1.0, true, "", no_choices, \
    active, "", \
    "Reuse pinned weights within the process when possible.") \
  X(pinned_weight_cache_namespace, text, "DDO_PINNED_WEIGHT_CACHE_NAMESPACE", 1.0, true, "", \
    no_choices, active, "", \
    "Separates pinned-weight caches between model/config groups.") \
  X(pinned_weight_cache_budget_gb, real, "DDO_PINNED_WEIGHT_CACHE_BUDGET_GB", 1.0, true, "GiB", \
    no_choices, active, "", \
    "Page-locked bytes of the process's weight registry, every model together; 0: the " \
    "available RAM less system_ram_headroom_gb (ddo addition).") \
  X(auto_budget_policy, choice, "DDO_AUTO_BUDGET_POLICY", 1.0, true, "", \
    enum_values<budget_policy>(), active, "", \
    "off uses budgets as given; balanced derives the resident budget from free VRAM.") \
  X(max_resident_module_budget_gb, real, "DDO_MAX_RESIDENT_MODULE_BUDGET_GB", 1.0, true, \
    "GiB", no_choices, active, "", \
    "Upper cap of auto budgeting; 0 means uncapped.") \
  X(auto_vram_headroom_gb, real, "DDO_AUTO_VRAM_HEADROOM_GB", 1.0, true, "GiB", no_choices, \
    active, "", \
    "Extra VRAM margin reserved by auto budgeting.") \
  X(profile_vram_headroom_gb, real, "DDO_PROFILE_VRAM_HEADROOM_GB", 1.0, true, "GiB", \
    no_choices, active, "", \
    "VRAM held back when a zero-resident calibration computes the next run's resident " \
    "budget.") \
  X(profile_name, text, "", 1.0, false, "", no_choices, active, "", \
    "Workload name for capacity-profile lookup; empty disables lookup.") \
  X(build_profile, boolean, "", 1.0, false, "", no_choices, active, "", \
    "Calibrate with a zero resident budget and save a profile; requires profile_name.") \
  X(auto_full_pin_min_model_to_vram_ratio, real, "DDO_AUTO_FULL_PIN_MIN_MODEL_TO_VRAM_RATIO", \
    1.0, true, "", no_choices, active, "", \
    "Model-to-VRAM ratio from which balanced auto pins every weight when RAM fits them;" \
    " 0 disables.") \
  X(max_pin_weight_budget_gb, real, "DDO_MAX_PIN_WEIGHT_BUDGET_GB", 1.0, true, "GiB", \
    no_choices, active, "", \
    "Upper cap of auto pinning; 0 means uncapped.") \
  X(available_system_ram_gb, real, "DDO_AVAILABLE_SYSTEM_RAM_GB", 1.0, true, "GiB", \
    no_choices, active, "", \
    "Available system RAM; from_env() detects it (MemAvailable and the cgroup limit) " \
    "unless set (provenance: detected). A RAM the engine states for its machine " \
    "(ddo::state_available_ram) outranks a detected value, not an explicit one.") \
  X(system_ram_headroom_gb, real, "DDO_SYSTEM_RAM_HEADROOM_GB", 1.0, true, "GiB", no_choices, \
    active, "", \
    "RAM held back from auto pinning decisions.") \
  X(pin_weight_budget_gb, real, "DDO_PIN_WEIGHT_BUDGET_GB", 1.0, true, "GiB", no_choices, \
    active, "", \
    "Explicit pinned-weight budget.") \
  X(pin_weight_budget_ratio, ratio, "DDO_PIN_WEIGHT_BUDGET_RATIO", 1.0, true, "", no_choices, \
    active, "", \
    "Fraction of candidate weights to pin, clamped to 0.0..1.0.") \
  X(pin_weight_selection, choice, "DDO_PIN_WEIGHT_SELECTION", 1.0, true, "", \
    enum_values<selection>(), active, "", \
    "Which candidates the pin budget picks.") \
  X(resident_module_budget_gb, real, "DDO_RESIDENT_MODULE_BUDGET_GB", 1.0, true, "GiB", \
    no_choices, active, "", \
    "Explicit resident module budget.") \
  X(resident_module_patterns, pattern_list, "DDO_RESIDENT_MODULE_PATTERNS", 1.0, true, "", \
    no_choices, active, "", \
    "Regex patterns naming execution blocks; \"auto\" infers common block patterns.") \
  X(resident_module_selection, choice, "DDO_RESIDENT_MODULE_SELECTION", 1.0, true, "", \
    enum_values<selection>(), active, "", \
    "Which candidates the resident budget picks.") \
  X(load_safetensors_backend, choice, "DDO_LOAD_SAFETENSORS_BACKEND", 1.0, true, "", \
    enum_values<safetensors_backend>(), active, "", \
    "File loading: \"\" keeps the library default; mmap or pread override it (alias " \
    "variable DDO_SAFETENSORS_BACKEND).") \
  X(verbose, boolean, "DDO_VERBOSE", 1.0, true, "", no_choices, active, "", \
    "Print additional setup details.") \
  X(show_profile, boolean, "DDO_SHOW_PROFILE", 1.0, true, "", no_choices, active, "", \
    "Print the offload profile summary; from_env() resolves false.") \
  X(vmm_native_transport, boolean, "DDO_VMM_NATIVE_TRANSPORT", 1.0, true, "", no_choices, \
    active, "", \
    "Native reusable registered-host windows for the VMM route.") \
  X(vmm_source_cache_gb, real, "DDO_VMM_SOURCE_CACHE_GB", 1.0, true, "GiB", no_choices, \
    active, "", \
    "Native retained-storage ceiling, separate from GPU and registration; 0 disables " \
    "retained sources.") \
  X(vmm_source_registered_gb, real, "DDO_VMM_SOURCE_REGISTERED_GB", 1.0, true, "GiB", \
    no_choices, active, "", \
    "Registration within retained storage; 0 uses the storage ceiling, explicit values " \
    "are whole 64 MiB segments within it.") \
  X(vmm_module_pattern, text, "DDO_VMM_MODULE_PATTERN", 1.0, true, "", no_choices, active, "", \
    "Regex selecting the native attachment units.") \
  X(vmm_page_mb, count, "DDO_VMM_PAGE_MB", 1.0, true, "MiB", no_choices, active, "", \
    "VMM page size; 0 requests the default geometry, else a multiple of the 2 MiB " \
    "granularity.") \
  X(vmm_dxgi_local_headroom_gb, real, "DDO_VMM_DXGI_LOCAL_HEADROOM_GB", 1.0, true, "GiB", \
    no_choices, no_effect_on_this_platform, reason_windows_only, \
    "Windows local budget reserve; not used on Linux.") \
  X(vmm_dxgi_shared_headroom_gb, real, "DDO_VMM_DXGI_SHARED_HEADROOM_GB", 1.0, true, "GiB", \
    no_choices, no_effect_on_this_platform, reason_windows_only, \
    "Windows non-local budget reserve; not used on Linux.") \
  X(vmm_dxgi_system_headroom_gb, real, "DDO_VMM_DXGI_SYSTEM_HEADROOM_GB", 1.0, true, "GiB", \
    no_choices, no_effect_on_this_platform, reason_windows_only, \
    "Windows system reserve; Linux uses host/cgroup admission.") \
  X(vmm_component_tensor_ownership, boolean, "", 1.0, true, "", no_choices, \
    active, "", \
    "Opt-in whole-component tensor ownership (native fast route only).") \
  X(vmm_component_buffer_limit_mb, count, "", 1.0, true, "MiB", no_choices, \
    active, "", \
    "Ceiling of once-copied device-buffer payload per component.") \
  X(vmm_native_source_cache_slot_mb, count, "DDO_VMM_NATIVE_SOURCE_CACHE_SLOT_MB", 1.0, true, \
    "MiB", no_choices, active, "", \
    "Legacy explicit micro-cache slot size; paired with the slot count.") \
  X(vmm_native_source_cache_slots, count, "DDO_VMM_NATIVE_SOURCE_CACHE_SLOTS", 1.0, true, "", \
    no_choices, active, "", \
    "Legacy micro-cache slot count; 0 keeps the cache off.") \
  X(vmm_host_cache_gb, real, "DDO_VMM_HOST_CACHE_GB", 1.0, true, "GiB", no_choices, \
    not_yet_implemented, reason_vmm_pending, \
    "Legacy CPU-source registration cache of the older VMM route.") \
  X(vmm_pin_source_weights, boolean, "DDO_VMM_PIN_SOURCE_WEIGHTS", 1.0, true, "", no_choices, \
    not_yet_implemented, reason_vmm_pending, \
    "Legacy VMM route: register the CPU source weights (not CPU pinning).") \
  X(backend, choice, "DDO_BACKEND", 1.0, true, "", enum_values<offload_backend>(), active, "", \
    "Transport for non-resident weights; auto follows execution_mode (ddo addition).") \
  X(pipeline_device_budget_gb, real, "DDO_PIPELINE_DEVICE_BUDGET_GB", 1.0, true, "GiB", \
    no_choices, active, "", \
    "enable_pipeline_offload: ddo's device bytes in any phase, shared by the components " \
    "(64 MiB runtime reserve included); 0 does not share (ddo addition).") \
  X(pipeline_pinned_budget_gb, real, "DDO_PIPELINE_PINNED_BUDGET_GB", 1.0, true, "GiB", \
    no_choices, active, "", \
    "enable_pipeline_offload: page-locked weight bytes of all components together, split " \
    "by weight bytes; 0 keeps each component's own pin budget (ddo addition).") \
  X(disk_read_gb_per_s, real, "DDO_DISK_READ_GB_PER_S", 1.0, true, "GB/s", no_choices, active, \
    "", \
    "The disk's read rate for the plan's step bound (file bytes / rate), e.g. what dd " \
    "iflag=direct measures; 0 takes a capacity profile's measurement or assumes 1.6 GB/s " \
    "(ddo addition).") \
  X(debug_poison_released_slots, boolean, "DDO_DEBUG_POISON_RELEASED_SLOTS", 1.0, true, "", \
    no_choices, active, "", \
    "Debug: fill a streamed group's slot with 0xCD bytes as soon as its lease is released, so " \
    "a pointer kept past its lease reads the pattern (ddo addition; costs a reload per use).")
// clang-format on
