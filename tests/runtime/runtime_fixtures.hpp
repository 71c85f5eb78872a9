// SPDX-License-Identifier: Apache-2.0
#pragma once
// Synthetic models with hand-built plans for the runtime tests (host_sim here, linear in
// tests/gpu): random bytes in engine-owned host memory and in a temporary file, every placement.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"
#include "random_bytes.hpp"

namespace ddo_test {

/// A model whose expected bytes are known: expected[w] holds weight w's bytes.
struct synthetic_model {
  ddo::weight_table table;
  std::vector<std::vector<std::byte>> host;      // engine-owned host memory (host sources)
  std::vector<std::vector<std::byte>> expected;  // per weight
  ddo::offload_plan plan;
  std::filesystem::path file;
  synthetic_model() = default;
  synthetic_model(const synthetic_model&) = delete;
  synthetic_model& operator=(const synthetic_model&) = delete;
  ~synthetic_model() {
    std::error_code ec;
    if (!file.empty()) std::filesystem::remove(file, ec);
  }
};

struct model_spec {
  std::size_t groups = 6;
  std::size_t weights_per_group = 4;
  std::uint64_t min_bytes = 1000;
  std::uint64_t max_bytes = 200000;
  std::uint32_t seed = 1;
  /// placement for (group, position); default mixes every placement
  std::function<ddo::placement(std::size_t, std::size_t)> where = [](std::size_t g, std::size_t i) {
    switch ((g + i) % 5) {
      case 0: return ddo::placement::pinned_host;
      case 1: return ddo::placement::pageable_host;
      case 2: return ddo::placement::file;
      case 3: return ddo::placement::pinned_host;
      default: return (g % 3 == 0) ? ddo::placement::gpu_resident : ddo::placement::pinned_host;
    }
  };
  /// pinned weights read from the file instead of host memory, every other one
  bool pinned_from_file = true;
  /// weights a VMM route covers (2-D bf16 of a linear layer) for (group, position); the others
  /// are 1-D bf16 of kind "other" (norm- or bias-like), which keep their planned placement there
  std::function<bool(std::size_t, std::size_t)> vmm_covered = [](std::size_t, std::size_t) { return true; };
};

inline std::unique_ptr<synthetic_model> make_model(const model_spec& spec) {
  auto m = std::make_unique<synthetic_model>();
  std::mt19937_64 rng(spec.seed);
  std::uniform_int_distribution<std::uint64_t> size(spec.min_bytes, spec.max_bytes);
  // Decide sizes and sources first; file weights are written to one temporary file.
  struct pending {
    std::string name;
    std::uint64_t bytes;
    ddo::placement where;
    bool from_file;
    bool covered;
  };
  std::vector<pending> all;
  for (std::size_t g = 0; g < spec.groups; ++g)
    for (std::size_t i = 0; i < spec.weights_per_group; ++i) {
      const auto where = spec.where(g, i);
      std::uint64_t bytes = size(rng) & ~std::uint64_t{1};  // even: bf16 elements
      if (bytes == 0) bytes = 2;
      const bool from_file = where == ddo::placement::file ||
                             (spec.pinned_from_file && where == ddo::placement::pinned_host && (i % 2 == 1));
      all.push_back({"blocks." + std::to_string(g) + ".w" + std::to_string(i) + ".weight", bytes, where,
                     from_file, spec.vmm_covered(g, i)});
    }
  bool any_file = false;
  for (const auto& p : all) any_file = any_file || p.from_file;
  std::size_t file_index = 0;
  std::ofstream out;
  if (any_file) {
    m->file = std::filesystem::temp_directory_path() /
              ("ddo_runtime_test_" + std::to_string(spec.seed) + "_" + std::to_string(::getpid()) + "_" +
               std::to_string(reinterpret_cast<std::uintptr_t>(m.get())) + ".bin");
    out.open(m->file, std::ios::binary);
    file_index = m->table.add_file(m->file.string());
    // a header so offsets are not zero
    const char header[64] = "ddo test file";
    out.write(header, sizeof header);
  }
  std::uint64_t file_offset = 64;
  m->host.reserve(all.size());
  m->plan.groups.resize(spec.groups);
  for (std::size_t k = 0; k < all.size(); ++k) {
    const auto& p = all[k];
    std::vector<std::byte> bytes(p.bytes);
    fill_random_bytes(bytes, rng);
    ddo::weight_info info;
    info.name = p.name;
    info.type = ddo::dtype::bf16;
    if (p.covered) {
      info.kind = ddo::module_kind::linear;
      info.shape = {1, static_cast<std::int64_t>(p.bytes / 2)};
    } else {
      info.shape = {static_cast<std::int64_t>(p.bytes / 2)};
    }
    info.bytes = p.bytes;
    if (p.from_file) {
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      info.source = ddo::file_source{file_index, file_offset};
      file_offset += p.bytes;
      m->host.emplace_back();
    } else {
      m->host.push_back(bytes);
      info.source = ddo::host_source{m->host.back().data()};
    }
    m->expected.push_back(std::move(bytes));
    const std::size_t w = m->table.add(info);
    const std::size_t g = k / spec.weights_per_group;
    m->plan.decisions.push_back({p.where, g, "test"});
    m->plan.groups[g].name = "blocks." + std::to_string(g);
    m->plan.groups[g].weights.push_back(w);
    m->plan.groups[g].bytes_by_placement[static_cast<std::size_t>(p.where)] += p.bytes;
  }
  if (any_file) out.close();
  return m;
}

/// Bytes a group needs streamed (for expectations).
inline std::uint64_t streamed_bytes(const synthetic_model& m, std::size_t g) {
  return m.plan.groups[g].streamed_bytes();
}

/// What an engine's model reload looks like to ddo: new random bytes (from @p seed) in the same
/// host buffers (the same addresses, as a new allocation where a freed one was) and in the same
/// file, rewritten in place with its modification time one second on (clear of the clock's
/// granularity); returns the table built anew over them, as a loader builds it.
inline ddo::weight_table reload_in_place(synthetic_model& m, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (std::size_t w = 0; w < m.table.size(); ++w) {
    auto& e = m.expected[w];
    fill_random_bytes(e, rng);
    if (std::holds_alternative<ddo::host_source>(m.table[w].source)) {
      std::memcpy(m.host[w].data(), e.data(), e.size());
    } else {
      std::fstream f(m.file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(std::get<ddo::file_source>(m.table[w].source).offset));
      f.write(reinterpret_cast<const char*>(e.data()), static_cast<std::streamsize>(e.size()));
    }
  }
  if (!m.file.empty())
    std::filesystem::last_write_time(
        m.file, std::filesystem::last_write_time(m.file) + std::chrono::seconds(1));
  ddo::weight_table reloaded;
  for (const auto& path : m.table.files()) reloaded.add_file(path);
  for (const auto& info : m.table.weights()) reloaded.add(info);
  return reloaded;
}

}  // namespace ddo_test
