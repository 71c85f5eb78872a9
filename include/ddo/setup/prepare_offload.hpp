// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The one call from inputs to a running offloader. Resolved settings + weight table +
/// setup options (the machine stated or probed, the engine's reserve, the component) + the
/// stored capacity profile the settings name →
/// - the transport, from `backend` (with_transport: the one switch, the CUDA device and its
///   cap included; host_sim standing in for the device where setup_options::simulate_device);
/// - the planner: the engine's, else by_profile_planner (the overlap-aware planner where the
///   stored profile's group timings apply; the plan says which planned, plan_budgets::
///   planner_detail);
/// - the plan (setup_offload), returned as a prepared_offload before any memory is pinned, so a
///   caller may print it (ddo-plan stops there);
/// - prepared_offload::start(): the offloader, with the plan (enabled_offload).
///
/// enable_offload, with_offload_backend and enable_pipeline_offload (setup/enable_offload.hpp,
/// setup/pipeline_offload.hpp), ddo-run, ddo-plan and the benchmarks all come through here.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/enum_names.hpp"
#include "ddo/core/error.hpp"
#include "ddo/profile/profile_lookup.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/setup/start.hpp"
#include "ddo/runtime/transport_setup.hpp"

namespace ddo {
inline namespace v0 {

/// @brief A component with offloading enabled: the offloader, the plan it runs and the settings
/// that made it.
/// @tparam Offloader a ddo::offloader<...>.
template <class Offloader>
struct enabled_offload {
  using offloader_type = Offloader;
  dynamic_offload_settings settings;  ///< resolved settings (preset, pinning, WSL)
  resolved_component component;       ///< the route taken and its group-offload parameters
  std::vector<std::string> notes;     ///< decisions a user should know (e.g. VMM not available)
  setup_machine machine;              ///< the machine the plan saw
  std::unique_ptr<Offloader> offloader;  ///< never null after enable_offload

  /// @brief The plan the offloader runs.
  [[nodiscard]] const offload_plan& plan() const { return offloader->plan(); }
  Offloader* operator->() const noexcept { return offloader.get(); }
  Offloader& operator*() const noexcept { return *offloader; }
};

/// @brief A planned component: the plan and everything to start it, before the offloader pins
/// or uploads anything.
template <class Offloader>
struct prepared_offload {
  using offloader_type = Offloader;
  using transport_type = typename Offloader::transport_type;

  dynamic_offload_settings settings;  ///< the resolved settings planned with
  /// The plan, the runtime options to run it with, the machine it saw, the route; its notes are
  /// all of the setup's (the route's, the stored profile's, then the plan's).
  offload_setup setup;
  /// The stored capacity profile the planner looked up (nullopt: no profile_name, calibrating,
  /// none stored, or an engine's own planner).
  std::optional<stored_group_timings> profile;
  transport_type transport;
  const weight_table* table = nullptr;

  [[nodiscard]] const offload_plan& plan() const noexcept { return setup.plan; }

  /// @brief Sets up the offloader over the transport (pins, uploads the resident weights); the
  /// prepared state is moved from.
  /// @throws out_of_memory, cuda_error (what the offloader's setup throws).
  [[nodiscard]] enabled_offload<Offloader> start() {
    enabled_offload<Offloader> result;
    result.component = setup.component;
    result.machine = setup.machine;
    result.notes = setup.notes;
    result.settings = std::move(settings);
    result.offloader = std::make_unique<Offloader>(*table, std::move(setup), std::move(transport));
    return result;
  }
};

namespace detail {

/// The offloader a prepared component runs: offloader<Policies...> over Transport (Policies may
/// name the same transport, or none). Its planner is the engine's, else by_profile_planner over
/// the selection (runtime/policy_set.hpp).
template <class Transport, class... Policies>
struct prepared_offloader {
  using named = offloader<Policies...>;
  static_assert(!policy_set<Policies...>::fixed_transport ||
                    std::is_same_v<typename named::transport_type, Transport>,
                "ddo: the transport object's type differs from the transport named in the "
                "policies");
  using type = std::conditional_t<policy_set<Policies...>::fixed_transport, named,
                                  offloader<Transport, Policies...>>;
};

}  // namespace detail

namespace detail {

template <class Offloader>
prepared_offload<Offloader> prepare_with(const weight_table& table,
                                         dynamic_offload_settings settings,
                                         const setup_options& options,
                                         typename Offloader::transport_type transport,
                                         const typename Offloader::planner_type& planner,
                                         std::optional<stored_group_timings> profile) {
  prepared_offload<Offloader> r;
  r.table = &table;
  r.profile = std::move(profile);
  std::vector<std::string> notes;
  const auto component = component_for(settings, options.inputs, &notes);
  if (r.profile && !r.profile->note.empty()) notes.push_back(r.profile->note);
  r.setup = setup_offload(table, settings, component, options, transport, planner,
                          typename Offloader::pin_selector_type{});
  notes.insert(notes.end(), r.setup.notes.begin(), r.setup.notes.end());
  r.setup.notes = std::move(notes);
  r.settings = std::move(settings);
  r.transport = std::move(transport);
  return r;
}

}  // namespace detail

/// @brief Plans @p table's component (`options.inputs.component`, route from the settings) over
/// @p transport with the planner of @p Offloader (planner_for: by profile unless the engine
/// fixed one), ready to start().
/// @throws config_error (settings, backend, execution_device), out_of_memory (budgets),
/// usage_error (groups, profile timings), format_error / io_error (profile file).
template <class Offloader>
[[nodiscard]] prepared_offload<Offloader> prepare_offload_as(
    const weight_table& table, dynamic_offload_settings settings, const setup_options& options,
    typename Offloader::transport_type transport) {
  std::optional<stored_group_timings> profile;
  const auto planner = planner_for<typename Offloader::planner_type>(
      table, settings.config, settings.profile_dir, options.tokens,
      runtime_options_from(settings.config, options.runtime), transport, &profile);
  return detail::prepare_with<Offloader>(table, std::move(settings), options, std::move(transport),
                                         planner, std::move(profile));
}

/// @brief prepare_offload_as over @p transport with the offloader of @p Policies (a planner, pin
/// selector, selections; a transport only if it is @p Transport).
template <class... Policies, class Transport>
[[nodiscard]] prepared_offload<typename detail::prepared_offloader<Transport, Policies...>::type>
prepare_offload(const weight_table& table, dynamic_offload_settings settings,
                const setup_options& options, Transport transport) {
  static_assert(detail::check_transport<Transport>());
  return prepare_offload_as<typename detail::prepared_offloader<Transport, Policies...>::type>(
      table, std::move(settings), options, std::move(transport));
}

/// @brief As above with the engine's planner object @p planner (a planner with state: measured
/// timings, a budget search), which the offloader's type names.
template <class... Policies, class Transport, residency_planner Planner>
[[nodiscard]] prepared_offload<
    typename detail::prepared_offloader<Transport, Planner, Policies...>::type>
prepare_offload(const weight_table& table, dynamic_offload_settings settings,
                const setup_options& options, Transport transport, const Planner& planner) {
  static_assert(detail::check_transport<Transport>());
  return detail::prepare_with<
      typename detail::prepared_offloader<Transport, Planner, Policies...>::type>(
      table, std::move(settings), options, std::move(transport), planner, std::nullopt);
}

/// @brief Which transports with_transport may make: the device's (and host_sim for backend
/// host_sim); also host_sim standing in for the device on every route (ddo-run and ddo-plan
/// without a GPU); or only those (a CPU engine: ddo-flux). A TU that never simulates does not
/// compile the simulated routes, one that only simulates not the device's.
enum class simulated_routes { refused, allowed, only };
/// @brief simulated_routes as an argument (with_prepared_offload's last).
template <simulated_routes S>
struct routes_of {};

/// @brief The transport `backend` chooses, made from the settings (make_transport: the CUDA
/// device `execution_device` names, capped at `options.device_limit_bytes`), passed to
/// @p make_use; returns what it returns (the same type for every transport):
/// - host_sim: host_sim_transport;
/// - vmm: vmm_transport (host_sim_vmm_transport when simulating);
/// - nvme: nvme_transport over vmm_transport with execution_mode vmm_runtime (nvme_baseline),
///   over linear_transport otherwise (over host_sim's modes when simulating);
/// - linear, auto: linear_transport (host_sim_transport when simulating).
/// @throws config_error for a backend this build has no transport for; usage_error when
/// `options.simulate_device` is set and @p Simulated is refused (`only` simulates whatever it
/// says).
template <simulated_routes Simulated = simulated_routes::allowed, class MakeUse>
decltype(auto) with_transport(const dynamic_offload_settings& settings,
                              const setup_options& options, MakeUse&& make_use) {
  const bool simulate = Simulated == simulated_routes::only || options.simulate_device;
  if constexpr (Simulated == simulated_routes::refused)
    DDO_EXPECTS(!simulate,
                "with_transport: setup_options::simulate_device is set but the caller "
                "compiled no simulated routes (simulated_routes::refused)");
  const auto use = [&]<class T>() -> decltype(auto) {
    return std::forward<MakeUse>(make_use)(setup_transport<T>(settings, options));
  };
  // The simulated device, or the device itself.
  const auto on = [&]<class Device, class Simulation>() -> decltype(auto) {
    if constexpr (Simulated == simulated_routes::only) {
      return use.template operator()<Simulation>();
    } else {
      if constexpr (Simulated == simulated_routes::allowed)
        if (simulate) return use.template operator()<Simulation>();
      return use.template operator()<Device>();
    }
  };
  const bool vmm_mode = settings.config.execution_mode == exec_mode::vmm_runtime;
  switch (settings.config.backend) {
    case offload_backend::host_sim:
      return use.template operator()<host_sim_transport>();
    case offload_backend::vmm:
      return on.template operator()<vmm_transport, host_sim_vmm_transport>();
    case offload_backend::nvme:
      if (vmm_mode)
        return on.template
        operator()<nvme_transport<vmm_transport>, nvme_transport<host_sim_vmm_transport>>();
      return on.template
      operator()<nvme_transport<linear_transport>, nvme_transport<host_sim_transport>>();
    case offload_backend::linear:
    case offload_backend::auto_select:
      return on.template operator()<linear_transport, host_sim_transport>();
  }
  const auto& where = settings.provenance.of(field_id::backend);
  throw config_error(where.source, where.key,
                     describe(where) +
                         ": backend = " + std::string(enum_name(settings.config.backend)) +
                         ": this build has no such transport; use linear, vmm, nvme or host_sim");
}

/// @brief The one call: the transport from the settings (with_transport), the planner by
/// profile, the plan; calls @p use with the `prepared_offload<offloader<Transport, ...>>&`,
/// which it may print and start(); returns what @p use returns (the same type for every
/// transport).
/// @tparam Policies a planner, pin selector or selections (no transport: `backend` chooses it).
/// @param routes routes_of<simulated_routes::refused>{} where host_sim never stands in for the
/// device (the simulated routes are then not compiled).
template <class... Policies, class Use, simulated_routes Simulated = simulated_routes::allowed>
decltype(auto) with_prepared_offload(const weight_table& table,
                                     const dynamic_offload_settings& settings,
                                     const setup_options& options, Use&& use,
                                     routes_of<Simulated> routes = {}) {
  (void)routes;
  static_assert(!detail::policy_set<Policies...>::fixed_transport,
                "ddo::with_prepared_offload: ddo chooses the transport from `backend`; do not "
                "name one in the policies (prepare_offload takes the engine's transport)");
  return with_transport<Simulated>(settings, options, [&](auto transport) -> decltype(auto) {
    auto prepared = prepare_offload<Policies...>(table, settings, options, std::move(transport));
    return std::forward<Use>(use)(prepared);
  });
}

}  // namespace v0
}  // namespace ddo
