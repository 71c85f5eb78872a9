// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Implementation of resolution. Not API: see config/resolve.hpp.

#include <algorithm>
#include <thread>

#include "ddo/config/closest_name.hpp"
#include "ddo/config/field_registry.hpp"
#include "ddo/config/field_status_warnings.hpp"
#include "ddo/config/operational_defaults.hpp"
#include "ddo/config/parse_value.hpp"
#include "ddo/config/presets.hpp"
// Part of ddo/config/resolve.hpp, which includes it (not back: no include cycles).
#include "ddo/config/validate.hpp"
#include "ddo/core/text.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// The operational defaults (config/operational_defaults.hpp) as (field, value) pairs;
/// available_system_ram_gb is the detected value when one is known (else the field keeps its
/// dataclass default of 0). Here, not beside the values: the vector of variants costs every
/// translation unit that includes the planner (which needs only the patterns) 5 MB of compile.
[[nodiscard]] DDO_INLINE std::vector<std::pair<field_id, field_value>> operational_defaults(
    double detected_ram_gb) {
  std::vector<std::pair<field_id, field_value>> values = {
      {field_id::small_tensor_threshold_bytes,
       static_cast<std::int64_t>(operational_small_tensor_threshold_bytes)},
      {field_id::pin_cpu_workers, operational_pin_cpu_workers(std::thread::hardware_concurrency())},
      {field_id::always_resident_modules_pattern, builtin_always_resident_patterns()},
      {field_id::show_profile, false},
  };
  if (detected_ram_gb > 0.0)
    values.emplace_back(field_id::available_system_ram_gb, detected_ram_gb);
  return values;
}

DDO_INLINE void merge_policy(component_policy& into, const component_policy& from) {
  if (from.route) into.route = from.route;
  if (from.offload_stream) into.offload_stream = from.offload_stream;
  if (from.offload_record_stream) into.offload_record_stream = from.offload_record_stream;
  if (from.offload_type) into.offload_type = from.offload_type;
  if (from.offload_low_cpu_mem_usage)
    into.offload_low_cpu_mem_usage = from.offload_low_cpu_mem_usage;
  if (from.num_blocks_per_group) into.num_blocks_per_group = from.num_blocks_per_group;
  into.config.insert(into.config.end(), from.config.begin(), from.config.end());
}

DDO_INLINE void apply_component_policy(resolved_component& out,
                                       const resolved_component& preset_default,
                                       const component_policy& policy, const field_origin& where) {
  if (policy.route) {
    out.route =
        *policy.route == component_route::auto_select ? preset_default.route : *policy.route;
    out.route_origin = where;
  }
  if (policy.offload_stream) out.offload_stream = *policy.offload_stream;
  if (policy.offload_record_stream) out.offload_record_stream = *policy.offload_record_stream;
  if (policy.offload_type) out.offload_type = *policy.offload_type;
  if (policy.offload_low_cpu_mem_usage)
    out.offload_low_cpu_mem_usage = *policy.offload_low_cpu_mem_usage;
  if (policy.num_blocks_per_group) {
    if (*policy.num_blocks_per_group < 1)
      throw config_error(where.source, where.key,
                         describe(where) + ": num_blocks_per_group = " +
                             std::to_string(*policy.num_blocks_per_group) + " for component " +
                             out.name + "; expected a positive integer");
    out.num_blocks_per_group = *policy.num_blocks_per_group;
  }
}

DDO_INLINE std::optional<field_value> last_assignment(const std::vector<config_layer>& layers,
                                                      field_id id) {
  const std::size_t index = field_index(id);
  std::optional<field_value> value;
  for (const auto& layer : layers)
    for (const auto& assignment : layer.fields)
      if (assignment.field == index) value = assignment.value;
  return value;
}

/// What the layers say besides config fields: the whole config one gives, the preset asked for
/// and --ddo-vmm-total-staging-gb. The rest (plan, WSL rule, profile folder, component policies,
/// standby purges, warnings) goes into the settings; the last layer by precedence wins.
struct layer_extras {
  const dynamic_offload_config* whole = nullptr;
  sourced<std::string> preset{"auto", {origin::default_value, "preset"}};
  std::optional<sourced<double>> total_staging;
};

DDO_INLINE layer_extras gather_extras(const std::vector<config_layer>& layers,
                                      dynamic_offload_settings& settings) {
  layer_extras out;
  for (const auto& layer : layers) {
    settings.warnings.insert(settings.warnings.end(), layer.warnings.begin(), layer.warnings.end());
    if (layer.whole_config) out.whole = &*layer.whole_config;
    if (layer.source == origin::config && !layer.fields.empty())
      settings.route_fallback_bypassed = true;
    if (layer.plan) settings.plan = layer.plan->value;
    if (layer.disable_pin_on_wsl) settings.disable_pin_on_wsl = layer.disable_pin_on_wsl->value;
    if (layer.vmm_total_staging_gb) out.total_staging = layer.vmm_total_staging_gb;
    if (layer.profile_dir) settings.profile_dir = *layer.profile_dir;
    auto& policies = layer.source == origin::toml  ? settings.toml_component_policies
                     : layer.source == origin::env ? settings.env_component_policies
                                                   : settings.component_policies;
    for (const auto& [name, policy] : layer.components) merge_policy(policies[name], policy);
    for (const auto& [phase, enabled] : layer.purge_windows_standby)
      settings.purge_windows_standby[phase] = enabled;
  }
  settings.explicit_config = out.whole != nullptr;
  settings.route_fallback_bypassed = settings.route_fallback_bypassed || settings.explicit_config;
  if (settings.profile_dir.empty()) settings.profile_dir = "~/.ddo/profiles";
  // The preset: --ddo-preset > code > DDO_PRESET > TOML > auto.
  for (origin rank : {origin::toml, origin::env, origin::config, origin::cli})
    for (const auto& layer : layers)
      if (layer.source == rank && layer.preset) out.preset = *layer.preset;
  return out;
}

/// What the preset reads (config/presets.hpp): the backend, RAM and headroom as the layers give
/// them (a field's last assignment, else the whole config's or the default value), the machine
/// and the model. The RAM: available_system_ram_gb when set > the engine's statement > detected.
DDO_INLINE preset_context preset_inputs(const resolve_context& context,
                                        const std::vector<config_layer>& layers,
                                        const dynamic_offload_config* whole,
                                        const dynamic_offload_settings& settings,
                                        std::optional<double> detected_ram_gb) {
  const dynamic_offload_config defaults;
  const auto given = [&](field_id id) {
    return last_assignment(layers, id).value_or(field(id).get(whole ? *whole : defaults));
  };
  preset_context in;
  in.backend = *parse_enum<offload_backend>(std::get<std::string>(given(field_id::backend)));
  in.running_on_wsl = settings.running_on_wsl;
  in.disable_pin_on_wsl = settings.disable_pin_on_wsl;
  in.available_ram_gb = detected_ram_gb;
  in.ram_source = context.detected_ram_gb ? "given as detected" : "detected";
  if (context.stated_ram_bytes) {
    in.available_ram_gb = bytes_to_gib(*context.stated_ram_bytes);
    in.ram_source = "stated by the engine";
  }
  // An assignment of available_system_ram_gb, or a positive one in the whole config.
  if (last_assignment(layers, field_id::available_system_ram_gb) ||
      (whole && whole->available_system_ram_gb > 0)) {
    in.available_ram_gb = std::get<double>(given(field_id::available_system_ram_gb));
    in.ram_source = "available_system_ram_gb";
  }
  in.system_ram_headroom_gb = std::get<double>(given(field_id::system_ram_headroom_gb));
  in.model_bytes = context.model_bytes;
  in.vmm_supported = context.vmm_supported;
  return in;
}

/// The config and its provenance, lowest source first: a whole explicit config, or the defaults,
/// the operational defaults and the preset's values; each layer's fields by precedence; the
/// policy fields of the component being configured, which outrank every other source.
DDO_INLINE void layer_config(dynamic_offload_settings& settings,
                             const std::vector<config_layer>& layers,
                             const dynamic_offload_config* whole, const preset_choice& choice,
                             std::optional<double> detected_ram_gb, const std::string& component) {
  const auto fields = config_fields();
  const auto assign = [&](std::size_t index, const field_value& value, field_origin where) {
    fields[index].set(settings.config, value);
    settings.provenance.set(index, std::move(where));
  };
  if (whole) {
    settings.config = *whole;
    for (std::size_t i = 0; i < fields.size(); ++i)
      settings.provenance.set(i, {origin::config, std::string(fields[i].name)});
  } else {
    // The detected RAM is a measurement, not a choice: origin::detected lets a RAM the engine
    // states for its machine outrank it (plan/plan_context.hpp), unlike an explicit value.
    for (const auto& [id, value] : detail::operational_defaults(detected_ram_gb.value_or(0.0)))
      assign(field_index(id), value,
             {id == field_id::available_system_ram_gb ? origin::detected : origin::default_value,
              std::string(to_string(id))});
    for (const auto& [id, value] : preset_values(choice.id))
      assign(field_index(id), value, {origin::preset, choice.name});
    for (const auto& [id, value] : choice.adjustments)
      assign(field_index(id), value, {origin::preset, choice.adjusted_by});
  }
  for (const auto& layer : layers)
    for (const auto& assignment : layer.fields)
      assign(assignment.field, assignment.value, assignment.where);
  for (const auto& layer : layers) {
    const auto it = component.empty() ? layer.components.end() : layer.components.find(component);
    if (it == layer.components.end()) continue;
    for (const auto& o : it->second.config) {
      const field_origin where{origin::component, "component " + component + " policy field " +
                                                      std::string(to_string(o.field))};
      assign(field_index(o.field), normalize_override(o, where), where);
    }
  }
}

/// The rules that derive settings from the layered config, before it is validated:
/// --ddo-vmm-total-staging-gb and the backend's "auto" and nvme_baseline rules.
DDO_INLINE void derive_settings(dynamic_offload_settings& settings, const preset_choice& choice,
                                const std::optional<sourced<double>>& total_staging) {
  dynamic_offload_config& config = settings.config;
  config_provenance& provenance = settings.provenance;
  // --ddo-vmm-total-staging-gb: native routes take the total; the protected NVMe/legacy route
  // splits it over its two staging slots.
  if (total_staging) {
    const field_origin& where = total_staging->where;
    if (!(total_staging->value > 0.0))
      throw config_error(where.source, where.key,
                         describe(where) + " = " + detail::format_number(total_staging->value) +
                             ": not a valid value; expected a positive size in GiB");
    if (provenance.of(field_id::vmm_staging_buffer_gb).source == origin::cli)
      throw config_error(where.source, where.key,
                         describe(where) + " and " +
                             describe(provenance.of(field_id::vmm_staging_buffer_gb)) +
                             " both set the staging size: give only one");
    const bool native = config.vmm_native_transport || config.vmm_source_cache_gb > 0.0;
    config.vmm_staging_buffer_gb = native ? total_staging->value : total_staging->value / 2.0;
    provenance.set(field_id::vmm_staging_buffer_gb, where);
  }
  // The reference lists nvme_baseline among the VMM backend's presets: the VMM route fed from
  // the model's files. In ddo that route is backend nvme (its file staging in front of the VMM
  // window, execution_mode vmm_runtime); backend vmm alone streams from host memory, which is
  // not what the preset names. Run the preset's route, and say so. (With execution_mode moved off
  // vmm_runtime, backend vmm is refused by validate() as everywhere.)
  if (choice.id == preset_id::nvme_baseline && config.backend == offload_backend::vmm &&
      config.execution_mode == exec_mode::vmm_runtime) {
    settings.warnings.push_back(
        "ddo: note: " + describe(provenance.of(field_id::backend)) +
        " = \"vmm\" with preset nvme_baseline runs the preset's route: weights stream from their "
        "files through the VMM window (backend nvme, execution_mode vmm_runtime)");
    config.backend = offload_backend::nvme;
    provenance.set(field_id::backend,
                   field_origin{origin::detected, "from backend vmm and preset nvme_baseline"});
  }
  // "auto" follows execution_mode. The value is then derived, not chosen: record it as detected,
  // so an engine that fixed its transport is not refused for a backend nobody named (an explicit
  // config struct carries every field, backend = auto included).
  if (config.backend == offload_backend::auto_select) {
    config.backend = config.execution_mode == exec_mode::vmm_runtime ? offload_backend::vmm
                                                                     : offload_backend::linear;
    provenance.set(
        field_id::backend,
        field_origin{origin::detected, "from backend auto and execution_mode " +
                                           std::string(enum_name(config.execution_mode))});
  }
}

/// Whether a route given in code (the reference's "group/dynamic enable arguments": an explicit
/// route, or a component policy from code) names a route other than auto for a component whose
/// preset default is a fallback (the VAE's leaf route): that bypasses the fallback, as a whole
/// config or field overrides do (issue 37). Routes from TOML, the environment or flags do not.
DDO_INLINE bool route_named_in_code(const dynamic_offload_settings& settings,
                                    const std::vector<config_layer>& layers,
                                    const resolve_context& context) {
  const auto has_fallback = [&](const std::string& name) {
    return preset_component_default(settings.effective_preset, name, false) !=
           preset_component_default(settings.effective_preset, name, true);
  };
  const auto named = [](const std::optional<component_route>& r) {
    return r && *r != component_route::auto_select;
  };
  if (!context.component.empty() && named(context.route) && has_fallback(context.component))
    return true;
  for (const auto& layer : layers)
    if (layer.source == origin::config)
      for (const auto& [name, policy] : layer.components)
        if (named(policy.route) && has_fallback(name)) return true;
  return false;
}

DDO_INLINE dynamic_offload_settings resolve_layers(const resolve_context& context,
                                                   std::vector<config_layer> layers) {
  std::stable_sort(layers.begin(), layers.end(), [](const config_layer& a, const config_layer& b) {
    return static_cast<int>(a.source) < static_cast<int>(b.source);
  });
  dynamic_offload_settings settings;
  const layer_extras extras = gather_extras(layers, settings);
  settings.running_on_wsl = context.running_on_wsl.value_or(running_on_wsl(context.paths));
  std::optional<double> detected_ram_gb = context.detected_ram_gb;
  if (!detected_ram_gb)
    if (const auto bytes = available_ram_bytes(context.paths))
      detected_ram_gb = bytes_to_gib(*bytes);
  const preset_choice choice = resolve_preset(
      extras.preset.value, preset_inputs(context, layers, extras.whole, settings, detected_ram_gb),
      extras.preset.where);
  settings.requested_preset = extras.preset.value;
  settings.effective_preset = choice.name;
  settings.preset_reason = choice.reason;

  layer_config(settings, layers, extras.whole, choice, detected_ram_gb, context.component);
  derive_settings(settings, choice, extras.total_staging);
  dynamic_offload_config& config = settings.config;
  validate(config, settings.provenance, settings.warnings);
  warn_inactive_fields(config, settings.provenance, settings.warnings);
  if (const auto& where = settings.provenance.of(field_id::backend);
      config.backend == offload_backend::vmm && context.vmm_supported == false)
    throw config_error(where.source, where.key,
                       describe(where) +
                           " = \"vmm\": the device reports no virtual-memory-management support; "
                           "expected linear, nvme or host_sim");

  settings.requested_pin_cpu_memory = config.pin_cpu_memory;
  settings.effective_pin_cpu_memory =
      config.pin_cpu_memory && !(settings.running_on_wsl && settings.disable_pin_on_wsl);
  config.pin_cpu_memory = settings.effective_pin_cpu_memory;
  settings.enabled =
      choice.id != preset_id::off && (config.execution_mode != exec_mode::plan || settings.plan);

#if !defined(_WIN32)
  for (const auto& [phase, enabled] : settings.purge_windows_standby)
    if (enabled)
      settings.warnings.push_back(
          "ddo: the Windows standby purge is enabled for phase '" + phase +
          "' (DDO_PURGE_WINDOWS_STANDBY_*), which has no effect on this platform "
          "(no_effect_on_this_platform): maybe_purge_windows_standby_cache is a no-op off Windows");
#endif

  std::vector<std::string> names;
  if (!context.component.empty()) names.push_back(context.component);
  settings.route_fallback_bypassed =
      settings.route_fallback_bypassed || route_named_in_code(settings, layers, context);
  for (const auto& name : context.components)
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  for (const auto& name : names)
    settings.components.push_back(resolve_component(
        settings, name, name == context.component ? context.route : std::nullopt));
  // Warnings echo variables, flags, TOML values and component names (bytes): one line each,
  // escaped by the one function every ddo message goes through (core/text.hpp, core/error.hpp).
  for (auto& warning : settings.warnings) warning = sanitize_utf8(warning);
  return settings;
}

}  // namespace detail

DDO_INLINE dynamic_offload_settings resolve_settings(const resolve_inputs& inputs) {
  resolve_context context;
  context.component = inputs.component;
  context.components = inputs.components;
  context.route = inputs.route;
  context.model_bytes = inputs.model_bytes;
  context.vmm_supported = inputs.vmm_supported;
  context.running_on_wsl = inputs.running_on_wsl;
  context.detected_ram_gb = inputs.detected_ram_gb;
  context.stated_ram_bytes = inputs.stated_ram_bytes;
  context.paths = inputs.paths;

  explicit_source code;
  code.preset = inputs.preset;
  code.config = inputs.config;
  code.overrides = inputs.overrides;
  code.plan = inputs.plan;
  code.disable_pin_on_wsl = inputs.disable_pin_on_wsl;
  code.component_policies = inputs.component_policies;
  env_source environment;
  if (inputs.use_environment)
    environment.variables = inputs.environment ? *inputs.environment : process_environment();
  layer_source toml{inputs.toml.value_or(config_layer{})};
  toml.layer.source = origin::toml;
  layer_source cli{inputs.cli.value_or(config_layer{})};
  cli.layer.source = origin::cli;
  return resolve_from_sources(context, code, toml, environment, cli);
}

DDO_INLINE resolved_component resolve_component(const dynamic_offload_settings& settings,
                                                std::string_view name,
                                                std::optional<component_route> explicit_route) {
  // A route named in code is honoured with its own parameters (group offload's block_level),
  // not the fallback's (issue 37): resolve_layers set route_fallback_bypassed for a policy from
  // code; an explicit route bypasses it here too, for a caller that resolves a component alone.
  const bool named_route = explicit_route && *explicit_route != component_route::auto_select;
  const resolved_component preset_default = preset_component_default(
      settings.effective_preset, name, settings.route_fallback_bypassed || named_route);
  resolved_component out = preset_default;
  const std::string key(name);
  if (const auto it = settings.toml_component_policies.find(key);
      it != settings.toml_component_policies.end())
    detail::apply_component_policy(out, preset_default, it->second,
                                   {origin::toml, "components." + key});
  if (const auto it = settings.env_component_policies.find(key);
      it != settings.env_component_policies.end())
    detail::apply_component_policy(out, preset_default, it->second,
                                   {origin::env, "DDO_" + component_env_name(name) + "_ROUTE"});
  if (const auto it = settings.component_policies.find(key);
      it != settings.component_policies.end())
    detail::apply_component_policy(out, preset_default, it->second,
                                   {origin::component, "component_policies[" + key + "]"});
  if (explicit_route) {
    out.route =
        *explicit_route == component_route::auto_select ? preset_default.route : *explicit_route;
    out.route_origin = {origin::config, "route"};
  }
  if (settings.running_on_wsl && settings.disable_pin_on_wsl) {
    out.offload_stream = false;  // the reference's WSL safety rule
    out.offload_record_stream = false;
  }
  return out;
}

DDO_INLINE dynamic_offload_settings settings_from_env(std::string_view preset) {
  resolve_inputs inputs;
  if (!preset.empty()) inputs.preset = std::string(preset);
  return resolve_settings(inputs);
}

}  // namespace v0
}  // namespace ddo
