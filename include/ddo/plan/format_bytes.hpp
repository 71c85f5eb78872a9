// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::format_bytes: byte counts for people ("1.50 GiB", "216.00 MiB").

#include <cstdint>
#include <cstdio>
#include <string>

#include "ddo/core/units.hpp"

namespace ddo {
inline namespace v0 {

/// @brief "1.50 GiB", "216.00 MiB", "12.0 KiB", "17 B" (binary units, as the `*_gb` fields).
[[nodiscard]] inline std::string format_bytes(std::uint64_t bytes) {
  char buffer[64];
  if (bytes >= gib)
    std::snprintf(buffer, sizeof buffer, "%.2f GiB", bytes_to_gib(bytes));
  else if (bytes >= mib)
    std::snprintf(buffer, sizeof buffer, "%.2f MiB",
                  static_cast<double>(bytes) / static_cast<double>(mib));
  else if (bytes >= kib)
    std::snprintf(buffer, sizeof buffer, "%.1f KiB",
                  static_cast<double>(bytes) / static_cast<double>(kib));
  else
    std::snprintf(buffer, sizeof buffer, "%llu B", static_cast<unsigned long long>(bytes));
  return buffer;
}

}  // namespace v0
}  // namespace ddo
