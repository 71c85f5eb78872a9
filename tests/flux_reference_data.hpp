// SPDX-License-Identifier: Apache-2.0
#pragma once
// tests/data/flux_tiny_reference.bin (tools/flux_reference.py: diffusers' own
// FluxTransformer2DModel at the tiny configuration): "DDOFLUX1", a count, then each array as its
// length and float32 values. Read by the CPU (runner suite) and GPU (gpu suite) checks alike.

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace ddo_test {

/// `path` is the source tree's file as the build saw it; the environment's DDO_FLUX_REFERENCE,
/// when set, names it instead, so a test binary carried to another checkout (the GPU machine
/// gets a copy of the tree elsewhere) reads the copy there.
inline std::vector<std::vector<float>> read_flux_reference(const char* path) {
  if (const char* moved = std::getenv("DDO_FLUX_REFERENCE"); moved != nullptr && *moved != '\0')
    path = moved;
  INFO("the diffusers reference file: " << path);
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  char magic[8];
  std::uint32_t count = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&count), 4);
  REQUIRE(std::string(magic, 8) == "DDOFLUX1");
  std::vector<std::vector<float>> arrays(count);
  for (auto& a : arrays) {
    std::uint32_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 4);
    a.resize(n);
    in.read(reinterpret_cast<char*>(a.data()), static_cast<std::streamsize>(n) * 4);
  }
  REQUIRE(in.good());
  return arrays;
}

}  // namespace ddo_test
