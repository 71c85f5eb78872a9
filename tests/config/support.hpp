// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers shared by the config suites: hermetic resolve inputs (no process environment, no
// probing of this machine) and random values.

#include <cstdint>
#include <map>
#include <random>
#include <string>

#include "ddo/config/resolve.hpp"

namespace ddo_test {

/// Inputs that read nothing from this machine: empty environment, 64 GiB of RAM, not WSL.
inline ddo::resolve_inputs hermetic_inputs(std::map<std::string, std::string> env = {}) {
  ddo::resolve_inputs inputs;
  inputs.environment = std::move(env);
  inputs.detected_ram_gb = 64.0;
  inputs.running_on_wsl = false;
  inputs.paths.meminfo = inputs.paths.self_cgroup = inputs.paths.proc_version =
      inputs.paths.osrelease = "/nonexistent/ddo-test";
  return inputs;
}

/// A generator seeded freshly per test (the seed is printed on failure through INFO).
inline std::mt19937_64 random_engine(std::uint64_t& seed) {
  seed = std::random_device{}();
  return std::mt19937_64(seed);
}

}  // namespace ddo_test
