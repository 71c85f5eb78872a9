// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Explicit instantiation definitions of the offloader for the shipped transports
/// (host_sim_transport, linear_transport). Include this header in exactly one translation unit
/// of a program whose other TUs are compiled with DDO_EXTERN_TEMPLATES (extern_templates.hpp);
/// that TU then holds the only copy of the runtime core. The program links the CUDA runtime
/// (cudart), as every program using ddo does.

#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/extern_templates.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"

namespace ddo {
inline namespace v0 {

template class detail::offloader_core<host_sim_transport>;
template class basic_offloader<host_sim_transport>;
template class lease<host_sim_transport>;
template class detail::offloader_core<linear_transport>;
template class basic_offloader<linear_transport>;
template class lease<linear_transport>;

}  // namespace v0
}  // namespace ddo
