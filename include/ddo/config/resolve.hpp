// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Resolution: merging presets and config sources into ddo::dynamic_offload_settings with
/// the provenance of every field. The public entry is ddo::resolve_settings(resolve_inputs).
///
/// Precedence, lowest first: dataclass defaults < from_env() operational defaults < preset <
/// explicit config (code) < TOML file < DDO_* environment < command line < component policies.
/// The preset itself is chosen by --ddo-preset, else the preset passed in code, else DDO_PRESET,
/// else the TOML file's `preset`, else auto; `auto` is resolved after every source is read
/// (it looks at the backend, WSL, RAM, the model size and VMM support).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/config/component_policy.hpp"
#include "ddo/config/concepts.hpp"
#include "ddo/config/config_layer.hpp"
#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/env_source.hpp"
#include "ddo/config/explicit_source.hpp"
#include "ddo/config/field_override.hpp"
#include "ddo/config/resolve_context.hpp"
#include "ddo/core/linkage.hpp"
#include "ddo/memory/system_probe.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Resolves settings from config sources composed at compile time, each a
/// ddo::config_source, given lowest precedence first (they are ordered by their origin anyway).
/// @throws config_error for any invalid value, naming its source.
template <class... Sources>
[[nodiscard]] dynamic_offload_settings resolve_from_sources(const resolve_context& context,
                                                            const Sources&... sources);

namespace detail {
/// Resolves the collected layers (any order: sorted by origin) against @p context.
[[nodiscard]] DDO_INLINE dynamic_offload_settings resolve_layers(const resolve_context& context,
                                                                 std::vector<config_layer> layers);
}  // namespace detail

template <class... Sources>
dynamic_offload_settings resolve_from_sources(const resolve_context& context,
                                              const Sources&... sources) {
  static_assert(check_config_sources<Sources...>());
  std::vector<config_layer> layers;
  layers.reserve(sizeof...(Sources));
  (layers.push_back(sources.collect()), ...);
  return detail::resolve_layers(context, std::move(layers));
}

/// @brief Everything an application passes to resolution, in one struct.
struct resolve_inputs {
  std::optional<std::string> preset;             ///< preset from code (else DDO_PRESET, else auto)
  std::optional<dynamic_offload_config> config;  ///< a whole explicit config (see explicit_source)
  /// Explicit field overrides ({field_id::backend, offload_backend::nvme}), provenance config.
  std::vector<field_override> overrides;
  std::optional<config_layer> toml;  ///< from ddo::read_toml_config(path) (config/toml_source.hpp)
  /// DDO_* variables; nullopt reads the process environment.
  std::optional<std::map<std::string, std::string>> environment;
  /// false ignores the environment entirely: config variables and component routes.
  bool use_environment = true;
  std::optional<config_layer> cli;  ///< from ddo::cli_config_layer(vm) (cli/)
  std::string component;                 ///< see resolve_context::component
  std::vector<std::string> components;   ///< see resolve_context::components
  std::optional<component_route> route;  ///< see resolve_context::route
  std::map<std::string, component_policy> component_policies;  ///< per-component policies
  std::optional<bool> plan;                ///< as DDO_PLAN, from code
  std::optional<bool> disable_pin_on_wsl;  ///< as DDO_DISABLE_PIN_ON_WSL, from code
  std::optional<std::uint64_t> model_bytes;  ///< total weight bytes, when known
  std::optional<bool> vmm_supported;         ///< device VMM support, when known
  std::optional<bool> running_on_wsl;        ///< overrides WSL detection (tests)
  std::optional<double> detected_ram_gb;     ///< overrides RAM detection (tests)
  std::optional<std::uint64_t> stated_ram_bytes;  ///< see resolve_context::stated_ram_bytes
  system_paths paths;                        ///< probe file paths (tests)
};

/// @brief Resolves settings from @p inputs: the one entry point applications, the runner and
/// enable_offload() use.
/// @throws config_error naming the field, its source (variable, flag, TOML key), the value seen
/// and what is allowed.
[[nodiscard]] dynamic_offload_settings resolve_settings(const resolve_inputs& inputs);

/// @brief The route and group-offload parameters of component @p name under @p settings:
/// preset default (with the reference's VAE policy) < TOML [components.NAME] < DDO_<NAME>_*
/// (unless use_environment was false) < code component_policies < @p explicit_route; on WSL with
/// the pinning safety rule, offload_stream and offload_record_stream are forced off.
[[nodiscard]] resolved_component resolve_component(
    const dynamic_offload_settings& settings, std::string_view name,
    std::optional<component_route> explicit_route = std::nullopt);

/// @brief Resolves settings from the process environment, as the reference's
/// `DynamicOffloadSettings.from_env()`: preset @p preset (empty: DDO_PRESET, else auto), the
/// operational defaults, the DDO_* variables. Equal to resolve_settings with only the preset set.
/// @throws config_error for an invalid variable, naming it.
[[nodiscard]] dynamic_offload_settings settings_from_env(std::string_view preset = {});

}  // namespace v0
}  // namespace ddo

#if DDO_HEADER_ONLY
#include "ddo/config/detail/resolve_impl.hpp"
#endif
