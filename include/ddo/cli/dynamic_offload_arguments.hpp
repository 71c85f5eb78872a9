// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The `--ddo-*` command-line flags (Boost.Program_options; link ddo_cli_dep):
/// add_dynamic_offload_arguments, cli_config_layer, build_config_from_args.
///
/// Flags come from the field registry: `--ddo-<field-with-dashes>` for every field with a DDO_*
/// variable, plus the VMM component flags, `--ddo-preset` and `--ddo-vmm-total-staging-gb`. Every
/// flag takes its value as text and is read by the same parser as the environment, so errors
/// read alike; booleans may be given bare (`--ddo-verbose` means true) or as
/// `--ddo-verbose=false`.

#include <boost/program_options.hpp>

#include <optional>
#include <string>
#include <vector>

#include "ddo/config/closest_name.hpp"
#include "ddo/config/config_layer.hpp"
#include "ddo/config/explicit_source.hpp"
#include "ddo/config/field_registry.hpp"
#include "ddo/config/parse_value.hpp"
#include "ddo/config/presets.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/core/text.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The flag that selects the preset.
inline constexpr std::string_view preset_flag = "--ddo-preset";
/// @brief The flag whose total staging capacity build_config_from_args translates: the native
/// route (vmm_native_transport or a retained-source cache) takes it as vmm_staging_buffer_gb;
/// the protected NVMe/legacy route splits it over its two staging slots (vmm_staging_buffer_gb =
/// total / 2). Omitted, the route's own staging default stays.
inline constexpr std::string_view total_staging_flag = "--ddo-vmm-total-staging-gb";

namespace detail {
inline std::string help_text(const field_info& info) {
  std::string help(info.meaning);
  if (!info.env.empty()) help += " [" + std::string(info.env) + "]";
  if (info.type == field_type::choice) help += " {" + join_allowed(info.allowed) + "}";
  return help;
}
}  // namespace detail

/// @brief Adds every `--ddo-*` flag to @p options.
inline void add_dynamic_offload_arguments(boost::program_options::options_description& options) {
  namespace po = boost::program_options;
  auto add = options.add_options();
  add(std::string(preset_flag.substr(2)).c_str(), po::value<std::string>()->value_name("NAME"),
      "Preset: auto, one_shot_fast, low_ram_safe, wsl_compat, diffusers_offload_compat, "
      "diffusers_leaf_offload_compat, off, warm_process, nvme_baseline, vmm_fast_runtime "
      "[DDO_PRESET]");
  for (const auto& info : config_fields()) {
    if (!info.has_flag) continue;
    const std::string name = info.flag().substr(2);
    const std::string help = detail::help_text(info);
    if (info.type == field_type::boolean)
      add(name.c_str(), po::value<std::string>()->value_name("BOOL")->implicit_value("true"),
          help.c_str());
    else
      add(name.c_str(), po::value<std::string>()->value_name(info.unit.empty() ? "VALUE" : std::string(info.unit)),
          help.c_str());
  }
  add(std::string(total_staging_flag.substr(2)).c_str(), po::value<std::string>()->value_name("GiB"),
      "Total host staging capacity: the native VMM route's total, or split over the NVMe "
      "route's two slots");
}

/// @brief Reads the `--ddo-*` flags present in @p vm into a layer (origin cli).
/// @throws config_error naming the flag, the value seen and what is allowed.
[[nodiscard]] inline config_layer cli_config_layer(const boost::program_options::variables_map& vm) {
  config_layer layer;
  layer.source = origin::cli;
  const auto given = [&](const std::string& name) -> const std::string* {
    const auto it = vm.find(name);
    if (it == vm.end() || it->second.defaulted() || it->second.empty()) return nullptr;
    return &it->second.as<std::string>();
  };
  if (const auto* preset = given(std::string(preset_flag.substr(2))))
    layer.preset = sourced<std::string>{to_lower(trim(*preset)), {origin::cli, std::string(preset_flag)}};
  const auto fields = config_fields();
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (!fields[i].has_flag) continue;
    const std::string flag = fields[i].flag();
    if (const auto* text = given(flag.substr(2))) {
      const field_origin where{origin::cli, flag};
      layer.fields.push_back({i, parse_field_text(fields[i], *text, where), where});
    }
  }
  if (const auto* text = given(std::string(total_staging_flag.substr(2)))) {
    const field_origin where{origin::cli, std::string(total_staging_flag)};
    const auto value = parse_real(*text);
    if (!value || *value <= 0.0)
      throw_rejected(where, "vmm_staging_buffer_gb", *text, "a positive size in GiB");
    layer.vmm_total_staging_gb = sourced<double>{*value, where};
  }
  return layer;
}

/// @brief The reference's CLI helper default of `--ddo-vmm-resident-weight-budget-gb` (GiB),
/// used by build_config_from_args when the flag is absent.
inline constexpr double cli_default_vmm_resident_weight_budget_gb = 4.0;

/// @brief Adds the reference CLI helper's defaults to @p inputs, for a program whose `--ddo-*`
/// flags are that helper (ddo-run, ddo-plan): vmm_resident_weight_budget_gb = @p vmm_budget_gb
/// (4 GiB unless the program states what its emulated card holds). They rank as explicit
/// config, so a TOML file, DDO_* and the flags win over them, and the vmm_fast_runtime and
/// nvme_baseline presets' own 4 GiB is the same value.
inline void add_cli_helper_defaults(
    resolve_inputs& inputs, double vmm_budget_gb = cli_default_vmm_resident_weight_budget_gb) {
  inputs.overrides.emplace_back(field_id::vmm_resident_weight_budget_gb, vmm_budget_gb);
}

/// @brief Builds a config from the flags alone, as the reference's build_config_from_args: the
/// preset --ddo-preset names (auto by default, resolved with @p context) plus the flags, with
/// --ddo-vmm-total-staging-gb translated; no DDO_* variable is read. As in the reference, an
/// absent --ddo-vmm-resident-weight-budget-gb means 4 GiB (it ranks as explicit config, below the
/// flags), so `--ddo-execution-mode vmm_runtime` alone is a usable VMM config.
/// @throws config_error naming the flag, the value seen and what is allowed.
[[nodiscard]] inline dynamic_offload_config build_config_from_args(
    const boost::program_options::variables_map& vm, const resolve_context& context = {}) {
  explicit_source helper_defaults;
  helper_defaults.overrides = {
      {field_id::vmm_resident_weight_budget_gb, cli_default_vmm_resident_weight_budget_gb}};
  return resolve_from_sources(context, helper_defaults, layer_source{cli_config_layer(vm)}).config;
}

/// @brief One line for a Boost.Program_options error, suggesting the closest `--ddo-*` flag for
/// an unknown option.
[[nodiscard]] inline std::string describe_cli_error(
    const boost::program_options::error& error,
    const boost::program_options::options_description& options) {
  if (const auto* unknown = dynamic_cast<const boost::program_options::unknown_option*>(&error)) {
    std::vector<std::string> names;
    for (const auto& option : options.options()) names.push_back("--" + option->long_name());
    const std::string seen = unknown->get_option_name();
    const std::string suggestion = closest_name(seen, names);
    return "flag " + sanitize_utf8(seen) + " is not an option" +
           (suggestion.empty() ? std::string("; see --help")
                               : "; did you mean " + suggestion + "?");
  }
  if (dynamic_cast<const boost::program_options::too_many_positional_options_error*>(&error))
    return "unexpected argument: only --options are accepted; see --help";
  // Boost's own messages quote the command line as given: bytes, shown escaped (core/text.hpp).
  return sanitize_utf8(error.what());
}

}  // namespace v0
}  // namespace ddo
