// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The old spelling of ddo/core/module_kind.hpp (ddo::module_kind, all_module_kinds, to_string and parse_module_kind), kept so engines that include it
/// still compile (docs/changelog.md); ddo's own headers include the core/ header.

#include "ddo/core/module_kind.hpp"
