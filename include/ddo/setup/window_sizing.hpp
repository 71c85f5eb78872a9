// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief machine_for's question to a transport_with_window_sizing (the file route's slots, the
/// VMM window): what it sizes for and the plan limits its answer becomes. Part of the one setup
/// path (setup/setup.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/units.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "ddo/plan/make_plan_context.hpp"
#include "ddo/plan/plan_context.hpp"
#include "ddo/plan/residency_planner.hpp"
#include "ddo/runtime/native_vmm_options.hpp"
#include "ddo/runtime/transport_setup.hpp"
#include "ddo/setup/machine_inputs.hpp"
#include "ddo/setup/streamed_groups.hpp"
#include "ddo/transport/concepts.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {

/// machine_for's question to a transport_with_window_sizing: it sizes its staging or window for
/// the most any plan can stream in one group (what rules 1-3 keep never streams; a demoted
/// always-resident weight may), and its answer becomes the plan's limits in @p c with the detail
/// a refusal names: a per-group limit (the file route's slot: a size the user set is honoured, a
/// grown one says for which group) and the resident weights' share of
/// vmm_resident_weight_budget_gb.
/// @p from says which of the settings a source the user controls set (machine_inputs);
/// @p patterns, the config's with the table's matches (machine_inputs::patterns), or nullptr.
template <class Transport>
void size_window(Transport& transport, machine_capacity& c, const weight_table& table,
                 std::span<const execution_group> groups, const dynamic_offload_config& config,
                 const window_provenance& from, bool ring, std::span<const char> kept,
                 std::uint64_t slot_bytes, std::size_t ring_slots,
                 const plan_patterns* patterns = nullptr) {
  auto streams = [&](std::size_t w) { return kept.empty() || !kept[w]; };
  auto largest = streamed_per_group(table, groups, 1, streams);
  if (ring) {
    const rule_residency rules =
        residency_rules(make_plan_context(table, config, c, groups, patterns));
    auto may_stream = streamed_per_group(table, groups, 1, [&](std::size_t w) {
      return rules.rule[w] == residency_rule::managed ||
             rules.rule[w] == residency_rule::builtin_pattern;
    });
    if (may_stream.largest_bytes > largest.largest_bytes) largest = std::move(may_stream);
  }
  const bool stated = from.staging_stated;
  window_sizing_request r;
  r.streams = ring;
  r.staging_stated = stated;
  r.native_route = native_vmm_selected(config);
  r.staging_setting_bytes = gib_to_bytes(config.vmm_staging_buffer_gb);
  r.largest_group_bytes = largest.largest_bytes;
  r.slot_bytes = slot_bytes;
  // The mapped budget a preset or the defaults chose (4 GiB, the reference's CLI default) follows
  // the card: what the plan may use of it (issue 38: Wan2.1-14B kept 44 MiB of 7 GiB free).
  const bool budget_given = from.budget_given;
  if (config.vmm_resident_weight_budget_gb > 0.0)
    r.resident_budget_bytes = budget_given || c.free_vram_bytes == 0
                                  ? gib_to_bytes(config.vmm_resident_weight_budget_gb)
                                  : saturating_add(c.free_vram_bytes, ring_slots * slot_bytes);
  r.page_bytes = config.vmm_page_mb * mib;
  const window_sizing a = transport.size_window(r);
  const std::string& staging = from.staging_origin;
  if (a.group_limit_bytes != 0 && stated)
    c.max_group_detail = "vmm_staging_buffer_gb " + format_bytes(a.staging_bytes) + " set by " +
                         staging + ", honoured";
  else if (a.grown)
    c.max_group_detail = "vmm_staging_buffer_gb " + format_bytes(r.staging_setting_bytes) + " (" +
                         staging + ") grown to " + format_bytes(a.staging_bytes) +
                         " for the largest group that may stream, '" + largest.largest_name +
                         "' (" + format_bytes(largest.largest_bytes) + ")";
  if (a.group_limit_bytes != 0 &&
      (c.max_group_bytes == 0 || a.group_limit_bytes < c.max_group_bytes))
    c.max_group_bytes = a.group_limit_bytes;
  if (a.shares_resident_budget) {
    // The window keeps the ring's depth of slots: with one slot left (what the resident set
    // took when it could fill the budget less one) each load waits for the previous group's
    // compute, and FLUX.1 at 4096 tokens ran 1.26-1.49x its bound on 8 and 12 GiB cards (H100).
    const std::size_t slots = std::max<std::size_t>(ring_slots, 1);
    const std::uint64_t window = slots * a.window_slot_bytes;
    c.resident_limit_bytes =
        r.resident_budget_bytes > window ? r.resident_budget_bytes - window : 0;
    c.resident_limit_reason =
        "vmm_resident_weight_budget_gb " +
        (budget_given || c.free_vram_bytes == 0
             ? format_bytes(r.resident_budget_bytes)
             : format_bytes(gib_to_bytes(config.vmm_resident_weight_budget_gb)) + " (" +
                   from.budget_origin +
                   ") following the card: " + format_bytes(r.resident_budget_bytes)) +
        " less the ring's " + std::to_string(slots) + " window slot(s) of " +
        format_bytes(a.window_slot_bytes);
  }
}

}  // namespace detail

}  // namespace v0
}  // namespace ddo
