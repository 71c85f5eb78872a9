// SPDX-License-Identifier: Apache-2.0
#pragma once
// A model streamed from files in the build directory (not /tmp, which may be a tmpfs that
// refuses O_DIRECT), for the file-route tests on host_sim (tests/runtime) and on the GPU
// (tests/gpu): the expected bytes of every weight are kept.

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"
#include "random_bytes.hpp"

#ifndef DDO_TEST_BUILD_DIR
#error "DDO_TEST_BUILD_DIR must name a directory in the build tree (set by the test's meson.build)"
#endif

namespace ddo_test {

/// Weights in one or two files (shards) in the build directory; every weight streamed from
/// its file (placement file), groups of `per_group` weights; odd sizes and offsets, so O_DIRECT
/// reads must widen every piece.
struct file_model {
  ddo::weight_table table;
  ddo::offload_plan plan;
  std::vector<std::vector<std::byte>> expected;
  std::vector<std::filesystem::path> files;

  file_model(std::uint32_t seed, std::size_t groups, std::size_t per_group, std::uint64_t max_bytes,
             std::size_t shards = 2) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::uint64_t> size(max_bytes / 3, max_bytes);
    std::vector<std::ofstream> out(shards);
    std::vector<std::uint64_t> offset(shards, 0);
    // The build dir is on the disk the checks run on (O_DIRECT is refused by tmpfs); binaries
    // carried to another machine without it write to the temporary directory instead.
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::is_directory(DDO_TEST_BUILD_DIR, ec)
                                          ? std::filesystem::path(DDO_TEST_BUILD_DIR)
                                          : std::filesystem::temp_directory_path();
    for (std::size_t s = 0; s < shards; ++s) {
      files.push_back(dir / ("ddo_nvme_" + std::to_string(::getpid()) + "_" + std::to_string(seed) +
                             "_" + std::to_string(s) + ".bin"));
      out[s].open(files.back(), std::ios::binary | std::ios::trunc);
      if (!out[s].good()) throw std::runtime_error("cannot write " + files.back().string());
      table.add_file(files.back().string());
      const char header[77] = "odd-sized header so the first weight is not block aligned";
      out[s].write(header, sizeof header);
      offset[s] = sizeof header;
    }
    plan.groups.resize(groups);
    for (std::size_t g = 0; g < groups; ++g)
      for (std::size_t i = 0; i < per_group; ++i) {
        const std::size_t s = (g + i) % shards;
        std::vector<std::byte> bytes(size(rng) | 1);  // odd: never a whole block
        fill_random_bytes(bytes, rng);
        out[s].write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        ddo::weight_info info;
        info.name = "blocks." + std::to_string(g) + ".w" + std::to_string(i) + ".weight";
        info.kind = ddo::module_kind::linear;
        info.type = ddo::dtype::u8;
        info.shape = {static_cast<std::int64_t>(bytes.size())};
        info.bytes = bytes.size();
        info.source = ddo::file_source{s, offset[s]};
        offset[s] += bytes.size();
        const std::size_t w = table.add(info);
        plan.decisions.push_back({ddo::placement::file, g, "test"});
        plan.groups[g].name = "blocks." + std::to_string(g);
        plan.groups[g].weights.push_back(w);
        plan.groups[g].bytes_by_placement[static_cast<std::size_t>(ddo::placement::file)] += bytes.size();
        expected.push_back(std::move(bytes));
      }
    for (auto& o : out) o.close();
  }
  file_model(const file_model&) = delete;
  file_model& operator=(const file_model&) = delete;
  ~file_model() {
    std::error_code ec;
    for (const auto& f : files) std::filesystem::remove(f, ec);
  }
};

}  // namespace ddo_test
