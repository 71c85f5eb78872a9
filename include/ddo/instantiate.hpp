// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo compiled once: include this header in exactly one translation unit of a program
/// whose every TU (this one too) is compiled with DDO_EXTERN_TEMPLATES (core/linkage.hpp). That
/// TU then holds ddo's only copy of
/// - the bodies of its non-template functions (the detail/*_impl.hpp headers below: the
///   resolver, the pattern matcher, group inference, the file reader, safetensors, profiles),
/// - the offloader's runtime core and the setup path (with the default planner and pin
///   selector) for the transports the setup path constructs: host_sim_transport,
///   linear_transport, vmm_transport, nvme_transport<linear_transport> and
///   nvme_transport<vmm_transport> (DDO_RUNTIME_INSTANTIATIONS in runtime/basic_offloader.hpp,
///   DDO_SHIPPED_INSTANTIATIONS in setup/instantiations.hpp),
/// and every other TU pays ddo's declarations only (docs/getting-started.md, "Compile ddo
/// once"). The program links the CUDA runtime (cudart), as every program using ddo does.

#include "ddo/core/linkage.hpp"

#if DDO_HEADER_ONLY
#error "ddo/instantiate.hpp needs DDO_EXTERN_TEMPLATES in this and every TU (core/linkage.hpp)"
#else  // the rest only in that mode: the #error is the TU's one error, nothing after it

// The headers whose non-template functions ddo compiles here: in this mode they declare them and
// leave their bodies out (core/linkage.hpp) ...
#include "ddo/config/env_source.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/core/pattern.hpp"
#include "ddo/memory/system_probe.hpp"
#include "ddo/memory/weight_registry.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/model/synthetic_model.hpp"
#include "ddo/profile/profile_store.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/detail/group_layout.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"
#include "ddo/transport/nvme.hpp"
#include "ddo/transport/vmm.hpp"

// ... and the bodies, each after the header that declares it (an impl header is part of its
// header and does not include it back). Every impl header a header includes under
// DDO_HEADER_ONLY is listed here, after that header (tests/build_checks/check_layers.py impls).
#include "ddo/config/detail/env_source_impl.hpp"
#include "ddo/config/detail/resolve_impl.hpp"
#include "ddo/core/detail/pattern_impl.hpp"
#include "ddo/memory/detail/system_probe_impl.hpp"
#include "ddo/memory/detail/weight_registry_impl.hpp"
#include "ddo/model/detail/execution_groups_impl.hpp"
#include "ddo/model/detail/file_reader_impl.hpp"
#include "ddo/model/detail/safetensors_impl.hpp"
#include "ddo/model/detail/synthetic_model_impl.hpp"
#include "ddo/profile/detail/profile_store_impl.hpp"
#include "ddo/runtime/detail/group_layout_impl.hpp"

namespace ddo {
inline namespace v0 {

/// What every compiled-once TU refers to (core/linkage.hpp): defined here (external linkage, as
/// declared there), so a program that forgets this TU is told so by the linker.
const int detail::compiled_once_needs_one_tu_including_ddo_instantiate_hpp = 1;

// The weight registry's one instantiation (memory/weight_registry.hpp declares it extern).
template class basic_model_use<void>;
template class basic_piece_use<void>;
template class basic_weight_registry<void>;
template const std::shared_ptr<weight_registry>& process_weight_registry<void>();

DDO_RUNTIME_INSTANTIATIONS(, host_sim_transport)
DDO_RUNTIME_INSTANTIATIONS(, linear_transport)
DDO_SHIPPED_INSTANTIATIONS()
DDO_SHIPPED_PREPARE_INSTANTIATIONS()

}  // namespace v0
}  // namespace ddo

#endif  // DDO_HEADER_ONLY
