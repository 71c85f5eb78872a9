// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::enable_pipeline_offload(pipeline, preset, options[, transport]): offloading for
/// every component of a pipeline (text encoder, transformer, VAE), each with its own route
/// (component policies, DDO_<COMPONENT>_* variables, the preset's component defaults), and
/// optionally one device budget and one pinned-host budget for all of them (settings
/// pipeline_device_budget_gb / pipeline_pinned_budget_gb — TOML, DDO_PIPELINE_*_BUDGET_GB,
/// --ddo-pipeline-*-budget-gb — or setup_options::pipeline_device_budget_bytes /
/// pipeline_pinned_budget_bytes from code: pipeline_budgets_from; how they are shared:
/// setup/pipeline_budget.hpp).
///
/// Phases: the engine says which component runs next with `pipeline.enter_phase("vae")` (the
/// reference's lifecycle boundaries: before_text_encoder, before_transformer, before_vae).
/// ddo then releases the device memory of every other streaming component (resident weights,
/// ring or VMM window; their plans, pinned blocks and staging stay) and brings the named
/// component's device side up: its residents are uploaded again, its ring allocated. A lease
/// alive in a component that would be released refuses the switch (usage_error), before
/// anything changes. Components on route `none` stay on the device in every phase.
///
/// With a shared device budget every streaming component is set up one at a time, planned
/// against the whole budget (less the route-none components), and left released: the first
/// enter_phase brings its component up, so the device peak is the largest phase. Without one,
/// components plan as before (each against what the previous ones left free) and stay up
/// until a phase switch releases them.
///
/// Budgets only ratchet up within a run: raise_budgets() with a larger budget re-plans every
/// component (and pins again, once); the same budgets change nothing; a smaller one is refused.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/units.hpp"
#include "ddo/setup/device_budget.hpp"
#include "ddo/setup/enable_offload.hpp"
#include "ddo/setup/resolve_stage.hpp"
#include "ddo/setup/pipeline_budget.hpp"
#include "ddo/setup/start.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One component of a pipeline: its name ("transformer", "text_encoder", "vae") and
/// weights, optionally its execution groups.
struct pipeline_component {
  std::string name;
  const weight_table* model = nullptr;
  std::optional<std::vector<execution_group>> groups;
  /// How many times the engine runs the component's groups in one phase (the transformer: its
  /// steps; a text encoder or a VAE decode: 1); 0: unknown. Under a shared device budget a
  /// component run once per phase keeps nothing resident beyond its rules (always-resident
  /// patterns, small tensors): its phase moves every byte once either way, and streaming them
  /// overlaps its compute where re-uploading residents at the phase switch does not.
  int passes_per_phase = 0;
};

/// @brief What the phase switches of a pipeline did so far (for reports and tests).
struct pipeline_phase_counts {
  std::size_t switches = 0;            ///< enter_phase calls that changed the phase
  std::uint64_t restored_bytes = 0;    ///< resident weight bytes uploaded again by them
  std::uint64_t peak_device_bytes = 0; ///< most ddo device bytes of all components at a switch
};

/// @brief Every component of a pipeline with offloading enabled, by name, in setup order, and
/// the phase API (see the file comment).
template <class Offloader>
class pipeline_offload {
 public:
  using offloader_type = Offloader;
  /// Sets every component up again under new budgets (enable_pipeline_offload provides it).
  using planner = std::function<void(pipeline_offload&, const pipeline_budgets&)>;

  std::vector<std::string> order;                                ///< setup order
  std::map<std::string, enabled_offload<Offloader>> components;  ///< by name

  /// @brief The component called @p name. @throws usage_error if unknown.
  enabled_offload<Offloader>& operator[](const std::string& name) {
    auto it = components.find(name);
    DDO_EXPECTS(it != components.end(),
                "pipeline_offload: no component named '" + name + "'; the pipeline has " + names());
    return it->second;
  }

  /// @brief Makes @p component's phase the current one: releases the device memory of every
  /// other streaming component, then brings @p component's up (see the file comment). Entering
  /// the current phase again does nothing.
  /// @note Synchronizes with ddo's streams and the released leases' events (a phase boundary).
  /// @throws usage_error for an unknown component or while a component to be released has
  /// leases alive (nothing is changed then); out_of_memory / cuda_error when the component's
  /// device side does not fit (no phase is current then).
  void enter_phase(std::string_view component) {
    const std::string name(component);
    auto& target = (*this)[name];
    if (phase_ == name && !target->device_released()) return;
    for (auto& [other, c] : components)
      if (other != name && !c->device_released() && c.component.route != component_route::none &&
          c->live_leases() != 0)
        throw usage_error("enter_phase('" + name + "'): component '" + other + "' has " +
                          std::to_string(c->live_leases()) +
                          " lease(s) alive; drop them before the phase switch (its device memory "
                          "is released and their pointers would dangle)");
    for (auto& [other, c] : components)
      if (other != name && c.component.route != component_route::none) c->release_device();
    phase_.clear();
    if (target->device_released()) {
      target->restore_device();
      counts_.restored_bytes += target->plan().total_bytes(placement::gpu_resident);
    }
    phase_ = name;
    ++counts_.switches;
    counts_.peak_device_bytes = std::max(counts_.peak_device_bytes, device_bytes());
  }

  /// @brief The component whose phase is current ("" before the first enter_phase, or after a
  /// switch failed).
  [[nodiscard]] const std::string& phase() const noexcept { return phase_; }

  /// @brief ddo's device bytes of every component now (resident arenas and rings).
  [[nodiscard]] std::uint64_t device_bytes() const {
    std::uint64_t total = 0;
    for (const auto& [name, c] : components) total += c->device_bytes();
    return total;
  }

  /// @brief The budgets the pipeline shares (zeros: none shared).
  [[nodiscard]] const pipeline_budgets& budgets() const noexcept { return budgets_; }
  /// @brief Each component's share of them, in setup order.
  [[nodiscard]] const std::vector<pipeline_component_budget>& shares() const noexcept {
    return shares_;
  }
  [[nodiscard]] const pipeline_phase_counts& phase_counts() const noexcept { return counts_; }

  /// @brief Co-scheduled components (issue 41 item 3): moves each named component's device
  /// budget at a phase boundary without setup (set_device_budget on its offloader, with the
  /// settings and options it was set up with): several components stay up at once, each within
  /// its budget. Components whose budget falls move first, then those whose budget rises (a
  /// released one is moved while released and then restored), so ddo's device bytes of all
  /// components never exceed the larger of the sums before and after — within the pipeline's
  /// device budget when it has one. A budget of 0 releases the component's device side.
  /// Components not named keep theirs. No single phase is current afterwards.
  /// @note Synchronizes with ddo's streams (a phase boundary).
  /// @throws usage_error for an unknown or route-none component, one named twice, or a lease
  /// alive in a named one; out_of_memory when the budgets and the components not named exceed
  /// the pipeline's device budget, or (naming the smallest budget) when a component's budget
  /// holds none of its plans — nothing changed then; what a move throws (the components moved
  /// before it keep their new budgets).
  void move_budgets(const std::vector<std::pair<std::string, std::uint64_t>>& budgets) {
    check_budget_moves(budgets);
    phase_.clear();
    std::vector<char> falls;  // decided before any move: a moved component is within its budget
    for (const auto& b : budgets) falls.push_back(b.second < (*this)[b.first]->device_bytes());
    for (std::size_t i = 0; i < budgets.size(); ++i)  // those leaving or shrinking first
      if (budgets[i].second == 0) (*this)[budgets[i].first]->release_device();
      else if (falls[i]) move_component(budgets[i].first, budgets[i].second);
    for (std::size_t i = 0; i < budgets.size(); ++i)
      if (budgets[i].second != 0 && !falls[i]) move_component(budgets[i].first, budgets[i].second);
    counts_.peak_device_bytes = std::max(counts_.peak_device_bytes, device_bytes());
  }

  /// @brief The setup options component @p name was set up with (its share of the budgets in
  /// runtime.device_budget_bytes); move_budgets plans with them.
  [[nodiscard]] const setup_options& component_options(const std::string& name) const {
    const auto it = options_.find(name);
    DDO_EXPECTS(it != options_.end(), "pipeline_offload: no options for component '" + name +
                                          "' (not set up by enable_pipeline_offload)");
    return it->second;
  }

  /// @brief Raises the shared budgets: equal budgets change nothing; a larger one re-plans
  /// every component (and pins again, once); no phase is current afterwards.
  /// @throws usage_error for a budget lower than the current one (budgets only ratchet up
  /// within a run) or while any lease is alive; what setup throws when re-planning fails
  /// (the pipeline then holds no component).
  void raise_budgets(const pipeline_budgets& next) {
    auto refuse_lower = [](const char* which, std::uint64_t now, std::uint64_t asked) {
      if (asked < now)
        throw usage_error(std::string("raise_budgets: the pipeline ") + which + " budget is " +
                          format_bytes_exact(now) + "; " + format_bytes_exact(asked) +
                          " would lower it, and budgets only ratchet up within a run");
    };
    refuse_lower("device", budgets_.device_bytes, next.device_bytes);
    refuse_lower("pinned-host", budgets_.pinned_host_bytes, next.pinned_host_bytes);
    if (next == budgets_) return;
    for (auto& [name, c] : components)
      DDO_EXPECTS(c->live_leases() == 0, "raise_budgets: component '" + name + "' has " +
                                             std::to_string(c->live_leases()) +
                                             " lease(s) alive; drop them before re-planning");
    DDO_EXPECTS(static_cast<bool>(planner_), "raise_budgets: this pipeline was not made by "
                                             "enable_pipeline_offload and cannot re-plan");
    auto plan = planner_;  // the re-planning replaces *this's members, not the function it runs
    plan(*this, next);
  }

  // --- for enable_pipeline_offload ----------------------------------------------------------
  /// @brief Adds component @p name, last in setup order, set up with @p o.
  void add_component(const std::string& name, enabled_offload<Offloader> c, setup_options o) {
    components.emplace(name, std::move(c));
    order.push_back(name);
    options_.insert_or_assign(name, std::move(o));
  }
  /// @brief Records the budgets and shares the components were set up with.
  void set_planned(pipeline_budgets budgets, std::vector<pipeline_component_budget> shares,
                   planner p) {
    budgets_ = budgets;
    shares_ = std::move(shares);
    planner_ = std::move(p);
    phase_.clear();
  }

 private:
  void check_budget_moves(const std::vector<std::pair<std::string, std::uint64_t>>& budgets) {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < budgets.size(); ++i) {
      const auto& [name, bytes] = budgets[i];
      auto& c = (*this)[name];
      DDO_EXPECTS(c.component.route != component_route::none,
                  "move_budgets: component '" + name + "' is on route none (always resident)");
      for (std::size_t j = 0; j < i; ++j)
        DDO_EXPECTS(budgets[j].first != name, "move_budgets: component '" + name + "' named twice");
      DDO_EXPECTS(c->live_leases() == 0, "move_budgets: component '" + name + "' has " +
                                             std::to_string(c->live_leases()) +
                                             " lease(s) alive; drop them before the boundary");
      total += bytes;
    }
    for (const auto& entry : components) {
      const auto named = [&](const auto& b) { return b.first == entry.first; };
      if (std::none_of(budgets.begin(), budgets.end(), named))
        total += entry.second->device_bytes();
    }
    if (budgets_.device_bytes != 0 && total > budgets_.device_bytes)
      throw out_of_memory(memory_tier::device, total, budgets_.device_bytes,
                          "move_budgets: the budgets and the components not named need " +
                              format_bytes_exact(total) + ", the pipeline's device budget is " +
                              format_bytes_exact(budgets_.device_bytes) + "; nothing moved");
  }

  /// Moves component @p name to @p bytes (a released one moves while released, then comes up).
  void move_component(const std::string& name, std::uint64_t bytes) {
    auto& c = (*this)[name];
    (void)set_device_budget(*c, c.settings, component_options(name), bytes);
    if (c->device_released()) c->restore_device();
  }

  [[nodiscard]] std::string names() const {
    std::string s;
    for (const auto& n : order) s += (s.empty() ? "'" : ", '") + n + "'";
    return s.empty() ? "no components" : s;
  }

  std::string phase_;
  pipeline_budgets budgets_;
  std::vector<pipeline_component_budget> shares_;
  pipeline_phase_counts counts_;
  planner planner_;
  std::map<std::string, setup_options> options_;  // each component's, as set up
};

/// @brief The budgets a pipeline shares: `pipeline_device_budget_gb` / `pipeline_pinned_budget_gb`
/// of @p settings (the pipeline's settings, resolved with no component), or the engine's
/// `setup_options::pipeline_device_budget_bytes` / `pipeline_pinned_budget_bytes`.
///
/// The setup_options bytes rank as explicit config from code (step 4 of docs/configuration.md):
/// a value from the TOML file, a DDO_* variable or a --ddo-* flag wins over them; a non-zero
/// setup_options value wins over the default, a preset and resolve_inputs::overrides. Bytes
/// given in code are taken exactly; GiB settings become bytes by gib_to_bytes.
[[nodiscard]] inline pipeline_budgets pipeline_budgets_from(
    const dynamic_offload_settings& settings, const setup_options& options) {
  const auto pick = [&](field_id field, double gb, std::uint64_t code_bytes) {
    const bool from_outside_code = settings.provenance.of(field).source >= origin::toml;
    if (code_bytes != 0 && !from_outside_code) return code_bytes;
    return gib_to_bytes(gb);
  };
  return {pick(field_id::pipeline_device_budget_gb, settings.config.pipeline_device_budget_gb,
               options.pipeline_device_budget_bytes),
          pick(field_id::pipeline_pinned_budget_gb, settings.config.pipeline_pinned_budget_gb,
               options.pipeline_pinned_budget_bytes)};
}

namespace detail {

/// The least device bytes component @p c's phase needs on @p transport: the ring setup will
/// allocate (machine_for's formula) and ddo's runtime reserve; route none: every weight.
template <class Transport>
std::uint64_t least_phase_bytes(Transport& transport, const weight_table& model,
                                const dynamic_offload_settings& settings,
                                const resolved_component& c, const setup_options& options) {
  if (c.route == component_route::none) return model.total_bytes();
  const auto groups = options.groups
                          ? *options.groups
                          : infer_execution_groups(model, settings.config.resident_module_patterns);
  auto runtime = runtime_options_from(settings.config, options.runtime, options.pinned_cache);
  if (c.route == component_route::diffusers_group_offload)
    runtime = group_offload_runtime_options(group_offload_options_from(c), runtime);
  const auto m = machine_for(transport, model, groups, settings.config,
                             machine_inputs_for(settings, options, options.inputs.paths, model,
                                                runtime),
                             runtime);
  return m.ring_bytes + runtime_device_reserve_bytes;
}

/// The pipeline's own settings (no component), for its shared budgets and the one transport ddo
/// makes: the resolve stage over every component's bytes, as each component's goes over its own.
inline dynamic_offload_settings pipeline_settings(const std::vector<pipeline_component>& pipeline,
                                                  std::optional<std::string_view> preset,
                                                  const setup_options& options) {
  setup_resolution in = options;
  in.inputs.component.clear();
  std::uint64_t bytes = 0;
  for (const auto& c : pipeline) bytes += c.model != nullptr ? c.model->total_bytes() : 0;
  return resolve_for(bytes, preset, in, options.ram_bytes);
}

/// Caps the pinned weights of @p settings at @p share bytes (every pin rule: the cap, and an
/// explicit pin budget above the share).
inline void cap_pinned(dynamic_offload_settings& settings, std::uint64_t share) {
  const double gb = static_cast<double>(share) / static_cast<double>(gib);
  auto& c = settings.config;
  if (c.max_pin_weight_budget_gb == 0.0 || c.max_pin_weight_budget_gb > gb)
    c.max_pin_weight_budget_gb = gb;
  if (c.pin_weight_budget_gb > gb) c.pin_weight_budget_gb = gb;
  // A share of 0 bytes pins nothing (a cap of 0 would mean "uncapped").
  if (share == 0) settings.effective_pin_cpu_memory = c.pin_cpu_memory = false;
}

/// Sets up every component of @p pipeline into @p result under @p budgets (see the file
/// comment of setup/pipeline_offload.hpp); on failure @p result holds no component.
template <class Result, class... Policies, class Transport>
void setup_pipeline(Result& result, const std::vector<pipeline_component>& pipeline,
                    const std::optional<std::string>& preset, const setup_options& options,
                    const Transport& transport, const pipeline_budgets& budgets) {
  result.components.clear();
  result.order.clear();
  std::vector<std::string> names;
  for (const auto& c : pipeline) {
    DDO_EXPECTS(c.model != nullptr, "enable_pipeline_offload: component '" + c.name + "' has no model");
    for (const auto& n : names)
      DDO_EXPECTS(n != c.name, "enable_pipeline_offload: component '" + c.name + "' given twice");
    names.push_back(c.name);
  }
  // Resolve every component first: the shares need each one's route and ring.
  std::vector<setup_options> component_options;
  std::vector<dynamic_offload_settings> settings;
  std::vector<pipeline_component_need> needs;
  auto probe_transport = transport;
  for (const auto& c : pipeline) {
    auto o = options;
    o.inputs.component = c.name;
    o.inputs.components = names;
    if (c.groups) o.groups = c.groups;
    if (preset) o.inputs.preset = *preset;  // a preset from code outranks DDO_PRESET
    auto s = resolve_for(c.model->total_bytes(), std::nullopt, o, o.ram_bytes);
    const auto route = component_for(s, o.inputs);
    pipeline_component_need need;
    need.name = c.name;
    need.weight_bytes = c.model->total_bytes();
    need.stays_resident = route.route == component_route::none;
    need.pins_whole = route.route == component_route::diffusers_group_offload;
    if (budgets.device_bytes != 0)
      need.min_device_bytes = least_phase_bytes(probe_transport, *c.model, s, route, o);
    needs.push_back(std::move(need));
    component_options.push_back(std::move(o));
    settings.push_back(std::move(s));
  }
  auto shares = plan_pipeline_budgets(needs, budgets);
  try {
    for (std::size_t i = 0; i < pipeline.size(); ++i) {
      auto& o = component_options[i];
      auto& s = settings[i];
      std::vector<std::string> notes;
      if (budgets.device_bytes != 0 && !needs[i].stays_resident) {
        o.runtime.device_budget_bytes = shares[i].device_bytes;
        notes.push_back("pipeline device budget: phase '" + pipeline[i].name + "' plans against " +
                        format_bytes(shares[i].device_bytes));
        if (pipeline[i].passes_per_phase == 1 &&
            !set_explicitly(s, field_id::resident_module_budget_gb)) {
          o.zero_resident_reason =
              "pipeline phase '" + pipeline[i].name + "' runs once (passes_per_phase = 1)";
          notes.push_back("passes_per_phase = 1: nothing resident beyond the rules (streamed "
                          "bytes overlap the compute; residents would be uploaded again every phase)");
        }
      }
      if (budgets.pinned_host_bytes != 0 && !needs[i].stays_resident) {
        cap_pinned(s, shares[i].pinned_host_bytes);
        o.runtime.pinned_budget_bytes = shares[i].pinned_host_bytes;
        notes.push_back("pipeline pinned-host budget: this component's share is " +
                        format_bytes(shares[i].pinned_host_bytes));
      }
      auto enabled = enable_resolved<typename Result::offloader_type>(*pipeline[i].model,
                                                                      std::move(s), o, transport);
      enabled.notes.insert(enabled.notes.end(), notes.begin(), notes.end());
      // Shared device budget: each phase is set up alone, then waits for enter_phase.
      if (budgets.device_bytes != 0 && !needs[i].stays_resident) enabled->release_device();
      result.add_component(pipeline[i].name, std::move(enabled), o);
    }
  } catch (...) {
    result.components.clear();
    result.order.clear();
    throw;
  }
  result.set_planned(budgets, std::move(shares),
                     [pipeline, preset, options, transport](Result& r, const pipeline_budgets& next) {
                       r.components.clear();  // frees the old pinned blocks before pinning again
                       r.order.clear();
                       setup_pipeline<Result, Policies...>(r, pipeline, preset, options, transport, next);
                     });
}

}  // namespace detail

/// @brief enable_offload for every component over @p transport (see the file comment); with
/// a shared device or pinned-host budget (settings `pipeline_device_budget_gb` /
/// `pipeline_pinned_budget_gb`, or `options.pipeline_device_budget_bytes` /
/// `pipeline_pinned_budget_bytes`: pipeline_budgets_from) the components share it and the
/// engine marks phases with enter_phase().
/// @throws usage_error for a component without a model or given twice; out_of_memory naming
/// the phase whose least footprint exceeds the device budget; what enable_offload throws.
template <class... Policies, class Transport>
[[nodiscard]] pipeline_offload<typename detail::offloader_over<Transport, Policies...>::type>
enable_pipeline_offload(const std::vector<pipeline_component>& pipeline,
                        std::optional<std::string_view> preset, setup_options options,
                        Transport transport) {
  using result_type =
      pipeline_offload<typename detail::offloader_over<Transport, Policies...>::type>;
  result_type result;
  // The budgets are the pipeline's, not a component's: read from its settings (no component).
  const auto budgets =
      pipeline_budgets_from(detail::pipeline_settings(pipeline, preset, options), options);
  detail::setup_pipeline<result_type, Policies...>(
      result, pipeline, preset ? std::optional<std::string>(*preset) : std::nullopt, options,
      transport, budgets);
  return result;
}

/// @brief As above; ddo makes the policies' transport (default linear) from the settings the
/// pipeline resolves to (no component), once, shared by every component. Returns what the
/// overload above returns for that transport (it named offloader<Policies...>, another type when
/// the policies leave the transport out, and did not compile: issue 40's docs check).
template <class... Policies>
[[nodiscard]] pipeline_offload<typename detail::offloader_over<
    typename offloader<Policies...>::transport_type, Policies...>::type>
enable_pipeline_offload(
    const std::vector<pipeline_component>& pipeline,
    std::optional<std::string_view> preset = std::nullopt, setup_options options = {}) {
  using transport_type = typename offloader<Policies...>::transport_type;
  const auto settings = detail::pipeline_settings(pipeline, preset, options);
  auto transport = setup_transport<transport_type>(settings, options);
  return enable_pipeline_offload<Policies...>(pipeline, preset, std::move(options),
                                              std::move(transport));
}

}  // namespace v0
}  // namespace ddo
