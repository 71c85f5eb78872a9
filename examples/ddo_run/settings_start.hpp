// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp): where the settings come from (preset auto < --config
/// < DDO_* < --ddo-* flags, the CLI helper's defaults), the outputs checked before any work, and
/// the device the run uses (a GPU, else host_sim with the CPU stand-in). Example code.

#include "ddo_run/common.hpp"

namespace ddo_run {

/// The settings' sources before the model is known.
struct run_inputs {
  ddo::resolve_inputs inputs;
  double helper_vmm_budget_gb = 0.0;  ///< the CLI helper's VMM budget (the card's, if smaller)
  bool backend_sim = false;           ///< backend host_sim: the CPU stand-in even with a GPU
};

/// @p out's sources from @p opt and @p vm, every output path checked now; nullopt to go on,
/// else the exit status of a refusal.
inline std::optional<int> start_settings(const run_options& opt, const po::variables_map& vm,
                                         ddo::runner::interrupt_cleanup& interrupts,
                                         run_inputs& out) {
  // Settings: preset auto < --config < DDO_* < --ddo-* flags; the component is the transformer.
  auto& inputs = out.inputs;
  if (!opt.config_path.empty()) inputs.toml = ddo::read_toml_config(opt.config_path);
  inputs.use_environment = opt.use_environment;
  inputs.cli = ddo::cli_config_layer(vm);
  inputs.component = ddo::runner::run_component;
  if (opt.calibrate && opt.profile_name.empty())
    return fail("--calibrate needs --profile NAME (the name the profile is saved under)", exit_usage);
  if (!opt.profile_name.empty()) inputs.overrides.emplace_back(ddo::field_id::profile_name, opt.profile_name);
  if (opt.calibrate) inputs.overrides.emplace_back(ddo::field_id::build_profile, true);
  // ddo-run's --ddo-* flags are the reference's CLI helper: its 4 GiB VMM budget where no source
  // sets one (so `--ddo-execution-mode vmm_runtime` alone runs); on an emulated card smaller
  // than that (--vram-gb), what the card holds. Said so below when the VMM route uses it.
  double& helper_vmm_budget_gb = out.helper_vmm_budget_gb;
  helper_vmm_budget_gb = ddo::cli_default_vmm_resident_weight_budget_gb;
  for (double card : opt.vram_gib) helper_vmm_budget_gb = std::min(helper_vmm_budget_gb, card);
  ddo::add_cli_helper_defaults(inputs, helper_vmm_budget_gb);
  // Preset auto may choose a VMM route: only where device 0 has VMM (not known without a GPU).
  if (!opt.force_cpu) inputs.vmm_supported = ddo::probe_vmm_supported(0);
  // `backend` picks the transport: host_sim runs the CPU stand-in even with a GPU (resolved once
  // here, before the model is known, only to read it).
  const auto early = ddo::resolve_settings(inputs);
  out.backend_sim = early.config.backend == ddo::offload_backend::host_sim;
  const bool backend_sim = out.backend_sim;
  if (ddo::set_explicitly(early, ddo::field_id::backend) && !backend_sim &&
      early.config.backend != ddo::offload_backend::linear &&
      early.config.backend != ddo::offload_backend::vmm &&
      early.config.backend != ddo::offload_backend::nvme)
    return fail(ddo::describe(early.provenance.of(ddo::field_id::backend)) +
                    ": backend = " + std::string(ddo::enum_name(early.config.backend)) +
                    ": this build has no such transport; use linear, vmm, nvme or host_sim",
                exit_usage);

  // Every output is checked now, not after the work: a calibration runs for minutes on a GPU
  // before it saves its profile.
  if (opt.calibrate)
    ddo::check_output_directory(ddo::profile_store(early.profile_dir).directory(),
                                "profile directory");
  // An unwritable trace path is reported now, not after the whole run.
  if (!opt.trace_path.empty()) {
    ddo::check_output_path(opt.trace_path, "trace file");
    interrupts.watch(std::filesystem::absolute(opt.trace_path).parent_path());
  }
  return std::nullopt;
}

/// The device a run uses, said so, and the CUDA context's bytes on it.
struct device_choice {
  ddo::cuda_device_probe probe;
  bool gpu = false;
  std::uint64_t context_bytes = 0;  ///< measured once CUDA started, before any allocation
};

inline device_choice choose_device(const run_options& opt, bool backend_sim) {
  // The device decides the defaults.
  device_choice d{ddo::runner::probe_gpu(0), false, 0};
  const auto& gpu_probe = d.probe;
  d.gpu = gpu_probe.available && !opt.force_cpu && !backend_sim;
  const bool gpu = d.gpu;
  if (gpu) {
    std::printf("ddo-run: GPU 0: %s (%s): linear transport, cuBLAS compute\n",
                gpu_probe.name.c_str(), gb(gpu_probe.total_bytes).c_str());
  } else if (opt.force_cpu || backend_sim) {
    std::printf("ddo-run: %s: host_sim transport with the CPU stand-in compute\n",
                opt.force_cpu ? "--cpu" : "backend host_sim");
  } else {
    std::printf("ddo-run: %s — running on the host_sim transport (host memory stands in for the "
                "GPU, threads for its copy engine) with a CPU stand-in for the compute\n",
                gpu_probe.reason.c_str());
  }

  // The CUDA context, measured now that CUDA has started and before anything is allocated: the
  // part of the card that is neither ddo's nor the engine's.
  if (gpu) {
    const auto memory = ddo::query_device_memory(0);
    d.context_bytes = memory.total_bytes - memory.free_bytes;
  }
  return d;
}

}  // namespace ddo_run
