// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief One device budget and one pinned-host budget for a whole pipeline (text encoder,
/// transformer, VAE): how they are shared between the components. Plain values and arithmetic;
/// setup/pipeline_offload.hpp applies them.
///
/// Device: a pipeline's phases never overlap, so each component that streams gets the whole
/// device budget for its own phase, less what stays on the device in every phase: the
/// components on route `none` (every weight resident for the whole run). The device peak is the
/// largest phase, not the sum. A phase that cannot hold its least footprint (the ring of its
/// largest group, ddo's reserve, the route-none components) is refused with the numbers.
///
/// Pinned host: pinned blocks persist across phases and images, so the pinned budget is split
/// once, between the components that stream, in proportion to their weight bytes and never
/// above them (a share a component cannot use goes to the others). A component whose route
/// pins all or nothing (diffusers_group_offload) gets its whole weight bytes or 0.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The budgets a whole pipeline shares (0: not shared; each component plans alone).
struct pipeline_budgets {
  std::uint64_t device_bytes = 0;       ///< ddo's device bytes in any phase
  std::uint64_t pinned_host_bytes = 0;  ///< page-locked weight bytes of all components together
  friend bool operator==(const pipeline_budgets&, const pipeline_budgets&) = default;
};

/// @brief What budget sharing needs to know of one component.
struct pipeline_component_need {
  std::string name;
  std::uint64_t weight_bytes = 0;  ///< every weight of the component
  /// Route `none`: every weight on the device in every phase (it counts in all of them).
  bool stays_resident = false;
  /// The least device bytes its own phase needs: the ring (slots × largest group) and ddo's
  /// runtime reserve; for route none, its weights.
  std::uint64_t min_device_bytes = 0;
  /// Its route pins every weight or none (diffusers_group_offload): a share below its weight
  /// bytes is worth nothing to it, so it gets 0 and the others share the rest.
  bool pins_whole = false;
};

/// @brief A component's share of the pipeline's budgets.
struct pipeline_component_budget {
  std::string name;
  /// ddo's device budget for the component's phase (route none: its weights, held in every phase).
  std::uint64_t device_bytes = 0;
  /// Its share of the pinned-host budget (0 for route none and when the budget is not shared).
  std::uint64_t pinned_host_bytes = 0;
  /// Bytes of other components on the device during its phase (the route-none ones).
  std::uint64_t resident_elsewhere_bytes = 0;
};

/// @brief Splits @p total in proportion to @p weights, each share at most its cap (@p caps
/// empty: uncapped); what a capped share cannot take goes to the others in the same
/// proportion. Shares are whole bytes and never sum above @p total.
/// @throws usage_error when @p caps is neither empty nor as long as @p weights.
[[nodiscard]] inline std::vector<std::uint64_t> proportional_split(
    std::uint64_t total, std::span<const std::uint64_t> weights,
    std::span<const std::uint64_t> caps = {}) {
  DDO_EXPECTS(caps.empty() || caps.size() == weights.size(),
              "proportional_split: " + std::to_string(caps.size()) + " caps for " +
                  std::to_string(weights.size()) + " weights");
  const std::size_t n = weights.size();
  std::vector<std::uint64_t> share(n, 0);
  std::vector<char> open(n, 0);
  for (std::size_t i = 0; i < n; ++i) open[i] = weights[i] != 0 && (caps.empty() || caps[i] != 0);
  std::uint64_t left = total;
  // Each round either fills every open share or caps at least one: at most n + 1 rounds.
  for (std::size_t round = 0; round <= n && left != 0; ++round) {
    long double weight_sum = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (open[i]) weight_sum += static_cast<long double>(weights[i]);
    if (weight_sum == 0) break;
    const std::uint64_t pool = left;
    bool capped = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (!open[i]) continue;
      auto add = static_cast<std::uint64_t>(static_cast<long double>(pool) *
                                            static_cast<long double>(weights[i]) / weight_sum);
      add = std::min(add, left);
      if (!caps.empty() && share[i] + add >= caps[i]) {
        add = caps[i] - share[i];
        open[i] = 0;
        capped = true;
      }
      share[i] += add;
      left -= add;
    }
    if (!capped) break;  // every open share took its proportion; rounding leaves < n bytes
  }
  return share;
}

/// @brief Each component's share of @p budgets (see the file comment).
/// @throws out_of_memory(memory_tier::device, ...) naming the component whose phase does not fit
/// the device budget, with its least footprint and what the route-none components hold.
[[nodiscard]] inline std::vector<pipeline_component_budget> plan_pipeline_budgets(
    std::span<const pipeline_component_need> components, const pipeline_budgets& budgets) {
  std::uint64_t always = 0;
  std::string always_names;
  for (const auto& c : components)
    if (c.stays_resident) {
      always += c.weight_bytes;
      always_names += (always_names.empty() ? "" : ", ") + c.name;
    }
  std::vector<pipeline_component_budget> result;
  std::vector<std::uint64_t> weights, caps;
  for (const auto& c : components) {
    pipeline_component_budget b;
    b.name = c.name;
    b.resident_elsewhere_bytes = c.stays_resident ? always - c.weight_bytes : always;
    const std::uint64_t need = c.stays_resident ? always : always + c.min_device_bytes;
    if (budgets.device_bytes != 0) {
      if (need > budgets.device_bytes) {
        std::string what =
            "phase '" + c.name + "' needs " + format_bytes_exact(need) + " of device memory";
        if (!c.stays_resident)
          what += " (its ring and ddo's reserve " + format_bytes_exact(c.min_device_bytes) + ")";
        if (always != 0)
          what += (c.stays_resident ? " (the route-none components "
                                    : ", plus the route-none components ") +
                  always_names + " holding " + format_bytes_exact(always) +
                  (c.stays_resident ? ")" : " in every phase");
        throw out_of_memory(memory_tier::device, need, budgets.device_bytes,
                            "pipeline device budget refused: " + what + " but the budget is " +
                                format_bytes_exact(budgets.device_bytes) +
                                "; raise the pipeline device budget (pipeline_device_budget_gb), "
                                "use smaller groups or fewer "
                                "slots for '" +
                                c.name + "', or stream the route-none components");
      }
      b.device_bytes = c.stays_resident ? c.weight_bytes : budgets.device_bytes - always;
    }
    weights.push_back(c.stays_resident ? 0 : c.weight_bytes);
    caps.push_back(c.stays_resident ? 0 : c.weight_bytes);
    result.push_back(std::move(b));
  }
  if (budgets.pinned_host_bytes != 0) {
    auto shares = proportional_split(budgets.pinned_host_bytes, weights, caps);
    // Each pass drops at least one all-or-nothing component that its share cannot cover.
    for (bool dropped = true; dropped;) {
      dropped = false;
      for (std::size_t i = 0; i < components.size(); ++i)
        if (components[i].pins_whole && caps[i] != 0 && shares[i] < components[i].weight_bytes) {
          caps[i] = weights[i] = 0;
          dropped = true;
        }
      if (dropped) shares = proportional_split(budgets.pinned_host_bytes, weights, caps);
    }
    for (std::size_t i = 0; i < result.size(); ++i) result[i].pinned_host_bytes = shares[i];
  }
  return result;
}

}  // namespace v0
}  // namespace ddo
