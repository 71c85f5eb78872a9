// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Element types of weights, with the names safetensors uses.

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace ddo {
inline namespace v0 {

/// @brief A weight's element type. Names follow safetensors ("BF16", "F16", ...).
enum class dtype { bool8, u8, i8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64, f8_e4m3, f8_e5m2 };

struct dtype_info {
  dtype type;
  std::string_view safetensors_name;
  std::size_t size_bytes;
};

inline constexpr std::array<dtype_info, 15> dtype_table = {{
    {dtype::bool8, "BOOL", 1},    {dtype::u8, "U8", 1},        {dtype::i8, "I8", 1},
    {dtype::i16, "I16", 2},       {dtype::u16, "U16", 2},      {dtype::i32, "I32", 4},
    {dtype::u32, "U32", 4},       {dtype::i64, "I64", 8},      {dtype::u64, "U64", 8},
    {dtype::f16, "F16", 2},       {dtype::bf16, "BF16", 2},    {dtype::f32, "F32", 4},
    {dtype::f64, "F64", 8},       {dtype::f8_e4m3, "F8_E4M3", 1}, {dtype::f8_e5m2, "F8_E5M2", 1},
}};

/// @brief Bytes per element.
[[nodiscard]] constexpr std::size_t size_of(dtype type) noexcept {
  for (const auto& info : dtype_table)
    if (info.type == type) return info.size_bytes;
  return 0;
}

/// @brief The safetensors name ("BF16").
[[nodiscard]] constexpr std::string_view to_string(dtype type) noexcept {
  for (const auto& info : dtype_table)
    if (info.type == type) return info.safetensors_name;
  return "?";
}

/// @brief Parses a safetensors dtype name; nullopt when unknown.
[[nodiscard]] constexpr std::optional<dtype> parse_dtype(std::string_view name) noexcept {
  for (const auto& info : dtype_table)
    if (info.safetensors_name == name) return info.type;
  return std::nullopt;
}

}  // namespace v0
}  // namespace ddo
