// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The one setup path: settings + weight table + transport → the machine the plan sees →
/// the plan and runtime options of the component's route → an offloader.
///
/// enable_offload / enable_pipeline_offload (runtime/enable_offload.hpp), ddo::offloader's
/// planning constructors, ddo-run, ddo-plan and the benchmarks all go through these functions,
/// so for the same inputs ddo-plan prints the plan ddo-run runs.
///
/// - machine_for(): the machine a plan sees. Device free/total from the transport (capped by
///   runtime_options::device_budget_bytes when the engine or a pipeline sets one), minus the
///   slot ring (device_footprint.hpp: the formula the runtime's budget check uses), minus the
///   engine's reserve (activations, workspaces: setup_options::reserve_device_bytes), minus
///   runtime_device_reserve_bytes (64 MiB); RAM stated by the engine or probed; a stored
///   capacity profile applied.
/// - setup_offload(): dispatches the component's route — dynamic_offload (planned with the
///   Planner and PinSelector, through the application's plan_cache when `cache_plan` is on),
///   diffusers_group_offload and none (runtime/routes.hpp) — and returns the plan and the runtime
///   options to run it with. It checks the transport against `backend` and `execution_device`
///   and prints the setup details when `verbose` is on.
/// - planner_for(): the residency planner of a run (by profile: runtime/prepare_offload.hpp).
/// - make_transport(): the transport a Transport type gets from the settings (execution_device;
///   runtime/transport_setup.hpp).

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/enum_names.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/linkage.hpp"
#include "ddo/core/log_sink.hpp"
#include "ddo/core/text.hpp"
#include "ddo/memory/shared_weight_store.hpp"
#include "ddo/memory/system_probe.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/plan/by_profile_planner.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "ddo/plan/pin_selector.hpp"
#include "ddo/plan/planner.hpp"
#include "ddo/plan/residency_planner.hpp"
#include "ddo/profile/profile_lookup.hpp"
#include "ddo/runtime/component_ownership.hpp"
#include "ddo/runtime/device_footprint.hpp"
#include "ddo/runtime/native_vmm_options.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/runtime/plan_cache.hpp"
#include "ddo/runtime/routes.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/runtime/stable_address_route.hpp"
#include "ddo/runtime/transport_setup.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Everything setup takes besides the settings, the table and the transport.
/// (enable_options and offloader_inputs are the former names of this one struct.)
struct setup_options {
  /// Resolution inputs, for the entry points that resolve settings themselves (enable_offload,
  /// enable_pipeline_offload, with_offload_backend): explicit config, overrides, TOML,
  /// environment, CLI, component policies, the component's name and explicit route. `preset`
  /// stays empty unless the engine names one (then DDO_PRESET no longer chooses).
  resolve_inputs inputs;
  /// The engine's execution groups; empty: inferred from `resident_module_patterns`.
  std::optional<std::vector<execution_group>> groups;
  /// Base runtime options (metrics, trace, ...); the config's runtime fields go on top.
  runtime_options runtime;
  /// The application's pinned-weight cache, used when `cache_pinned_weights` is on.
  pinned_weight_cache* pinned_cache = nullptr;
  /// The application's plan cache, used when `cache_plan` is on (null: plans every time).
  plan_cache* plans = nullptr;
  /// Device bytes the engine needs besides ddo's (activations, workspaces): left free by the plan.
  std::uint64_t reserve_device_bytes = 0;
  /// Available RAM the engine states for its machine; wins over detection unless
  /// `available_system_ram_gb` was set explicitly (config, TOML, environment, flag, component).
  std::optional<std::uint64_t> ram_bytes;
  /// Largest streamed bytes of one group the transport's slot/staging holds (0: unconstrained);
  /// a plan streaming more in one group is refused (machine_capacity::max_group_bytes).
  std::uint64_t max_group_bytes = 0;
  /// enable_pipeline_offload: ddo's device bytes in any phase of the pipeline, shared by its
  /// components (each plans against it for its own phase; runtime/pipeline_budget.hpp).
  /// 0: the setting pipeline_device_budget_gb decides (its default 0: not shared, each
  /// component plans against the device memory free at its setup). Ranks as explicit config
  /// from code: TOML, DDO_PIPELINE_DEVICE_BUDGET_GB and the flag win (pipeline_budgets_from).
  std::uint64_t pipeline_device_budget_bytes = 0;
  /// enable_pipeline_offload: page-locked weight bytes of all components together, split once
  /// in proportion to their weight bytes. 0: the setting pipeline_pinned_budget_gb decides
  /// (its default 0: each component's own pin budget). Ranks as above.
  std::uint64_t pipeline_pinned_budget_bytes = 0;
  /// Not empty: plan nothing resident beyond the rules, for this reason (a pipeline phase that
  /// runs once uploads its residents again every phase), unless resident_module_budget_gb is set
  /// (machine_capacity::zero_resident_reason; the plan's source is "zero_resident").
  std::string zero_resident_reason;
  /// Options of a host_sim transport ddo makes itself (backend host_sim, or simulate_device).
  host_sim_options host_sim;
  /// The transports ddo makes (with_prepared_offload): host_sim stands in for the device, every
  /// route running over it (its VMM mode for the VMM routes, the file route over it): a machine
  /// without a GPU, planning for one.
  bool simulate_device = false;
  /// Caps the device memory of a CUDA transport ddo makes (an emulated smaller card); 0: the
  /// device's.
  std::uint64_t device_limit_bytes = 0;
  /// Activation rows per step the engine runs, for a stored profile's group timings
  /// (by_profile_planner); 0: the profile's calibrated high token count.
  std::uint64_t tokens = 0;
  /// Where ddo writes the setup details (`verbose`) and the offloader its profile summary
  /// (`show_profile`): stderr by default; a FILE*, nullptr (silent) or the engine's logger
  /// (core/log_sink.hpp).
  log_sink log;
};
using enable_options = setup_options;
using offloader_inputs = setup_options;

/// @brief The machine as the plan sees it, and how it was derived.
struct setup_machine {
  machine_capacity capacity;     ///< what make_plan gets
  device_memory_info device;     ///< free/total as the transport reported it (0: unknown),
                                 ///< capped by runtime_options::device_budget_bytes
  std::uint64_t slot_bytes = 0;  ///< one ring slot: the largest group, aligned
  std::size_t slots = 0;         ///< slots the plan leaves room for
  std::uint64_t ring_bytes = 0;  ///< ring_bytes_for(slot_bytes, slots)
  std::uint64_t engine_reserve_bytes = 0;   ///< setup_options::reserve_device_bytes
  std::uint64_t runtime_reserve_bytes = 0;  ///< runtime_device_reserve_bytes (0 when unknown)
  std::string ram_source;  ///< "stated by the engine", "probed", "available_system_ram_gb (...)"
  /// Of capacity.available_ram_bytes, the bytes credited back for this table's weights a shared
  /// weight store holds already (probed RAM only): after planning, only those the plan pins.
  std::uint64_t store_credit_bytes = 0;
  std::string profile_note;  ///< what the capacity-profile lookup did (empty: no profile_name)
};

/// @brief What setup_offload decided: everything needed to construct the offloader.
struct offload_setup {
  offload_plan plan;
  runtime_options runtime;
  setup_machine machine;
  resolved_component component;    ///< the route executed (never auto_select)
  std::vector<std::string> notes;  ///< decisions a user should know
  bool plan_from_cache = false;    ///< the plan came from setup_options::plans
};

namespace detail {

/// The plan cache's name of the policies: their types, and the planner's state when it has one
/// that changes the plan (by_profile_planner: the profile's timings, or none).
template <class Planner>
std::string policy_names(const Planner& planner, const std::type_info& pins) {
  std::string names = std::string(typeid(Planner).name()) + '+' + pins.name();
  if constexpr (requires {
                  { planner.cache_key() } -> std::convertible_to<std::string>;
                })
    names += '+' + planner.cache_key();
  return names;
}

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
  line("RAM " + format_bytes(m.capacity.available_ram_bytes) + " (" + m.ram_source + "); WSL " +
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

/// The cache fields act only with the application's cache objects (ddo keeps no process-wide
/// cache): one note when a field asks for caching and its object is missing.
inline void note_missing_caches(const dynamic_offload_settings& settings,
                                const setup_options& options, std::vector<std::string>& notes) {
  std::string fields;
  const auto add = [&](std::string_view text) {
    if (!fields.empty()) fields += ", ";
    fields += text;
  };
  if (settings.config.cache_plan && options.plans == nullptr &&
      settings.provenance.of(field_id::cache_plan).source != origin::default_value)
    add("cache_plan (setup_options::plans)");
  if (options.pinned_cache == nullptr) {
    if (settings.config.cache_pinned_weights)
      add("cache_pinned_weights (setup_options::pinned_cache)");
    if (!settings.config.pinned_weight_cache_namespace.empty())
      add("pinned_weight_cache_namespace '" + settings.config.pinned_weight_cache_namespace + "'");
  }
  if (!fields.empty())
    notes.push_back(fields +
                    ": no effect, the engine passed no cache object (ddo keeps no "
                    "process-wide cache; every setup plans and pins anew)");
}

}  // namespace detail

/// @brief Per weight, 1 when the residency rules keep it resident whatever the budget (before
/// demotion): what setup leaves out of the ring it reserves.
[[nodiscard]] inline std::vector<char> rule_kept_weights(const weight_table& table,
                                                         std::span<const execution_group> groups,
                                                         const dynamic_offload_config& config) {
  const machine_capacity unknown;
  const rule_residency rules = residency_rules(make_plan_context(table, config, unknown, groups));
  std::vector<char> kept(table.size(), 0);
  for (std::size_t w = 0; w < table.size(); ++w) kept[w] = rules.kept(w) ? 1 : 0;
  return kept;
}

/// @brief The largest ring slot @p plan needs: its streamed weights per group, aligned as the
/// runtime lays them out.
[[nodiscard]] inline std::uint64_t streamed_slot_bytes(const offload_plan& plan,
                                                       const weight_table& table,
                                                       std::uint64_t alignment) {
  std::uint64_t largest = 0;
  for (const auto& g : plan.groups) {
    std::vector<std::size_t> streamed;
    for (std::size_t w : g.weights)
      if (plan.decisions[w].where != placement::gpu_resident) streamed.push_back(w);
    largest = std::max(largest, slot_bytes_for(table, streamed, alignment));
  }
  return largest;
}

/// @brief The ring @p plan needs: its largest streamed slot times the slots the runtime makes
/// (runtime_options::slot_count, at most one per streamed group).
[[nodiscard]] inline std::uint64_t streamed_ring_bytes(const offload_plan& plan,
                                                       const weight_table& table,
                                                       const runtime_options& runtime) {
  std::size_t streaming = 0;
  for (const auto& g : plan.groups) streaming += g.streamed_bytes() != 0 ? 1 : 0;
  return ring_bytes_for(streamed_slot_bytes(plan, table, runtime.alignment),
                        std::min(runtime.slot_count, streaming));
}

namespace detail {

/// The group whose weights @p streams(w) selects weigh the most (the first of equals): its name
/// and those bytes, unaligned.
template <class Streams>
[[nodiscard]] std::pair<std::string, std::uint64_t> largest_group(
    const weight_table& table, std::span<const execution_group> groups, Streams streams) {
  std::pair<std::string, std::uint64_t> largest{"", 0};
  for (const auto& g : groups) {
    std::uint64_t bytes = 0;
    for (std::size_t w : g.weights) bytes += streams(w) ? table[w].bytes : 0;
    if (bytes > largest.second) largest = {g.name, bytes};
  }
  return largest;
}

/// machine_for's question to a transport_with_window_sizing: it sizes its staging or window for
/// the most any plan can stream in one group (what rules 1-3 keep never streams; a demoted
/// always-resident weight may), and its answer becomes the plan's limits in @p c with the detail
/// a refusal names: a per-group limit (the file route's slot: a size the user set is honoured, a
/// grown one says for which group) and the resident weights' share of
/// vmm_resident_weight_budget_gb.
template <class Transport>
void size_window(Transport& transport, machine_capacity& c, const weight_table& table,
                 std::span<const execution_group> groups, const dynamic_offload_settings& settings,
                 bool ring, std::span<const char> kept, std::uint64_t slot_bytes,
                 std::size_t ring_slots) {
  const auto& config = settings.config;
  auto largest =
      largest_group(table, groups, [&](std::size_t w) { return kept.empty() || !kept[w]; });
  if (ring) {
    const rule_residency rules = residency_rules(make_plan_context(table, config, c, groups));
    auto may_stream = largest_group(table, groups, [&](std::size_t w) {
      return rules.rule[w] == residency_rule::managed ||
             rules.rule[w] == residency_rule::builtin_pattern;
    });
    if (may_stream.second > largest.second) largest = std::move(may_stream);
  }
  const bool stated = set_explicitly(settings, field_id::vmm_staging_buffer_gb);
  window_sizing_request r;
  r.streams = ring;
  r.staging_stated = stated;
  r.native_route = native_vmm_selected(config);
  r.staging_setting_bytes = gib_to_bytes(config.vmm_staging_buffer_gb);
  r.largest_group_bytes = largest.second;
  r.slot_bytes = slot_bytes;
  if (config.vmm_resident_weight_budget_gb > 0.0)
    r.resident_budget_bytes = gib_to_bytes(config.vmm_resident_weight_budget_gb);
  r.page_bytes = config.vmm_page_mb * mib;
  const window_sizing a = transport.size_window(r);
  const std::string staging = describe(settings.provenance.of(field_id::vmm_staging_buffer_gb));
  if (a.group_limit_bytes != 0 && stated)
    c.max_group_detail = "vmm_staging_buffer_gb " + format_bytes(a.staging_bytes) + " set by " +
                         staging + ", honoured";
  else if (a.grown)
    c.max_group_detail = "vmm_staging_buffer_gb " + format_bytes(r.staging_setting_bytes) + " (" +
                         staging + ") grown to " + format_bytes(a.staging_bytes) +
                         " for the largest group that may stream, '" + largest.first + "' (" +
                         format_bytes(largest.second) + ")";
  if (a.group_limit_bytes != 0 &&
      (c.max_group_bytes == 0 || a.group_limit_bytes < c.max_group_bytes))
    c.max_group_bytes = a.group_limit_bytes;
  if (a.shares_resident_budget) {
    // The window keeps the ring's depth of slots: with one slot left (what the resident set
    // took when it could fill the budget less one) each load waits for the previous group's
    // compute, and FLUX.1 at 4096 tokens ran 1.26-1.49x its bound on 8 and 12 GiB cards (H100).
    const std::size_t slots = std::max<std::size_t>(ring_slots, 1);
    const std::uint64_t window = slots * a.window_slot_bytes;
    c.resident_limit_bytes =
        r.resident_budget_bytes > window ? r.resident_budget_bytes - window : 0;
    c.resident_limit_reason = "vmm_resident_weight_budget_gb " +
                              format_bytes(r.resident_budget_bytes) + " less the ring's " +
                              std::to_string(slots) + " window slot(s) of " +
                              format_bytes(a.window_slot_bytes);
  }
}

}  // namespace detail

/// @brief The machine the plan sees (see the file comment).
/// @param groups the execution groups (any may stream: the ring is sized for the largest).
/// @param runtime the runtime options the plan will run with (slot_count, alignment).
/// @param ring whether the route streams at all (route none: no ring).
/// @param kept per weight, 1 for a weight that never streams (the residency rules keep it, or
/// the plan did): the ring holds only what streams, as the runtime's slots do. Empty: every
/// weight may stream.
template <class Transport>
[[nodiscard]] setup_machine machine_for(Transport& transport, const weight_table& table,
                                        std::span<const execution_group> groups,
                                        const dynamic_offload_settings& settings,
                                        const runtime_options& runtime,
                                        const setup_options& options, bool ring = true,
                                        std::span<const char> kept = {}) {
  setup_machine m;
  m.device = transport.device_memory();
  // A device budget (the engine's cap, or a pipeline phase's share of the shared budget) caps
  // the card the plan sees, so ddo's resident weights and ring stay inside it. The balanced
  // rule's VRAM headroom protects the engine's memory on the real card, not inside ddo's budget:
  // the free bytes seen are capped at budget + headroom, so the rule leaves the budget to ddo.
  if (runtime.device_budget_bytes != 0) {
    auto cap = [](std::uint64_t reported, std::uint64_t limit) {
      return reported == 0 ? limit : std::min(reported, limit);
    };
    const std::uint64_t limit = saturating_add(runtime.device_budget_bytes,
                                               gib_to_bytes(settings.config.auto_vram_headroom_gb));
    m.device.free_bytes = cap(m.device.free_bytes, limit);
    m.device.total_bytes = cap(m.device.total_bytes, limit);
  }
  std::size_t streaming_groups = 0;
  for (const auto& g : groups) {
    std::vector<std::size_t> streamed;
    for (std::size_t w : g.weights)
      if (kept.empty() || !kept[w]) streamed.push_back(w);
    if (streamed.empty()) continue;
    ++streaming_groups;
    m.slot_bytes = std::max(m.slot_bytes, slot_bytes_for(table, streamed, runtime.alignment));
  }
  m.slots =
      ring ? std::min(runtime.slot_count, kept.empty() ? groups.size() : streaming_groups) : 0;
  m.ring_bytes = ring_bytes_for(m.slot_bytes, m.slots);
  m.engine_reserve_bytes = options.reserve_device_bytes;
  machine_capacity& c = m.capacity;
  c.total_vram_bytes = m.device.total_bytes;
  if (m.device.free_bytes != 0) {
    m.runtime_reserve_bytes = runtime_device_reserve_bytes;
    const std::uint64_t reserve = m.ring_bytes + m.engine_reserve_bytes + m.runtime_reserve_bytes;
    // 0 means "unknown" to the planner (checks off): keep at least one byte.
    c.free_vram_bytes = m.device.free_bytes > reserve ? m.device.free_bytes - reserve : 1;
  }
  // 0 asks for detection (the reference's "None"), also when an explicit config struct carries it.
  if (set_explicitly(settings, field_id::available_system_ram_gb) &&
      settings.config.available_system_ram_gb > 0.0) {
    m.ram_source = "available_system_ram_gb (" +
                   describe(settings.provenance.of(field_id::available_system_ram_gb)) + ")";
    c.available_ram_bytes = gib_to_bytes(settings.config.available_system_ram_gb);
  } else if (options.ram_bytes) {
    m.ram_source = "stated by the engine";
    c.available_ram_bytes = *options.ram_bytes;
  } else {
    m.ram_source = "probed";
    c.available_ram_bytes = available_ram_bytes(options.inputs.paths).value_or(0);
    // This table's weights already in a shared weight store are out of MemAvailable and a plan
    // that pins them reuses them: counted once, by the offloader that pinned them. All of them
    // here; setup_offload cuts the credit to those its plan pins (cap_store_credit).
    if (runtime.weight_store && c.available_ram_bytes != 0) {
      m.store_credit_bytes =
          detail::pinning_detail::store_bytes_held(*runtime.weight_store, table, runtime);
      c.available_ram_bytes += m.store_credit_bytes;
      m.ram_source += ", plus " + format_bytes(m.store_credit_bytes) +
                      " of its weights in the shared weight store";
    }
  }
  c.max_group_bytes = options.max_group_bytes;
  c.zero_resident_reason = options.zero_resident_reason;
  // The file route's slots and the VMM window (transport_with_window_sizing).
  if constexpr (transport_with_window_sizing<Transport>)
    detail::size_window(transport, c, table, groups, settings, ring, kept, m.slot_bytes, m.slots);
  c.running_on_wsl = settings.running_on_wsl;
  c.disable_pin_on_wsl = settings.disable_pin_on_wsl;
  // host_sim stands in for any device (ddo-plan --vram-gb plans for a GPU on it): a profile's
  // device name is checked on real devices only; its size is checked everywhere.
  const std::string device_name = transport_device_name(transport);
  m.profile_note = apply_capacity_profile(c, settings.config, settings.profile_dir, &table,
                                          device_name == "host_sim" ? "" : device_name);
  return m;
}

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

namespace detail {
template <class Planner>
inline constexpr bool is_by_profile_planner = false;
template <class Fallback>
inline constexpr bool is_by_profile_planner<by_profile_planner<Fallback>> = true;
}  // namespace detail

/// @brief The residency planner of this run: a by_profile_planner gets the group timings of the
/// stored capacity profile the settings name (`profile_name`) when they apply to @p table on
/// @p transport's device at `options.tokens`, and says which planner plans and why; any other
/// planner is default-constructed.
/// @param found set to the profile lookup (nullopt: no profile_name, calibrating, or none stored)
/// for a caller that reports it; untouched for other planners.
/// @throws format_error / io_error for a bad profile file.
template <class Planner, class Transport>
[[nodiscard]] Planner planner_for(const weight_table& table,
                                  const dynamic_offload_settings& settings,
                                  const setup_options& options, const Transport& transport,
                                  std::optional<stored_group_timings>* found = nullptr) {
  Planner planner{};
  if constexpr (detail::is_by_profile_planner<Planner>) {
    // A simulated device stands in for any device: no name to check.
    std::string device;
    if constexpr (requires {
                    { transport.device() } -> std::convertible_to<int>;
                  })
      device = transport_device_name(transport);
    auto timings =
        stored_timings_for(settings.config, settings.profile_dir, table, device, options.tokens);
    if (timings && !timings->timings.empty()) {
      const runtime_options runtime = runtime_options_from(settings.config, options.runtime);
      planner.overlap.emplace();
      planner.overlap->timings = timings->timings;
      planner.overlap->ring = {runtime.slot_count, runtime.prefetch_depth};
      planner.reason = "overlap-aware: capacity profile '" + settings.config.profile_name +
                       "', group timings at " +
                       (options.tokens != 0 ? std::to_string(options.tokens) + " tokens"
                                            : std::string("its calibrated token count"));
    } else {
      planner.reason = settings.config.profile_name.empty() ? "selection: no profile_name"
                       : settings.config.build_profile      ? "selection: calibrating"
                       : !timings ? "selection: capacity profile '" + settings.config.profile_name +
                                        "' not stored yet"
                                  : "selection: capacity profile '" + settings.config.profile_name +
                                        "' has no group timings that apply here";
    }
    if (found != nullptr) *found = std::move(timings);
  }
  return planner;
}

/// @brief Plans component @p component's route over @p transport and returns the plan and
/// runtime options to run it with (see the file comment).
/// @tparam Planner, PinSelector the dynamic_offload route's policies (plan/concepts.hpp).
/// @throws config_error (settings, backend, execution_device), out_of_memory (budgets),
/// usage_error (groups).
namespace detail {

/// Cuts @p m's shared-weight-store credit to @p cap bytes (those a plan pins; setup_offload).
inline void cap_store_credit(setup_machine& m, std::uint64_t cap) {
  if (m.store_credit_bytes <= cap) return;
  m.capacity.available_ram_bytes -= m.store_credit_bytes - cap;
  m.store_credit_bytes = cap;
  m.ram_source = "probed, plus " + format_bytes(cap) +
                 " of its weights in the shared weight store (those the plan pins)";
}

/// The dynamic route's planning (setup_offload): the plan cache's plan when it still fits, else
/// planned with the ring reserved for what the plan streams. @p machine gives the machine for
/// the weights a plan keeps (machine_for with setup_offload's arguments).
template <class Planner, class PinSelector, class Machine>
void plan_streaming(offload_setup& r, const weight_table& table,
                    const std::vector<execution_group>& groups,
                    const dynamic_offload_config& settings_config,
                    const dynamic_offload_config& config, const setup_options& options,
                    const Planner& planner, const PinSelector& pins, Machine& machine, bool cached,
                    std::string& key) {
  // The ring holds what streams: reserved from what the residency rules do not keep.
  const std::vector<char> rule_kept = rule_kept_weights(table, groups, settings_config);
  std::vector<char> kept = rule_kept;
  r.machine = machine(kept);
  if (cached) {
    const std::pair<std::string_view, std::uint64_t> budgets[] = {
        {"total_vram", r.machine.device.total_bytes},
        {"ring", r.machine.ring_bytes},
        {"engine_reserve", r.machine.engine_reserve_bytes},
        {"runtime_reserve", r.machine.runtime_reserve_bytes},
        {"stated_ram", options.ram_bytes.value_or(0)},
        {"profile", r.machine.capacity.profile_resident_budget_bytes.value_or(~0ull)},
        {"wsl", (r.machine.capacity.running_on_wsl ? 1u : 0u)},
        {"max_group", r.machine.capacity.max_group_bytes},
        {"zero_resident", options.zero_resident_reason.empty() ? 0u : 1u},
        {"resident_limit", r.machine.capacity.resident_limit_bytes.value_or(~0ull)},
    };
    key =
        plan_cache_key(table, groups, config, policy_names(planner, typeid(PinSelector)), budgets);
    if (auto hit = options.plans->find(key)) {
      // Reused while its resident bytes still fit what is free now.
      const std::uint64_t free = r.machine.capacity.free_vram_bytes;
      if (free == 0 || hit->total_bytes(placement::gpu_resident) <= free) {
        r.plan = std::move(*hit);
        r.plan_from_cache = true;
      } else {
        r.notes.push_back("cached plan keeps more resident than is free now: planned again");
      }
    }
  }
  // The ring the plan sees is reserved from what a plan streams: first from what the rules
  // do not keep; again from the plan's own streamed weights when they differ (demoted
  // weights stream too; the budget kept the largest groups), planning once more and taking
  // a smaller ring only when the new plan still fits it. A model the card holds whole (no
  // ring at all) is planned that way first.
  auto reserve_for = [&](const offload_plan& plan) {
    for (std::size_t w = 0; w < table.size(); ++w)
      kept[w] = plan.decisions[w].where == placement::gpu_resident ? 1 : 0;
    return machine(kept);
  };
  if (r.plan_from_cache) {
    r.machine = reserve_for(r.plan);
    return;
  }
  if (table.total_bytes() <= r.machine.device.free_bytes) {
    offload_plan everything;  // no ring: what is resident when nothing has to stream
    everything.decisions.assign(table.size(), weight_decision{});
    auto m = reserve_for(everything);
    auto plan = make_plan(table, groups, config, m.capacity, planner, pins);
    m = reserve_for(plan);  // the ring of what that plan streams
    plan = make_plan(table, groups, config, m.capacity, planner, pins);
    if (streamed_ring_bytes(plan, table, r.runtime) <= m.ring_bytes) {
      r.machine = std::move(m);
      r.plan = std::move(plan);
      return;
    }
    kept = rule_kept;
  }
  r.plan = make_plan(table, groups, config, r.machine.capacity, planner, pins);
  const std::uint64_t streamed = streamed_slot_bytes(r.plan, table, r.runtime.alignment);
  if (streamed != r.machine.slot_bytes && streamed != 0) {
    auto m = reserve_for(r.plan);
    auto plan = make_plan(table, groups, config, m.capacity, planner, pins);
    if (streamed > r.machine.slot_bytes ||
        streamed_ring_bytes(plan, table, r.runtime) <= m.ring_bytes) {
      r.machine = std::move(m);
      r.plan = std::move(plan);
    }
  }
}

/// The dynamic_offload route's machine and plan (setup_offload), through the plan cache when
/// the engine gave one. The shared weight store's credit to the probed RAM (machine_for) is every
/// byte of this table it holds; a plan that pins other weights would count those bytes as free
/// RAM. So while the plan pins fewer of them than it was credited, it is made again with the
/// credit cut to those it pins: each round credits less, and the third credits nothing (always
/// right: then the plan's new pinned bytes fit the RAM probed).
template <class Planner, class PinSelector, class Transport>
void plan_dynamic_offload(offload_setup& r, Transport& transport, const weight_table& table,
                          const std::vector<execution_group>& groups,
                          const dynamic_offload_settings& settings, const setup_options& options,
                          const Planner& planner, const PinSelector& pins) {
  r.runtime.route = executed_route::dynamic_offload;
  // The machine carries the RAM the plan uses (explicit field, stated, or probed): resolution's
  // detected value in the config must not override a stated one.
  dynamic_offload_config config = settings.config;
  config.available_system_ram_gb = 0.0;
  const bool cached = settings.config.cache_plan && options.plans != nullptr;
  std::string key;
  std::optional<std::uint64_t> credit_cap;
  auto machine = [&](std::span<const char> kept) {
    auto m = machine_for(transport, table, groups, settings, r.runtime, options, true, kept);
    if (credit_cap) cap_store_credit(m, *credit_cap);
    return m;
  };
  for (int round = 0;; ++round) {
    r.plan_from_cache = false;
    plan_streaming(r, table, groups, settings.config, config, options, planner, pins, machine,
                   cached, key);
    if (r.machine.store_credit_bytes == 0) break;
    const std::uint64_t taken =
        pinning_detail::store_bytes_held(*r.runtime.weight_store, table, r.runtime, &r.plan);
    if (taken >= r.machine.store_credit_bytes) break;
    credit_cap = round < 1 ? taken : 0;
  }
  if (cached && !r.plan_from_cache) options.plans->insert(std::move(key), r.plan);
}

}  // namespace detail

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
  auto groups = options.groups
                    ? *options.groups
                    : infer_execution_groups(table, settings.config.resident_module_patterns);
  r.runtime = runtime_options_from(settings.config, options.runtime, options.pinned_cache);
  detail::note_missing_caches(settings, options, r.notes);
  // show_profile: the offloader writes its profile summary through the setup log when it is
  // destroyed (runtime_options::profile_summary; metrics on, as the summary reads them).
  if (settings.config.show_profile && options.log) {
    r.runtime.metrics = true;
    r.runtime.profile_summary = options.log;
  }
  switch (component.route) {
    case component_route::none: {
      r.runtime.route = executed_route::none;
      r.machine = machine_for(transport, table, groups, settings, r.runtime, options, false);
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
      r.machine = machine_for(transport, table, groups, settings, r.runtime, options);
      r.plan =
          make_group_offload_plan(table, std::move(groups), g, settings.effective_pin_cpu_memory);
      break;
    }
    default:
      detail::plan_dynamic_offload(r, transport, table, groups, settings, options, planner, pins);
      break;
  }
  // A stable-address (VMM) transport's route: its window's slots, staging and route name
  // (runtime/stable_address_route.hpp).
  if constexpr (transport_with_stable_addresses<Transport>)
    if (component.route != component_route::none) {
      window_room room{r.machine.capacity.free_vram_bytes, r.machine.slot_bytes,
                       r.machine.ring_bytes};
      if constexpr (requires {
                      { transport.staging_buffer_bytes() } -> std::same_as<std::uint64_t>;
                    })
        room.staging_bytes = transport.staging_buffer_bytes();
      configure_stable_address_route(r.runtime, r.notes, r.plan, table, settings, room);
    }
  if (settings.config.verbose) detail::print_setup(options.log, table, r, transport.name());
  return r;
}

namespace detail {

/// The offloader's settings constructors come here (runtime/offloader.hpp): setup_offload with
/// the offloader's planner and pin selector, make_transport, resolve_from_sources.
template <>
struct setup_path<dynamic_offload_settings> {
  using options_type = setup_options;

  // Defined out of the class (not implicitly inline) so that `extern template` keeps it out
  // of the TUs of a program that compiles ddo once (below).
  template <class Planner, class PinSelector, class Transport>
  static offload_setup run(const weight_table& table, const dynamic_offload_settings& settings,
                           const setup_options& options, Transport& transport);

  template <class Transport>
  static Transport transport(const dynamic_offload_settings& settings,
                             const setup_options& options) {
    return make_transport<Transport>(settings, options.host_sim);
  }

  template <class... Sources>
  static dynamic_offload_settings resolve(const resolve_context& context,
                                          const Sources&... sources) {
    return resolve_from_sources(context, sources...);
  }
};

template <class Planner, class PinSelector, class Transport>
offload_setup setup_path<dynamic_offload_settings>::run(const weight_table& table,
                                                        const dynamic_offload_settings& settings,
                                                        const setup_options& options,
                                                        Transport& transport) {
  return setup_offload(table, settings, component_for(settings, options.inputs), options, transport,
                       planner_for<Planner>(table, settings, options, transport), PinSelector{});
}

}  // namespace detail

/// The setup path's instantiations for one shipped transport with the default planner and pin
/// selector: declared extern where ddo is compiled once (DDO_EXTERN_TEMPLATES, core/linkage.hpp)
/// and defined by ddo/instantiate.hpp. @p PREFIX is `extern` or empty.
#define DDO_SETUP_PATH_INSTANTIATIONS(PREFIX, TRANSPORT)                                       \
  PREFIX template offload_setup                                                                \
  setup_offload<default_offload_planner, default_pin_selector, TRANSPORT>(                     \
      const weight_table&, const dynamic_offload_settings&, const resolved_component&,         \
      const setup_options&, TRANSPORT&, const default_offload_planner&,                        \
      const default_pin_selector&);                                                            \
  PREFIX template setup_machine machine_for<TRANSPORT>(                                        \
      TRANSPORT&, const weight_table&, std::span<const execution_group>,                       \
      const dynamic_offload_settings&, const runtime_options&, const setup_options&, bool,     \
      std::span<const char>);                                                                  \
  PREFIX template TRANSPORT make_transport<TRANSPORT>(const dynamic_offload_settings&,         \
                                                      const host_sim_options&, std::uint64_t); \
  PREFIX template offload_setup detail::setup_path<dynamic_offload_settings>::run<             \
      default_offload_planner, default_pin_selector, TRANSPORT>(                               \
      const weight_table&, const dynamic_offload_settings&, const setup_options&, TRANSPORT&);

/// Every transport the setup path constructs (make_transport, with_offload_backend): the
/// simulation, the linear ring, the VMM window and the file route over either; the runtime of
/// the last three is declared here (runtime/basic_offloader.hpp has the first two), where
/// their headers are included.
#define DDO_SHIPPED_INSTANTIATIONS(PREFIX)                                \
  DDO_SETUP_PATH_INSTANTIATIONS(PREFIX, host_sim_transport)               \
  DDO_SETUP_PATH_INSTANTIATIONS(PREFIX, linear_transport)                 \
  DDO_RUNTIME_INSTANTIATIONS(PREFIX, vmm_transport)                       \
  DDO_SETUP_PATH_INSTANTIATIONS(PREFIX, vmm_transport)                    \
  DDO_RUNTIME_INSTANTIATIONS(PREFIX, nvme_transport<linear_transport>)    \
  DDO_SETUP_PATH_INSTANTIATIONS(PREFIX, nvme_transport<linear_transport>) \
  DDO_RUNTIME_INSTANTIATIONS(PREFIX, nvme_transport<vmm_transport>)       \
  DDO_SETUP_PATH_INSTANTIATIONS(PREFIX, nvme_transport<vmm_transport>)

#if !DDO_HEADER_ONLY
DDO_SHIPPED_INSTANTIATIONS(extern)
#endif

}  // namespace v0
}  // namespace ddo
