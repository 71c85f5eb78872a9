// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief setup_offload(): dispatches the component's route — dynamic_offload (planned with the
/// Planner and PinSelector, through the application's plan_cache when `cache_plan` is on),
/// diffusers_group_offload and none (runtime/routes.hpp) — and returns the plan and the runtime
/// options to run it with. It checks the transport against `backend` and `execution_device` and
/// prints the setup details when `verbose` is on. Part of the one setup path (setup/setup.hpp).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/config/component_policy.hpp"
#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/enum_names.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/log_sink.hpp"
#include "ddo/core/text.hpp"
#include "ddo/memory/weight_registry.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/by_profile_planner.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "ddo/plan/pin_selector.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/runtime/routes.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/runtime/transport_setup.hpp"
#include "ddo/setup/machine.hpp"
#include "ddo/setup/machine_inputs.hpp"
#include "ddo/setup/options.hpp"
#include "ddo/setup/plan_loop.hpp"
#include "ddo/setup/planner_choice.hpp"
#include "ddo/setup/registry_budget.hpp"
#include "ddo/setup/stable_address_route.hpp"
#include "ddo/setup/start.hpp"
#include "ddo/transport/concepts.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {

inline void print_setup(const log_sink& log, const weight_table& table, const offload_setup& r,
                        std::string_view transport_name) {
  if (!log) return;
  const auto& m = r.machine;
  const auto line = [&](const std::string& text) {
    log(log_severity::info, "ddo: setup: " + text);
  };
  line("route " + std::string(to_string(r.component.route)) + " on the " +
       std::string(transport_name) + " transport, " + std::to_string(table.size()) + " weights (" +
       format_bytes(table.total_bytes()) + ")");
  if (m.device.total_bytes != 0)
    line("device " + format_bytes(m.device.free_bytes) + " free of " +
         format_bytes(m.device.total_bytes) + "; ring " + std::to_string(m.slots) + " x " +
         format_bytes(m.slot_bytes) + " = " + format_bytes(m.ring_bytes) + "; engine reserve " +
         format_bytes(m.engine_reserve_bytes) + "; runtime reserve " +
         format_bytes(m.runtime_reserve_bytes) + "; the plan sees " +
         format_bytes(m.capacity.free_vram_bytes) + " free");
  else
    line("device memory unknown: the plan's capacity checks are off");
  line("RAM " + format_bytes(m.capacity.available_ram_bytes) + " (" + describe(m.ram) + "); WSL " +
       (m.capacity.running_on_wsl ? "yes" : "no"));
  if (!m.profile_note.empty()) line(sanitize_utf8(m.profile_note));
  line(std::string("plan ") + (r.plan_from_cache ? "from the plan cache" : "made now") +
       "; resident " + format_bytes(r.plan.total_bytes(placement::gpu_resident)) + ", pinned " +
       format_bytes(r.plan.total_bytes(placement::pinned_host)) + "; ring " +
       std::to_string(r.runtime.slot_count) + " slot(s), prefetch " +
       (r.runtime.prefetch_depth > 64 ? std::string("as far as the ring allows")
                                      : std::to_string(r.runtime.prefetch_depth)));
  // Notes echo patterns, names and file paths: escaped as every ddo message is (core/text.hpp).
  for (const auto& n : r.notes) log(log_severity::note, "ddo: setup: note: " + sanitize_utf8(n));
}

/// The cache fields act by default (issue 42): `cache_plan` through the engine's plan cache or
/// the process's (process_plan_cache), `cache_pinned_weights` through the engine's
/// pinned_weight_cache, store or registry, else the process's weight registry
/// (process_weight_registry: host copies kept across calls, shared between models). Returns
/// the plan cache to use (null: none); notes what the host copies come from and reuse.
inline plan_cache* use_caches(const dynamic_offload_config& config, const engine_facts& facts,
                              const weight_table& table, runtime_options& runtime,
                              std::vector<std::string>& notes) {
  if (config.cache_pinned_weights && facts.pinned_cache == nullptr && !runtime.weight_store &&
      !runtime.registry)
    runtime.registry = process_weight_registry();
  if (runtime.registry) {
    const auto name = pinning_detail::registry_model_name(table, runtime);
    notes.push_back("host copies: " +
                    std::string(runtime.registry == process_weight_registry()
                                    ? "the process's weight registry"
                                    : "the engine's weight registry") +
                    ", model '" + name + "': " +
                    format_bytes(pinning_detail::registry_bytes_held(*runtime.registry, table,
                                                                     runtime)) +
                    " of its weights held already (reused, not read again)");
  } else if (!config.cache_pinned_weights && !config.pinned_weight_cache_namespace.empty()) {
    notes.push_back("pinned_weight_cache_namespace '" + config.pinned_weight_cache_namespace +
                    "': no effect without cache_pinned_weights");
  }
  if (!config.cache_plan) return nullptr;
  return facts.plans != nullptr ? facts.plans : &process_plan_cache();
}

}  // namespace detail

/// @brief The route of component `inputs.component` under @p settings ("": the plain model's:
/// `inputs.route`, else dynamic_offload); a disabled preset ("off") gives route none.
[[nodiscard]] inline resolved_component component_for(const dynamic_offload_settings& settings,
                                                      const resolve_inputs& inputs,
                                                      std::vector<std::string>* notes = nullptr) {
  resolved_component c;
  if (!inputs.component.empty()) {
    c = resolve_component(settings, inputs.component, inputs.route);
  } else {
    c.route = inputs.route.value_or(component_route::dynamic_offload);
    if (c.route == component_route::auto_select) c.route = component_route::dynamic_offload;
  }
  if (!settings.enabled) {
    c.route = component_route::none;
    if (notes)
      notes->push_back("preset '" + settings.effective_preset +
                       "' disables offloading: every weight is uploaded once (route none)");
  }
  return c;
}

/// @brief Plans component @p component's route over @p transport and returns the plan and
/// runtime options to run it with (see the file comment).
/// @tparam Planner, PinSelector the dynamic_offload route's policies (plan/concepts.hpp).
/// @throws config_error (settings, backend, execution_device), out_of_memory (budgets),
template <class Planner = default_offload_planner, class PinSelector = default_pin_selector,
          class Transport>
[[nodiscard]] offload_setup setup_offload(const weight_table& table,
                                          const dynamic_offload_settings& settings,
                                          const resolved_component& component,
                                          const setup_options& options, Transport& transport,
                                          const Planner& planner = {},
                                          const PinSelector& pins = {}) {
  static_assert(detail::check_transport<Transport>());
  offload_setup r;
  r.component = component;
  DDO_EXPECTS(component.route != component_route::auto_select,
              "setup_offload: the component's route must be resolved (component_for)");
  detail::check_transport_settings(settings, transport, r.notes);
  const dynamic_offload_config& config = settings.config;
  // Engine-given groups are checked before any stage indexes the table by them (the machine
  // stage marks each group's weights: an index past the table wrote past its vectors).
  auto groups = options.groups ? validate_execution_groups(table, *options.groups)
                               : infer_execution_groups(table, config.resident_module_patterns);
  r.runtime = runtime_options_from(config, options.runtime, options.pinned_cache);
  plan_cache* const plans = detail::use_caches(config, options, table, r.runtime, r.notes);
  // show_profile: the offloader writes its profile summary through the setup log when it is
  // destroyed (runtime_options::profile_summary; metrics on, as the summary reads them).
  if (config.show_profile && options.log) {
    r.runtime.metrics = true;
    r.runtime.profile_summary = options.log;
  }
  // The machine stage's inputs, the RAM among them, once for every machine this setup tries.
  const machine_inputs in =
      machine_inputs_for(settings, options, options.inputs.paths, table, r.runtime);
  if (r.runtime.registry && r.runtime.registry == process_weight_registry())
    detail::apply_registry_budget(config, in.ram, *r.runtime.registry, r.notes);
  switch (component.route) {
    case component_route::none: {
      r.runtime.route = executed_route::none;
      r.machine = machine_for(transport, table, groups, config, in, r.runtime, false);
      r.plan = make_resident_plan(table, std::move(groups));
      const std::uint64_t resident = r.plan.total_bytes(placement::gpu_resident);
      const std::uint64_t free = r.machine.capacity.free_vram_bytes;
      if (free != 0 && resident > free)
        throw out_of_memory(memory_tier::device, resident, free,
                            "route none keeps every weight on the device (" +
                                format_bytes(resident) + ") but the plan sees " +
                                format_bytes(free) +
                                " free after the engine's and ddo's reserves; choose a streaming "
                                "route (dynamic_offload, diffusers_group_offload)");
      r.plan.budgets.free_vram_bytes = free;
      r.plan.budgets.total_vram_bytes = r.machine.capacity.total_vram_bytes;
      break;
    }
    case component_route::diffusers_group_offload: {
      const auto g = group_offload_options_from(component);
      if (!g.record_stream)
        r.notes.push_back(
            "offload_record_stream=false: ddo's release events always keep "
            "weights alive for the compute stream; nothing to turn off");
      r.runtime = group_offload_runtime_options(g, r.runtime);
      r.machine = machine_for(transport, table, groups, config, in, r.runtime);
      r.plan =
          make_group_offload_plan(table, std::move(groups), g, settings.effective_pin_cpu_memory);
      break;
    }
    default:
      detail::plan_dynamic_offload(r, transport, table, groups, config, in, plans, planner, pins);
      break;
  }
  // A stable-address (VMM) transport's route: its window's slots, staging and route name
  // (setup/stable_address_route.hpp).
  if constexpr (transport_with_stable_addresses<Transport>)
    if (component.route != component_route::none) {
      window_room room{r.machine.capacity.free_vram_bytes, r.machine.slot_bytes,
                       r.machine.ring_bytes};
      if constexpr (requires {
                      { transport.staging_buffer_bytes() } -> std::same_as<std::uint64_t>;
                    })
        room.staging_bytes = transport.staging_buffer_bytes();
      configure_stable_address_route(r.runtime, r.notes, r.plan, table, config, room);
    }
  if (config.verbose) detail::print_setup(options.log, table, r, transport.name());
  return r;
}

}  // namespace v0
}  // namespace ddo
