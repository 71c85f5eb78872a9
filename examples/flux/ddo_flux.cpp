// SPDX-License-Identifier: Apache-2.0
// ddo-flux: FLUX.1's transformer (diffusers' FluxTransformer2DModel) as an engine on ddo — the
// denoising loop of FluxPipeline over seeded inputs, the weights streamed by ddo per block.
//
//   ddo-flux --model PATH... [--steps N] [--width PX --height PX] [--text-tokens N]
//            [--guidance G] [--seed S] [--axes A,B,C] [--vram-gb GiB] [--check] [--graph]
//            [--output FILE] [--trace FILE.json] [--ddo-FLAG VALUE]...
//   ddo-flux --model PATH... --capacity-profile NAME [--calibrate | --smallest-card
//            [--max-slowdown X] [--card-step-gb GiB]] [--json FILE] ...
//   ddo-flux --make-model FILE [--config dev|tiny] [--dtype f32|bf16] [--seed S]
//
// The text encoders (CLIP, T5) and the VAE are not part of it: the inputs are what a pipeline
// hands the transformer — packed latents (2x2 patches of 16 channels), 512 T5 tokens, CLIP's
// pooled vector, position ids, timestep and guidance — generated from --seed. The latents after
// the last step are written to --output (little-endian: "DDOFLUX1", uint32 1, uint32 count,
// float32 values, image tokens x 64).
//
// With a GPU (and built with nvcc: DDO_FLUX_GPU) the engine runs the GPU forward
// (examples/flux/flux_gpu.hpp: cuBLASLt bf16 GEMMs with float accumulation, the kernels of
// flux_kernels.cu) on ddo's CUDA transports, on an emulated card of --vram-gb; without one (or
// with --cpu, or backend host_sim) the CPU float path (flux_cpu.hpp) on ddo's host_sim
// transport, where host memory stands in for the device and the compute stream's thread runs
// each stage. The route is the settings' (--ddo-backend, --ddo-execution-mode, presets, DDO_*):
// linear (pinned or pageable sources), the file route (nvme_baseline), or VMM (legacy or native).
// --check runs the same loop with every weight resident without ddo (in host memory, or copied
// once to the GPU) and fails unless the two outputs are equal to the bit. --graph captures the
// first step's forward and replays it for every step, through offloader.launch_graph when the
// ring is smaller than the streamed groups (docs/cuda-graphs.md); on the GPU it runs after the
// eager loop on the same offloader and must give its latents to the bit. --trace FILE.json
// writes a Chrome trace of the streamed run (flux_trace.hpp): ddo's loads, stalls, per-group
// compute and leases on their tracks and each step's host phases.
// On the GPU, --capacity-profile NAME --calibrate builds a capacity profile on this forward
// (flux_calibration.hpp: ddo::calibrate, each group timed at a quarter of the image tokens and
// at all of them);
// --capacity-profile NAME alone plans with it (the overlap-aware planner) and prints the
// predicted step against the measured median; --smallest-card finds by measurement the smallest
// emulated card within --max-slowdown of the all-resident step for the overlap planner and the
// spread and first rules (flux_gpu_runs.hpp, flux_card_sweep.hpp). --profile is not that: it
// times one resident step's GEMMs and attention (docs/calibration.md, "ddo-flux: calibrating
// the FLUX.1 engine").
// The stages, the lookup by name and the acquire/run/release loop are shared
// (docs/engine-walkthrough.md). This file reads the options and dispatches; each path is a file
// of examples/ddo_flux/: arguments.hpp (the options, read and checked), cpu_run.hpp (the CPU
// path on host_sim), gpu_run.hpp (the GPU path: the card measured, then gpu_steps.hpp's
// streamed run, --graph and --calibrate, and gpu_report.hpp's summary, --json, --check and
// --profile), latents.hpp (--output and the bitwise verdicts).

#include <boost/program_options.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>

#include "ddo/cli/dynamic_offload_arguments.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo_flux/arguments.hpp"
#include "ddo_flux/cpu_run.hpp"
#include "ddo_flux/resolutions.hpp"
#include "flux/flux_init.hpp"
#include "flux/flux_modes.hpp"
#include "runner/program_main.hpp"
#if defined(DDO_FLUX_GPU)
#include "ddo/platform/cuda_device.hpp"
#include "ddo_flux/gpu_resolutions.hpp"
#include "ddo_flux/gpu_run.hpp"
#endif

namespace {

namespace po = boost::program_options;
using ddo::runner::exit_usage;

int fail(const std::string& message, int status) {
  return ddo::runner::report_failure("ddo-flux", message, status);
}

/// --make-model FILE: seeded weights of --config's sizes in --dtype, then exit.
int make_model_mode(const ddo_flux::arguments& a) {
  const auto c = ddo_flux::named_config(a.config_name);
  ddo::dtype type = ddo::dtype::bf16;
  if (a.dtype_name == "f32")
    type = ddo::dtype::f32;
  else if (a.dtype_name != "bf16")
    return fail("--dtype '" + a.dtype_name + "' is not one of f32, bf16", exit_usage);
  const std::uint64_t seed = a.seed;
  flux::write_seeded_model(c, a.make_model, type, seed);
  std::printf(
      "wrote %s: %s FLUX.1 transformer (%d double + %d single blocks, %d x %d), seed %llu\n",
      a.make_model.c_str(), a.config_name.c_str(), c.double_blocks, c.single_blocks, c.heads,
      c.head_dim, static_cast<unsigned long long>(seed));
  return 0;
}

/// The settings' sources: the environment unless --no-environment, the --ddo-* flags; with
/// --capacity-profile the stored profile to plan with (profile_name), with --calibrate the one to
/// build (build_profile); --smallest-card sets them per card and rule (flux_card_sweep.hpp).
ddo::resolve_inputs settings_inputs(const po::variables_map& vm, const ddo_flux::arguments& a,
                                    std::uint64_t model_bytes) {
  ddo::resolve_inputs inputs;
  inputs.use_environment = vm.count("no-environment") == 0;
  inputs.cli = ddo::cli_config_layer(vm);
  inputs.component = "transformer";
  inputs.model_bytes = model_bytes;
  if (!a.modes.capacity_profile.empty() && !a.modes.smallest_card)
    inputs.overrides.emplace_back(ddo::field_id::profile_name, a.modes.capacity_profile);
  if (a.modes.calibrate) inputs.overrides.emplace_back(ddo::field_id::build_profile, true);
  return inputs;
}

/// The engine states its activations to ddo: the joint sequence, q/k/v, the widest temporary
/// (the single block's [attention | MLP] rows) and the modulation vectors, in float.
std::uint64_t activation_bytes(const flux::config& c, const flux::inputs& in) {
  const std::size_t n = in.image_tokens + in.text_tokens, h = static_cast<std::size_t>(c.hidden());
  return 4ull * (n * h * 6 + n * (h + static_cast<std::size_t>(c.mlp())) + 12 * h);
}

/// --resolutions: each phase's inputs, seeded as a single run's at that size, and the
/// activations the engine states there (its reserve per image size).
ddo_flux::resolution_phases phases_of(const ddo_flux::arguments& a, const flux::config& c) {
  ddo_flux::resolution_phases p;
  p.sizes = ddo_flux::parse_resolutions(a.resolutions);
  for (const auto& s : p.sizes) {
    p.inputs.push_back(flux::seeded_inputs(
        c, static_cast<std::size_t>(s.height / 16), static_cast<std::size_t>(s.width / 16),
        static_cast<std::size_t>(static_cast<int>(a.text_tokens)), static_cast<float>(a.guidance),
        a.seed));
    p.activations.push_back(activation_bytes(c, p.inputs.back()));
  }
  return p;
}

/// --resolutions (ddo_flux/resolutions.hpp): the CPU path's phases on host_sim.
int resolutions_mode(const ddo_flux::arguments& a, const ddo::weight_table& table,
                     const flux::config& c, const ddo::resolve_inputs& inputs,
                     const ddo::dynamic_offload_settings& settings) {
  const auto phases = phases_of(a, c);
  std::printf("model: %d double + %d single blocks, %s of weights; %zu phases of %d steps\n",
              c.double_blocks, c.single_blocks, ddo::format_bytes(table.total_bytes()).c_str(),
              phases.sizes.size(), static_cast<int>(a.steps));
#if defined(DDO_FLUX_GPU)
  if (!a.force_cpu && settings.config.backend != ddo::offload_backend::host_sim) {
    const auto probe = ddo::probe_cuda_device(0);
    if (probe.available)
      return ddo_flux::run_gpu_resolutions({table, settings, inputs, c, phases.inputs.front(),
                                            a.steps, a.vram_gib, a.modes, a.output, a.json, 0,
                                            0, a.seed, a.trace_path, {}},  // no --lora here
                                           probe, phases);
    std::printf("no GPU (%s): the CPU path on host_sim\n", probe.reason.c_str());
  }
#endif
  return ddo_flux::run_cpu_resolutions({table, settings, inputs, c, phases.inputs.front(),
                                        a.steps, a.vram_gib, phases.activations.front(),
                                        a.modes, a.output, a.trace_path, {}},  // no --lora
                                       phases);
}

int run(int argc, char** argv) {
  ddo_flux::arguments a;
  po::options_description general("ddo-flux options");
  ddo_flux::add_run_options(general, a);
  ddo_flux::add_mode_options(general, a);
  po::options_description ddo_flags("ddo settings (each also a DDO_* variable)");
  ddo::add_dynamic_offload_arguments(ddo_flags);
  po::options_description all;
  all.add(general).add(ddo_flags);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional({}).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return fail(ddo::describe_cli_error(e, all), exit_usage);
  }
  if (vm.count("help")) {
    std::cout << ddo_flux::usage_text << all << '\n';
    return 0;
  }
  if (!a.make_model.empty()) return make_model_mode(a);
  if (!a.make_lora.empty()) {
    if (a.models.empty()) return fail("--make-lora needs --model (the base it adapts)", exit_usage);
    const auto bytes = ddo_flux::write_seeded_lora(ddo::load_safetensors(a.models), a.make_lora,
                                                   a.lora_rank, a.seed);
    std::printf("wrote %s: a rank-%d LoRA, %s, seed %llu\n", a.make_lora.c_str(),
                static_cast<int>(a.lora_rank), ddo::format_bytes(bytes).c_str(),
                static_cast<unsigned long long>(static_cast<std::uint64_t>(a.seed)));
    return 0;
  }
  ddo_flux::check_run_arguments(vm, a);
  const int steps = a.steps, width = a.width, height = a.height;
  const auto axes = ddo_flux::parse_axes(a.axes_text);
  const ddo::weight_table table = ddo::load_safetensors(a.models);
  const flux::config c = flux::config_of(table, axes);
  if (!a.loras.empty() && (a.modes.smallest_card || a.modes.calibrate || !a.resolutions.empty()))
    throw ddo::usage_error("--lora runs the eager loop and --graph only: not with --smallest-card, "
                           "--calibrate or --resolutions (each sets up offloaders of its own; "
                           "docs/adapters.md)");
  if (a.modes.lora_switch && (a.loras.empty() || a.modes.graph))
    throw ddo::usage_error("--lora-switch needs --lora FILE[:SCALE]... (the adapters it switches) "
                           "and runs on the eager loop: not with --graph");
  if (!a.resolutions.empty()) {
    const ddo::resolve_inputs inputs = settings_inputs(vm, a, table.total_bytes());
    return resolutions_mode(a, table, c, inputs, ddo::resolve_settings(inputs));
  }
  const auto loras = ddo_flux::load_loras(a.loras, table);  // bad files refused before any work
  const auto rows = static_cast<std::size_t>(height / 16),
             cols = static_cast<std::size_t>(width / 16);
  const flux::inputs in =
      flux::seeded_inputs(c, rows, cols, static_cast<std::size_t>(static_cast<int>(a.text_tokens)),
                          static_cast<float>(a.guidance), a.seed);
  std::printf(
      "model: %d double + %d single blocks, %d heads x %d, %s of weights; %zu image + %zu "
      "text tokens, %d steps\n",
      c.double_blocks, c.single_blocks, c.heads, c.head_dim,
      ddo::format_bytes(table.total_bytes()).c_str(), in.image_tokens, in.text_tokens, steps);
  const ddo::resolve_inputs inputs = settings_inputs(vm, a, table.total_bytes());
  const auto settings = ddo::resolve_settings(inputs);
#if defined(DDO_FLUX_GPU)
  if (!a.force_cpu && settings.config.backend != ddo::offload_backend::host_sim) {
    const auto probe = ddo::probe_cuda_device(0);
    if (probe.available)
      return ddo_flux::run_gpu({table, settings, inputs, c, in, steps, a.vram_gib, a.modes,
                                a.output, a.json, rows, cols, a.seed, a.trace_path, loras},
                               probe);
    std::printf("no GPU (%s): the CPU path on host_sim\n", probe.reason.c_str());
  }
#endif
  if (a.modes.needs_gpu()) return fail(flux::gpu_only_modes, exit_usage);
  return ddo_flux::run_cpu({table, settings, inputs, c, in, steps, a.vram_gib,
                            activation_bytes(c, in), a.modes, a.output, a.trace_path, loras});
}

}  // namespace

int main(int argc, char** argv) {
  return ddo::runner::run_program("ddo-flux", run, argc, argv);
}
