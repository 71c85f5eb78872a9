// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp): its options, read and checked before any work (each
/// refusal names the option and what is allowed; counts through one checked conversion,
/// runner/count_options.hpp). Example code (docs/runner.md).

#include "ddo_run/common.hpp"

namespace ddo_run {

/// The option groups of ddo-run's command line.
struct option_set {
  po::options_description general{"ddo-run options"};
  po::options_description synth{"synthetic model (as ddo-make-model; cached by these values)"};
  po::options_description ddo_flags{"ddo settings (each also a DDO_* variable)"};
  po::options_description deprecated{"deprecated"};
  po::options_description all;
};

/// What to run and how to read the settings.
inline void add_run_options(po::options_description& general, run_options& opt) {
  general.add_options()("help,h", "Print this help and exit")(
      "model", po::value<std::vector<std::string>>()->multitoken()->value_name("PATH..."),
      "Run these safetensors files (or .index.json) instead of the synthetic model; 2-D weights "
      "are linear layers [out, in]")(
      "steps", po::value<ddo::runner::steps_option>()->value_name("N"),
      "Steady steps to run and take the median of (default 3; 1..1000000), after the warm-up "
      "steps")(
      "warmup", po::value<ddo::runner::warmup_option>()->value_name("N"),
      "Warm-up steps before the steady ones, reported apart (default 1; 0..100)")(
      "no-bound",
      "Do not measure the bound max(C, W / B) before the steps (C costs up to four steps of "
      "compute; for scripts that check the plan, not the speed)")(
      "setup-floor", po::bool_switch(&opt.setup_floor),
      "Before the setup, measure its floor (a parallel read of the model files into fresh "
      "page-aligned memory; registering those bytes) and print setup / max(read, registration)")(
      "parallel-setup", po::bool_switch(&opt.parallel_setup),
      "Pack and page-lock the streamed groups beside the residents' upload at setup "
      "(runtime_options::parallel_setup; off by default)")(
      "tokens", po::value<std::string>()->value_name("T[,T...]"),
      "Activation rows per GEMM (default 4096 on a GPU, 8 on the CPU stand-in); several, "
      "comma-separated, run one phase each over one offloader whose device budget follows the "
      "activations (set_device_reserve between phases)")(
      "verify", po::bool_switch(&opt.verify),
      "Each step, copy every acquired weight back from the device and compare it with the file")(
      "trace", po::value<std::string>(&opt.trace_path)->value_name("FILE.json"),
      "Write a Chrome trace (Perfetto) of copies, stalls, leases and steps")(
      "config", po::value<std::string>(&opt.config_path)->value_name("FILE"),
      "TOML file of settings (keys are the config field names)")(
      "no-environment", "Ignore every DDO_* variable")(
      "print-settings", po::bool_switch(&opt.print_settings),
      "Print the full resolved settings as TOML (with where each value came from)")(
      "cpu", po::bool_switch(&opt.force_cpu), "Use host_sim and the CPU stand-in even with a GPU")(
      "vram-gb", po::value<std::string>()->value_name("GiB[,GiB...]|device"),
      "The card to emulate: the plan and ddo's device bytes, the engine's reserve and the CUDA "
      "context are held to it (default on a GPU 12, a consumer card; on host_sim the weights "
      "kept resident by rule + half the rest + the ring and reserves). Several sizes sweep them "
      "with --compare; 'device': the whole real device")(
      "ram-gb", po::value<std::string>()->value_name("GiB"),
      "Available system RAM to plan with, as an engine states it: shapes the plan and the pin "
      "budget, not the kernel's page cache (default: probed; available_system_ram_gb set "
      "explicitly wins)");
}

/// The modes and the card: --compare, --profile, --pipeline, --devices, --graph, ...
inline void add_mode_options(po::options_description& general, run_options& opt) {
  general.add_options()(
      "compare", po::bool_switch(&opt.compare),
      "Run the model all resident, with ddo's plan, and as a naive copy-then-compute loop from "
      "pinned and pageable memory; print one table (ratios to the bound measured now)")(
      "json", po::value<std::string>(&opt.json_path)->value_name("FILE.json"),
      "--compare: write the table as JSON (a sweep writes ddo-run-compare.json by default)")(
      "profile", po::value<std::string>(&opt.profile_name)->value_name("NAME"),
      "Capacity profile NAME (profile_name): with a stored profile of group timings, plan with the "
      "overlap-aware planner and print predicted vs measured ms/step")(
      "calibrate", po::bool_switch(&opt.calibrate),
      "With --profile: calibrate (build_profile: zero resident, compute timed at a quarter of "
      "--tokens and at --tokens) and save the profile")(
      "pipeline", po::bool_switch(&opt.pipeline),
      "Run a synthetic text encoder -> transformer steps (--steps) -> VAE pipeline per image "
      "under one shared device budget (phases) and, in the same run, with that budget split "
      "by weight bytes; --hidden and --blocks (transformer blocks) size it")(
      "images", po::value<ddo::runner::images_option>()->value_name("N"),
      "--pipeline: images to run (default 3 on a GPU, 2 on host_sim), after one warm-up image; "
      "its budgets are the settings pipeline_device_budget_gb / pipeline_pinned_budget_gb "
      "(--ddo-pipeline-device-budget-gb, DDO_PIPELINE_DEVICE_BUDGET_GB, TOML; default 40% of "
      "the weights + 64 MiB and every weight)")(
      "devices", po::value<ddo::runner::devices_option>()->value_name("N"),
      "Run N devices at once, one offloader each (its own transport, card budget, ring, copy "
      "stream, plan and thread), all reading one shared host copy of the weights: N GPUs where "
      "the host has them, else N emulated cards (--vram-gb each) on the one GPU, sharing its "
      "link (host_sim without a GPU); reported per device and in total")(
      "graph", po::bool_switch(&opt.graph),
      "Capture the first step as a CUDA graph (host_sim: its graph model) and replay it for "
      "every step: through offloader.launch_graph when the ring (or the VMM window) is smaller "
      "than the streamed groups (graph streaming: the linear route with streamed groups pinned, "
      "or the legacy VMM route, execution_mode vmm_runtime; not the native VMM route), directly "
      "when every group stays loaded")(
      "models", po::value<std::string>()->value_name("A,B[,...]"),
      "Several models in one process under one pinned-RAM budget (the process's weight "
      "registry): each a model file or synthetic[:seed=S][:blocks=N][:single-blocks=M]"
      "[:hidden=H] (the synthetic flags' model with those changed); generations of --steps "
      "steps, changing model every --switch-every generations; per switch the process's reads, "
      "bytes pinned, reused and evicted, the time against its floor, peak RSS and MemAvailable")(
      "experts", po::value<std::string>()->value_name("A,B"),
      "Two experts as Wan 2.2 A14B runs them: A for the first half of every generation's "
      "--steps, B for the rest (models as --models)")(
      "switch-every", po::value<ddo::runner::images_option>()->value_name("N"),
      "--models: generations per model before the next (default 1)")(
      "generations", po::value<ddo::runner::images_option>()->value_name("G"),
      "--models / --experts: generations to run (default: --models every model twice, "
      "--experts 2)")(
      "shard", po::value<std::string>()->value_name("none|layers"),
      "With --devices: none (default) runs the whole model on each device (data parallel); "
      "layers gives each device its consecutive range of the execution groups (pipeline "
      "parallel)");
}

/// The synthetic model's shape (as ddo-make-model) and its cache.
inline void add_synthetic_options(po::options_description& synth, run_options& opt) {
  synth.add_options()("shape", po::value<std::string>()->value_name("dit|flux"),
                      "dit: one kind of block; flux: FLUX.1's double- and single-stream blocks "
                      "(default flux on a GPU, dit on the CPU)")(
      "blocks", po::value<ddo::runner::blocks_option>()->value_name("N"),
      "Transformer blocks; flux: double-stream blocks (default: dit 8 on the CPU; flux 19 on a "
      "GPU, 2 on the CPU)")(
      "single-blocks", po::value<ddo::runner::blocks_option>()->value_name("M"),
      "flux: single-stream blocks (default twice --blocks)")(
      "hidden", po::value<ddo::runner::hidden_option>()->value_name("H"),
      "Hidden size (default 1024 on the CPU, 3072 on a GPU)")(
      "mlp-ratio", po::value<ddo::runner::mlp_ratio_option>()->value_name("R"), "MLP width / hidden (default 4)")(
      "dtype", po::value<std::string>()->value_name("bf16|fp16|fp32"), "Weight dtype (default bf16)")(
      "shards", po::value<ddo::runner::shards_option>()->value_name("K"), "Files to split the model over (default 1)")(
      "seed", po::value<ddo::runner::seed_option>()->value_name("S"), "Random seed of the weights (default 0)")(
      "cache-dir", po::value<std::string>(&opt.cache_dir)->value_name("DIR"),
      "Where generated models are kept (default: beside ddo-run, else $TMPDIR)")(
      "expect-model", po::value<std::string>(&opt.expect_model)->value_name("KEY"),
      "Run only the synthetic model KEY (as printed: 'model: synthetic KEY'): where the disk or "
      "RAM cannot hold it, fail instead of using a smaller one (figures that must name their "
      "model: tools/gpu-figures)");
}

/// Every option of ddo-run into @p o, the values that bind to @p opt bound.
inline void describe_options(option_set& o, run_options& opt) {
  add_run_options(o.general, opt);
  add_mode_options(o.general, opt);
  o.deprecated.add_options()("sim-vram-gb", po::value<std::string>()->value_name("GiB"),
                           "deprecated: --vram-gb (which now applies to a GPU too)");
  add_synthetic_options(o.synth, opt);
  ddo::add_dynamic_offload_arguments(o.ddo_flags);
  o.all.add(o.general).add(o.synth).add(o.ddo_flags).add(o.deprecated);
}

/// Parses the command line into @p vm; nullopt to go on, else the exit status (0 after --help).
inline std::optional<int> parse_arguments(int argc, char** argv, option_set& o,
                                          po::variables_map& vm) {
  try {
    const po::positional_options_description no_positionals;
    po::store(po::command_line_parser(argc, argv).options(o.all).positional(no_positionals).run(), vm);
    po::notify(vm);
  } catch (const po::error& error) {
    return fail(ddo::describe_cli_error(error, o.all), exit_usage);
  }
  if (vm.count("help")) {
    std::cout << "Usage: ddo-run [--model PATH...] [--steps N] [--tokens T] [--verify] "
                 "[--trace FILE.json]\n"
                 "               [--config FILE] [--ddo-FLAG VALUE]...\n"
                 "Runs steps of a synthetic transformer forward while ddo streams the weights.\n"
                 "With no --model, a synthetic model is generated once and cached (on a GPU\n"
                 "Flux-sized, run on an emulated 12 GiB card; --compare for the cost table).\n\n"
              << po::options_description().add(o.general).add(o.synth).add(o.ddo_flags) << '\n';
    return 0;
  }
  return std::nullopt;
}

/// --tokens T[,T...]: each count checked as --tokens always was (runner/count_options.hpp:
/// 1..2^20); several are the phases of one run (phases_mode.hpp).
inline std::optional<int> read_token_phases(const std::string& text, run_options& opt) {
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    using tokens = ddo::runner::tokens_option;
    const auto n = ddo::parse_bounded_integer<std::int64_t>(
        std::string_view(text).substr(at, comma - at), tokens::min, tokens::max);
    if (!n)
      return fail("--tokens " + text + ": each count must be an integer in 1.." +
                      std::to_string(tokens::max),
                  exit_usage);
    opt.token_phases.push_back(*n);
    at = comma + 1;
  }
  opt.tokens = opt.token_phases.front();
  if (opt.token_phases.size() == 1) opt.token_phases.clear();
  return std::nullopt;
}

/// --models A,B,... / --experts A,B with --switch-every and --generations into @p opt, and the
/// combinations a switching run does not run refused; nullopt to go on, else the exit status.
inline std::optional<int> read_switch_options(run_options& opt, const po::variables_map& vm) {
  const bool models = vm.count("models") != 0, experts = vm.count("experts") != 0;
  if (!models && !experts) {
    for (const char* flag : {"switch-every", "generations"})
      if (vm.count(flag))
        return fail(std::string("--") + flag + " needs --models or --experts", exit_usage);
    return std::nullopt;
  }
  if (models && experts) return fail("give --models or --experts, not both", exit_usage);
  const std::string list = vm[models ? "models" : "experts"].as<std::string>();
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    opt.switch_models.push_back(list.substr(at, comma - at));
    if (opt.switch_models.back().empty())
      return fail(std::string(models ? "--models " : "--experts ") + list +
                      ": an empty model name", exit_usage);
    at = comma + 1;
  }
  opt.experts = experts;
  if (experts && opt.switch_models.size() != 2)
    return fail("--experts " + list + ": exactly two models (A for the first half of the "
                "steps, B for the rest)", exit_usage);
  if (models && opt.switch_models.size() < 2)
    return fail("--models " + list + ": at least two models to switch between", exit_usage);
  if (experts && vm.count("switch-every"))
    return fail("--switch-every applies to --models (--experts switches twice a generation)",
                exit_usage);
  using count = ddo::runner::images_option;  // 1..100,000, refused by the parser otherwise
  if (vm.count("switch-every")) opt.switch_every = vm["switch-every"].as<count>();
  const int models_n = static_cast<int>(opt.switch_models.size());
  opt.generations = vm.count("generations") ? int(vm["generations"].as<count>())
                    : experts                ? 2
                                             : 2 * models_n * opt.switch_every;
  if (experts && opt.steps == 1)
    return fail("--experts needs --steps 2 or more (half for each expert)", exit_usage);
  if (!opt.models.empty() || opt.compare || opt.pipeline || opt.devices > 1 || opt.graph ||
      opt.calibrate || !opt.trace_path.empty() || !opt.token_phases.empty() ||
      !opt.profile_name.empty() || opt.vram_gib.size() > 1)
    return fail("--models / --experts run eager steps of several models: --model, --compare, "
                "--pipeline, --devices, --graph, --calibrate, --profile, --trace, several "
                "--tokens and a --vram-gb sweep run one model", exit_usage);
  return std::nullopt;
}

/// The values of @p vm into @p opt, and the combinations ddo-run does not run refused; nullopt
/// to go on, else the exit status.
inline std::optional<int> read_options(run_options& opt, const po::variables_map& vm) {
  opt.use_environment = vm.count("no-environment") == 0;
  opt.bound = vm.count("no-bound") == 0;
  if (vm.count("model")) opt.models = vm["model"].as<std::vector<std::string>>();
  // Counts through one checked conversion (runner/count_options.hpp): refused when out of range
  // by the parser itself, with the option's name and range.
  if (vm.count("steps")) opt.steps = vm["steps"].as<ddo::runner::steps_option>();
  if (vm.count("warmup")) opt.warmup = vm["warmup"].as<ddo::runner::warmup_option>();
  if (vm.count("images")) opt.images = vm["images"].as<ddo::runner::images_option>();
  if (vm.count("devices")) opt.devices = vm["devices"].as<ddo::runner::devices_option>();
  if (vm.count("warmup") && (opt.compare || opt.pipeline))
    return fail("--warmup applies to the plain run (--compare and --pipeline each warm up once "
                "on their own)", exit_usage);
  if (vm.count("tokens"))
    if (const auto refused = read_token_phases(vm["tokens"].as<std::string>(), opt)) return refused;
  if (!opt.token_phases.empty() && (opt.compare || opt.pipeline || opt.devices > 1 || opt.graph ||
                                    opt.calibrate || !opt.trace_path.empty()))
    return fail("--tokens with several counts runs the phases of one eager run: --compare, "
                "--pipeline, --devices, --graph, --calibrate and --trace run one size",
                exit_usage);
  if (vm.count("sim-vram-gb") && vm.count("vram-gb"))
    return fail("give --vram-gb only (--sim-vram-gb is its deprecated spelling)", exit_usage);
  if (vm.count("sim-vram-gb") || vm.count("vram-gb")) {
    const bool old = vm.count("sim-vram-gb") != 0;
    const auto text = vm[old ? "sim-vram-gb" : "vram-gb"].as<std::string>();
    if (old)
      std::fprintf(stderr, "ddo-run: --sim-vram-gb is deprecated: use --vram-gb (the same size, "
                           "now also on a GPU)\n");
    if (!old && text == "device")
      opt.vram_device = true;
    else
      opt.vram_gib = ddo::runner::parse_size_list_gib(text, old ? "--sim-vram-gb" : "--vram-gb");
    if (old && opt.vram_gib.size() > 1)
      return fail("--sim-vram-gb takes one size; a sweep is --compare --vram-gb 4,8,...", exit_usage);
  }
  if (opt.vram_gib.size() > 1 && !opt.compare)
    return fail("--vram-gb " + vm["vram-gb"].as<std::string>() +
                    ": several sizes are a sweep, which needs --compare",
                exit_usage);
  if (vm.count("ram-gb"))
    opt.ram_gb = ddo::runner::parse_size_gib(vm["ram-gb"].as<std::string>(), "--ram-gb");
  if (opt.compare && !opt.trace_path.empty())
    return fail("--compare does not write a trace (--trace runs one plan)", exit_usage);
  if (!opt.json_path.empty() && !opt.compare && !vm.count("models") && !vm.count("experts"))
    return fail("--json writes the --compare table or the --models / --experts switches; give "
                "one of them too", exit_usage);
  if (!opt.json_path.empty()) ddo::check_output_path(opt.json_path, "--json file");
  if (vm.count("shard")) {
    const auto shard = vm["shard"].as<std::string>();
    if (shard != "none" && shard != "layers")
      return fail("--shard = \"" + shard + "\": expected none or layers", exit_usage);
    opt.shard_layers = shard == "layers";
  }
  if (opt.devices > 1 && (opt.compare || opt.pipeline || opt.calibrate || !opt.trace_path.empty()))
    return fail("--devices runs the plain steps: --compare, --pipeline, --calibrate and --trace "
                "run one device",
                exit_usage);

  if (const auto refused = read_switch_options(opt, vm)) return refused;
  if (opt.graph && (opt.verify || opt.compare || opt.pipeline || opt.calibrate || opt.devices > 1 ||
                    !opt.trace_path.empty()))
    return fail("--graph replays one captured step: --verify (host reads inside the step), "
                "--trace (timing events), --compare, --pipeline, --calibrate and --devices run "
                "without it",
                exit_usage);
  return std::nullopt;
}

}  // namespace ddo_run
