// SPDX-License-Identifier: Apache-2.0
#pragma once
// A model for the adapter cases on host_sim (tests/adapter) and on the GPU (tests/gpu): 2-D
// weights of every mergeable type in every placement, adapters over them, the reference merge.

#include <unistd.h>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "adapter/lora_test_support.hpp"
#include "ddo/adapter/lora_delta.hpp"
#include "ddo/plan/plan.hpp"

namespace adapter_model {

/// Groups of 2-D weights of every mergeable type, every placement, a file for the file ones.
struct model {
  ddo::weight_table table;
  std::vector<std::vector<std::byte>> host;  // host sources (empty for file weights)
  std::vector<std::vector<std::byte>> base;  // per weight: its bytes
  ddo::offload_plan plan;
  std::filesystem::path file;
  model() = default;
  model(const model&) = delete;
  ~model() {
    std::error_code ec;
    std::filesystem::remove(file, ec);
  }
  /// The plan with every weight resident.
  [[nodiscard]] ddo::offload_plan all_resident() const {
    auto p = plan;
    for (auto& d : p.decisions) d.where = ddo::placement::gpu_resident;
    for (std::size_t g = 0; g < p.groups.size(); ++g) {
      auto& pg = p.groups[g];
      std::uint64_t bytes = 0;
      for (std::size_t k = 0; k < 4; ++k) bytes += pg.bytes_by_placement[k];
      pg.bytes_by_placement = {};
      pg.bytes_by_placement[0] = bytes;
    }
    return p;
  }
};

/// @p linear_kinds: every weight but each group's second a linear layer's (module_kind::linear),
/// which a VMM route maps in its stable ranges where it is BF16 or FP16 (the others go to the
/// slots' side images).
inline std::unique_ptr<model> make_model(std::size_t groups, std::uint32_t seed,
                                         bool linear_kinds = false) {
  auto m = std::make_unique<model>();
  std::mt19937 rng(seed);
  m->file =
      std::filesystem::temp_directory_path() /
      ("ddo_adapter_test_" + std::to_string(::getpid()) + "_" + std::to_string(seed) + ".bin");
  std::ofstream out(m->file, std::ios::binary);
  const std::size_t file_index = m->table.add_file(m->file.string());
  std::uint64_t offset = 0;
  const ddo::dtype types[] = {ddo::dtype::bf16, ddo::dtype::f16, ddo::dtype::f32};
  const ddo::placement places[] = {ddo::placement::pinned_host, ddo::placement::pageable_host,
                                   ddo::placement::file, ddo::placement::gpu_resident};
  m->host.reserve(groups * 3);
  m->plan.groups.resize(groups);
  for (std::size_t g = 0; g < groups; ++g) {
    for (std::size_t i = 0; i < 3; ++i) {
      ddo::weight_info info;
      info.name = "blocks." + std::to_string(g) + ".w" + std::to_string(i) + ".weight";
      info.type = types[(g + i) % 3];
      if (linear_kinds && i != 1) info.kind = ddo::module_kind::linear;
      info.shape = {static_cast<std::int64_t>(6 + 2 * i), static_cast<std::int64_t>(10 + g)};
      const auto where = places[(g * 3 + i) % 4];
      const auto n = static_cast<std::size_t>(info.shape[0] * info.shape[1]);
      auto bytes = lora_test_support::encode(lora_test_support::random_values(n, rng()), info.type);
      info.bytes = bytes.size();
      if (where == ddo::placement::file) {
        out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
        info.source = ddo::file_source{file_index, offset};
        offset += bytes.size();
        m->host.emplace_back();
      } else {
        m->host.push_back(bytes);
        info.source = ddo::host_source{m->host.back().data()};
      }
      m->base.push_back(std::move(bytes));
      const auto w = m->table.add(info);
      m->plan.decisions.push_back({where, g, "test"});
      m->plan.groups[g].name = "blocks." + std::to_string(g);
      m->plan.groups[g].weights.push_back(w);
      m->plan.groups[g].bytes_by_placement[static_cast<std::size_t>(where)] += info.bytes;
    }
  }
  return m;
}

/// @p m's plan with every streamed weight pinned (a captured step on the linear route loads from
/// pinned memory only) and the file weights resident.
inline ddo::offload_plan pinned_plan(const model& m) {
  auto p = m.plan;
  for (auto& g : p.groups) g.bytes_by_placement = {};
  for (std::size_t w = 0; w < p.decisions.size(); ++w) {
    auto& d = p.decisions[w];
    if (d.where == ddo::placement::pageable_host) d.where = ddo::placement::pinned_host;
    if (d.where == ddo::placement::file) d.where = ddo::placement::gpu_resident;
    p.groups[d.group].bytes_by_placement[static_cast<std::size_t>(d.where)] += m.table[w].bytes;
  }
  return p;
}

/// An adapter of @p rank on every weight but every @p skip_every-th (0: none), its factors kept
/// in @p factors on the device.
inline std::shared_ptr<ddo::lora_adapter> make_adapter(const model& m, std::int64_t rank,
                                                       std::uint32_t seed, std::size_t skip_every,
                                                       ddo::dtype factors = ddo::dtype::f32) {
  auto a = std::make_shared<ddo::lora_adapter>();
  for (std::size_t w = 0; w < m.table.size(); ++w) {
    if (skip_every != 0 && w % skip_every == 0) continue;
    const auto& info = m.table[w];
    ddo::lora_delta d{
        "k" + std::to_string(w),         info.name, w, rank, info.shape[0], info.shape[1],
        2.0f / static_cast<float>(rank), {},        {}};
    d.down =
        lora_test_support::random_values(static_cast<std::size_t>(rank * d.cols), seed + 2 * w);
    d.up =
        lora_test_support::random_values(static_cast<std::size_t>(d.rows * rank), seed + 2 * w + 1);
    d.factor_type = factors;  // the values made exact in that type, as a loaded file's are
    if (factors == ddo::dtype::f16)
      for (auto* f : {&d.down, &d.up})
        for (auto& v : *f) v = ddo::f16_bits_to_float(ddo::float_to_f16_bits(v));
    a->deltas.push_back(std::move(d));
  }
  return a;
}

/// The reference: every weight's base merged with @p set (adapter, scale), in order, by the one
/// merge function.
inline std::vector<std::vector<std::byte>> expected(
    const model& m, const std::vector<std::pair<const ddo::lora_adapter*, float>>& set) {
  auto out = m.base;
  for (std::size_t w = 0; w < m.table.size(); ++w) {
    std::vector<ddo::lora_term> terms;
    for (const auto& [a, scale] : set)
      if (const auto* d = a->find(w)) terms.push_back(d->term(scale));
    if (!terms.empty())
      ddo::merge_lora(out[w].data(), m.table[w].type, m.table[w].shape[0], m.table[w].shape[1],
                      terms);
  }
  return out;
}

}  // namespace adapter_model
