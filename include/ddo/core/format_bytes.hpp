// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo's one byte formatter: byte counts for people ("1.50 GiB", "216.00 MiB"), the exact
/// form error messages use ("1610612736 bytes (1.50 GiB)") and decimal gigabytes for bandwidth
/// reports ("1.61 GB"). Every summary, error message and report formats bytes through here.

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

/// @brief "1610612736 bytes (1.50 GiB)": the exact count, then format_bytes() in parentheses
/// (below 1 KiB just "17 bytes"). For error messages, where the exact number matters.
[[nodiscard]] inline std::string format_bytes_exact(std::uint64_t bytes) {
  std::string out = std::to_string(bytes) + " bytes";
  if (bytes >= kib) out += " (" + format_bytes(bytes) + ")";
  return out;
}

/// @brief The unit of a fixed-unit size: decimal gigabytes (1e9 bytes, as GB/s rates) or
/// binary gibibytes (2^30 bytes, as the `*_gb` settings and a card's VRAM are stated).
enum class size_unit { gb, gib };

/// @brief "1.61": @p bytes in @p unit with @p decimals decimals, the number alone (a table cell
/// whose header names the unit).
[[nodiscard]] inline std::string format_size_number(std::uint64_t bytes, size_unit unit,
                                                    int decimals = 2) {
  const double per_unit = unit == size_unit::gb ? 1e9 : static_cast<double>(gib);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, static_cast<double>(bytes) / per_unit);
  return buffer;
}

/// @brief "1.61 GB" / "1.50 GiB": format_size_number() and the unit.
[[nodiscard]] inline std::string format_size(std::uint64_t bytes, size_unit unit,
                                             int decimals = 2) {
  return format_size_number(bytes, unit, decimals) + (unit == size_unit::gb ? " GB" : " GiB");
}

/// @brief "1.61 GB": decimal gigabytes (1e9 bytes) with two decimals, the unit bandwidth reports
/// (GB/s) use, so bytes and rates read alike.
[[nodiscard]] inline std::string format_decimal_gb(std::uint64_t bytes) {
  return format_size(bytes, size_unit::gb);
}

}  // namespace v0
}  // namespace ddo
