// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Kept for existing includes: ddo::format_bytes lives in core/format_bytes.hpp, the one
/// byte formatter of the library.

#include "ddo/core/format_bytes.hpp"
