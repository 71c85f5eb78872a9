// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The resolve stage (resolve_for): the resolution inputs with what the entry points know
/// about the run — the model's bytes, the RAM the engine states, whether the device has VMM —
/// resolved into settings with provenance. Every entry point that resolves settings itself
/// (enable_offload, with_offload_backend, enable_pipeline_offload: its components and the
/// pipeline's own settings) comes here, so the preset `auto` chooses alike on each. Part of the
/// one setup path (setup/setup.hpp).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/platform/cuda_driver.hpp"
#include "ddo/setup/options.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The settings @p in resolves to for a model (or a pipeline) of @p model_bytes, with
/// @p preset from code when given (it outranks DDO_PRESET) and the RAM the engine states
/// (@p stated_ram, engine_facts::ram_bytes: preset auto decides on it). What `in.inputs` gives
/// already (model_bytes, stated_ram_bytes, vmm_supported) is kept.
/// @throws config_error for invalid settings.
[[nodiscard]] inline dynamic_offload_settings resolve_for(std::uint64_t model_bytes,
                                                          std::optional<std::string_view> preset,
                                                          const setup_resolution& in,
                                                          std::optional<std::uint64_t> stated_ram) {
  auto inputs = in.inputs;
  if (preset) inputs.preset = std::string(*preset);
  if (!inputs.model_bytes) inputs.model_bytes = model_bytes;
  if (!inputs.stated_ram_bytes) inputs.stated_ram_bytes = stated_ram;  // auto decides on it
  // Preset auto chooses a VMM route only where the device has VMM (device 0 unless the engine
  // states it in resolve_inputs::vmm_supported; no GPU: not known, the reference's rule).
  if (!inputs.vmm_supported) inputs.vmm_supported = probe_vmm_supported();
  return resolve_settings(inputs);
}

}  // namespace v0
}  // namespace ddo
