// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The umbrella header: ddo's core (standard library and CUDA runtime only). The TOML
/// source (ddo/config/toml_source.hpp) and the command-line helpers (ddo/cli/) are included
/// separately by the programs that want them.

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/model/dtype.hpp"
#include "ddo/model/module_kind.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"
