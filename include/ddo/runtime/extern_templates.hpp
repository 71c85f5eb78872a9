// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Explicit instantiation declarations of the offloader for the shipped transports
/// (host_sim_transport, linear_transport): with them, a translation unit that uses
/// basic_offloader<host_sim_transport> or <linear_transport> does not instantiate the runtime
/// core; it pays the include only and links against the one TU that instantiates it.
///
/// The pattern (docs/getting-started.md, "Instantiate the offloader once"):
/// - compile every TU of the engine with DDO_EXTERN_TEMPLATES defined (basic_offloader.hpp then
///   includes this header), or include this header after ddo's;
/// - in exactly one TU, include ddo/runtime/instantiate_offloaders.hpp, which provides the
///   explicit instantiation definitions.
/// A program that defines DDO_EXTERN_TEMPLATES and instantiates nowhere fails to link with
/// undefined ddo::v0::detail::offloader_core<...> members.

#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"

namespace ddo {
inline namespace v0 {

extern template class detail::offloader_core<host_sim_transport>;
extern template class basic_offloader<host_sim_transport>;
extern template class lease<host_sim_transport>;
extern template class detail::offloader_core<linear_transport>;
extern template class basic_offloader<linear_transport>;
extern template class lease<linear_transport>;

}  // namespace v0
}  // namespace ddo
