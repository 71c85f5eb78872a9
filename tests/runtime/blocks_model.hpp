// SPDX-License-Identifier: Apache-2.0
#pragma once
// A flat model of numbered blocks for the setup tests (setup_test, entry_points_test): `blocks`
// blocks of two bf16 linears (attn.to_q, ff.up), each of a random size of [min_elems,
// 2 * min_elems) elements with random bytes in engine-owned host memory.

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ddo/model/weight_table.hpp"
#include "random_bytes.hpp"

namespace ddo_test {

struct blocks_model {
  ddo::weight_table table;
  std::vector<std::vector<std::byte>> bytes;
  explicit blocks_model(std::uint32_t seed, std::int64_t min_elems, int blocks = 8) {
    std::mt19937 rng(seed);
    bytes.reserve(static_cast<std::size_t>(blocks) * 2);
    for (int b = 0; b < blocks; ++b)
      for (const char* m : {"attn.to_q", "ff.up"}) {
        const std::int64_t elems =
            min_elems + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(min_elems));
        auto& v = bytes.emplace_back(static_cast<std::size_t>(elems * 2));
        fill_random_bytes(v, rng);
        ddo::weight_info w;
        w.name = "transformer_blocks." + std::to_string(b) + "." + m + ".weight";
        w.kind = ddo::module_kind::linear;
        w.type = ddo::dtype::bf16;
        w.shape = {elems};
        w.source = ddo::host_source{v.data()};
        w.bytes = 0;
        table.add(w);
      }
  }
};

}  // namespace ddo_test
