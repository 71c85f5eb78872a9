// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The built-in presets: their config values, their component routes, and how `auto`
/// resolves on this platform. docs/presets.md gives every value and its reason.

#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/config/closest_name.hpp"
#include "ddo/config/component_policy.hpp"
#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/enum_names.hpp"
#include "ddo/config/field_id.hpp"
#include "ddo/config/field_value.hpp"
#include "ddo/config/preset_id.hpp"
#include "ddo/config/provenance.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/text.hpp"
#include "ddo/core/units.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Every preset name a caller may request; vmm_fast_runtime is also what
/// `--ddo-backend vmm --ddo-preset auto` resolves to.
/// (The canonical names of ddo::preset_id, config/preset_id.hpp.)
inline constexpr const std::array<std::string_view, 10>& preset_names = preset_id_names;

/// @brief Whether @p name is a preset.
[[nodiscard]] constexpr bool is_preset(std::string_view name) noexcept {
  return parse_preset(name).has_value();
}

/// @brief One config value a preset sets: the field and its value.
using preset_value = std::pair<field_id, field_value>;

/// @brief The config values preset @p preset sets (on top of the dataclass defaults and
/// from_env()'s operational defaults). Empty for auto_select (resolve it first).
[[nodiscard]] inline std::vector<preset_value> preset_values(preset_id preset) {
  using v = std::vector<preset_value>;
  using enum field_id;
  // Enum settings are written as enum values; a field_value carries an enum as its canonical
  // name (config/enum_names.hpp), which normalize_field_value reads back.
  const auto value = [](auto e) { return field_value(std::string(enum_name(e))); };
  const std::vector<std::string> auto_blocks = {"auto"};
  switch (preset) {
    case preset_id::one_shot_fast:
      return v{{execution_mode, value(exec_mode::linear_runtime)},
               {pin_cpu_memory, true},
               {auto_budget_policy, value(budget_policy::balanced)},
               {resident_module_patterns, auto_blocks},
               {auto_vram_headroom_gb, 1.5}};
    case preset_id::low_ram_safe:
      return v{{execution_mode, value(exec_mode::linear_runtime)},
               {pin_cpu_memory, false},
               {pin_cpu_workers, std::int64_t{2}},
               {auto_budget_policy, value(budget_policy::balanced)},
               {resident_module_patterns, auto_blocks},
               {max_resident_module_budget_gb, 3.0},
               {auto_vram_headroom_gb, 3.0},
               {auto_full_pin_min_model_to_vram_ratio, 0.0},
               {system_ram_headroom_gb, 8.0},
               {load_safetensors_backend, value(safetensors_backend::mmap)}};
    case preset_id::wsl_compat:
      return v{{execution_mode, value(exec_mode::linear_runtime)},
               {pin_cpu_memory, false},
               {pin_cpu_workers, std::int64_t{1}},
               {auto_budget_policy, value(budget_policy::balanced)},
               {resident_module_patterns, auto_blocks},
               {auto_vram_headroom_gb, 2.0},
               {auto_full_pin_min_model_to_vram_ratio, 0.0},
               {system_ram_headroom_gb, 8.0}};
    case preset_id::diffusers_offload_compat:
    case preset_id::diffusers_leaf_offload_compat:
      return v{{execution_mode, value(exec_mode::linear_runtime)},
               {pin_cpu_memory, true},
               {auto_budget_policy, value(budget_policy::off)},
               {resident_module_budget_gb, 0.0},
               {always_resident_modules_pattern, std::vector<std::string>{}}};
    case preset_id::off:
      return v{{execution_mode, value(exec_mode::plan)},
               {pin_cpu_memory, false},
               {auto_budget_policy, value(budget_policy::off)}};
    case preset_id::warm_process:
      return v{{execution_mode, value(exec_mode::linear_runtime)},
               {pin_cpu_memory, true},
               {pin_cpu_workers, std::int64_t{8}},
               {cache_plan, true},
               {cache_pinned_weights, true},
               {pinned_weight_cache_namespace, std::string("warm_process")},
               {auto_budget_policy, value(budget_policy::balanced)},
               {resident_module_patterns, auto_blocks},
               {auto_vram_headroom_gb, 1.5},
               {auto_full_pin_min_model_to_vram_ratio, 1.0}};
    case preset_id::nvme_baseline:
      return v{{execution_mode, value(exec_mode::vmm_runtime)},
               {backend, value(offload_backend::nvme)},
               {vmm_native_transport, false},
               {vmm_resident_weight_budget_gb, 4.0},
               {vmm_staging_buffer_gb, 0.625},
               {pin_cpu_memory, false},
               {auto_budget_policy, value(budget_policy::balanced)},
               {resident_module_patterns, auto_blocks},
               {auto_vram_headroom_gb, 1.5},
               {load_safetensors_backend, value(safetensors_backend::pread)}};
    case preset_id::vmm_fast_runtime:
      return v{{execution_mode, value(exec_mode::vmm_runtime)},
               {backend, value(offload_backend::vmm)},
               {vmm_native_transport, true},
               {vmm_resident_weight_budget_gb, 4.0},
               {vmm_staging_buffer_gb, 1.25},
               {pin_cpu_memory, false},
               {auto_budget_policy, value(budget_policy::off)}};
    case preset_id::auto_select:
      break;
  }
  return {};
}

/// @brief The values of the preset named @p name; empty for "auto" and for unknown names.
[[nodiscard]] inline std::vector<preset_value> preset_values(std::string_view name) {
  const auto preset = parse_preset(name);
  return preset ? preset_values(*preset) : std::vector<preset_value>{};
}

/// @brief What `auto` (and the backend) resolution looks at.
struct preset_context {
  offload_backend backend = offload_backend::auto_select;  ///< requested backend (before auto)
  bool running_on_wsl = false;                              ///< detected WSL
  bool disable_pin_on_wsl = true;                           ///< the WSL pinning safety rule
  std::optional<double> available_ram_gb;                   ///< detected, stated or set RAM
  /// Which RAM figure available_ram_gb is ("detected", "stated by the engine",
  /// "available_system_ram_gb"): the reason names it.
  std::string ram_source = "detected";
  double system_ram_headroom_gb = 6.0;                      ///< RAM held back from pinning
  std::optional<std::uint64_t> model_bytes;                 ///< total weight bytes, if known
  /// Device VMM support, if known. auto no longer asks it (its route for a model larger than
  /// RAM is the linear one); kept for callers that state it.
  std::optional<bool> vmm_supported;
};

/// @brief An effective preset and why it was chosen (one sentence, for verbose output).
struct preset_choice {
  std::string name;    ///< the effective preset's name (to_string(id))
  std::string reason;  ///< why
  preset_id id = preset_id::one_shot_fast;  ///< the effective preset
  /// Values `auto` sets over the preset's own (three_tier_values for a model larger than RAM),
  /// recorded with provenance `preset <adjusted_by>`; empty for a preset requested by name.
  std::vector<preset_value> adjustments;
  std::string adjusted_by;  ///< "auto (three tiers)" when adjustments is not empty
};

/// @brief What `auto` sets over nvme_baseline for a model larger than RAM: three tiers, each
/// byte from the fastest place it fits — what fits on the card stays resident, what fits in
/// usable RAM (available RAM less `system_ram_headroom_gb`) is pinned, the rest streams from its
/// file — on the linear route, whose file reads overlap the pinned tier's bus copies. The
/// preset's own values (pinning off, the legacy VMM route and its 4 GiB mapped budget) left RAM
/// empty while the disk carried every streamed byte (issue 38: 20.45 GiB a step from the file
/// for a 22.17 GiB model with 16 GiB of RAM, where three tiers read 8.1 GiB). A departure from
/// the reference's preset table (docs/presets.md, docs/configuration.md).
[[nodiscard]] inline std::vector<preset_value> three_tier_values() {
  return {{field_id::execution_mode, field_value(std::string(enum_name(exec_mode::linear_runtime)))},
          {field_id::pin_cpu_memory, true}};
}

/// @brief Below this much available RAM (GiB), `auto` with no known model size picks
/// low_ram_safe: the 12-40 GB models ddo targets cannot be pinned in full there.
inline constexpr double auto_low_ram_gb = 16.0;

/// @brief Resolves a requested preset to the effective one. `auto` is platform-aware: backend
/// vmm → vmm_fast_runtime, backend nvme → nvme_baseline; WSL with the pinning safety rule →
/// wsl_compat; a known model larger than available RAM → nvme_baseline with three_tier_values
/// (pinning on, the linear route); larger than RAM minus headroom → low_ram_safe; no model size and
/// under 16 GiB RAM → low_ram_safe; otherwise one_shot_fast. Backend vmm accepts only auto,
/// vmm_fast_runtime and nvme_baseline (the reference has no other native presets).
/// @param where the preset's source (variable, flag, TOML key), for error messages.
/// @throws config_error for an unknown preset or a preset the vmm backend does not have.
[[nodiscard]] inline preset_choice resolve_preset(std::string_view requested,
                                                  const preset_context& context,
                                                  const field_origin& origin_of_request = {
                                                      origin::config, "preset"}) {
  const origin source = origin_of_request.source;
  const std::string& key = origin_of_request.key;
  const std::string where = describe(origin_of_request);
  const auto preset = parse_preset(requested);
  if (!preset)
    throw config_error(source, key,
                       where + " = \"" + sanitize_utf8(requested) +
                           "\": not a preset; expected one of auto, one_shot_fast, low_ram_safe, "
                           "wsl_compat, diffusers_offload_compat, diffusers_leaf_offload_compat, "
                           "off, warm_process, nvme_baseline, vmm_fast_runtime" +
                           did_you_mean(closest_name(requested, preset_names)));
  using enum preset_id;
  if (context.backend == offload_backend::vmm && *preset != auto_select &&
      *preset != vmm_fast_runtime && *preset != nvme_baseline)
    throw config_error(source, key,
                       where + " = \"" + std::string(requested) +
                           "\": not available with backend vmm; expected auto (selects "
                           "vmm_fast_runtime), vmm_fast_runtime or nvme_baseline");
  const auto choose = [](preset_id id, std::string reason) {
    return preset_choice{std::string(to_string(id)), std::move(reason), id, {}, {}};
  };
  if (*preset != auto_select) return choose(*preset, "requested explicitly");
  if (context.backend == offload_backend::vmm)
    return choose(vmm_fast_runtime, "backend vmm with preset auto selects the native VMM route");
  if (context.backend == offload_backend::nvme)
    return choose(nvme_baseline, "backend nvme with preset auto selects the NVMe route");
  if (context.running_on_wsl && context.disable_pin_on_wsl)
    return choose(wsl_compat, "running on WSL, where pinned host memory is disabled by default");
  // The reason names the RAM figure that decided and both numbers.
  const auto gib_text = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f GiB", v);
    return std::string(b);
  };
  const std::string ram =
      context.available_ram_gb
          ? "available RAM " + gib_text(*context.available_ram_gb) + " (" + context.ram_source + ")"
          : std::string();
  if (context.available_ram_gb && context.model_bytes) {
    const double model_gb = bytes_to_gib(*context.model_bytes);
    const std::string model = "the model (" + gib_text(model_gb) + ")";
    if (*context.available_ram_gb < model_gb) {
      // The linear route needs no VMM support: the device's is not asked.
      auto three = choose(nvme_baseline,
                          model + " is larger than " + ram +
                              ": three tiers, what fits on the card resident, what fits in RAM "
                              "less the " + gib_text(context.system_ram_headroom_gb) +
                              " headroom pinned, the rest streamed from its file (linear route)");
      three.adjustments = three_tier_values();
      three.adjusted_by = "auto (three tiers)";
      return three;
    }
    if (*context.available_ram_gb - context.system_ram_headroom_gb < model_gb)
      return choose(low_ram_safe, model + " fits in " + ram + " but not with the " +
                                      gib_text(context.system_ram_headroom_gb) +
                                      " RAM headroom to pin it");
    return choose(one_shot_fast, model + " fits in " + ram + " with the " +
                                     gib_text(context.system_ram_headroom_gb) +
                                     " RAM headroom to pin it");
  }
  if (context.available_ram_gb && *context.available_ram_gb < auto_low_ram_gb)
    return choose(low_ram_safe,
                  "less than 16 GiB of RAM available (" + ram + ") and no model size known");
  return choose(one_shot_fast, "enough RAM available for pinning" +
                                   (ram.empty() ? std::string() : " (" + ram + ")"));
}

/// @brief The route and group-offload parameters preset @p effective_preset gives component
/// @p component when no source names them. The reference's VAE policy: auto, one_shot_fast,
/// low_ram_safe and vmm_fast_runtime give the VAE leaf-level group offload without a stream;
/// warm_process, wsl_compat and nvme_baseline keep it resident (route none); off leaves every
/// component unmanaged. @p bypass_fallback (a whole config or field overrides from code:
/// dynamic_offload_settings::route_fallback_bypassed) bypasses the VAE fallback.
[[nodiscard]] inline resolved_component preset_component_default(preset_id effective_preset,
                                                                 std::string_view component,
                                                                 bool bypass_fallback) {
  using enum preset_id;
  resolved_component out;
  out.name = std::string(component);
  out.route_origin = {origin::preset, std::string(to_string(effective_preset))};
  if (effective_preset == off) {
    out.route = component_route::none;
    return out;
  }
  if (effective_preset == diffusers_offload_compat ||
      effective_preset == diffusers_leaf_offload_compat) {
    out.route = component_route::diffusers_group_offload;
    out.offload_type = effective_preset == diffusers_offload_compat
                           ? group_offload_type::block_level
                           : group_offload_type::leaf_level;
    out.offload_stream = true;
    out.offload_record_stream = true;
    return out;
  }
  out.route = component_route::dynamic_offload;
  if (component == "vae" && !bypass_fallback) {
    if (effective_preset == one_shot_fast || effective_preset == low_ram_safe ||
        effective_preset == vmm_fast_runtime) {
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

/// @brief preset_component_default for a preset given by name (the effective preset of
/// dynamic_offload_settings); @throws std::invalid_argument for a name that is not a preset.
[[nodiscard]] inline resolved_component preset_component_default(std::string_view effective_preset,
                                                                 std::string_view component,
                                                                 bool bypass_fallback) {
  const auto preset = parse_preset(effective_preset);
  if (!preset)
    throw std::invalid_argument("ddo: preset_component_default: \"" +
                                sanitize_utf8(effective_preset) + "\" is not a preset");
  return preset_component_default(*preset, component, bypass_fallback);
}

}  // namespace v0
}  // namespace ddo
