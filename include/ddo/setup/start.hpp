// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The transport a setup makes: one function for every entry point that lets ddo make it
/// (enable_offload, with_transport, enable_pipeline_offload, the offloader's settings
/// constructors), so each honours every device option of setup_options. Part of the one setup
/// path (setup/setup.hpp).

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/runtime/transport_setup.hpp"
#include "ddo/setup/options.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The transport @p Transport gets for a setup: make_transport on the device
/// `execution_device` names, with the engine's device options (setup_options::host_sim for a
/// simulated device, setup_options::device_limit_bytes capping either).
/// @throws config_error when execution_device is "cpu" for a CUDA transport; cuda_error.
template <class Transport>
[[nodiscard]] Transport setup_transport(const dynamic_offload_settings& settings,
                                        const setup_options& options) {
  return make_transport<Transport>(settings, options.host_sim, options.device_limit_bytes);
}

}  // namespace v0
}  // namespace ddo
