// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The registry table itself and the member accessors behind it. Not API: use
/// ddo::config_fields() from config/field_registry.hpp.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "ddo/config/enum_names.hpp"
#include "ddo/config/field_info.hpp"
#include "ddo/model/module_kind.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

template <class T>
inline constexpr bool is_config_enum_v =
    std::is_same_v<T, exec_mode> || std::is_same_v<T, runtime_strategy> ||
    std::is_same_v<T, selection> || std::is_same_v<T, budget_policy> ||
    std::is_same_v<T, safetensors_backend> || std::is_same_v<T, offload_backend>;

template <class T>
field_value to_field_value(const T& member) {
  if constexpr (std::is_same_v<T, bool>) {
    return member;
  } else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, std::uint64_t>) {
    return static_cast<std::int64_t>(member);
  } else if constexpr (std::is_same_v<T, double>) {
    return member;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return member;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return member;
  } else if constexpr (std::is_same_v<T, std::vector<module_kind>>) {
    std::vector<std::string> names;
    for (module_kind kind : member) names.emplace_back(to_string(kind));
    return names;
  } else {
    static_assert(is_config_enum_v<T>, "ddo: config member of a type the registry cannot hold");
    return std::string(enum_name(member));
  }
}

// The sources parse and check values before they reach here, so a mismatch is a ddo bug; it is
// reported rather than ignored.
[[noreturn]] inline void field_value_mismatch() {
  throw std::logic_error("ddo: internal error: config value of the wrong type for its field");
}

template <class T>
void from_field_value(T& member, const field_value& value) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!std::holds_alternative<bool>(value)) field_value_mismatch();
    member = std::get<bool>(value);
  } else if constexpr (std::is_same_v<T, int>) {
    if (!std::holds_alternative<std::int64_t>(value)) field_value_mismatch();
    const auto v = std::get<std::int64_t>(value);
    member = static_cast<int>(std::clamp<std::int64_t>(v, std::numeric_limits<int>::min(),
                                                       std::numeric_limits<int>::max()));
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    if (!std::holds_alternative<std::int64_t>(value)) field_value_mismatch();
    const auto v = std::get<std::int64_t>(value);
    member = v < 0 ? 0 : static_cast<std::uint64_t>(v);
  } else if constexpr (std::is_same_v<T, double>) {
    if (std::holds_alternative<double>(value))
      member = std::get<double>(value);
    else if (std::holds_alternative<std::int64_t>(value))
      member = static_cast<double>(std::get<std::int64_t>(value));
    else
      field_value_mismatch();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!std::holds_alternative<std::string>(value)) field_value_mismatch();
    member = std::get<std::string>(value);
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    if (!std::holds_alternative<std::vector<std::string>>(value)) field_value_mismatch();
    member = std::get<std::vector<std::string>>(value);
  } else if constexpr (std::is_same_v<T, std::vector<module_kind>>) {
    if (!std::holds_alternative<std::vector<std::string>>(value)) field_value_mismatch();
    std::vector<module_kind> kinds;
    for (const auto& name : std::get<std::vector<std::string>>(value)) {
      const auto kind = parse_module_kind(name);
      if (!kind) field_value_mismatch();
      kinds.push_back(*kind);
    }
    member = std::move(kinds);
  } else {
    static_assert(is_config_enum_v<T>, "ddo: config member of a type the registry cannot hold");
    if (!std::holds_alternative<std::string>(value)) field_value_mismatch();
    const auto parsed = parse_enum<T>(std::get<std::string>(value));
    if (!parsed) field_value_mismatch();
    member = *parsed;
  }
}

template <auto Member>
field_value get_member(const dynamic_offload_config& config) {
  return to_field_value(config.*Member);
}

template <auto Member>
void set_member(dynamic_offload_config& config, const field_value& value) {
  from_field_value(config.*Member, value);
}

inline constexpr std::array<std::string_view, 5> module_kind_names = {"linear", "embedding", "norm",
                                                                      "conv", "other"};
inline constexpr std::span<const std::string_view> no_choices{};

// Field rows. The macro only spares writing each member name three times.
#define DDO_FIELD_ROW(member, type, env, scale, flag, unit, allowed, meaning)                \
  field_info {                                                                               \
    #member, field_type::type, env, scale, flag, unit, allowed, meaning,                     \
        &get_member<&dynamic_offload_config::member>,                                        \
        &set_member<&dynamic_offload_config::member>                                         \
  }

inline constexpr std::array field_table = {
    DDO_FIELD_ROW(execution_device, text, "", 1.0, false, "", no_choices,
                  "Device where active compute runs (cuda or cuda:N)."),
    DDO_FIELD_ROW(offload_device, text, "", 1.0, false, "", no_choices,
                  "Where inactive weights are kept; ddo keeps them in host memory (cpu)."),
    DDO_FIELD_ROW(target_module_classes, kind_list, "", 1.0, false, "", module_kind_names,
                  "Module kinds eligible for the dynamic runtime."),
    DDO_FIELD_ROW(skip_modules_pattern, pattern_list, "", 1.0, false, "", no_choices,
                  "Regex patterns of modules ddo ignores (left where the engine put them)."),
    DDO_FIELD_ROW(always_resident_modules_pattern, pattern_list,
                  "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS", 1.0, true, "", no_choices,
                  "Regex patterns of modules kept resident on the GPU; from_env() supplies "
                  "projection, embedding and normalization patterns unless overridden."),
    DDO_FIELD_ROW(small_tensor_threshold_bytes, count, "DDO_SMALL_TENSOR_THRESHOLD_KB", 1024.0,
                  true, "bytes", no_choices,
                  "Tensors at most this large are moved directly, not streamed; the variable is "
                  "in KiB, from_env() resolves 1024 KiB."),
    DDO_FIELD_ROW(execution_mode, choice, "DDO_EXECUTION_MODE", 1.0, true, "",
                  enum_values<exec_mode>(),
                  "plan builds the placement plan; linear_runtime streams through the linear "
                  "transport; vmm_runtime streams through CUDA virtual-memory mappings."),
    DDO_FIELD_ROW(linear_runtime_strategy, choice, "DDO_LINEAR_RUNTIME_STRATEGY", 1.0, true, "",
                  enum_values<runtime_strategy>(),
                  "functional hands out leases; swap rewrites the engine's bound tensor pointers "
                  "for the lease and restores them after."),
    DDO_FIELD_ROW(vmm_resident_weight_budget_gb, real, "DDO_VMM_RESIDENT_WEIGHT_BUDGET_GB", 1.0,
                  true, "GiB", no_choices,
                  "Mapped physical-weight budget of vmm_runtime; must be positive when that "
                  "route is selected."),
    DDO_FIELD_ROW(vmm_staging_buffer_gb, real, "DDO_VMM_STAGING_BUFFER_GB", 1.0, true, "GiB",
                  no_choices,
                  "Total pinned host staging for VMM/NVMe group uploads; must fit the largest "
                  "execution group."),
    DDO_FIELD_ROW(pin_cpu_memory, boolean, "DDO_PIN_CPU_MEMORY", 1.0, true, "", no_choices,
                  "Page-lock host copies of weights when supported and safe."),
    DDO_FIELD_ROW(allow_pin_memory_fallback, boolean, "DDO_ALLOW_PIN_MEMORY_FALLBACK", 1.0, true,
                  "", no_choices, "Fall back to pageable memory cleanly if pinning fails."),
    DDO_FIELD_ROW(pin_cpu_workers, integer, "DDO_PIN_CPU_WORKERS", 1.0, true, "", no_choices,
                  "Threads preparing pinned memory (positive); from_env() resolves 4."),
    DDO_FIELD_ROW(cache_plan, boolean, "DDO_CACHE_PLAN", 1.0, true, "", no_choices,
                  "Cache structural planning in-process."),
    DDO_FIELD_ROW(cache_pinned_weights, boolean, "DDO_CACHE_PINNED_WEIGHTS", 1.0, true, "",
                  no_choices, "Reuse pinned weights within the process when possible."),
    DDO_FIELD_ROW(pinned_weight_cache_namespace, text, "DDO_PINNED_WEIGHT_CACHE_NAMESPACE", 1.0,
                  true, "", no_choices,
                  "Separates pinned-weight caches between model/config groups."),
    DDO_FIELD_ROW(auto_budget_policy, choice, "DDO_AUTO_BUDGET_POLICY", 1.0, true, "",
                  enum_values<budget_policy>(),
                  "off uses budgets as given; balanced derives the resident budget from free VRAM."),
    DDO_FIELD_ROW(max_resident_module_budget_gb, real, "DDO_MAX_RESIDENT_MODULE_BUDGET_GB", 1.0,
                  true, "GiB", no_choices, "Upper cap of auto budgeting; 0 means uncapped."),
    DDO_FIELD_ROW(auto_vram_headroom_gb, real, "DDO_AUTO_VRAM_HEADROOM_GB", 1.0, true, "GiB",
                  no_choices, "Extra VRAM margin reserved by auto budgeting."),
    DDO_FIELD_ROW(profile_vram_headroom_gb, real, "DDO_PROFILE_VRAM_HEADROOM_GB", 1.0, true, "GiB",
                  no_choices,
                  "VRAM held back when a zero-resident calibration computes the next run's "
                  "resident budget."),
    DDO_FIELD_ROW(profile_name, text, "", 1.0, false, "", no_choices,
                  "Workload name for capacity-profile lookup; empty disables lookup."),
    DDO_FIELD_ROW(build_profile, boolean, "", 1.0, false, "", no_choices,
                  "Calibrate with a zero resident budget and save a profile; requires "
                  "profile_name."),
    DDO_FIELD_ROW(auto_full_pin_min_model_to_vram_ratio, real,
                  "DDO_AUTO_FULL_PIN_MIN_MODEL_TO_VRAM_RATIO", 1.0, true, "", no_choices,
                  "Model-to-VRAM ratio from which balanced auto pins every weight when RAM "
                  "fits them; 0 disables."),
    DDO_FIELD_ROW(max_pin_weight_budget_gb, real, "DDO_MAX_PIN_WEIGHT_BUDGET_GB", 1.0, true, "GiB",
                  no_choices, "Upper cap of auto pinning; 0 means uncapped."),
    DDO_FIELD_ROW(available_system_ram_gb, real, "DDO_AVAILABLE_SYSTEM_RAM_GB", 1.0, true, "GiB",
                  no_choices,
                  "Available system RAM; from_env() detects it (MemAvailable and the cgroup "
                  "limit) unless set."),
    DDO_FIELD_ROW(system_ram_headroom_gb, real, "DDO_SYSTEM_RAM_HEADROOM_GB", 1.0, true, "GiB",
                  no_choices, "RAM held back from auto pinning decisions."),
    DDO_FIELD_ROW(pin_weight_budget_gb, real, "DDO_PIN_WEIGHT_BUDGET_GB", 1.0, true, "GiB",
                  no_choices, "Explicit pinned-weight budget."),
    DDO_FIELD_ROW(pin_weight_budget_ratio, ratio, "DDO_PIN_WEIGHT_BUDGET_RATIO", 1.0, true, "",
                  no_choices, "Fraction of candidate weights to pin, clamped to 0.0..1.0."),
    DDO_FIELD_ROW(pin_weight_selection, choice, "DDO_PIN_WEIGHT_SELECTION", 1.0, true, "",
                  enum_values<selection>(), "Which candidates the pin budget picks."),
    DDO_FIELD_ROW(resident_module_budget_gb, real, "DDO_RESIDENT_MODULE_BUDGET_GB", 1.0, true,
                  "GiB", no_choices, "Explicit resident module budget."),
    DDO_FIELD_ROW(resident_module_patterns, pattern_list, "DDO_RESIDENT_MODULE_PATTERNS", 1.0, true,
                  "", no_choices,
                  "Regex patterns naming execution blocks; \"auto\" infers common block patterns."),
    DDO_FIELD_ROW(resident_module_selection, choice, "DDO_RESIDENT_MODULE_SELECTION", 1.0, true,
                  "", enum_values<selection>(), "Which candidates the resident budget picks."),
    DDO_FIELD_ROW(load_safetensors_backend, choice, "DDO_LOAD_SAFETENSORS_BACKEND", 1.0, true, "",
                  enum_values<safetensors_backend>(),
                  "File loading: \"\" keeps the library default; mmap or pread override it "
                  "(alias variable DDO_SAFETENSORS_BACKEND)."),
    DDO_FIELD_ROW(verbose, boolean, "DDO_VERBOSE", 1.0, true, "", no_choices,
                  "Print additional setup details."),
    DDO_FIELD_ROW(show_profile, boolean, "DDO_SHOW_PROFILE", 1.0, true, "", no_choices,
                  "Print the offload profile summary; from_env() resolves false."),
    DDO_FIELD_ROW(vmm_native_transport, boolean, "DDO_VMM_NATIVE_TRANSPORT", 1.0, true, "",
                  no_choices, "Native reusable registered-host windows for the VMM route."),
    DDO_FIELD_ROW(vmm_source_cache_gb, real, "DDO_VMM_SOURCE_CACHE_GB", 1.0, true, "GiB",
                  no_choices,
                  "Native retained-storage ceiling, separate from GPU and registration; 0 "
                  "disables retained sources."),
    DDO_FIELD_ROW(vmm_source_registered_gb, real, "DDO_VMM_SOURCE_REGISTERED_GB", 1.0, true, "GiB",
                  no_choices,
                  "Registration within retained storage; 0 uses the storage ceiling, explicit "
                  "values are whole 64 MiB segments within it."),
    DDO_FIELD_ROW(vmm_module_pattern, text, "DDO_VMM_MODULE_PATTERN", 1.0, true, "", no_choices,
                  "Regex selecting the native attachment units."),
    DDO_FIELD_ROW(vmm_page_mb, count, "DDO_VMM_PAGE_MB", 1.0, true, "MiB", no_choices,
                  "VMM page size; 0 requests the default geometry, else a multiple of the 2 MiB "
                  "granularity."),
    DDO_FIELD_ROW(vmm_dxgi_local_headroom_gb, real, "DDO_VMM_DXGI_LOCAL_HEADROOM_GB", 1.0, true,
                  "GiB", no_choices, "Windows local budget reserve; not used on Linux."),
    DDO_FIELD_ROW(vmm_dxgi_shared_headroom_gb, real, "DDO_VMM_DXGI_SHARED_HEADROOM_GB", 1.0, true,
                  "GiB", no_choices, "Windows non-local budget reserve; not used on Linux."),
    DDO_FIELD_ROW(vmm_dxgi_system_headroom_gb, real, "DDO_VMM_DXGI_SYSTEM_HEADROOM_GB", 1.0, true,
                  "GiB", no_choices, "Windows system reserve; Linux uses host/cgroup admission."),
    DDO_FIELD_ROW(vmm_component_tensor_ownership, boolean, "", 1.0, true, "", no_choices,
                  "Opt-in whole-component tensor ownership (native fast route only)."),
    DDO_FIELD_ROW(vmm_component_buffer_limit_mb, count, "", 1.0, true, "MiB", no_choices,
                  "Ceiling of once-copied device-buffer payload per component."),
    DDO_FIELD_ROW(vmm_native_source_cache_slot_mb, count, "DDO_VMM_NATIVE_SOURCE_CACHE_SLOT_MB",
                  1.0, true, "MiB", no_choices,
                  "Legacy explicit micro-cache slot size; paired with the slot count."),
    DDO_FIELD_ROW(vmm_native_source_cache_slots, count, "DDO_VMM_NATIVE_SOURCE_CACHE_SLOTS", 1.0,
                  true, "", no_choices,
                  "Legacy micro-cache slot count; 0 keeps the cache off."),
    DDO_FIELD_ROW(vmm_host_cache_gb, real, "DDO_VMM_HOST_CACHE_GB", 1.0, true, "GiB", no_choices,
                  "Legacy CPU-source registration cache of the older VMM route."),
    DDO_FIELD_ROW(vmm_pin_source_weights, boolean, "DDO_VMM_PIN_SOURCE_WEIGHTS", 1.0, true, "",
                  no_choices,
                  "Legacy VMM route: register the CPU source weights (not CPU pinning)."),
    DDO_FIELD_ROW(backend, choice, "DDO_BACKEND", 1.0, true, "", enum_values<offload_backend>(),
                  "Transport for non-resident weights; auto follows execution_mode (ddo "
                  "addition)."),
};

#undef DDO_FIELD_ROW

}  // namespace detail
}  // namespace v0
}  // namespace ddo
