// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Exact conversions between float and the 16-bit weight types (bf16, IEEE fp16), rounding
/// to nearest even as CUDA's __float2bfloat16_rn / __float2half_rn do, so a host merge and a
/// device merge round a float to the same bits.

#include <bit>
#include <cstdint>

namespace ddo {
inline namespace v0 {

/// @brief The float a bf16 bit pattern stands for (exact).
[[nodiscard]] inline float bf16_bits_to_float(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

/// @brief @p x rounded to bf16, nearest even; NaN stays a (quiet) NaN with its sign.
[[nodiscard]] inline std::uint16_t float_to_bf16_bits(float x) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

/// @brief The float an IEEE binary16 bit pattern stands for (exact, subnormals included).
[[nodiscard]] inline float f16_bits_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // A subnormal: normalise it (its value is mantissa * 2^-24, exact in float).
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  const auto e = static_cast<std::uint32_t>(113 - shift);
  return std::bit_cast<float>(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
}

/// @brief @p x rounded to IEEE binary16, nearest even (overflow to infinity, subnormals kept).
[[nodiscard]] inline std::uint16_t float_to_f16_bits(float x) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal or zero, value m * 2^-24.
    if (a < 0x33000000u) return sign;  // below half the smallest subnormal: rounds to zero
    const std::uint32_t e = a >> 23;
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // x = m * 2^(e - 150): in units of 2^-24, m >> shift
    const std::uint32_t q = m >> shift;
    const std::uint32_t rest = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    const std::uint32_t r = q + ((rest > half || (rest == half && (q & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  const std::uint32_t rebased = a - (112u << 23);
  const std::uint32_t r = (rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13;
  return static_cast<std::uint16_t>(sign | r);
}

}  // namespace v0
}  // namespace ddo
