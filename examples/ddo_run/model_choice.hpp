// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp): which model runs. --model's files, or the synthetic
/// model the flags describe (on a GPU by default Flux-sized, made smaller where the disk or RAM
/// cannot hold it, unless --expect-model names it), found in or generated into the model cache.
/// Example code (docs/runner.md).

#include "ddo_run/common.hpp"

namespace ddo_run {

/// The synthetic model of the flags into opt.synthetic (the device decides the defaults);
/// nullopt to go on, else the exit status of a refusal.
inline std::optional<int> choose_synthetic(run_options& opt, const po::variables_map& vm,
                                           bool gpu) {
  auto& synthetic = opt.synthetic;
  // CPU default: big enough that the attention and MLP weights (1024² and 4096×1024 bf16) pass
  // the 1 MiB small-tensor threshold the environment defaults give, so they really stream.
  // GPU default: FLUX.1-sized (≈ 23.8 GB), so that a consumer card has to stream it.
  std::string shape = gpu ? "flux" : "dit";
  if (vm.count("shape")) shape = vm["shape"].as<std::string>();
  if (shape == "flux") {
    synthetic = gpu ? ddo::flux_model_options() : ddo::flux_model_options(2, 4, 1024);
  } else if (shape == "dit") {
    synthetic.blocks = gpu ? 24 : 8;
    synthetic.hidden = gpu ? 3072 : 1024;
    if (vm.count("single-blocks"))
      return fail("--single-blocks needs --shape flux (the dit shape has one kind of block)",
                  exit_usage);
  } else {
    return fail("--shape = \"" + shape + "\": expected dit or flux", exit_usage);
  }
  synthetic.mlp_ratio = 4;
  synthetic.type = ddo::dtype::bf16;
  if (vm.count("blocks")) {
    synthetic.blocks = vm["blocks"].as<ddo::runner::blocks_option>();
    if (shape == "flux") synthetic.single_blocks = 2 * synthetic.blocks;
  }
  if (vm.count("single-blocks"))
    synthetic.single_blocks = vm["single-blocks"].as<ddo::runner::blocks_option>();
  if (vm.count("hidden")) synthetic.hidden = vm["hidden"].as<ddo::runner::hidden_option>();
  if (vm.count("mlp-ratio")) synthetic.mlp_ratio = vm["mlp-ratio"].as<ddo::runner::mlp_ratio_option>();
  if (vm.count("shards")) synthetic.shards = vm["shards"].as<ddo::runner::shards_option>();
  if (vm.count("seed")) synthetic.seed = vm["seed"].as<ddo::runner::seed_option>();
  if (vm.count("dtype")) {
    const auto type = parse_model_dtype(vm["dtype"].as<std::string>());
    if (!type)
      return fail("--dtype = \"" + vm["dtype"].as<std::string>() + "\": expected bf16, fp16 or fp32",
                  exit_usage);
    synthetic.type = *type;
  }
  for (const char* flag :
       {"shape", "blocks", "single-blocks", "hidden", "mlp-ratio", "dtype", "shards", "seed"})
    if (vm.count(flag)) opt.synthetic_given = true;
  if (!opt.expect_model.empty() && !opt.models.empty())
    return fail("--expect-model names a synthetic model; --model runs your files", exit_usage);
  if (opt.synthetic_given && !opt.models.empty())
    return fail("--model runs your files; the synthetic-model flags (--blocks, --hidden, ...) "
                "cannot be combined with it",
                exit_usage);
  return std::nullopt;
}

/// The default Flux-sized model @p synthetic, made smaller when this machine cannot hold it
/// (said so), unless it is already in @p cache.
inline void fit_default_model(ddo::synthetic_model_options& synthetic,
                              const std::filesystem::path& cache) {
  if (std::filesystem::exists(ddo::runner::cached_model_entry(synthetic, cache))) return;
  std::error_code ec;
  std::filesystem::path probe = cache;
  while (!probe.empty() && !std::filesystem::exists(probe, ec)) probe = probe.parent_path();
  const auto space = std::filesystem::space(probe.empty() ? "." : probe, ec);
  std::string why;
  synthetic = ddo::runner::fit_flux_model(synthetic, ec ? 0 : space.available,
                                          ddo::available_ram_bytes().value_or(0), &why);
  if (!why.empty()) std::printf("model: %s\n", why.c_str());
}

/// The synthetic model's file, found in the cache or generated into it (the cache checked for
/// writing only then), into @p paths; nullopt to go on, else the exit status of a refusal.
inline std::optional<int> synthetic_model_paths(run_options& opt, bool gpu,
                                                ddo::runner::interrupt_cleanup& interrupts,
                                                std::vector<std::string>& paths) {
  auto& synthetic = opt.synthetic;
  const std::filesystem::path cache =
      opt.cache_dir.empty() ? ddo::runner::default_model_cache_dir() : std::filesystem::path(opt.cache_dir);
  bool generated = false;
  interrupts.watch(cache);
  if (gpu && !opt.synthetic_given) fit_default_model(synthetic, cache);
  // A figure names the model it was taken on: a substitute is refused before any work.
  if (!opt.expect_model.empty() &&
      ddo::runner::synthetic_model_key(synthetic) != opt.expect_model)
    return fail("--expect-model " + opt.expect_model + ": this run's synthetic model is " +
                    ddo::runner::synthetic_model_key(synthetic) +
                    " (a smaller model where the disk or RAM cannot hold the one asked for, "
                    "or other --shape/--blocks/... flags); no step was run",
                exit_failure);
  const auto entry = ddo::runner::cached_model_entry(synthetic, cache);
  if (!std::filesystem::exists(entry)) {
    // Checked for writing only now that something must be written: a shared read-only cache
    // that holds the model is read, not refused.
    ddo::check_output_directory(cache, "model cache directory");
    std::fprintf(stderr, "ddo-run: generating the synthetic model %s (%s) into %s ...\n",
                 ddo::runner::synthetic_model_key(synthetic).c_str(),
                 gb([&] {
                   std::uint64_t b = 0;
                   for (const auto& s : ddo::synthetic_model_specs(synthetic)) b += s.bytes();
                   return b;
                 }()).c_str(),
                 cache.string().c_str());
  }
  const auto t0 = std::chrono::steady_clock::now();
  paths.push_back(ddo::runner::ensure_synthetic_model(synthetic, cache, &generated));
  std::printf("model: synthetic %s, %s %s\n", ddo::runner::synthetic_model_key(synthetic).c_str(),
              generated ? "generated in" : "cached at",
              generated ? (std::to_string(seconds_since(t0)).substr(0, 4) + " s").c_str()
                        : paths.back().c_str());
  return std::nullopt;
}

/// The model's weight table and the settings resolved for it.
struct loaded_model {
  ddo::weight_table table;
  ddo::dynamic_offload_settings settings;
};

/// Reads the headers of @p paths, resolves the settings from @p inputs for a model of that size
/// (reading again with the backend they name) and prints both.
inline loaded_model load_model(const std::vector<std::string>& paths, ddo::resolve_inputs& inputs,
                               const run_options& opt, double helper_vmm_budget_gb) {
  const auto probe_backend = ddo::safetensors_backend::library_default;
  ddo::weight_table table = ddo::load_safetensors(std::span<const std::string>(paths), probe_backend);
  inputs.model_bytes = table.total_bytes();
  if (opt.ram_gb > 0.0) inputs.stated_ram_bytes = ddo::gib_to_bytes(opt.ram_gb);  // decides auto
  const ddo::dynamic_offload_settings settings = ddo::resolve_settings(inputs);
  if (settings.config.load_safetensors_backend != probe_backend)
    table = ddo::load_safetensors(std::span<const std::string>(paths),
                                  settings.config.load_safetensors_backend);
  std::printf("model: %zu tensors in %zu file(s), %s\n", table.size(), table.files().size(),
              gb(table.total_bytes()).c_str());
  print_settings_summary(settings, opt);
  if (settings.config.execution_mode == ddo::exec_mode::vmm_runtime &&
      settings.provenance.of(ddo::field_id::vmm_resident_weight_budget_gb).source ==
          ddo::origin::config)
    std::printf(
        "settings: vmm_resident_weight_budget_gb %s: %s (no TOML key, "
        "DDO_VMM_RESIDENT_WEIGHT_BUDGET_GB or flag sets it)\n",
        gib_text(ddo::gib_to_bytes(helper_vmm_budget_gb)).c_str(),
        helper_vmm_budget_gb < ddo::cli_default_vmm_resident_weight_budget_gb
            ? "what the emulated card holds (below the CLI helper's default 4 GiB)"
            : "the CLI helper's default");
  if (opt.print_settings) {
    std::ostringstream out;
    ddo::write_settings_toml(out, settings);
    std::printf("\n%s", out.str().c_str());
  }
  return {std::move(table), settings};
}

}  // namespace ddo_run
