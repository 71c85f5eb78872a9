// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The umbrella header: ddo's core (standard library and CUDA runtime only). The TOML
/// source (ddo/config/toml_source.hpp) and the command-line helpers (ddo/cli/) are included
/// separately by the programs that want them.

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"

#include "ddo/platform/cuda_device.hpp"
#include "ddo/platform/cuda_driver.hpp"

#include "ddo/config/component_policy.hpp"
#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/presets.hpp"

#include "ddo/model/dtype.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/module_kind.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/model/weight_table.hpp"

#include "ddo/plan/plan.hpp"
#include "ddo/plan/planner.hpp"

#include "ddo/profile/capacity_profile.hpp"
#include "ddo/profile/profile_store.hpp"

#include "ddo/memory/host_buffer.hpp"
#include "ddo/memory/pinned_weight_cache.hpp"
#include "ddo/memory/system_probe.hpp"

#include "ddo/transport/concepts.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"

#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/enable_offload.hpp"
#include "ddo/runtime/lease.hpp"
#include "ddo/runtime/metrics.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/runtime/plan_cache.hpp"
#include "ddo/runtime/setup.hpp"
#include "ddo/runtime/routes.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/runtime/trace.hpp"
