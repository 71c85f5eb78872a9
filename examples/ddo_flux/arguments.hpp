// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux (examples/flux/ddo_flux.cpp): its command line, read and checked before any
/// work (each refusal names the option and what is allowed; counts through one checked
/// conversion, ddo/cli/bounded_integer.hpp). Example code (docs/engine-walkthrough.md).

#include <boost/program_options.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ddo/cli/bounded_integer.hpp"
#include "ddo/core/atomic_file.hpp"
#include "ddo/core/error.hpp"
#include "flux/flux_init.hpp"
#include "flux/flux_modes.hpp"
#include "runner/synthetic_options.hpp"

namespace ddo_flux {

namespace po = boost::program_options;

/// @brief What ddo-flux's command line asks for.
struct arguments {
  // Counts through one checked conversion (ddo/cli/bounded_integer.hpp): "-1" or a value past
  // the range is refused by the parser with the option's name and range, never wrapped.
  using steps_option = ddo::bounded_integer<int, 1, 1000>;
  using pixels_option = ddo::bounded_integer<int, 16, 16384>;
  using text_tokens_option = ddo::bounded_integer<int, 1, 4096>;
  std::vector<std::string> models;
  std::vector<std::string> loras;  ///< --lora FILE[:SCALE], in order
  std::string make_lora;           ///< --make-lora FILE (with --model)
  ddo::bounded_integer<int, 1, 4096> lora_rank{64};
  std::string make_model, config_name = "dev", dtype_name = "bf16", axes_text = "16,56,56";
  std::string output, trace_path, json;
  std::string resolutions;  // --resolutions WxH,...: phases over one offloader (resolutions.hpp)
  steps_option steps{28};
  pixels_option width{1024}, height{1024};
  text_tokens_option text_tokens{512};
  double guidance = 3.5, vram_gib = 12.0;
  ddo::runner::seed_option seed{0};
  bool force_cpu = false;
  flux::run_modes modes;
};

/// The usage lines of --help, before the options.
inline constexpr const char* usage_text =
    "Usage: ddo-flux --model PATH... [--steps N] [--width PX --height PX] [--check]\n"
    "                [--lora FILE[:SCALE]...] [--trace FILE.json]\n"
    "       ddo-flux --model PATH... --resolutions WxH,WxH,... [--steps N]\n"
    "       ddo-flux --model PATH... --capacity-profile NAME [--calibrate | --smallest-card]\n"
    "       ddo-flux --make-model FILE [--config dev|tiny] [--dtype f32|bf16]\n"
    "       ddo-flux --model PATH... --make-lora FILE [--lora-rank R]\n"
    "FLUX.1's transformer on ddo (the GPU forward on a GPU, else the CPU float path\n"
    "on host_sim; text encoders and VAE not included: seeded inputs stand in).\n\n";

/// The run: the model, the image, the card and the steps.
inline void add_run_options(po::options_description& general, arguments& a) {
  general.add_options()("help,h", "Print this help and exit")(
      "model", po::value(&a.models)->multitoken()->value_name("PATH..."),
      "FLUX.1 transformer weights by their diffusers names: safetensors files or an .index.json")(
      "steps", po::value(&a.steps)->value_name("N"), "Euler steps (default 28, FluxPipeline's)")(
      "width", po::value(&a.width)->value_name("PX"),
      "Image width in pixels, a multiple of 16 (default 1024)")(
      "height", po::value(&a.height)->value_name("PX"),
      "Image height in pixels, a multiple of 16 (default 1024)")(
      "text-tokens", po::value(&a.text_tokens)->value_name("N"), "T5 tokens (default 512)")(
      "guidance", po::value(&a.guidance)->value_name("G"), "Guidance scale (default 3.5)")(
      "seed", po::value(&a.seed)->value_name("S"),
      "Seed of the inputs (and of --make-model's weights)")(
      "axes", po::value(&a.axes_text)->value_name("A,B,C"),
      "RoPE axes (axes_dims_rope), summing to the head size (default 16,56,56)")(
      "vram-gb", po::value(&a.vram_gib)->value_name("GiB"),
      "The card ddo plans for (default 12): host_sim's device memory, or on a GPU an emulated "
      "card (ddo's transport capped at it minus the CUDA context)")(
      "cpu", po::bool_switch(&a.force_cpu), "Run the CPU path on host_sim even where a GPU is")(
      "lora", po::value(&a.loras)->multitoken()->value_name("FILE[:SCALE]..."),
      "LoRA adapters (PEFT/diffusers or kohya safetensors) merged into the weights on ddo's side "
      "at SCALE (default 1), in the order given (docs/adapters.md); --check merges them into its "
      "all-resident weights too")(
      "resolutions", po::value(&a.resolutions)->value_name("WxH,..."),
      "Phases of --steps steps each at these image sizes over one offloader, the device budget "
      "following the activations (set_device_reserve between phases): each move, each phase's "
      "step against its bound, a cached re-setup's time beside it. Not with --width/--height "
      "or the modes (--check, --graph, --output, --trace, --profile, --capacity-profile, "
      "--lora)");
}

/// What the run measures and checks besides its steps (flux_modes.hpp), and --make-model.
inline void add_mode_options(po::options_description& general, arguments& a) {
  flux::run_modes& modes = a.modes;
  general.add_options()(
      "profile", po::bool_switch(&modes.profile),
      "GPU: also time the all-resident steps, one step's GEMMs and attention (events), and the "
      "pinned bandwidth; print the streamed step's ratio to max(resident, bytes / bandwidth)")(
      "json", po::value(&a.json)->value_name("FILE"),
      "--profile, --capacity-profile or --smallest-card: write the figures to FILE")(
      "capacity-profile", po::value(&modes.capacity_profile)->value_name("NAME"),
      "GPU: plan with the stored capacity profile NAME (the overlap-aware planner; profile_name) "
      "and print its predicted step against the measured median. Not --profile, the timing "
      "switch")(
      "calibrate", po::bool_switch(&modes.calibrate),
      "With --capacity-profile: calibrate on this run's forward (build_profile: nothing resident, "
      "each group timed at a quarter of the image tokens and at all of them) and save the "
      "profile")(
      "smallest-card", po::bool_switch(&modes.smallest_card),
      "With --capacity-profile: find by measurement the smallest emulated card within "
      "--max-slowdown of the all-resident step, for the overlap planner and the spread and "
      "first rules (a fresh offloader per card, bisected over --card-step-gb)")(
      "max-slowdown", po::value(&modes.max_slowdown)->value_name("X"),
      "--smallest-card: the allowed step over the all-resident step (default 1.02)")(
      "card-step-gb", po::value(&modes.card_step_gib)->value_name("GiB"),
      "--smallest-card: the cards' spacing (default 0.5)")(
      "check", po::bool_switch(&modes.check),
      "Also run every step all-resident without ddo and fail unless the outputs are bitwise equal")(
      "output", po::value(&a.output)->value_name("FILE"), "Write the final latents here")(
      "trace", po::value(&a.trace_path)->value_name("FILE.json"),
      "Write a Chrome trace (Perfetto) of the streamed run: ddo's loads, stalls, each group's "
      "compute and leases, and each step's host phases (stage enqueueing, synchronize, velocity "
      "read, Euler update). Not with --graph or --smallest-card")(
      "graph", po::bool_switch(&modes.graph),
      "Capture the first step's forward and replay it for every step: through "
      "offloader.launch_graph when the ring (or the legacy VMM window) is smaller than the "
      "streamed groups, else directly. On the GPU after the eager loop, on the same offloader: "
      "prints both step times and fails unless the latents are bitwise equal. Not on the native "
      "VMM route (vmm_fast_runtime)")(
      "lora-switch", po::bool_switch(&modes.lora_switch),
      "With --lora: after the eager loop, switch the adapters between steps (each detached and "
      "attached again, each scale changed; 4 of each, the last back to the loop's), each timed "
      "against the loop's median step, then run the loop again and fail unless its latents are "
      "bitwise equal to the first loop's")(
      "make-model", po::value(&a.make_model)->value_name("FILE"),
      "Write seeded weights (the tests' generator) to FILE.safetensors and exit")(
      "config", po::value(&a.config_name)->value_name("dev|tiny"),
      "--make-model: FLUX.1-dev's sizes or the tests' tiny model (default dev)")(
      "dtype", po::value(&a.dtype_name)->value_name("f32|bf16"),
      "--make-model: weight dtype (default bf16)")(
      "make-lora", po::value(&a.make_lora)->value_name("FILE"),
      "With --model: write a seeded LoRA (PEFT naming, bf16) over every attention and MLP linear "
      "of the model to FILE.safetensors and exit")(
      "lora-rank", po::value(&a.lora_rank)->value_name("R"),
      "--make-lora: the rank (default 64)")("no-environment", "Ignore every DDO_* variable");
}

/// --axes A,B,C: three whole numbers.
/// @throws ddo::usage_error naming the option and what is expected.
inline std::array<int, 3> parse_axes(const std::string& text) {
  std::array<int, 3> axes{};
  std::stringstream in(text);
  std::string part;
  std::size_t n = 0;
  while (std::getline(in, part, ',')) {
    if (n == 3) break;
    try {
      std::size_t used = 0;
      axes[n] = std::stoi(part, &used);
      if (used != part.size()) throw std::invalid_argument(part);
    } catch (const std::exception&) {
      throw ddo::usage_error("--axes = \"" + text + "\": \"" + part + "\" is not a whole number");
    }
    ++n;
  }
  if (n != 3 || std::getline(in, part, ','))
    throw ddo::usage_error("--axes = \"" + text + "\": three numbers are expected (e.g. 16,56,56)");
  return axes;
}

/// --config dev|tiny (--make-model).
inline flux::config named_config(const std::string& name) {
  if (name == "dev") return flux::config{};
  if (name == "tiny") return flux::tiny_config();
  throw ddo::usage_error("--config '" + name + "' is not one of dev, tiny");
}

/// One --resolutions entry.
struct resolution {
  int width = 0, height = 0;
};

/// --resolutions 1024x1024,2048x2048,...: each side a multiple of 16 in 16..16384.
/// @throws ddo::usage_error naming the option, the entry and what is allowed.
inline std::vector<resolution> parse_resolutions(const std::string& text) {
  std::vector<resolution> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string part = text.substr(begin, end - begin);
    const auto bad = [&](const std::string& why) {
      return ddo::usage_error("--resolutions " + text + ": \"" + part + "\" " + why +
                              "; give WIDTHxHEIGHT pairs, each side a multiple of 16 in "
                              "16..16384 (e.g. 1024x1024,2048x2048,1024x1024)");
    };
    const std::size_t x = part.find('x');
    if (x == std::string::npos) throw bad("is not WIDTHxHEIGHT");
    int sides[2] = {0, 0};
    const std::string texts[2] = {part.substr(0, x), part.substr(x + 1)};
    for (int i = 0; i < 2; ++i) {
      const auto& s = texts[i];
      if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos)
        throw bad("is not WIDTHxHEIGHT in whole pixels");
      sides[i] = std::stoi(s);
      if (sides[i] < 16 || sides[i] > 16384 || sides[i] % 16 != 0)
        throw bad("has a side outside the allowed ones");
    }
    out.push_back({sides[0], sides[1]});
    begin = end + 1;
  }
  return out;
}

/// --resolutions runs the eager streamed loop per phase and prints its table: no other image
/// size and none of the modes. @throws ddo::usage_error naming the option given with it.
inline void check_resolutions_alone(const po::variables_map& vm, const arguments& a) {
  if (a.resolutions.empty()) return;
  (void)parse_resolutions(a.resolutions);
  const flux::run_modes& m = a.modes;
  const std::pair<bool, const char*> others[] = {
      {vm.count("width") != 0, "--width"},
      {vm.count("height") != 0, "--height"},
      {m.check, "--check"},
      {m.graph, "--graph"},
      {m.output, "--output"},
      {m.trace, "--trace"},
      {m.profile, "--profile"},
      {m.json, "--json"},
      {!m.capacity_profile.empty(), "--capacity-profile"}};
  for (const auto& [given, name] : others)
    if (given)
      throw ddo::usage_error(std::string("--resolutions runs its phases' eager streamed loop "
                                         "and prints their table; not with ") +
                             name + " (each phase's size is --resolutions')");
}

/// A run's arguments checked before any work (after --help and --make-model, which need none of
/// these): the modes' combinations (flux/flux_modes.hpp), an unwritable trace path, the image's
/// sides and the card.
/// @throws ddo::usage_error naming the option and what is allowed.
inline void check_run_arguments(const po::variables_map& vm, arguments& a) {
  if (a.models.empty())
    throw ddo::usage_error("--model is required (or --make-model to write one)");
  flux::run_modes& modes = a.modes;
  modes.max_slowdown_given = vm.count("max-slowdown") != 0;
  modes.card_step_given = vm.count("card-step-gb") != 0;
  modes.output = !a.output.empty();
  modes.json = !a.json.empty();
  modes.trace = !a.trace_path.empty();
  flux::check_run_modes(modes);
  // An unwritable trace path is said now, not after the run.
  if (modes.trace) ddo::check_output_path(a.trace_path, "trace file");
  for (auto [v, name] : {std::pair{static_cast<int>(a.width), "--width"},
                         std::pair{static_cast<int>(a.height), "--height"}})
    if (v % 16 != 0)
      throw ddo::usage_error(std::string(name) + " must be a multiple of 16 in 16..16384, got " +
                             std::to_string(v));
  check_resolutions_alone(vm, a);
  if (!(a.vram_gib > 0.0) || a.vram_gib > 65536.0)
    throw ddo::usage_error("--vram-gb must be greater than 0 and at most 65536");
}

}  // namespace ddo_flux
