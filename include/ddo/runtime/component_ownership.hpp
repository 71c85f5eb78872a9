// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Component tensor ownership of the native VMM route (`vmm_component_tensor_ownership`,
/// `vmm_component_buffer_limit_mb`), as a rewrite of the plan (docs/transports.md says how ddo
/// reads the two lines of the reference).
///
/// The VMM routes cover dense BF16/FP16 linear weights (module kind linear, 2-D, bf16 or f16).
/// Every other tensor of the component — norms, biases, embeddings, convolutions, other dtypes —
/// keeps the placement its planner gave it, unless ownership is on: then the route owns the whole
/// component. Its other tensors are "once-copied device buffers" while their payload fits the
/// limit (smallest first, so the most tensors fit), and mapped and streamed like the linear
/// weights beyond it (from their file, or their pageable host memory: the native route pins
/// nothing). The limit is a ceiling on that once-copied payload, not on ddo's device memory.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Whether weight @p w is what the VMM routes cover: a dense BF16/FP16 linear weight.
[[nodiscard]] inline bool vmm_covered_weight(const weight_info& w) noexcept {
  return w.kind == module_kind::linear && w.shape.size() == 2 &&
         (w.type == dtype::bf16 || w.type == dtype::f16);
}

/// @brief What apply_component_ownership changed.
struct component_ownership_result {
  std::size_t once_copied = 0;             ///< tensors made once-copied device buffers
  std::uint64_t once_copied_bytes = 0;     ///< their payload (≤ the limit)
  std::size_t mapped = 0;                  ///< tensors beyond the limit, now streamed
  std::uint64_t mapped_bytes = 0;
};

/// @brief Takes ownership of every tensor of @p plan that the VMM routes do not cover (see the
/// file comment): once-copied (gpu_resident) while the payload stays ≤ @p limit_bytes, smallest
/// first; streamed (file or pageable_host) beyond. Linear weights are not touched.
inline component_ownership_result apply_component_ownership(offload_plan& plan, const weight_table& table,
                                                            std::uint64_t limit_bytes) {
  std::vector<std::size_t> owned;
  for (std::size_t w = 0; w < plan.decisions.size() && w < table.size(); ++w)
    if (!vmm_covered_weight(table[w])) owned.push_back(w);
  // Smallest first, ties in table order (a sort by (bytes, index): std::stable_sort's merge
  // machinery costs every TU that includes this header more to compile).
  std::sort(owned.begin(), owned.end(), [&](std::size_t a, std::size_t b) {
    return table[a].bytes != table[b].bytes ? table[a].bytes < table[b].bytes : a < b;
  });
  component_ownership_result r;
  for (std::size_t w : owned) {
    auto& d = plan.decisions[w];
    if (d.group >= plan.groups.size()) continue;  // a weight the plan does not place
    const std::uint64_t n = table[w].bytes;
    placement to;
    if (r.once_copied_bytes + n <= limit_bytes) {
      to = placement::gpu_resident;
      r.once_copied_bytes += n;
      ++r.once_copied;
      d.reason = "vmm component ownership: once-copied buffer (payload within "
                 "vmm_component_buffer_limit_mb)";
    } else {
      to = std::holds_alternative<file_source>(table[w].source) ? placement::file : placement::pageable_host;
      r.mapped_bytes += n;
      ++r.mapped;
      d.reason = "vmm component ownership: mapped (beyond vmm_component_buffer_limit_mb)";
    }
    auto& by = plan.groups[d.group].bytes_by_placement;
    by[static_cast<std::size_t>(d.where)] -= n;
    by[static_cast<std::size_t>(to)] += n;
    d.where = to;
  }
  return r;
}

}  // namespace v0
}  // namespace ddo
