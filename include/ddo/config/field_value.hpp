// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::field_value: a config value in transit between a source and the config struct.

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace ddo {
inline namespace v0 {

/// @brief One setting's value as the sources produce it: bool, integer, real, string (also the
/// canonical name of an enum) or a list of strings (patterns, module kinds).
using field_value = std::variant<bool, std::int64_t, double, std::string, std::vector<std::string>>;

}  // namespace v0
}  // namespace ddo
