// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Runtime presets for application code: ddo::enable_offload(model, preset) and
/// ddo::enable_pipeline_offload(pipeline, preset) resolve settings (preset → explicit config →
/// DDO_* environment → component policies; config/resolve.hpp), pick the component's route and
/// return a ready offloader with the resolved settings beside it, for printing.
///
/// Routes: dynamic_offload plans with the default planner and pin selector; diffusers_group_offload
/// and none run the plans of runtime/routes.hpp; a disabled preset ("off") is route none.
/// execution_mode=vmm_runtime runs on the linear transport until a VMM transport exists (the
/// result's `notes` say so); plan and linear_runtime both stream through the transport.

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/runtime/routes.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Everything enable_offload takes besides the model and the preset.
struct enable_options {
  /// Resolution inputs (explicit config, overrides, TOML, environment, CLI, component policies,
  /// the component's name and explicit route). `preset` is set from the preset argument.
  resolve_inputs inputs;
  /// The engine's execution groups; empty: inferred from `resident_module_patterns`.
  std::optional<std::vector<execution_group>> groups;
  runtime_options runtime;                       ///< base runtime options (metrics, trace, ...)
  pinned_weight_cache* pinned_cache = nullptr;   ///< used when cache_pinned_weights is on
  std::uint64_t reserve_device_bytes = 0;        ///< device bytes to leave to the engine
};

/// @brief A component with offloading enabled: the offloader and the settings that made it.
template <class Transport>
struct enabled_offload {
  dynamic_offload_settings settings;  ///< resolved settings (requested/effective preset, pinning, WSL)
  resolved_component component;       ///< the route taken and its group-offload parameters
  std::vector<std::string> notes;      ///< decisions a user should know (e.g. VMM not available)
  std::unique_ptr<basic_offloader<Transport>> offloader;  ///< never null after enable_offload

  basic_offloader<Transport>* operator->() const noexcept { return offloader.get(); }
  basic_offloader<Transport>& operator*() const noexcept { return *offloader; }
};

/// @brief Resolves settings for @p model and returns a ready offloader over @p transport.
/// @param model the component's weights (must outlive the result, like their sources).
/// @param preset "auto", "one_shot_fast", "low_ram_safe", "wsl_compat", "off", ...
/// @throws config_error for invalid settings; out_of_memory when budgets cannot hold the plan.
template <class Transport = linear_transport>
[[nodiscard]] enabled_offload<Transport> enable_offload(const weight_table& model,
                                                        std::string_view preset = "auto",
                                                        enable_options options = {},
                                                        Transport transport = Transport{}) {
  static_assert(detail::check_transport<Transport>());
  auto inputs = options.inputs;
  inputs.preset = std::string(preset);
  if (!inputs.model_bytes) inputs.model_bytes = model.total_bytes();
  enabled_offload<Transport> result;
  result.settings = resolve_settings(inputs);
  const auto& settings = result.settings;
  if (!inputs.component.empty()) {
    result.component = resolve_component(settings, inputs.component, inputs.route);
  } else {
    result.component.route = inputs.route.value_or(component_route::dynamic_offload);
    if (result.component.route == component_route::auto_select)
      result.component.route = component_route::dynamic_offload;
  }
  if (!settings.enabled) {
    result.component.route = component_route::none;
    result.notes.push_back("preset '" + settings.effective_preset +
                           "' disables offloading: every weight is uploaded once (route none)");
  }
  if (settings.config.execution_mode == exec_mode::vmm_runtime)
    result.notes.push_back("execution_mode vmm_runtime: no VMM transport in this build; the " +
                           std::string(transport.name()) + " transport streams instead");

  auto groups = options.groups ? *options.groups
                               : infer_execution_groups(model, settings.config.resident_module_patterns);
  const auto base = runtime_options_for(settings, options.runtime, options.pinned_cache);
  switch (result.component.route) {
    case component_route::none: {
      auto o = base;
      o.route = "none";
      result.offloader = std::make_unique<basic_offloader<Transport>>(
          transport, model, make_resident_plan(model, std::move(groups)), o);
      break;
    }
    case component_route::diffusers_group_offload: {
      const auto g = group_offload_options_from(result.component);
      if (!g.record_stream)
        result.notes.push_back("offload_record_stream=false: ddo's release events always keep "
                               "weights alive for the compute stream; nothing to turn off");
      result.offloader = std::make_unique<basic_offloader<Transport>>(
          transport, model,
          make_group_offload_plan(model, std::move(groups), g, settings.effective_pin_cpu_memory),
          group_offload_runtime_options(g, base));
      break;
    }
    default: {
      offloader_inputs in;
      in.runtime = options.runtime;
      in.pinned_cache = options.pinned_cache;
      in.reserve_device_bytes = options.reserve_device_bytes;
      const auto machine = machine_capacity_for(transport, model, groups, settings, in);
      auto plan = make_plan(model, std::move(groups), settings.config, machine);
      result.offloader =
          std::make_unique<basic_offloader<Transport>>(transport, model, std::move(plan), base);
      break;
    }
  }
  return result;
}

/// @brief One component of a pipeline: its name ("transformer", "text_encoder", "vae") and
/// weights, optionally its execution groups.
struct pipeline_component {
  std::string name;
  const weight_table* model = nullptr;
  std::optional<std::vector<execution_group>> groups;
};

/// @brief Every component of a pipeline with offloading enabled, by name, in setup order.
template <class Transport>
struct pipeline_offload {
  std::vector<std::string> order;
  std::map<std::string, enabled_offload<Transport>> components;
  /// @brief The component called @p name. @throws usage_error if unknown.
  enabled_offload<Transport>& operator[](const std::string& name) {
    auto it = components.find(name);
    DDO_EXPECTS(it != components.end(), "pipeline_offload: no component named '" + name + "'");
    return it->second;
  }
};

/// @brief enable_offload for every component, each with its own route (component policies,
/// DDO_<COMPONENT>_* variables, the preset's component defaults). Components are set up in
/// order, so each plans against the device memory the previous ones left.
template <class Transport = linear_transport>
[[nodiscard]] pipeline_offload<Transport> enable_pipeline_offload(
    const std::vector<pipeline_component>& pipeline, std::string_view preset = "auto",
    enable_options options = {}, Transport transport = Transport{}) {
  pipeline_offload<Transport> result;
  std::vector<std::string> names;
  for (const auto& c : pipeline) names.push_back(c.name);
  for (const auto& c : pipeline) {
    DDO_EXPECTS(c.model != nullptr, "enable_pipeline_offload: component '" + c.name + "' has no model");
    DDO_EXPECTS(!result.components.contains(c.name),
                "enable_pipeline_offload: component '" + c.name + "' given twice");
    auto o = options;
    o.inputs.component = c.name;
    o.inputs.components = names;
    if (c.groups) o.groups = c.groups;
    result.components.emplace(c.name, enable_offload<Transport>(*c.model, preset, std::move(o), transport));
    result.order.push_back(c.name);
  }
  return result;
}

}  // namespace v0
}  // namespace ddo
