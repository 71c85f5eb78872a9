// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Runtime presets for application code: ddo::enable_offload(model, preset) (and
/// ddo::enable_pipeline_offload(pipeline, preset), setup/pipeline_offload.hpp) resolve settings
/// (preset < code < TOML < environment < flags < component policies; config/resolve.hpp), pick the
/// component's route and return the composed ddo::offloader, ready, with the plan and the resolved
/// settings beside it. All of it goes through the one call (setup/prepare_offload.hpp): the
/// planner by profile, the plan, the offloader.
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
///   transport from `backend` (with_transport: host_sim, linear, vmm, or the file route over
///   linear or vmm) and calls `engine(enabled)` with the concrete
///   `enabled_offload<offloader<Transport, Policies...>>`.

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
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/resolve_stage.hpp"
#include "ddo/runtime/routes.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/setup/start.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {

/// The offloader enable_offload returns over Transport (prepare_offload's).
template <class Transport, class... Policies>
using offloader_over = prepared_offloader<Transport, Policies...>;

template <class Offloader>
enabled_offload<Offloader> enable_resolved(const weight_table& model,
                                           dynamic_offload_settings settings,
                                           const setup_options& options,
                                           typename Offloader::transport_type transport) {
  return detail::prepare_offload_as<Offloader>(model, std::move(settings), options,
                                               std::move(transport))
      .start();
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
  return detail::enable_resolved<result>(
      model, resolve_for(model.total_bytes(), preset, options, options.ram_bytes), options,
      std::move(transport));
}

/// @brief As above; ddo makes the policies' transport (default linear) from the settings.
template <class... Policies>
[[nodiscard]] enabled_offload<offloader<Policies...>> enable_offload(
    const weight_table& model, std::optional<std::string_view> preset = std::nullopt,
    setup_options options = {}) {
  using result = offloader<Policies...>;
  using transport_type = typename result::transport_type;
  auto settings = resolve_for(model.total_bytes(), preset, options, options.ram_bytes);
  auto transport = setup_transport<transport_type>(settings, options);
  return detail::enable_resolved<result>(model, std::move(settings), options, std::move(transport));
}

/// @brief ddo chooses the transport from `backend` (with_transport: host_sim, linear, vmm, or
/// the file route over either) and calls @p engine with the ready
/// `enabled_offload<offloader<Transport, Planner, PinSelector>>&`; returns what @p engine
/// returns (the same type for every transport).
/// @throws config_error for a backend this build has no transport for.
template <class... Policies, class Engine>
decltype(auto) with_offload_backend(const weight_table& model,
                                    std::optional<std::string_view> preset,
                                    setup_options options, Engine&& engine) {
  static_assert(!detail::policy_set<Policies...>::fixed_transport,
                "ddo::with_offload_backend: ddo chooses the transport from `backend`; do not name "
                "one in the policies (use enable_offload to fix the transport at compile time)");
  return with_prepared_offload<Policies...>(
      model, resolve_for(model.total_bytes(), preset, options, options.ram_bytes), options,
      [&](auto& prepared) -> decltype(auto) {
        auto enabled = prepared.start();
        return std::forward<Engine>(engine)(enabled);
      },
      routes_of<simulated_routes::refused>{});
}

}  // namespace v0
}  // namespace ddo
