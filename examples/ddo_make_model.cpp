// SPDX-License-Identifier: Apache-2.0
// ddo-make-model: writes a synthetic DiT-like (Flux-like) safetensors model with random non-zero
// values, for tests, the runner and the benchmarks.
//
//   ddo-make-model --output PATH [--blocks N] [--hidden H] [--mlp-ratio R]
//                  [--dtype bf16|fp16|fp32] [--shards K] [--seed S]
//
// With --shards K > 1, PATH names the index (e.g. model.safetensors.index.json) and the shards
// are written next to it as <stem>-0000i-of-0000K.safetensors.

#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

#include "ddo/model/synthetic_model.hpp"
#include "ddo/plan/format_bytes.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  ddo::synthetic_model_options options;
  std::string type_name = "bf16";
  po::options_description description(
      "ddo-make-model: write a synthetic Flux-like safetensors model (random, never zero)\n"
      "Options");
  description.add_options()("help,h", "show this help")(
      "output,o", po::value<std::string>(&options.output)->required(),
      "the .safetensors file to write (with --shards > 1: the .safetensors.index.json)")(
      "blocks", po::value<std::uint32_t>(&options.blocks)->default_value(24), "transformer blocks")(
      "hidden", po::value<std::uint32_t>(&options.hidden)->default_value(3072), "hidden size")(
      "mlp-ratio", po::value<std::uint32_t>(&options.mlp_ratio)->default_value(4),
      "MLP width as a multiple of the hidden size")(
      "dtype", po::value<std::string>(&type_name)->default_value("bf16"), "bf16, fp16 or fp32")(
      "shards", po::value<std::uint32_t>(&options.shards)->default_value(1),
      "number of shard files (> 1 writes an index)")(
      "seed", po::value<std::uint64_t>(&options.seed)->default_value(0), "random seed");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, description), vm);
    if (vm.count("help") != 0) {
      std::cout << description << "\n";
      return 0;
    }
    po::notify(vm);
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
    if (options.shards > 1 && !options.output.ends_with(".index.json")) {
      std::cerr << "ddo-make-model: with --shards " << options.shards
                << ", --output must name the index file (ending in .index.json), got '"
                << options.output << "'\n";
      return 2;
    }
  } catch (const po::error& e) {
    std::cerr << "ddo-make-model: " << e.what() << "\n\n" << description << "\n";
    return 2;
  }

  try {
    const auto start = std::chrono::steady_clock::now();
    const auto result = ddo::write_synthetic_model(options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("wrote %zu tensors, %s (%llu bytes) in %zu file%s in %.2f s (%.2f GB/s)\n",
                result.tensors, ddo::format_bytes(result.tensor_bytes).c_str(),
                static_cast<unsigned long long>(result.tensor_bytes), result.files.size(),
                result.files.size() == 1 ? "" : "s", seconds,
                static_cast<double>(result.tensor_bytes) / 1e9 / (seconds > 0 ? seconds : 1e-9));
    for (const auto& f : result.files) std::printf("  %s\n", f.c_str());
    if (!result.index.empty()) std::printf("  index: %s\n", result.index.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ddo-make-model: " << e.what() << "\n";
    return 1;
  }
}
