// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::model_fingerprint: a short identity of a weight table, stored in capacity profiles
/// so that timings measured on one model are never applied to another.
///
/// It hashes what decides the timings — every weight's name, dtype, shape and bytes, in table
/// order — and not where the bytes come from (files may move, a host pointer changes per run) or
/// their values (a fine-tune has the timings of its base). 64-bit FNV-1a, printed as 16 hex
/// digits: an identity check, not a security boundary.

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "ddo/model/weight_table.hpp"

namespace ddo {
inline namespace v0 {

/// @brief 16 lower-case hex digits identifying @p table's names, dtypes, shapes and sizes.
[[nodiscard]] inline std::string model_fingerprint(const weight_table& table) {
  std::uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  };
  const auto mix_u64 = [&mix](std::uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    mix(b, 8);
  };
  mix_u64(table.size());
  for (const auto& w : table.weights()) {
    mix_u64(w.name.size());  // lengths keep "ab"+"c" apart from "a"+"bc"
    mix(w.name.data(), w.name.size());
    mix_u64(static_cast<std::uint64_t>(w.type));
    mix_u64(w.shape.size());
    for (const auto d : w.shape) mix_u64(static_cast<std::uint64_t>(d));
    mix_u64(w.bytes);
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

}  // namespace v0
}  // namespace ddo
