// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Lifecycle flags: `--ddo-purge-windows-standby-<phase>` for the phase boundaries a host
/// supports, each an optional boolean (absent inherits DDO_PURGE_WINDOWS_STANDBY_<PHASE>).

#include <boost/program_options.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/config/component_policy.hpp"
#include "ddo/config/parse_value.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The flag of phase @p phase: `--ddo-purge-windows-standby-` + phase with '_' as '-'.
[[nodiscard]] inline std::string lifecycle_flag(std::string_view phase) {
  std::string flag = "--ddo-purge-windows-standby-";
  for (char c : to_lower(phase)) flag.push_back(c == '_' ? '-' : c);
  return flag;
}

/// @brief Adds one purge flag per phase in @p phases (only the boundaries the host really has:
/// the reference says unsupported phases must not be exposed).
inline void add_dynamic_offload_lifecycle_arguments(
    boost::program_options::options_description& options, const std::vector<std::string>& phases) {
  namespace po = boost::program_options;
  for (const auto& phase : phases) {
    const std::string name = lifecycle_flag(phase).substr(2);
    const std::string help = "Purge the Windows standby list at phase " + phase +
                             " (absent: DDO_PURGE_WINDOWS_STANDBY_" + component_env_name(phase) +
                             "; no-op off Windows)";
    options.add_options()(name.c_str(),
                          po::value<std::string>()->value_name("BOOL")->implicit_value("true"),
                          help.c_str());
  }
}

/// @brief The value of phase @p phase's flag: nullopt when absent (inherit), else true/false.
/// @throws config_error for a value that is not a boolean spelling.
[[nodiscard]] inline std::optional<bool> lifecycle_flag_value(
    const boost::program_options::variables_map& vm, std::string_view phase) {
  const std::string flag = lifecycle_flag(phase);
  const auto it = vm.find(flag.substr(2));
  if (it == vm.end() || it->second.empty() || it->second.defaulted()) return std::nullopt;
  const std::string value = to_lower(trim(it->second.as<std::string>()));
  if (env_truthy(value)) return true;
  if (value == "0" || value == "false" || value == "no" || value == "off") return false;
  throw config_error(origin::cli, flag,
                     "flag " + flag + " = \"" + it->second.as<std::string>() +
                         "\": not a valid value; expected true or false (1/0, yes/no, on/off)");
}

}  // namespace v0
}  // namespace ddo
