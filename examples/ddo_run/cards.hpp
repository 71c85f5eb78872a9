// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp): the card(s) a run is held to — --vram-gb (several for
/// a --compare sweep), 'device', or the default (on a GPU a 12 GiB consumer card; on host_sim a
/// device that holds the rule-resident weights, half the rest, the ring and the reserves) —
/// each refused now when too small, and said. Example code (docs/runner.md).

#include "ddo_run/report.hpp"

namespace ddo_run {

/// ctx.sweep, ctx.budget and ctx.emulated from the options, the device @p probe, its CUDA
/// context and the engine's @p reserve.
inline void set_cards(run_context& ctx, const ddo::cuda_device_probe& probe,
                      std::uint64_t context_bytes, std::uint64_t reserve) {
  const auto& opt = ctx.opt;
  const auto& table = ctx.table;
  const auto& settings = ctx.settings;
  const bool gpu = ctx.gpu;
  const auto& gpu_probe = probe;
  // The card(s): --vram-gb, else on a GPU a 12 GiB consumer card, on host_sim a device that
  // holds the rule-resident weights, half the rest, the ring and the reserves (so weights stream).
  ctx.emulated = !opt.vram_device;
  std::vector<std::uint64_t> cards;
  for (double v : opt.vram_gib) cards.push_back(ddo::gib_to_bytes(v));
  if (opt.vram_device) {
    cards.push_back(gpu ? gpu_probe.total_bytes
                        : ddo::runner::default_sim_device_bytes(table, settings, reserve));
  } else if (cards.empty()) {
    cards.push_back(gpu ? ddo::gib_to_bytes(ddo::runner::default_gpu_vram_gib)
                        : ddo::runner::default_sim_device_bytes(table, settings, reserve));
  }
  for (std::uint64_t card : cards) {
    ddo::runner::vram_budget b{card, context_bytes, reserve};
    (void)b.ddo_limit_bytes(ddo::runtime_device_reserve_bytes);  // refuses a card too small, now
    ctx.sweep.push_back(b);
  }
  ctx.budget = ctx.sweep.front();
  if (gpu && opt.vram_device)
    std::printf("device: the whole %s (no emulation)\n", gb(gpu_probe.total_bytes).c_str());
  else if (gpu)
    std::printf("device: emulating a %s card%s on the %s: ddo's transport capped at the card "
                "minus the CUDA context (%s measured at start)%s\n",
                gib_text(ctx.budget.vram_bytes).c_str(), opt.vram_gib.empty() ? " (the default)" : "",
                gpu_probe.name.c_str(), gb(context_bytes).c_str(),
                ctx.sweep.size() > 1 ? "; --compare sweeps every size given" : "");
  else
    std::printf("host_sim: simulated device memory %s%s\n", gib_text(ctx.budget.vram_bytes).c_str(),
                opt.vram_gib.empty() ? " (rule-resident weights + half the rest + the ring and "
                                       "reserves; --vram-gb to change)"
                                     : "");
  if (ctx.emulated) std::printf("note: %s\n", ddo::runner::emulation_caveat);
}

}  // namespace ddo_run
