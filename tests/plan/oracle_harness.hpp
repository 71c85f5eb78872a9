// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the oracle tests share: ddo's plan made as `ddo-plan --no-environment --tokens T
// --vram-gb V --ram-gb R` makes it on a host without a GPU (examples/ddo_plan.cpp: the same
// resolution inputs, the CLI helper's VMM budget, ddo-run's engine reserve at T tokens, the
// emulated card on host_sim, the one call with_prepared_offload), the oracle's machine under the
// same settings (the preset's headroom and the ring's rules), and the execution units of a
// model for the oracle (the finest repeated units, from the names).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ddo/cli/dynamic_offload_arguments.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/plan/residency_planner.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "plan/plan_oracle.hpp"
#include "runner/run_setup.hpp"
#include "runner/vram_budget.hpp"

namespace ddo_test::oracle_harness {

/// The rates a bound is computed at. The table's: a consumer machine (PCIe 4.0 x16 copies, a
/// Gen4 NVMe, an RTX 4090-class GPU's dense bf16 GEMMs); the property test draws them.
struct rates {
  double bus_bytes_per_s = 25e9;
  double disk_bytes_per_s = 3.5e9;
  double flops_per_s = 160e12;
};

/// ddo-plan's resolution inputs for a card of @p card_gib and stated RAM @p ram.
inline ddo::resolve_inputs plan_inputs(const ddo::weight_table& table, double card_gib,
                                       std::uint64_t ram) {
  ddo::resolve_inputs inputs;
  inputs.use_environment = false;
  inputs.component = ddo::runner::run_component;
  inputs.model_bytes = table.total_bytes();
  inputs.stated_ram_bytes = ram;
  ddo::add_cli_helper_defaults(inputs,
                               std::min(card_gib, ddo::cli_default_vmm_resident_weight_budget_gb));
  return inputs;
}

/// ddo-run's engine reserve at @p tokens on host_sim (its activations).
inline std::uint64_t engine_reserve(const ddo::weight_table& table, std::int64_t tokens) {
  return ddo::runner::engine_reserve_bytes(tokens, ddo::runner::compute_shape_of(table), false);
}

/// ddo's plan through ddo-plan's path; throws what setup throws (a refusal).
inline ddo::offload_setup plan_like_ddo_plan(const ddo::weight_table& table,
                                             const ddo::dynamic_offload_settings& settings,
                                             double card_gib, std::uint64_t ram,
                                             std::int64_t tokens) {
  const auto inputs = plan_inputs(table, card_gib, ram);
  const std::uint64_t reserve = engine_reserve(table, tokens);
  auto options = ddo::runner::run_setup_options(inputs, reserve, ram);
  options.tokens = static_cast<std::uint64_t>(tokens);
  options.simulate_device = true;
  options.log = nullptr;
  options.host_sim.device_capacity_bytes =
      ddo::runner::vram_budget{ddo::gib_to_bytes(card_gib), 0, reserve}.ddo_limit_bytes(
          ddo::runtime_device_reserve_bytes);
  return ddo::with_prepared_offload<>(
      table, settings, options, [](auto& prepared) { return std::move(prepared.setup); });
}

/// Flops of one step at @p tokens: every 2-D weight is a GEMM over the tokens.
inline double step_flops(const ddo::weight_table& table, std::int64_t tokens) {
  double flops = 0.0;
  for (const auto& w : table.weights())
    if (w.shape.size() == 2)
      flops += 2.0 * static_cast<double>(tokens) * static_cast<double>(w.shape[0]) *
               static_cast<double>(w.shape[1]);
  return flops;
}

/// The oracle's machine under @p settings: the card, the reserves ddo-run keeps, the preset's
/// headroom (VRAM under the balanced rule, RAM always), the ring's slot count and alignment.
inline plan_oracle::machine oracle_machine(const ddo::weight_table& table,
                                           const ddo::dynamic_offload_settings& settings,
                                           double card_gib, std::uint64_t ram,
                                           std::int64_t tokens, const rates& at) {
  const auto& c = settings.config;
  const auto runtime = ddo::runtime_options_from(c);
  plan_oracle::machine m;
  m.card_bytes = ddo::gib_to_bytes(card_gib);
  m.engine_reserve_bytes = engine_reserve(table, tokens);
  m.vram_headroom_bytes = c.auto_budget_policy == ddo::budget_policy::balanced
                              ? ddo::gib_to_bytes(c.auto_vram_headroom_gb)
                              : 0;
  m.ram_bytes = ram;
  m.ram_headroom_bytes = ddo::gib_to_bytes(c.system_ram_headroom_gb);
  m.slot_count = runtime.slot_count;
  m.alignment = runtime.alignment;
  m.bus_bytes_per_s = at.bus_bytes_per_s;
  m.disk_bytes_per_s = at.disk_bytes_per_s;
  m.compute_s = step_flops(table, tokens) / at.flops_per_s;
  return m;
}

/// The presets that keep more headroom than one_shot_fast (auto_vram_headroom_gb above 1.5 GiB
/// or system_ram_headroom_gb above 6 GiB: low_ram_safe, wsl_compat): ddo's plan may be 1.10x
/// the oracle's there, 1.05x elsewhere (issue 38), the headroom counted in the oracle too.
inline double allowed_ratio(const ddo::dynamic_offload_config& c) {
  return c.auto_vram_headroom_gb > 1.5 || c.system_ram_headroom_gb > 6.0 ? 1.10 : 1.05;
}

/// The execution unit of tensor @p name: its deepest `<family>.<N>` prefix for the repeated
/// families of the published layouts (transformer blocks, layers, resnets, a VAE's blocks),
/// else its module. A stage's weights outside its repeated units (an attention's proj_in, a
/// downsampler) are units of their own: finer never hurts the ring.
inline std::string unit_of(std::string_view name) {
  static constexpr std::string_view families[] = {
      "transformer_blocks", "single_transformer_blocks", "double_blocks", "single_blocks",
      "joint_blocks", "blocks", "layers", "layer", "h", "resnets", "resblocks", "block"};
  std::size_t best = std::string_view::npos;
  std::size_t start = 0;
  while (start < name.size()) {
    const std::size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) break;
    const std::string_view part = name.substr(start, dot - start);
    const std::size_t next = name.find('.', dot + 1);
    const std::string_view index =
        name.substr(dot + 1, next == std::string_view::npos ? name.npos : next - dot - 1);
    const bool numbered = !index.empty() && next != std::string_view::npos &&
                          std::all_of(index.begin(), index.end(),
                                      [](char ch) { return ch >= '0' && ch <= '9'; });
    if (numbered && std::find(std::begin(families), std::end(families), part) != std::end(families))
      best = next;
    start = dot + 1;
  }
  if (best != std::string_view::npos) return std::string(name.substr(0, best));
  return ddo::module_name_of(name);
}

/// The oracle's model of @p table: units by unit_of, weights that cannot stream by ddo's
/// residency rules 1-3 under @p config.
inline plan_oracle::model oracle_model(const ddo::weight_table& table,
                                       const ddo::dynamic_offload_config& config) {
  plan_oracle::model mo;
  mo.table = &table;
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t w = 0; w < table.size(); ++w) {
    const auto [at, added] = index.try_emplace(unit_of(table[w].name), mo.units.size());
    if (added) mo.units.emplace_back();
    mo.units[at->second].push_back(w);
  }
  // Rules 1-3 (plan/residency_planner.hpp): what cannot stream whatever the budget.
  std::vector<ddo::pattern> skip;
  for (const auto& text : config.skip_modules_pattern) skip.emplace_back(text);
  mo.fixed.assign(table.size(), 0);
  for (std::size_t w = 0; w < table.size(); ++w) {
    const auto& info = table[w];
    const auto& kinds = config.target_module_classes;
    mo.fixed[w] = std::any_of(skip.begin(), skip.end(),
                              [&](const ddo::pattern& p) { return p.search(info.module_name); }) ||
                  std::find(kinds.begin(), kinds.end(), info.kind) == kinds.end() ||
                  info.bytes <= config.small_tensor_threshold_bytes;
  }
  return mo;
}

}  // namespace ddo_test::oracle_harness
