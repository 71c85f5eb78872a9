// SPDX-License-Identifier: Apache-2.0
// ddo-make-model: writes a synthetic DiT-like or Flux-like safetensors model with random non-zero
// values, for tests, the runner and the benchmarks.
//
//   ddo-make-model --output PATH [--shape dit|flux] [--blocks N] [--single-blocks M]
//                  [--hidden H] [--mlp-ratio R] [--dtype bf16|fp16|fp32] [--shards K] [--seed S]
//                  [--layout execution|diffusers] [--max-shard-bytes N]
//
// --shape flux writes FLUX.1's layout (ddo::flux_model_options): 19 double-stream blocks
// (--blocks) and 38 single-stream blocks (--single-blocks; default twice --blocks), ≈ 23.8 GB.
//
// With --shards K > 1, PATH names the index (e.g. model.safetensors.index.json) and the shards
// are written next to it as <stem>-0000i-of-0000K.safetensors.
//
// --layout diffusers (--shape flux): PATH is a folder written as diffusers publishes FLUX.1-dev's
// transformer/ (ddo::synthetic_layout): FluxTransformer2DModel's state-dict order split at
// --max-shard-bytes (default 10^10, diffusers' "10GB": at FLUX.1's sizes the published 3 shards),
// names sorted within each file, diffusion_pytorch_model-0000i-of-0000K.safetensors and
// diffusion_pytorch_model.safetensors.index.json (one shard: diffusion_pytorch_model.safetensors).
//
// Files are written aside (a temporary directory next to the output) and renamed into place —
// the shards first, the index last — so a failed or interrupted run never leaves a truncated
// model where a good one was; SIGINT/SIGTERM remove the temporary, and the temporaries of a
// killed process are removed at the next start. A model that would not fit on the disk is
// refused with the numbers before anything is written.

#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <limits>
#include <string>

#include "ddo/core/atomic_file.hpp"
#include "ddo/core/standard_output.hpp"
#include "ddo/core/text.hpp"
#include "ddo/model/synthetic_model.hpp"
#include "ddo/plan/format_bytes.hpp"
#include "runner/interrupt_cleanup.hpp"
#include "runner/synthetic_options.hpp"

namespace po = boost::program_options;

using ddo::runner::blocks_option;
using ddo::runner::hidden_option;
using ddo::runner::mlp_ratio_option;
using ddo::runner::seed_option;
using ddo::runner::shards_option;

int main(int argc, char** argv) {
  ddo::runner::interrupt_cleanup interrupts("ddo-make-model");
  ddo::synthetic_model_options options;
  std::string type_name = "bf16";
  std::string shape_name = "dit";
  blocks_option blocks{24};
  blocks_option single_blocks{38};
  hidden_option hidden{3072};
  mlp_ratio_option mlp_ratio{4};
  shards_option shards{1};
  seed_option seed{0};
  std::string layout_name = "execution";
  std::uint64_t max_shard_bytes = ddo::diffusers_max_shard_bytes;
  po::options_description description(
      "ddo-make-model: write a synthetic Flux-like safetensors model (random, never zero)\n"
      "Options");
  description.add_options()("help,h", "show this help")(
      "output,o", po::value<std::string>(&options.output)->required(),
      "the .safetensors file to write (with --shards > 1: the .safetensors.index.json)")(
      "shape", po::value<std::string>(&shape_name)->default_value("dit"),
      "dit (one kind of block) or flux (double- and single-stream blocks, as FLUX.1)")(
      "blocks", po::value(&blocks), "transformer blocks; with --shape flux the double-stream "
      "blocks (1-4096; default 24, flux 19)")(
      "single-blocks", po::value(&single_blocks),
      "--shape flux: single-stream blocks (1-4096; default twice --blocks)")(
      "hidden", po::value(&hidden)->default_value(hidden), "hidden size (1-65536)")(
      "mlp-ratio", po::value(&mlp_ratio)->default_value(mlp_ratio),
      "MLP width as a multiple of the hidden size (1-64)")(
      "dtype", po::value<std::string>(&type_name)->default_value("bf16"), "bf16, fp16 or fp32")(
      "shards", po::value(&shards)->default_value(shards),
      "number of shard files (> 1 writes an index; 1-1024)")(
      "seed", po::value(&seed)->default_value(seed), "random seed")(
      "layout", po::value<std::string>(&layout_name)->default_value(layout_name),
      "execution (execution order, --shards files of equal bytes) or diffusers (--shape flux: "
      "--output is a folder laid out as FLUX.1-dev's published transformer/)")(
      "max-shard-bytes", po::value(&max_shard_bytes),
      "--layout diffusers: start a new shard when the next tensor would pass this size "
      "(default 10000000000, diffusers' 10GB)");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, description), vm);
    if (vm.count("help") != 0) {
      std::cout << description << "\n";
      ddo::flush_standard_output();
      return 0;
    }
    po::notify(vm);
    if (shape_name == "flux") {
      options.shape = ddo::synthetic_shape::flux;
      options.blocks = vm.count("blocks") != 0 ? static_cast<std::uint32_t>(blocks) : 19u;
      options.single_blocks = vm.count("single-blocks") != 0
                                  ? static_cast<std::uint32_t>(single_blocks)
                                  : (vm.count("blocks") != 0 ? 2 * options.blocks : 38u);
    } else if (shape_name == "dit") {
      if (vm.count("single-blocks") != 0) {
        std::cerr << "ddo-make-model: --single-blocks needs --shape flux (the dit shape has one "
                     "kind of block)\n";
        return 2;
      }
      options.blocks = blocks;
    } else {
      std::cerr << "ddo-make-model: --shape '" << shape_name << "' is not one of dit, flux\n";
      return 2;
    }
    options.hidden = hidden;
    options.mlp_ratio = mlp_ratio;
    options.shards = shards;
    options.seed = seed;
    if (type_name == "bf16")
      options.type = ddo::dtype::bf16;
    else if (type_name == "fp16" || type_name == "f16")
      options.type = ddo::dtype::f16;
    else if (type_name == "fp32" || type_name == "f32")
      options.type = ddo::dtype::f32;
    else {
      std::cerr << "ddo-make-model: --dtype '" << type_name << "' is not one of bf16, fp16, fp32\n";
      return 2;
    }
    if (layout_name == "diffusers") {
      options.layout = ddo::synthetic_layout::diffusers;
      if (options.shape != ddo::synthetic_shape::flux) {
        std::cerr << "ddo-make-model: --layout diffusers is FluxTransformer2DModel's layout; it "
                     "needs --shape flux\n";
        return 2;
      }
      if (vm.count("shards") != 0 && !vm["shards"].defaulted()) {
        std::cerr << "ddo-make-model: --layout diffusers splits at --max-shard-bytes; --shards "
                     "applies to --layout execution\n";
        return 2;
      }
      if (max_shard_bytes == 0) {
        std::cerr << "ddo-make-model: --max-shard-bytes must be at least 1, got 0\n";
        return 2;
      }
      options.shard_max_bytes = max_shard_bytes;
    } else if (layout_name != "execution") {
      std::cerr << "ddo-make-model: --layout '" << layout_name
                << "' is not one of execution, diffusers\n";
      return 2;
    } else if (vm.count("max-shard-bytes") != 0) {
      std::cerr << "ddo-make-model: --max-shard-bytes applies to --layout diffusers\n";
      return 2;
    }
    if (options.layout == ddo::synthetic_layout::execution && options.shards > 1 &&
        !options.output.ends_with(".index.json")) {
      std::cerr << "ddo-make-model: with --shards " << options.shards
                << ", --output must name the index file (ending in .index.json), got '"
                << options.output << "'\n";
      return 2;
    }
  } catch (const po::error& e) {
    std::cerr << "ddo-make-model: " << ddo::sanitize_utf8(e.what()) << "\n\n"
              << description << "\n";
    return 2;
  }

  try {
    const bool folder = options.layout == ddo::synthetic_layout::diffusers;
    if (folder) std::filesystem::create_directories(options.output);
    // The diffusers layout's files go into the folder; the index (or the one file) is the target.
    const std::filesystem::path target =
        folder ? std::filesystem::absolute(options.output) / ddo::diffusers_index_name
               : std::filesystem::absolute(options.output);
    const auto dir = target.parent_path();
    ddo::check_output_path(target, "model");
    interrupts.watch(dir);
    ddo::remove_stale_temporaries(dir);
    std::uint64_t bytes = 0;
    for (const auto& spec : ddo::synthetic_model_specs(options)) bytes += spec.bytes();
    ddo::require_free_space(dir, bytes + bytes / 100 + (1u << 20), "model '" + target.string() + "'");

    // Written into a temporary directory beside the output, then moved into place file by file.
    const auto temporary = ddo::temporary_path_for(target);
    std::filesystem::create_directory(temporary);
    auto aside = options;
    aside.output = folder ? temporary.string() : (temporary / target.filename()).string();
    const auto start = std::chrono::steady_clock::now();
    ddo::synthetic_model_result result;
    try {
      result = ddo::write_synthetic_model(aside);
      for (auto& f : result.files) {
        const auto name = std::filesystem::path(f).filename();
        ddo::commit_temporary(f, dir / name);
        f = (dir / name).string();
      }
      if (!result.index.empty()) {
        ddo::commit_temporary(result.index, target);
        result.index = target.string();
      } else if (folder) {
        // One shard and no index: a stale index of an earlier sharded run would name files
        // that are not this model's.
        std::filesystem::remove(target);
      }
    } catch (...) {
      std::error_code ignore;
      std::filesystem::remove_all(temporary, ignore);
      throw;
    }
    std::error_code ignore;
    std::filesystem::remove_all(temporary, ignore);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("wrote %zu tensors, %s (%llu bytes) in %zu file%s in %.2f s (%.2f GB/s)\n",
                result.tensors, ddo::format_bytes(result.tensor_bytes).c_str(),
                static_cast<unsigned long long>(result.tensor_bytes), result.files.size(),
                result.files.size() == 1 ? "" : "s", seconds,
                static_cast<double>(result.tensor_bytes) / 1e9 / (seconds > 0 ? seconds : 1e-9));
    for (const auto& f : result.files) std::printf("  %s\n", f.c_str());
    if (!result.index.empty()) std::printf("  index: %s\n", result.index.c_str());
    ddo::flush_standard_output();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ddo-make-model: " << ddo::sanitize_utf8(e.what()) << "\n";
    return 1;
  }
}
