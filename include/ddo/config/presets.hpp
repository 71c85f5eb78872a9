// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The built-in presets: their config values, their component routes, and how `auto`
/// resolves on this platform. docs/presets.md gives every value and its reason.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/config/closest_name.hpp"
#include "ddo/config/component_policy.hpp"
#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/field_value.hpp"
#include "ddo/config/provenance.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Every preset name a caller may request; vmm_fast_runtime is also what
/// `--ddo-backend vmm --ddo-preset auto` resolves to.
inline constexpr std::array<std::string_view, 10> preset_names = {
    "auto",         "one_shot_fast",           "low_ram_safe",
    "wsl_compat",   "diffusers_offload_compat", "diffusers_leaf_offload_compat",
    "off",          "warm_process",            "nvme_baseline",
    "vmm_fast_runtime"};

/// @brief Whether @p name is a preset.
[[nodiscard]] constexpr bool is_preset(std::string_view name) noexcept {
  for (std::string_view known : preset_names)
    if (known == name) return true;
  return false;
}

/// @brief One config value a preset sets: field name and value.
using preset_value = std::pair<std::string_view, field_value>;

/// @brief The config values preset @p name sets (on top of the dataclass defaults and from_env()'s
/// operational defaults). Empty for "auto" (resolve it first) and unknown names.
[[nodiscard]] inline std::vector<preset_value> preset_values(std::string_view name) {
  using v = std::vector<preset_value>;
  const std::vector<std::string> auto_blocks = {"auto"};
  if (name == "one_shot_fast")
    return v{{"execution_mode", std::string("linear_runtime")},
             {"pin_cpu_memory", true},
             {"auto_budget_policy", std::string("balanced")},
             {"resident_module_patterns", auto_blocks},
             {"auto_vram_headroom_gb", 1.5}};
  if (name == "low_ram_safe")
    return v{{"execution_mode", std::string("linear_runtime")},
             {"pin_cpu_memory", false},
             {"pin_cpu_workers", std::int64_t{2}},
             {"auto_budget_policy", std::string("balanced")},
             {"resident_module_patterns", auto_blocks},
             {"max_resident_module_budget_gb", 3.0},
             {"auto_vram_headroom_gb", 3.0},
             {"auto_full_pin_min_model_to_vram_ratio", 0.0},
             {"system_ram_headroom_gb", 8.0},
             {"load_safetensors_backend", std::string("mmap")}};
  if (name == "wsl_compat")
    return v{{"execution_mode", std::string("linear_runtime")},
             {"pin_cpu_memory", false},
             {"pin_cpu_workers", std::int64_t{1}},
             {"auto_budget_policy", std::string("balanced")},
             {"resident_module_patterns", auto_blocks},
             {"auto_vram_headroom_gb", 2.0},
             {"auto_full_pin_min_model_to_vram_ratio", 0.0},
             {"system_ram_headroom_gb", 8.0}};
  if (name == "diffusers_offload_compat" || name == "diffusers_leaf_offload_compat")
    return v{{"execution_mode", std::string("linear_runtime")},
             {"pin_cpu_memory", true},
             {"auto_budget_policy", std::string("off")},
             {"resident_module_budget_gb", 0.0},
             {"always_resident_modules_pattern", std::vector<std::string>{}}};
  if (name == "off")
    return v{{"execution_mode", std::string("plan")},
             {"pin_cpu_memory", false},
             {"auto_budget_policy", std::string("off")}};
  if (name == "warm_process")
    return v{{"execution_mode", std::string("linear_runtime")},
             {"pin_cpu_memory", true},
             {"pin_cpu_workers", std::int64_t{8}},
             {"cache_plan", true},
             {"cache_pinned_weights", true},
             {"pinned_weight_cache_namespace", std::string("warm_process")},
             {"auto_budget_policy", std::string("balanced")},
             {"resident_module_patterns", auto_blocks},
             {"auto_vram_headroom_gb", 1.5},
             {"auto_full_pin_min_model_to_vram_ratio", 1.0}};
  if (name == "nvme_baseline")
    return v{{"execution_mode", std::string("vmm_runtime")},
             {"backend", std::string("nvme")},
             {"vmm_native_transport", false},
             {"vmm_resident_weight_budget_gb", 4.0},
             {"vmm_staging_buffer_gb", 0.625},
             {"pin_cpu_memory", false},
             {"auto_budget_policy", std::string("off")},
             {"load_safetensors_backend", std::string("pread")}};
  if (name == "vmm_fast_runtime")
    return v{{"execution_mode", std::string("vmm_runtime")},
             {"backend", std::string("vmm")},
             {"vmm_native_transport", true},
             {"vmm_resident_weight_budget_gb", 4.0},
             {"vmm_staging_buffer_gb", 1.25},
             {"pin_cpu_memory", false},
             {"auto_budget_policy", std::string("off")}};
  return {};
}

/// @brief What `auto` (and the backend) resolution looks at.
struct preset_context {
  offload_backend backend = offload_backend::auto_select;  ///< requested backend (before auto)
  bool running_on_wsl = false;                              ///< detected WSL
  bool disable_pin_on_wsl = true;                           ///< the WSL pinning safety rule
  std::optional<double> available_ram_gb;                   ///< detected or overridden RAM
  double system_ram_headroom_gb = 6.0;                      ///< RAM held back from pinning
  std::optional<std::uint64_t> model_bytes;                 ///< total weight bytes, if known
  std::optional<bool> vmm_supported;                        ///< device VMM support, if known
};

/// @brief An effective preset and why it was chosen (one sentence, for verbose output).
struct preset_choice {
  std::string name;    ///< the effective preset
  std::string reason;  ///< why
};

/// @brief Below this much available RAM (GiB), `auto` with no known model size picks
/// low_ram_safe: the 12-40 GB models ddo targets cannot be pinned in full there.
inline constexpr double auto_low_ram_gb = 16.0;

/// @brief Resolves a requested preset to the effective one. `auto` is platform-aware: backend
/// vmm → vmm_fast_runtime, backend nvme → nvme_baseline; WSL with the pinning safety rule →
/// wsl_compat; a known model larger than available RAM → nvme_baseline (low_ram_safe when the
/// device has no VMM support); larger than RAM minus headroom → low_ram_safe; no model size and
/// under 16 GiB RAM → low_ram_safe; otherwise one_shot_fast. Backend vmm accepts only auto,
/// vmm_fast_runtime and nvme_baseline (the reference has no other native presets).
/// @param where the preset's source (variable, flag, TOML key), for error messages.
/// @throws config_error for an unknown preset or a preset the vmm backend does not have.
[[nodiscard]] inline preset_choice resolve_preset(std::string_view requested,
                                                  const preset_context& context,
                                                  const field_origin& origin_of_request = {
                                                      origin::config, "preset"}) {
  const std::string source(to_string(origin_of_request.source));
  const std::string& key = origin_of_request.key;
  const std::string where = describe(origin_of_request);
  if (!is_preset(requested))
    throw config_error(source, key,
                       where + " = \"" + std::string(requested) +
                           "\": not a preset; expected one of auto, one_shot_fast, low_ram_safe, "
                           "wsl_compat, diffusers_offload_compat, diffusers_leaf_offload_compat, "
                           "off, warm_process, nvme_baseline, vmm_fast_runtime" +
                           did_you_mean(closest_name(requested, preset_names)));
  if (context.backend == offload_backend::vmm && requested != "auto" &&
      requested != "vmm_fast_runtime" && requested != "nvme_baseline")
    throw config_error(source, key,
                       where + " = \"" + std::string(requested) +
                           "\": not available with backend vmm; expected auto (selects "
                           "vmm_fast_runtime), vmm_fast_runtime or nvme_baseline");
  if (requested != "auto") return {std::string(requested), "requested explicitly"};
  if (context.backend == offload_backend::vmm)
    return {"vmm_fast_runtime", "backend vmm with preset auto selects the native VMM route"};
  if (context.backend == offload_backend::nvme)
    return {"nvme_baseline", "backend nvme with preset auto selects the NVMe route"};
  if (context.running_on_wsl && context.disable_pin_on_wsl)
    return {"wsl_compat", "running on WSL, where pinned host memory is disabled by default"};
  if (context.available_ram_gb && context.model_bytes) {
    const double model_gb = bytes_to_gib(*context.model_bytes);
    if (*context.available_ram_gb < model_gb) {
      if (context.vmm_supported.value_or(true))
        return {"nvme_baseline", "the model is larger than available RAM: stream it from its file"};
      return {"low_ram_safe",
              "the model is larger than available RAM and the device has no VMM support"};
    }
    if (*context.available_ram_gb - context.system_ram_headroom_gb < model_gb)
      return {"low_ram_safe", "the model fits in RAM but not with the RAM headroom to pin it"};
    return {"one_shot_fast", "the model fits in RAM with headroom to pin it"};
  }
  if (context.available_ram_gb && *context.available_ram_gb < auto_low_ram_gb)
    return {"low_ram_safe", "less than 16 GiB of RAM available and no model size known"};
  return {"one_shot_fast", "enough RAM available for pinning"};
}

/// @brief The route and group-offload parameters preset @p effective_preset gives component
/// @p component when no source names them. The reference's VAE policy: auto, one_shot_fast,
/// low_ram_safe and vmm_fast_runtime give the VAE leaf-level group offload without a stream;
/// warm_process, wsl_compat and nvme_baseline keep it resident (route none); off leaves every
/// component unmanaged. @p explicit_config (a whole config from code) bypasses the VAE fallback.
[[nodiscard]] inline resolved_component preset_component_default(std::string_view effective_preset,
                                                                 std::string_view component,
                                                                 bool explicit_config) {
  resolved_component out;
  out.name = std::string(component);
  out.route_origin = {origin::preset, std::string(effective_preset)};
  if (effective_preset == "off") {
    out.route = component_route::none;
    return out;
  }
  if (effective_preset == "diffusers_offload_compat" ||
      effective_preset == "diffusers_leaf_offload_compat") {
    out.route = component_route::diffusers_group_offload;
    out.offload_type = effective_preset == "diffusers_offload_compat"
                           ? group_offload_type::block_level
                           : group_offload_type::leaf_level;
    out.offload_stream = true;
    out.offload_record_stream = true;
    return out;
  }
  out.route = component_route::dynamic_offload;
  if (component == "vae" && !explicit_config) {
    if (effective_preset == "one_shot_fast" || effective_preset == "low_ram_safe" ||
        effective_preset == "vmm_fast_runtime") {
      out.route = component_route::diffusers_group_offload;
      out.offload_type = group_offload_type::leaf_level;
      out.offload_stream = false;
      out.offload_record_stream = false;
    } else {
      out.route = component_route::none;  // resident staged-host VAE
    }
  }
  return out;
}

}  // namespace v0
}  // namespace ddo
