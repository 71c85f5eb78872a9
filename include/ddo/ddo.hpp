// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The umbrella header: what an engine needs to offload its weights — the weight table,
/// the plan, the offloader and the linear transport (the standard library and the CUDA runtime
/// only).
///
/// Everything else is included by the programs that use it (see docs/design.md, "Layers"):
/// planning (the setup path, ddo/setup/setup.hpp: enable_offload, prepare_offload; make_plan,
/// ddo/plan/planner.hpp; group inference, ddo/model/execution_groups.hpp), resolution from the
/// environment (ddo/config/resolve.hpp), the host_sim transport (ddo/transport/host_sim.hpp),
/// model files (ddo/model/safetensors.hpp), the synthetic model and
/// its writer (ddo/model/synthetic_model.hpp), capacity profiles (ddo/profile/), component routes
/// and enable_offload (ddo/runtime/routes.hpp, ddo/setup/enable_offload.hpp), tracing
/// (ddo/runtime/trace.hpp), the TOML source (ddo/config/toml_source.hpp) and the command-line
/// helpers (ddo/cli/).

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"

#include "ddo/config/component_policy.hpp"
#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/dynamic_offload_settings.hpp"

#include "ddo/core/module_kind.hpp"
#include "ddo/model/dtype.hpp"
#include "ddo/model/weight_table.hpp"

#include "ddo/plan/plan.hpp"

#include "ddo/transport/concepts.hpp"
#include "ddo/transport/linear.hpp"

#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/lease.hpp"
#include "ddo/runtime/metrics.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/runtime/runtime_options.hpp"
