// SPDX-License-Identifier: Apache-2.0
#pragma once
// The benchmarks that measure the runtime on a placement of their choosing (every weight
// resident, or every weight streamed from pinned, pageable or file memory) get their offloader
// through the one call (ddo/setup/prepare_offload.hpp) like every engine: settings that make
// the planner choose that placement, and a check that it did.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/plan/plan_format.hpp"
#include "ddo/setup/prepare_offload.hpp"

namespace ddo_bench {

/// Setup options that place every weight of @p groups in @p where: gpu_resident (route none),
/// or streamed from pinned_host, pageable_host or file (dynamic_offload with no small-tensor
/// rule, no resident budget and no always-resident pattern; pinning on for pinned_host). The
/// environment is ignored: a benchmark measures what it states.
[[nodiscard]] inline ddo::setup_options placement_setup(std::vector<ddo::execution_group> groups,
                                                        ddo::placement where) {
  ddo::setup_options o;
  o.inputs.use_environment = false;
  o.groups = std::move(groups);
  if (where == ddo::placement::gpu_resident) {
    o.inputs.route = ddo::component_route::none;
    return o;
  }
  o.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{0}},
                        {ddo::field_id::auto_budget_policy, ddo::budget_policy::off},
                        {ddo::field_id::resident_module_budget_gb, 0.0},
                        {ddo::field_id::always_resident_modules_pattern, std::vector<std::string>{}},
                        {ddo::field_id::system_ram_headroom_gb, 0.0},
                        {ddo::field_id::pin_cpu_memory, where == ddo::placement::pinned_host}};
  if (where == ddo::placement::file)
    o.inputs.overrides.emplace_back(ddo::field_id::backend, ddo::offload_backend::nvme);
  return o;
}

/// The started offloader (ddo::enabled_offload) of @p table over @p transport with @p options
/// (placement_setup), planned through the one call.
/// @throws std::runtime_error when the plan does not put every weight in @p where.
template <class Transport>
[[nodiscard]] auto offloader_for(const ddo::weight_table& table, const ddo::setup_options& options,
                                 Transport transport, ddo::placement where) {
  auto prepared = ddo::prepare_offload<>(table, ddo::resolve_settings(options.inputs), options,
                                         std::move(transport));
  if (prepared.plan().total_bytes(where) != table.total_bytes())
    throw std::runtime_error("the plan does not put every weight in " +
                             std::string(ddo::to_string(where)) + ":\n" +
                             ddo::format_plan_summary(prepared.plan(), table));
  return prepared.start();
}

}  // namespace ddo_bench
