// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Runtime presets for application code: ddo::enable_offload(model, preset) (and
/// ddo::enable_pipeline_offload(pipeline, preset), runtime/pipeline_offload.hpp) resolve settings (preset < code < TOML <
/// environment < flags < component policies; config/resolve.hpp), pick the component's route
/// and return the composed ddo::offloader, ready, with the resolved settings beside it. All of
/// it goes through the one setup path (runtime/setup.hpp).
///
/// The preset: when the engine passes none, DDO_PRESET (then the TOML file's, then "auto")
/// chooses; a preset passed in code outranks DDO_PRESET, as the reference says.
///
/// The transport:
/// - `enable_offload<Policies...>(model, preset, options, transport)`: the engine's transport
///   object; its type is fixed at compile time, so an explicit `backend` naming another
///   transport is refused (config_error), and an explicit `execution_device` must be its device;
/// - `enable_offload<Policies...>(model, preset, options)`: ddo makes the policies' transport
///   (default linear) on the device `execution_device` names;
/// - `with_offload_backend<Policies...>(model, preset, options, engine)`: ddo chooses the
///   transport from `backend` (host_sim, linear or vmm; nvme when it exists) and calls
///   `engine(enabled)` with the concrete `enabled_offload<offloader<Transport, Policies...>>`.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/platform/cuda_driver.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/runtime/routes.hpp"
#include "ddo/runtime/setup.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"

namespace ddo {
inline namespace v0 {

/// @brief A component with offloading enabled: the offloader and the settings that made it.
/// @tparam Offloader a ddo::offloader<...>.
template <class Offloader>
struct enabled_offload {
  using offloader_type = Offloader;
  dynamic_offload_settings settings;  ///< resolved settings (requested/effective preset, pinning, WSL)
  resolved_component component;       ///< the route taken and its group-offload parameters
  std::vector<std::string> notes;     ///< decisions a user should know (e.g. VMM not available)
  setup_machine machine;              ///< the machine the plan saw
  std::unique_ptr<Offloader> offloader;  ///< never null after enable_offload

  Offloader* operator->() const noexcept { return offloader.get(); }
  Offloader& operator*() const noexcept { return *offloader; }
};

namespace detail {

/// offloader<Policies...> over Transport: Policies may name the same transport, or none.
template <class Transport, class... Policies>
struct offloader_over {
  using named = offloader<Policies...>;
  static_assert(!policy_set<Policies...>::fixed_transport ||
                    std::is_same_v<typename named::transport_type, Transport>,
                "ddo::enable_offload: the transport object's type differs from the transport "
                "named in the policies");
  using type = std::conditional_t<policy_set<Policies...>::fixed_transport, named,
                                  offloader<Transport, Policies...>>;
};

inline dynamic_offload_settings resolve_for(const weight_table& model,
                                            std::optional<std::string_view> preset,
                                            const setup_options& options) {
  auto inputs = options.inputs;
  if (preset) inputs.preset = std::string(*preset);
  if (!inputs.model_bytes) inputs.model_bytes = model.total_bytes();
  if (!inputs.stated_ram_bytes) inputs.stated_ram_bytes = options.ram_bytes;  // auto decides on it
  // Preset auto chooses a VMM route only where the device has VMM (device 0 unless the engine
  // states it in resolve_inputs::vmm_supported; no GPU: not known, the reference's rule).
  if (!inputs.vmm_supported) inputs.vmm_supported = probe_vmm_supported();
  return resolve_settings(inputs);
}

template <class Offloader>
enabled_offload<Offloader> enable_resolved(const weight_table& model,
                                           dynamic_offload_settings settings,
                                           const setup_options& options,
                                           typename Offloader::transport_type transport) {
  enabled_offload<Offloader> result;
  result.settings = std::move(settings);
  std::vector<std::string> notes;
  const auto component = component_for(result.settings, options.inputs, &notes);
  auto setup = setup_offload(model, result.settings, component, options, transport,
                             typename Offloader::planner_type{},
                             typename Offloader::pin_selector_type{});
  result.component = setup.component;
  result.machine = setup.machine;
  result.notes = std::move(notes);
  result.notes.insert(result.notes.end(), setup.notes.begin(), setup.notes.end());
  result.offloader = std::make_unique<Offloader>(model, std::move(setup), std::move(transport));
  return result;
}

}  // namespace detail

/// @brief Resolves settings for @p model and returns a ready offloader over @p transport (the
/// engine's transport object: see the file comment).
/// @param model the component's weights (must outlive the result, like their sources).
/// @param preset "auto", "one_shot_fast", "low_ram_safe", "wsl_compat", "off", ...; nullopt
/// (the default): DDO_PRESET, else auto.
/// @throws config_error for invalid settings or a `backend` the transport is not;
/// out_of_memory when budgets cannot hold the plan.
template <class... Policies, class Transport>
[[nodiscard]] enabled_offload<typename detail::offloader_over<Transport, Policies...>::type>
enable_offload(const weight_table& model, std::optional<std::string_view> preset,
               setup_options options, Transport transport) {
  static_assert(detail::check_transport<Transport>());
  using result = typename detail::offloader_over<Transport, Policies...>::type;
  return detail::enable_resolved<result>(model, detail::resolve_for(model, preset, options),
                                         options, std::move(transport));
}

/// @brief As above; ddo makes the policies' transport (default linear) from the settings.
template <class... Policies>
[[nodiscard]] enabled_offload<offloader<Policies...>> enable_offload(
    const weight_table& model, std::optional<std::string_view> preset = std::nullopt,
    setup_options options = {}) {
  using result = offloader<Policies...>;
  auto settings = detail::resolve_for(model, preset, options);
  auto transport = make_transport<typename result::transport_type>(settings, options.host_sim);
  return detail::enable_resolved<result>(model, std::move(settings), options, std::move(transport));
}

/// @brief ddo chooses the transport from `backend` and calls @p engine with the ready
/// `enabled_offload<offloader<Transport, Policies...>>&` (Transport: host_sim_transport or
/// linear_transport); returns what @p engine returns (the same type for every transport).
/// `backend = nvme` gives nvme_transport<vmm_transport> with execution_mode vmm_runtime
/// (nvme_baseline), nvme_transport<linear_transport> otherwise.
/// @throws config_error for a backend this build has no transport for.
template <class... Policies, class Engine>
decltype(auto) with_offload_backend(const weight_table& model,
                                    std::optional<std::string_view> preset,
                                    setup_options options, Engine&& engine) {
  static_assert(!detail::policy_set<Policies...>::fixed_transport,
                "ddo::with_offload_backend: ddo chooses the transport from `backend`; do not name "
                "one in the policies (use enable_offload to fix the transport at compile time)");
  using sim_result = enabled_offload<offloader<host_sim_transport, Policies...>>;
  using linear_result = enabled_offload<offloader<linear_transport, Policies...>>;
  using vmm_result = enabled_offload<offloader<vmm_transport, Policies...>>;
  using nvme_result = enabled_offload<offloader<nvme_transport<linear_transport>, Policies...>>;
  using nvme_vmm_result = enabled_offload<offloader<nvme_transport<vmm_transport>, Policies...>>;
  static_assert(std::is_same_v<std::invoke_result_t<Engine, sim_result&>,
                               std::invoke_result_t<Engine, linear_result&>>,
                "ddo::with_offload_backend: the engine callback must return the same type for "
                "every transport");
  auto settings = detail::resolve_for(model, preset, options);
  switch (settings.config.backend) {
    case offload_backend::host_sim: {
      auto transport = make_transport<host_sim_transport>(settings, options.host_sim);
      auto enabled = detail::enable_resolved<typename sim_result::offloader_type>(
          model, std::move(settings), options, std::move(transport));
      return std::forward<Engine>(engine)(enabled);
    }
    case offload_backend::vmm: {
      auto transport = make_transport<vmm_transport>(settings, options.host_sim);
      auto enabled = detail::enable_resolved<typename vmm_result::offloader_type>(
          model, std::move(settings), options, std::move(transport));
      return std::forward<Engine>(engine)(enabled);
    }
    case offload_backend::nvme: {
      // The file route: the VMM route fed from files with execution_mode vmm_runtime
      // (nvme_baseline), the linear ring otherwise.
      if (settings.config.execution_mode == exec_mode::vmm_runtime) {
        auto transport = make_transport<nvme_transport<vmm_transport>>(settings, options.host_sim);
        auto enabled = detail::enable_resolved<typename nvme_vmm_result::offloader_type>(
            model, std::move(settings), options, std::move(transport));
        return std::forward<Engine>(engine)(enabled);
      }
      auto transport = make_transport<nvme_transport<linear_transport>>(settings, options.host_sim);
      auto enabled = detail::enable_resolved<typename nvme_result::offloader_type>(
          model, std::move(settings), options, std::move(transport));
      return std::forward<Engine>(engine)(enabled);
    }
    case offload_backend::linear:
    case offload_backend::auto_select:
      break;
    default: {
      const auto& where = settings.provenance.of("backend");
      throw config_error(std::string(to_string(where.source)), where.key,
                         describe(where) + ": backend = " +
                             std::string(enum_name(settings.config.backend)) +
                             ": this build has no such transport; use linear, vmm, nvme or host_sim");
    }
  }
  auto transport = make_transport<linear_transport>(settings, options.host_sim);
  auto enabled = detail::enable_resolved<typename linear_result::offloader_type>(
      model, std::move(settings), options, std::move(transport));
  return std::forward<Engine>(engine)(enabled);
}

}  // namespace v0
}  // namespace ddo
