// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp) --pipeline: a synthetic text encoder -> transformer
/// steps -> VAE pipeline under one shared device budget and, in the same run, that budget split
/// by weight bytes (runner/pipeline_run.hpp; docs/pipeline.md). Example code (docs/runner.md).

#include "ddo_run/common.hpp"

namespace ddo_run {

/// --pipeline with the options @p opt (@p vm: which were given), the settings' @p inputs (each
/// component resolves its own) and the device.
inline int run_pipeline(const run_options& opt, const po::variables_map& vm,
                        ddo::resolve_inputs inputs, bool gpu) {
  for (const char* flag : {"compare", "model", "trace", "vram-gb", "sim-vram-gb", "calibrate", "profile",
                           "json", "shape", "single-blocks", "mlp-ratio", "dtype", "shards",
                           "expect-model"})
    if (vm.count(flag) && !vm[flag].defaulted())
      return fail(std::string("--pipeline runs its own synthetic pipeline: --") + flag +
                      " does not apply (it takes --steps, --tokens, --images, --hidden, --blocks, "
                      "--verify, --ram-gb and the ddo settings, --ddo-pipeline-device-budget-gb "
                      "and --ddo-pipeline-pinned-budget-gb among them)",
                  exit_usage);
  ddo::runner::pipeline_run_options p;
  p.gpu = gpu;
  p.verify = opt.verify;
  p.images = vm.count("images") ? opt.images : (gpu ? 3 : 2);
  p.shape.hidden = vm.count("hidden") ? static_cast<std::uint32_t>(vm["hidden"].as<ddo::runner::hidden_option>())
                                      : (gpu ? 3072u : 256u);
  p.shape.transformer_blocks = vm.count("blocks")
                                   ? static_cast<std::uint32_t>(vm["blocks"].as<ddo::runner::blocks_option>())
                                   : (gpu ? 24u : 6u);
  p.shape.text_encoder_blocks = std::max(1u, p.shape.transformer_blocks / 2);
  p.shape.vae_blocks = std::max(1u, p.shape.transformer_blocks / 6);
  p.shape.tokens = opt.tokens ? opt.tokens : (gpu ? 4608 : 4);
  p.shape.text_tokens = std::min<std::int64_t>(512, p.shape.tokens);
  p.shape.steps = opt.steps ? opt.steps : 4;
  inputs.component.clear();  // each component of the pipeline resolves its own
  // The budget decides residency, not the balanced rule's default cap; the small weights of
  // host_sim sizes still stream. Explicit settings (TOML, DDO_*, --ddo-*) win over both.
  inputs.overrides.emplace_back(ddo::field_id::max_resident_module_budget_gb, 0.0);
  inputs.overrides.emplace_back(ddo::field_id::small_tensor_threshold_bytes, std::int64_t{16384});
  p.setup.inputs = inputs;
  if (opt.ram_gb > 0.0) p.setup.ram_bytes = ddo::gib_to_bytes(opt.ram_gb);
  if (gpu)
    return ddo::runner::run_pipeline_mode<ddo::runner::gpu_engine>(
        p, [] { return ddo::linear_transport(ddo::linear_options{}); });
  return ddo::runner::run_pipeline_mode<ddo::runner::cpu_engine>(
      p, [] { return ddo::host_sim_transport(ddo::host_sim_options{}); });
}

}  // namespace ddo_run
