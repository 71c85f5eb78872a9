// SPDX-License-Identifier: Apache-2.0
#pragma once
// The inputs ddo-run gives the one setup path (ddo/setup/setup.hpp), shared with ddo-plan so
// that, for the same arguments, ddo-plan prints the plan ddo-run runs: the component, the
// engine's device reserve (the runner's activations), the simulated device size on host_sim.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/model/dtype.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/planner.hpp"
#include "ddo/runtime/device_footprint.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/setup/setup.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// The component ddo-run and ddo-plan configure (its route: DDO_TRANSFORMER_ROUTE, ...).
inline constexpr const char* run_component = "transformer";

/// The dtypes the runner multiplies.
[[nodiscard]] constexpr bool is_compute_dtype(dtype type) noexcept {
  return type == dtype::bf16 || type == dtype::f16 || type == dtype::f32;
}

/// What the runner's compute looks like: the dtype of the first 2-D weight of a supported type
/// and the activation width (the largest dimension of any GEMM of that dtype).
struct compute_shape {
  dtype type = dtype::bf16;
  std::int64_t width = 1;
};

[[nodiscard]] inline compute_shape compute_shape_of(const weight_table& table) {
  compute_shape c;
  bool have_type = false;
  for (const auto& w : table.weights()) {
    if (w.shape.size() != 2 || !is_compute_dtype(w.type)) continue;
    if (!have_type) {
      c.type = w.type;
      have_type = true;
    }
    if (w.type == c.type) c.width = std::max({c.width, w.shape[0], w.shape[1]});
  }
  return c;
}

/// Activation rows per GEMM when --tokens is not given.
[[nodiscard]] constexpr std::int64_t default_tokens(bool gpu) noexcept { return gpu ? 4096 : 8; }

/// The runner's device reserve: its two activation buffers [tokens, width].
[[nodiscard]] inline std::uint64_t activation_reserve_bytes(std::int64_t tokens,
                                                            const compute_shape& c) {
  return 2 * static_cast<std::uint64_t>(tokens) * static_cast<std::uint64_t>(c.width) *
         size_of(c.type);
}

/// The cuBLAS workspace the GPU engine sets (runner/synthetic_forward.hpp cublas_workspace_bytes,
/// repeated here so that ddo-plan need not include cuBLAS).
inline constexpr std::uint64_t gpu_workspace_reserve_bytes = 32ull << 20;

/// The engine's whole device reserve: the activations, and on a GPU the cuBLAS workspace (the
/// CPU stand-in keeps its activations in host memory, but host_sim plans as if they were on the
/// device, so a plan on host_sim is the plan of the same card).
[[nodiscard]] inline std::uint64_t engine_reserve_bytes(std::int64_t tokens, const compute_shape& c,
                                                        bool gpu) {
  return activation_reserve_bytes(tokens, c) + (gpu ? gpu_workspace_reserve_bytes : 0);
}

/// The simulated device when none is stated: room for what the rules keep resident and half of
/// the rest besides what setup subtracts (the ring of what streams, the engine's reserve,
/// runtime_device_reserve_bytes), so a plan has to stream. Asks the planner's rules
/// (ddo::rule_kept_weights) and uses the formulas machine_for uses.
[[nodiscard]] inline std::uint64_t default_sim_device_bytes(const weight_table& table,
                                                            const dynamic_offload_settings& settings,
                                                            std::uint64_t engine_reserve) {
  const runtime_options runtime;
  const auto groups = infer_execution_groups(table, settings.config.resident_module_patterns);
  const std::vector<char> kept_by_rules = rule_kept_weights(table, groups, settings.config);
  std::uint64_t slot = 0, kept = 0;
  std::size_t streaming = 0;
  for (const auto& g : groups) {
    std::vector<std::size_t> streamed;
    for (std::size_t w : g.weights)
      (kept_by_rules[w] ? kept += table[w].bytes, void() : streamed.push_back(w));
    if (streamed.empty()) continue;
    ++streaming;
    slot = std::max(slot, slot_bytes_for(table, streamed, runtime.alignment));
  }
  return kept + (table.total_bytes() - kept) / 2 +
         ring_bytes_for(slot, std::min(runtime.slot_count, streaming)) + engine_reserve +
         runtime_device_reserve_bytes;
}

/// The setup options of a run: the component, the engine's reserve, stated RAM.
[[nodiscard]] inline setup_options run_setup_options(const resolve_inputs& inputs,
                                                     std::uint64_t engine_reserve,
                                                     std::optional<std::uint64_t> ram_bytes) {
  setup_options o;
  o.inputs = inputs;
  o.inputs.component = run_component;
  o.reserve_device_bytes = engine_reserve;
  o.ram_bytes = ram_bytes;
  return o;
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
