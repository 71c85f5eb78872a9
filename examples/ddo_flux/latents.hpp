// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux (examples/flux/ddo_flux.cpp): what it does with a run's final latents:
/// --output's file and the bitwise comparison --check and --graph judge by. Example code.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ddo/core/atomic_file.hpp"

namespace ddo_flux {

/// Whether two runs' latents are bitwise equal (the --check and --graph verdicts).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// --output: little-endian "DDOFLUX1", uint32 1, uint32 count, float32 values, written
/// atomically (no partial file where a good one was).
inline void write_latents(const std::string& path, const std::vector<float>& latents) {
  std::string bytes = "DDOFLUX1";
  const auto put = [&](const void* p, std::size_t n) {
    bytes.append(static_cast<const char*>(p), n);
  };
  const std::uint32_t arrays = 1, count = static_cast<std::uint32_t>(latents.size());
  put(&arrays, 4);
  put(&count, 4);
  put(latents.data(), latents.size() * 4);
  ddo::write_file_atomically(path, bytes);
}

}  // namespace ddo_flux
