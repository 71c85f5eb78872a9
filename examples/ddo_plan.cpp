// SPDX-License-Identifier: Apache-2.0
// ddo-plan: prints the offload plan ddo makes for a model on a machine.
//
//   ddo-plan MODEL... [--ddo-* flags] [--config F] [--vram-gb X] [--ram-gb Y]
//            [--slot-gb Z] [--wsl] [--no-environment] [--format text|toml|json]
//
// MODEL is a .safetensors file or a sharded model's .safetensors.index.json (several may be
// given: one table). Settings resolve as everywhere in ddo: preset < --config TOML < DDO_*
// environment < --ddo-* flags. --vram-gb / --ram-gb / --wsl stand in for the machine, so plans for
// other machines can be inspected; without them the GPU (if any) and /proc are probed.

#include <cuda_runtime_api.h>

#include <boost/program_options.hpp>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "ddo/cli/dynamic_offload_arguments.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/config/toml_source.hpp"
#include "ddo/memory/system_probe.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/plan/plan_format.hpp"
#include "ddo/plan/planner.hpp"

namespace po = boost::program_options;

namespace {

constexpr int exit_error = 1;
constexpr int exit_usage = 2;

/// Free and total memory of device 0, or zeros (unknown) when there is no usable GPU.
std::pair<std::uint64_t, std::uint64_t> probe_vram(std::string& note) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    note = "no CUDA device: VRAM unknown (give --vram-gb to plan for a GPU)";
    return {0, 0};
  }
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    note = "cudaMemGetInfo failed: VRAM unknown (give --vram-gb)";
    return {0, 0};
  }
  note = "VRAM of device 0 as probed now";
  return {free, total};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  std::string config_path;
  std::string format_name = "text";
  double vram_gb = 0.0;
  double ram_gb = 0.0;
  double slot_gb = 0.0;

  po::options_description general("ddo-plan MODEL... [options]\nOptions");
  general.add_options()("help,h", "show this help")(
      "config", po::value<std::string>(&config_path)->value_name("FILE"),
      "TOML config file (ranks below DDO_* variables and --ddo-* flags)")(
      "vram-gb", po::value<double>(&vram_gb)->value_name("GiB"),
      "plan for a GPU with this much free (and total) memory instead of probing")(
      "ram-gb", po::value<double>(&ram_gb)->value_name("GiB"),
      "plan for this much available system RAM instead of probing")(
      "slot-gb", po::value<double>(&slot_gb)->value_name("GiB"),
      "the transport's slot/staging size: refuse groups that stream more (default: unconstrained)")(
      "wsl", "plan as if running under WSL")("no-environment",
                                             "ignore DDO_* environment variables")(
      "format", po::value<std::string>(&format_name)->value_name("FORMAT"), "text, toml or json");
  po::options_description ddo_flags("ddo settings");
  ddo::add_dynamic_offload_arguments(ddo_flags);
  po::options_description hidden;
  hidden.add_options()("model", po::value<std::vector<std::string>>(&models));
  po::options_description all;
  all.add(general).add(ddo_flags).add(hidden);
  po::options_description visible;
  visible.add(general).add(ddo_flags);
  po::positional_options_description positional;
  positional.add("model", -1);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "ddo-plan: " << ddo::describe_cli_error(e, all) << "\n";
    return exit_usage;
  }
  if (vm.count("help") != 0) {
    std::cout << visible << "\n";
    return 0;
  }
  ddo::plan_format format = ddo::plan_format::text;
  if (format_name == "toml")
    format = ddo::plan_format::toml;
  else if (format_name == "json")
    format = ddo::plan_format::json;
  else if (format_name != "text") {
    std::cerr << "ddo-plan: --format '" << format_name << "' is not one of text, toml, json\n";
    return exit_usage;
  }
  if (models.empty()) {
    std::cerr << "ddo-plan: give at least one MODEL (.safetensors or .safetensors.index.json); "
                 "ddo-make-model writes one\n";
    return exit_usage;
  }
  for (const char* flag : {"vram-gb", "ram-gb", "slot-gb"})
    if (vm.count(flag) != 0 && !(vm[flag].as<double>() > 0.0)) {
      std::cerr << "ddo-plan: --" << flag << " must be a positive size in GiB\n";
      return exit_usage;
    }

  try {
    ddo::weight_table table = ddo::load_safetensors(models);

    ddo::resolve_inputs inputs;
    if (!config_path.empty()) inputs.toml = ddo::read_toml_config(config_path);
    inputs.use_environment = vm.count("no-environment") == 0;
    inputs.cli = ddo::cli_config_layer(vm);
    inputs.model_bytes = table.total_bytes();
    if (ram_gb > 0.0) inputs.detected_ram_gb = ram_gb;
    if (vm.count("wsl") != 0) inputs.running_on_wsl = true;
    const ddo::dynamic_offload_settings settings = ddo::resolve_settings(inputs);
    if (settings.config.load_safetensors_backend != ddo::safetensors_backend::library_default)
      table = ddo::load_safetensors(models, settings.config.load_safetensors_backend);

    ddo::machine_capacity machine;
    std::string vram_note;
    if (vram_gb > 0.0) {
      machine.free_vram_bytes = machine.total_vram_bytes = ddo::gib_to_bytes(vram_gb);
      vram_note = "VRAM as given by --vram-gb";
    } else {
      std::tie(machine.free_vram_bytes, machine.total_vram_bytes) = probe_vram(vram_note);
    }
    machine.available_ram_bytes =
        ram_gb > 0.0 ? ddo::gib_to_bytes(ram_gb) : ddo::available_ram_bytes().value_or(0);
    machine.running_on_wsl = settings.running_on_wsl;
    machine.disable_pin_on_wsl = settings.disable_pin_on_wsl;
    machine.max_group_bytes = ddo::gib_to_bytes(slot_gb);

    const ddo::offload_plan plan = ddo::make_plan(table, settings.config, machine);
    if (format == ddo::plan_format::text) {
      std::printf("model: %zu tensors in %zu file(s), %s\n", table.size(), table.files().size(),
                  ddo::format_bytes(table.total_bytes()).c_str());
      std::printf("preset: requested %s, effective %s%s%s\n", settings.requested_preset.c_str(),
                  settings.effective_preset.c_str(), settings.preset_reason.empty() ? "" : " — ",
                  settings.preset_reason.c_str());
      std::printf("pinning: requested %s, effective %s%s; %s\n",
                  settings.requested_pin_cpu_memory ? "on" : "off",
                  settings.effective_pin_cpu_memory ? "on" : "off",
                  settings.running_on_wsl ? " (WSL)" : "", vram_note.c_str());
      for (const auto& w : settings.warnings) std::printf("warning: %s\n", w.c_str());
    }
    std::fputs(ddo::format_plan(plan, table, format).c_str(), stdout);
    return 0;
  } catch (const ddo::config_error& e) {
    std::cerr << "ddo-plan: invalid setting (" << e.source() << " " << e.key() << "): " << e.what()
              << "\n";
    return exit_usage;
  } catch (const std::exception& e) {
    std::cerr << "ddo-plan: " << e.what() << "\n";
    return exit_error;
  }
}
