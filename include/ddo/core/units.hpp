// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Byte-size units. The reference's `*_gb` fields mean GiB and `*_mb` mean MiB.

#include <cstdint>
#include <limits>

namespace ddo {
inline namespace v0 {

inline constexpr std::uint64_t kib = 1024ull;
inline constexpr std::uint64_t mib = 1024ull * kib;
inline constexpr std::uint64_t gib = 1024ull * mib;

/// @brief GiB (as the reference's `*_gb` fields give them) to bytes, rounding down; negative or
/// NaN inputs give 0, values past the range of uint64 saturate.
[[nodiscard]] inline std::uint64_t gib_to_bytes(double gb) noexcept {
  if (!(gb > 0.0)) return 0;
  const long double bytes = static_cast<long double>(gb) * static_cast<long double>(gib);
  if (bytes >= static_cast<long double>(std::numeric_limits<std::uint64_t>::max()))
    return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(bytes);
}

/// @brief @p a + @p b, saturating at the largest uint64 instead of wrapping (budget arithmetic:
/// a headroom given as 1e20 GiB converts to the maximum and must stay there when added to).
[[nodiscard]] constexpr std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return a > std::numeric_limits<std::uint64_t>::max() - b ? std::numeric_limits<std::uint64_t>::max()
                                                          : a + b;
}

/// @brief The largest size in GiB that fits in 64 bits of bytes (2^34 GiB = 16 EiB).
inline constexpr double max_representable_gib = 17179869184.0;

/// @brief The largest size a setting or a capacity profile may state: 16 PiB (2^54 bytes). Far
/// above any machine (so a larger value is a typo, refused naming its source), and far enough
/// below 2^64 that sums, alignments and products with small counts of such sizes cannot wrap
/// (`--ddo-vmm-staging-buffer-gb 1e12` saturated to 2^64 - 1 bytes, which an alignment wrapped
/// to 0).
inline constexpr std::uint64_t max_stated_bytes = 1ull << 54;
/// @brief max_stated_bytes in GiB (2^24): the bound of every `*_gb` setting.
inline constexpr double max_stated_gib = 16777216.0;
/// @brief max_stated_bytes in MiB (2^34): the bound of every `*_mb` setting.
inline constexpr std::uint64_t max_stated_mib = max_stated_bytes / mib;
/// @brief The longest time one group's measurement or profile entry may state: 10^13 ns (about
/// 2.8 hours for one load or one group's compute). Sums over the most groups a profile holds
/// (20,000) and step counts stay far inside 64 bits.
inline constexpr std::uint64_t max_stated_ns = 10'000'000'000'000ull;

/// @brief Microseconds (as clocks and CUDA events give them) to whole nanoseconds: rounded,
/// negative and NaN as 0, above max_stated_ns as max_stated_ns (a measurement cannot be refused;
/// it must not wrap). The one conversion of measured times to integers.
[[nodiscard]] inline std::uint64_t microseconds_to_ns(double us) noexcept {
  if (!(us > 0.0)) return 0;
  const double ns = us * 1000.0 + 0.5;
  if (!(ns < static_cast<double>(max_stated_ns))) return max_stated_ns;
  return static_cast<std::uint64_t>(ns);
}

/// @brief Bytes to GiB, for printing and for the `*_gb` fields.
[[nodiscard]] inline double bytes_to_gib(std::uint64_t bytes) noexcept {
  return static_cast<double>(bytes) / static_cast<double>(gib);
}

/// @brief Rounds @p value up to a multiple of @p alignment (alignment > 0).
[[nodiscard]] constexpr std::uint64_t round_up(std::uint64_t value, std::uint64_t alignment) noexcept {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace v0
}  // namespace ddo
