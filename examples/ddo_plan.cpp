// SPDX-License-Identifier: Apache-2.0
// ddo-plan: prints the offload plan ddo makes for a model on a machine — for the same inputs,
// exactly the plan ddo-run runs (both go through ddo/setup/setup.hpp with the inputs of
// examples/runner/run_setup.hpp).
//
//   ddo-plan MODEL... [--ddo-* flags] [--config F] [--vram-gb X] [--ram-gb Y] [--tokens T |
//            --reserve-gb R] [--slot-gb Z] [--wsl] [--no-environment] [--format text|toml|json]
//            [--profile NAME [--max-slowdown X]]
//
// MODEL is a .safetensors file or a sharded model's .safetensors.index.json (several may be
// given: one table). Settings resolve as everywhere in ddo: preset < --config TOML < DDO_*
// environment < --ddo-* flags, for the component "transformer" (its route: DDO_TRANSFORMER_ROUTE).
// The machine: --vram-gb is the card, as in ddo-run (examples/runner/vram_budget.hpp): on a GPU
// the linear transport capped at the card minus the CUDA context measured at start (default a
// 12 GiB card; `device`: the whole GPU), without one a host_sim device of that size (default
// ddo-run's). The engine's reserve: --reserve-gb, or what ddo-run reserves for --tokens rows
// (default as ddo-run's) of the model's width (activations; on a GPU the cuBLAS workspace too).
// --profile NAME plans with the overlap-aware residency planner from capacity profile NAME's
// timings (at --tokens, default as ddo-run's) and prints the predicted step with the reason for
// every group; --max-slowdown X also prints the smallest resident budget predicted within X
// times the all-resident step, and what first / spread / largest need (runner/overlap_report.hpp).

#include <boost/program_options.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "ddo/cli/dynamic_offload_arguments.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/config/toml_source.hpp"
#include "ddo/core/standard_output.hpp"
#include "ddo/core/text.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/plan/plan_format.hpp"
#include "ddo/platform/cuda_device.hpp"
#include "ddo/platform/cuda_driver.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "runner/overlap_report.hpp"
#include "runner/run_setup.hpp"
#include "runner/vram_budget.hpp"

namespace po = boost::program_options;

namespace {

constexpr int exit_error = 1;
constexpr int exit_usage = 2;

/// Whether device 0 is a usable CUDA device (ddo-run's choice between linear and host_sim),
/// through ddo's one probe.
bool have_gpu() { return ddo::probe_cuda_device(0).available; }

/// The text plan's header: the model, the preset, pinning, the machine the plan sees (its RAM and
/// where that figure came from), the VMM route, the setup's notes and the settings' warnings.
void print_text_header(const ddo::weight_table& table, const std::string& preset_line,
                       const ddo::dynamic_offload_settings& settings, const std::string& vram_note,
                       const auto& setup, const std::vector<std::string>& notes) {
  std::printf("model: %zu tensors in %zu file(s), %s\n", table.size(), table.files().size(),
              ddo::format_bytes(table.total_bytes()).c_str());
  std::printf("%s\n", preset_line.c_str());
  std::printf("pinning: requested %s, effective %s%s; %s\n",
              settings.requested_pin_cpu_memory ? "on" : "off",
              settings.effective_pin_cpu_memory ? "on" : "off",
              settings.running_on_wsl ? " (WSL)" : "", vram_note.c_str());
  const auto& m = setup.machine;
  std::printf("route: %s; machine the plan sees: device %s free of %s - ring %zu x %s - "
              "engine reserve %s - ddo reserve %s = %s; RAM %s (%s)\n",
              std::string(ddo::to_string(setup.component.route)).c_str(),
              ddo::format_bytes(m.device.free_bytes).c_str(),
              ddo::format_bytes(m.device.total_bytes).c_str(), m.slots,
              ddo::format_bytes(m.slot_bytes).c_str(),
              ddo::format_bytes(m.engine_reserve_bytes).c_str(),
              ddo::format_bytes(m.runtime_reserve_bytes).c_str(),
              ddo::format_bytes(m.capacity.free_vram_bytes).c_str(),
              ddo::format_bytes(m.capacity.available_ram_bytes).c_str(),
              ddo::describe(m.ram).c_str());
  if (!m.profile_note.empty()) std::printf("%s\n", m.profile_note.c_str());
  if (const auto vmm = ddo::vmm_route_name(settings.config); !vmm.empty())
    std::printf("VMM route: %s (%s)\n", std::string(vmm).c_str(),
                vmm == "vmm_fast_runtime" ? "native: registered windows, retained sources"
                                          : "legacy: two pinned staging buffers");
  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
  for (const auto& w : settings.warnings) std::printf("warning: %s\n", w.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  std::string config_path;
  std::string format_name = "text";
  std::string vram_text;
  std::string ram_text;
  double vram_gb = 0.0;
  double ram_gb = 0.0;
  double slot_gb = 0.0;
  double reserve_gb = 0.0;
  std::int64_t tokens = 0;
  std::string profile_name;
  double max_slowdown = 0.0;

  po::options_description general("ddo-plan MODEL... [options]\nOptions");
  general.add_options()("help,h", "show this help")(
      "config", po::value<std::string>(&config_path)->value_name("FILE"),
      "TOML config file (ranks below DDO_* variables and --ddo-* flags)")(
      "vram-gb", po::value<std::string>(&vram_text)->value_name("GiB|device"),
      "the card to plan for, as ddo-run --vram-gb: on a GPU the card minus the CUDA context "
      "(default 12; 'device': the whole GPU), without one a host_sim device of this size")(
      "tokens", po::value<std::int64_t>(&tokens)->value_name("T"),
      "reserve the activations of T rows of the model's width, as ddo-run --tokens (default: "
      "ddo-run's, 4096 on a GPU, 8 on host_sim)")(
      "reserve-gb", po::value<double>(&reserve_gb)->value_name("GiB"),
      "device memory to leave to the engine (activations, workspaces) instead of --tokens")(
      "ram-gb", po::value<std::string>(&ram_text)->value_name("GiB"),
      "plan for this much available system RAM instead of probing")(
      "slot-gb", po::value<double>(&slot_gb)->value_name("GiB"),
      "the transport's slot/staging size: refuse groups that stream more (default: unconstrained)")(
      "wsl", "plan as if running under WSL")("no-environment",
                                             "ignore DDO_* environment variables")(
      "format", po::value<std::string>(&format_name)->value_name("FORMAT"), "text, toml or json")(
      "profile", po::value<std::string>(&profile_name)->value_name("NAME"),
      "plan with the overlap-aware planner from capacity profile NAME (sets profile_name) and "
      "print the predicted step")(
      "max-slowdown", po::value<double>(&max_slowdown)->value_name("X"),
      "with --profile: print the smallest resident budget predicted within X times the "
      "all-resident step (e.g. 1.02)");
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
    ddo::flush_standard_output();
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
  if (vm.count("tokens") != 0 && vm.count("reserve-gb") != 0) {
    std::cerr << "ddo-plan: give --tokens or --reserve-gb, not both\n";
    return exit_usage;
  }
  if (vm.count("tokens") != 0 && (tokens < 1 || tokens > (1 << 20))) {
    std::cerr << "ddo-plan: --tokens must be 1..1048576, got " << tokens << "\n";
    return exit_usage;
  }
  const bool vram_device = vram_text == "device";
  try {
    // Given is given: an empty --vram-gb "" or --ram-gb "" is refused as ddo-run refuses it
    // (the same parsers), never read as "not given".
    if (vm.count("vram-gb") != 0 && !vram_device) {
      const auto sizes = ddo::runner::parse_size_list_gib(vram_text, "--vram-gb");
      if (sizes.size() > 1) {
        std::cerr << "ddo-plan: --vram-gb " << vram_text
                  << ": ddo-plan plans one card; a sweep is ddo-run --compare --vram-gb "
                  << vram_text << "\n";
        return exit_usage;
      }
      vram_gb = sizes.front();
    }
    if (vm.count("ram-gb") != 0) ram_gb = ddo::runner::parse_size_gib(ram_text, "--ram-gb");
  } catch (const ddo::usage_error& e) {
    std::cerr << "ddo-plan: " << e.what() << "\n";
    return exit_usage;
  }
  if (vm.count("max-slowdown") != 0 && (profile_name.empty() || !(max_slowdown >= 1.0) ||
                                        max_slowdown > 1000.0)) {
    std::cerr << "ddo-plan: --max-slowdown needs --profile NAME and a factor >= 1 (1.02: 2% "
                 "slower than all-resident)\n";
    return exit_usage;
  }
  for (const char* flag : {"slot-gb", "reserve-gb"})
    if (vm.count(flag) != 0 && !(vm[flag].as<double>() > 0.0)) {
      std::cerr << "ddo-plan: --" << flag << " must be a positive size in GiB\n";
      return exit_usage;
    }

  // Said on a refusal too: which preset auto chose, and from which RAM figure.
  std::string preset_line;
  try {
    ddo::weight_table table = ddo::load_safetensors(models);

    ddo::resolve_inputs inputs;
    if (!config_path.empty()) inputs.toml = ddo::read_toml_config(config_path);
    inputs.use_environment = vm.count("no-environment") == 0;
    inputs.cli = ddo::cli_config_layer(vm);
    inputs.component = ddo::runner::run_component;
    inputs.model_bytes = table.total_bytes();
    if (ram_gb > 0.0) inputs.stated_ram_bytes = ddo::gib_to_bytes(ram_gb);  // decides auto
    if (vm.count("wsl") != 0) inputs.running_on_wsl = true;
    inputs.vmm_supported = ddo::probe_vmm_supported(0);  // for preset auto (ddo-run does the same)
    if (!profile_name.empty()) inputs.overrides.emplace_back(ddo::field_id::profile_name, profile_name);
    // The --ddo-* flags are the reference's CLI helper, as in ddo-run (same defaults, same plan).
    ddo::add_cli_helper_defaults(
        inputs, vram_gb > 0.0 ? std::min(vram_gb, ddo::cli_default_vmm_resident_weight_budget_gb)
                              : ddo::cli_default_vmm_resident_weight_budget_gb);
    const ddo::dynamic_offload_settings settings = ddo::resolve_settings(inputs);
    preset_line = "preset: requested " + settings.requested_preset + ", effective " +
                  settings.effective_preset +
                  (settings.preset_reason.empty() ? "" : " — " + settings.preset_reason);
    if (settings.config.load_safetensors_backend != ddo::safetensors_backend::library_default)
      table = ddo::load_safetensors(models, settings.config.load_safetensors_backend);

    // The machine and the reserve exactly as ddo-run states them.
    const bool gpu = settings.config.backend != ddo::offload_backend::host_sim && have_gpu();
    std::uint64_t context = 0;
    if (gpu) {
      const auto memory = ddo::query_device_memory(0);
      context = memory.total_bytes - memory.free_bytes;
    }
    const std::int64_t run_tokens = tokens > 0 ? tokens : ddo::runner::default_tokens(gpu);
    const std::uint64_t reserve =
        reserve_gb > 0.0 ? ddo::gib_to_bytes(reserve_gb)
                         : ddo::runner::engine_reserve_bytes(run_tokens, ddo::runner::compute_shape_of(table), gpu);
    auto options = ddo::runner::run_setup_options(
        inputs, reserve,
        ram_gb > 0.0 ? std::optional<std::uint64_t>(ddo::gib_to_bytes(ram_gb)) : std::nullopt);
    options.max_group_bytes = ddo::gib_to_bytes(slot_gb);
    options.tokens = static_cast<std::uint64_t>(run_tokens);
    std::string vram_note;
    const std::string device_name = gpu ? ddo::query_device_name(0) : std::string();
    if (!profile_name.empty())  // --profile: the profile must exist, with group timings
      ddo::runner::require_group_timings(settings, profile_name, table, device_name,
                                         static_cast<std::uint64_t>(run_tokens), models);
    // The machine as ddo-run states it: on a GPU the emulated card (or the device), without
    // one host_sim standing in for it.
    options.simulate_device = !gpu;
    if (gpu) {
      if (!vram_device) {
        const ddo::runner::vram_budget card{
            ddo::gib_to_bytes(vram_gb > 0.0 ? vram_gb : ddo::runner::default_gpu_vram_gib), context,
            reserve};
        options.device_limit_bytes = card.ddo_limit_bytes(ddo::runtime_device_reserve_bytes);
        vram_note = "an emulated " + ddo::format_bytes(card.vram_bytes) + " card on device " +
                    settings.config.execution_device + " (CUDA context " +
                    ddo::format_bytes(context) + " measured now)";
      } else {
        vram_note = "device " + settings.config.execution_device + " as probed now";
      }
    } else {
      const std::uint64_t card = vram_gb > 0.0 ? ddo::gib_to_bytes(vram_gb)
                                               : ddo::runner::default_sim_device_bytes(table, settings, reserve);
      options.host_sim.device_capacity_bytes =
          ddo::runner::vram_budget{card, 0, reserve}.ddo_limit_bytes(
              ddo::runtime_device_reserve_bytes);
      vram_note = vram_gb > 0.0 ? "host_sim device of --vram-gb"
                                : "no GPU: ddo-run's default host_sim device";
    }
    // The one call (ddo/setup/prepare_offload.hpp), as ddo-run and enable_offload take it:
    // the transport `backend` chooses, the planner by profile, the plan; nothing is started.
    std::optional<ddo::runner::overlap_timings> overlap;
    std::vector<std::string> notes;
    ddo::offload_setup setup =
        ddo::with_prepared_offload<>(table, settings, options, [&](auto& prepared) {
          overlap = prepared.profile;
          return std::move(prepared.setup);
        });
    // The stored profile's note is printed after the plan, with its prediction.
    for (auto& n : setup.notes)
      if (!overlap || n != overlap->note) notes.push_back(std::move(n));
    const ddo::offload_plan& plan = setup.plan;
    if (format == ddo::plan_format::text && (vram_gb > 0.0 || gpu))
      std::printf("note: %s\n", ddo::runner::emulation_caveat);
    if (format == ddo::plan_format::text)
      print_text_header(table, preset_line, settings, vram_note, setup, notes);
    std::fputs(ddo::format_plan(plan, table, format).c_str(), stdout);
    if (overlap && format == ddo::plan_format::text) {
      if (!overlap->note.empty()) std::printf("%s\n", overlap->note.c_str());
      if (!overlap->timings.empty()) {
        ddo::runner::print_overlap_prediction(plan, *overlap, ddo::runner::ring_of(setup.runtime));
        if (max_slowdown >= 1.0)
          ddo::runner::print_max_slowdown(*overlap, ddo::runner::ring_of(setup.runtime), max_slowdown);
      }
    }
    ddo::flush_standard_output();  // a truncated plan on a full disk is a failure
    return 0;
  } catch (const ddo::config_error& e) {
    std::cerr << "ddo-plan: invalid setting (" << e.source_name() << " "
              << ddo::sanitize_utf8(e.key()) << "): " << e.what() << "\n";
    return exit_usage;
  } catch (const ddo::usage_error& e) {
    std::cerr << "ddo-plan: " << e.what() << "\n";
    return exit_usage;
  } catch (const std::exception& e) {
    if (!preset_line.empty()) std::cerr << "ddo-plan: " << preset_line << "\n";
    std::cerr << "ddo-plan: " << ddo::sanitize_utf8(e.what()) << "\n";
    return exit_error;
  }
}
