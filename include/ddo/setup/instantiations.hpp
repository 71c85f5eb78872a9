// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The setup path's explicit instantiations for the transports it constructs: declared
/// extern where ddo is compiled once (DDO_EXTERN_TEMPLATES, core/linkage.hpp), defined by
/// ddo/instantiate.hpp. Part of the one setup path (setup/setup.hpp).

#include <cstdint>
#include <span>

#include "ddo/config/component_policy.hpp"
#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/core/linkage.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/by_profile_planner.hpp"
#include "ddo/plan/pin_selector.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/runtime/transport_setup.hpp"
#include "ddo/setup/machine.hpp"
#include "ddo/setup/options.hpp"
#include "ddo/setup/setup_offload.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"
#include "ddo/transport/nvme.hpp"
#include "ddo/transport/vmm.hpp"

namespace ddo {
inline namespace v0 {

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
      const dynamic_offload_config&, const machine_inputs&, const runtime_options&, bool,      \
      std::span<const char>, ring_floor);                                                      \
  PREFIX template TRANSPORT make_transport<TRANSPORT>(const dynamic_offload_settings&,         \
                                                      const host_sim_options&, std::uint64_t);

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
