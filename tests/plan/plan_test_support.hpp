// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers for the plan suite: Flux-like weight tables built in memory (the synthetic model's
// layout, host sources) and a config with planning-friendly defaults.

#include <cstdint>
#include <string>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/model/module_kind_inference.hpp"
#include "ddo/model/synthetic_model.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"

namespace ddo_test {

/// The synthetic model's tensors as host sources (planning never reads them).
inline ddo::weight_table flux_table(std::uint32_t blocks, std::uint32_t hidden = 128) {
  ddo::synthetic_model_options o;
  o.blocks = blocks;
  o.hidden = hidden;
  ddo::weight_table t;
  for (const auto& s : ddo::synthetic_model_specs(o)) {
    ddo::weight_info w;
    w.name = s.name;
    w.type = s.type;
    w.shape = s.shape;
    w.source = ddo::host_source{};
    t.add(w);
  }
  ddo::infer_module_kinds(t);
  return t;
}

/// A config where the block projections (≥ 32 KiB at hidden 128) are managed and biases/norms
/// (≤ 1 KiB) are small tensors.
inline ddo::dynamic_offload_config planning_config() {
  ddo::dynamic_offload_config c;
  c.small_tensor_threshold_bytes = 4096;
  c.system_ram_headroom_gb = 0.0;
  return c;
}

inline std::uint64_t bytes_where(const ddo::offload_plan& plan, const ddo::weight_table& t,
                                 ddo::placement p) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < t.size(); ++i)
    if (plan.decisions[i].where == p) total += t[i].bytes;
  return total;
}

/// Names of the block groups whose streamed bytes are zero (resident blocks).
inline std::vector<std::string> resident_blocks(const ddo::offload_plan& plan) {
  std::vector<std::string> out;
  for (const auto& g : plan.groups)
    if (g.name.starts_with("transformer_blocks.") && g.streamed_bytes() == 0) out.push_back(g.name);
  return out;
}

}  // namespace ddo_test
