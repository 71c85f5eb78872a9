// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Byte counts in the runtime's error messages: the exact count and a readable size.

#include <cstdint>
#include <cstdio>
#include <string>

#include "ddo/core/units.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// "123 bytes (0.1 MiB)" or "2147483648 bytes (2.00 GiB)".
[[nodiscard]] inline std::string human_bytes(std::uint64_t b) {
  char buf[64];
  if (b >= gib)
    std::snprintf(buf, sizeof buf, "%llu bytes (%.2f GiB)", static_cast<unsigned long long>(b),
                  bytes_to_gib(b));
  else
    std::snprintf(buf, sizeof buf, "%llu bytes (%.1f MiB)", static_cast<unsigned long long>(b),
                  static_cast<double>(b) / static_cast<double>(mib));
  return buf;
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
