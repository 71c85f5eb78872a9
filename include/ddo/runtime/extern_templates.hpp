// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Explicit instantiation declarations of the offloader for host_sim_transport and
/// linear_transport: with them, a translation unit that uses
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

/// The runtime's instantiations for one transport: declared extern where ddo is compiled once,
/// defined by ddo/instantiate.hpp. @p PREFIX is `extern` or empty. host_sim and linear here;
/// runtime/setup.hpp adds the transports the setup path constructs (VMM, the file route's).
#define DDO_RUNTIME_INSTANTIATIONS(PREFIX, TRANSPORT)    \
  PREFIX template class detail::offloader_core<TRANSPORT>; \
  PREFIX template class basic_offloader<TRANSPORT>;        \
  PREFIX template class lease<TRANSPORT>;

DDO_RUNTIME_INSTANTIATIONS(extern, host_sim_transport)
DDO_RUNTIME_INSTANTIATIONS(extern, linear_transport)

}  // namespace v0
}  // namespace ddo
