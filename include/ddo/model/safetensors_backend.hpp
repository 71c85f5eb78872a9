// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The old spelling of ddo/core/safetensors_backend.hpp (ddo::safetensors_backend), kept so engines that include it
/// still compile (docs/changelog.md); ddo's own headers include the core/ header.

#include "ddo/core/safetensors_backend.hpp"
