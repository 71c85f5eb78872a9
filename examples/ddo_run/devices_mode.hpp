// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp): --devices N: N offloaders sharing one weight store.
/// Example code (docs/runner.md).

#include "ddo_run/report.hpp"

namespace ddo_run {

// --- --devices ---------------------------------------------------------------------------------

/// --devices N (runner/devices_run.hpp): the linear transport on N GPUs where the host has them,
/// else N transports on the execution device, each capped at the card (emulated cards sharing
/// one link); without a GPU N host_sim devices of one simulated host.
inline int run_devices(run_context& ctx, bool gpu, std::uint64_t card_limit) {
  const auto& opt = ctx.opt;
  const auto backend = ctx.settings.config.backend;
  if (backend == ddo::offload_backend::vmm || backend == ddo::offload_backend::nvme)
    return fail(std::string("--devices runs the linear transport (host_sim without a GPU); "
                            "backend ") + std::string(ddo::enum_name(backend)) + " runs one device",
                exit_usage);
  const auto n = static_cast<std::size_t>(opt.devices);
  ddo::runner::devices_inputs in{ctx.settings, ctx.table,    ctx.files,  ctx.compute,
                                 ctx.tokens,   ctx.steps,    opt.warmup, opt.verify,
                                 opt.shard_layers, opt.bound,  ctx.setup,  ctx.budget};
  ddo::memory_watch host_memory;
  if (gpu) {
    const int gpus = ddo::query_cuda_availability().device_count;
    const bool real = gpus >= opt.devices;
    std::printf("devices: %zu %s\n", n,
                real ? "GPUs, one offloader each"
                     : "emulated cards on the one GPU (separate budgets and streams, one link)");
    std::vector<ddo::linear_transport> transports;
    for (std::size_t d = 0; d < n; ++d) {
      ddo::linear_options o;
      o.device = real ? static_cast<int>(d) : ddo::parse_execution_device(ctx.settings).index;
      o.device_limit_bytes = card_limit;
      transports.emplace_back(o);
    }
    host_memory.start();  // CUDA has started on every device used
    return ddo::runner::run_devices<gpu_engine>(in, std::move(transports), host_memory, false);
  }
  std::printf("devices: %zu simulated devices of one host (host_sim)\n", n);
  ddo::host_sim_options sim = ctx.setup.host_sim;
  sim.host = std::make_shared<ddo::host_sim_host>();
  std::vector<ddo::host_sim_transport> transports;
  for (std::size_t d = 0; d < n; ++d)
    transports.push_back(ddo::make_transport<ddo::host_sim_transport>(ctx.settings, sim));
  host_memory.start();
  return ddo::runner::run_devices<cpu_engine>(in, std::move(transports), host_memory, true);
}

}  // namespace ddo_run
