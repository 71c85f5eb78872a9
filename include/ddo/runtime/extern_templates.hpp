// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Explicit instantiation declarations of the offloader for the shipped transports
/// (host_sim_transport, linear_transport): with them, a translation unit that uses
/// basic_offloader<host_sim_transport> or <linear_transport> does not instantiate the runtime
/// core; it pays the include only and links against the one TU that instantiates it.
///
/// Part of compiling ddo once (core/linkage.hpp, docs/getting-started.md, "Compile ddo once"):
/// basic_offloader.hpp includes this header when DDO_EXTERN_TEMPLATES is defined, and
/// ddo/instantiate.hpp, in one TU of the program, holds the definitions. A program that defines
/// DDO_EXTERN_TEMPLATES and includes ddo/instantiate.hpp nowhere fails to link with undefined
/// ddo::v0::detail::offloader_core<...> members.

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
