// SPDX-License-Identifier: Apache-2.0
// ddo-config: resolves settings the way an application does (preset < --config FILE.toml <
// DDO_* environment < --ddo-* flags < component policies) and prints them as TOML.
// Invalid input of any kind: exit status 2, one line on stderr, nothing on stdout.

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>

#include "ddo/cli/dynamic_offload_arguments.hpp"
#include "ddo/config/field_registry.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/config/settings_toml.hpp"
#include "ddo/config/toml_source.hpp"
#include "ddo/core/standard_output.hpp"
#include "ddo/core/text.hpp"
#include "ddo/runtime/native_vmm_options.hpp"

namespace po = boost::program_options;

namespace {

constexpr int usage_exit = 2;

int fail(const std::string& message) {
  std::cerr << "ddo-config: " << ddo::sanitize_utf8(message) << '\n';
  return usage_exit;
}

// One line per registry field: name, variable, flag, status and, for a field that is not active,
// why. Columns are padded so the table reads in a terminal.
void print_fields(std::ostream& out) {
  std::size_t widths[4] = {5, 8, 4, 6};
  const auto cell = [](std::string_view text) {
    return text.empty() ? std::string("-") : std::string(text);
  };
  for (const auto& info : ddo::config_fields()) {
    widths[0] = std::max(widths[0], info.name.size());
    widths[1] = std::max(widths[1], cell(info.env).size());
    widths[2] = std::max(widths[2], cell(info.flag()).size());
    widths[3] = std::max(widths[3], ddo::to_string(info.status).size());
  }
  const auto row = [&](std::string_view a, std::string_view b, std::string_view c,
                       std::string_view d, std::string_view e) {
    std::string line;
    for (const auto& [text, width] : {std::pair{a, widths[0]}, std::pair{b, widths[1]},
                                      std::pair{c, widths[2]}, std::pair{d, widths[3]}}) {
      line += text;
      line.append(width - text.size() + 2, ' ');
    }
    line += e;
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  };
  row("field", "variable", "flag", "status", "reason");
  for (const auto& info : ddo::config_fields())
    row(info.name, cell(info.env), cell(info.flag()), ddo::to_string(info.status),
        info.status_reason);
}

int run(int argc, char** argv) {
  po::options_description general("ddo-config options");
  general.add_options()("help,h", "Print this help and exit")(
      "config", po::value<std::string>()->value_name("FILE"),
      "TOML file of settings (keys are the config field names)")(
      "component", po::value<std::vector<std::string>>()->value_name("NAME"),
      "Print the route of component NAME (repeatable)")(
      "no-environment", "Ignore every DDO_* variable (config and component routes)")(
      "model-gb", po::value<std::string>()->value_name("GiB"),
      "Model weight size, so that preset auto can compare it with available RAM")(
      "vmm-supported", po::value<std::string>()->value_name("BOOL"),
      "Whether the device supports CUDA virtual memory management (for preset auto)")(
      "fields", "Print every field with its variable, flag and status (whether it has an effect "
                "here) and exit");
  po::options_description ddo_flags("ddo settings (each also a DDO_* variable)");
  ddo::add_dynamic_offload_arguments(ddo_flags);
  po::options_description all;
  all.add(general).add(ddo_flags);

  po::variables_map vm;
  try {
    const po::positional_options_description no_positionals;
    po::store(po::command_line_parser(argc, argv).options(all).positional(no_positionals).run(), vm);
    po::notify(vm);
  } catch (const po::error& error) {
    return fail(ddo::describe_cli_error(error, all));
  }
  if (vm.count("help")) {
    std::cout << "Usage: ddo-config [--config FILE] [--component NAME]... [--no-environment] "
                 "[--ddo-FLAG VALUE]...\n"
                 "       ddo-config --fields\n"
                 "Prints the resolved ddo settings as TOML (a field with no effect here carries "
                 "its status as a comment),\nor with --fields the table of fields and their "
                 "status.\n\n"
              << all << '\n';
    return 0;
  }

  if (vm.count("fields")) {
    print_fields(std::cout);
    return 0;
  }

  ddo::resolve_inputs inputs;
  if (vm.count("config")) inputs.toml = ddo::read_toml_config(vm["config"].as<std::string>());
  inputs.use_environment = vm.count("no-environment") == 0;
  if (vm.count("component")) inputs.components = vm["component"].as<std::vector<std::string>>();
  if (vm.count("model-gb")) {
    const std::string text = vm["model-gb"].as<std::string>();
    const auto gb = ddo::parse_real(text);
    if (!gb || *gb <= 0.0)
      return fail("flag --model-gb = \"" + text + "\": not a valid value; expected a positive size in GiB");
    inputs.model_bytes = ddo::gib_to_bytes(*gb);
  }
  if (vm.count("vmm-supported")) {
    const std::string text = ddo::to_lower(ddo::trim(vm["vmm-supported"].as<std::string>()));
    if (!ddo::is_boolean_spelling(text) || text.empty())
      return fail("flag --vmm-supported = \"" + vm["vmm-supported"].as<std::string>() +
                  "\": not a valid value; expected true or false");
    inputs.vmm_supported = ddo::env_truthy(text);
  }
  for (const auto& name : inputs.components)
    if (name.empty()) return fail("flag --component = \"\": not a valid value; expected a component name");
  inputs.cli = ddo::cli_config_layer(vm);

  const ddo::dynamic_offload_settings settings = ddo::resolve_settings(inputs);
  std::ostringstream out;
  // Which VMM route these settings run (a TOML comment, so the output still reads back).
  if (const auto vmm = ddo::vmm_route_name(settings.config); !vmm.empty())
    out << "# VMM route: " << vmm
        << (vmm == "vmm_fast_runtime" ? " (native: registered windows, retained sources)\n"
                                       : " (legacy: two pinned staging buffers)\n");
  ddo::write_settings_toml(out, settings);
  for (const auto& warning : settings.warnings) std::cerr << warning << '\n';
  std::cout << out.str();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int status = run(argc, argv);
    if (status == 0) ddo::flush_standard_output();  // a full disk is a failure, not success
    return status;
  } catch (const ddo::config_error& error) {
    return fail(error.what());
  } catch (const ddo::io_error& error) {
    return fail(error.what());
  } catch (const std::exception& error) {
    return fail(error.what());
  }
}
