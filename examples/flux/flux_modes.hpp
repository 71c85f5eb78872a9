// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux's run modes around the overlap-aware planner and their combinations:
/// `--capacity-profile NAME` (plan with the stored profile NAME and print the predicted step
/// against the measured one), with `--calibrate` (build that profile on this run's forward), or
/// with `--smallest-card` (find by measurement the smallest emulated card within
/// `--max-slowdown` of the all-resident step, for the overlap planner and the spread and first
/// rules), and `--trace FILE.json` where it cannot trace. Checked before any work, each refusal
/// naming the flags and what is allowed. Example code (examples/flux/).

#include <string>

#include "ddo/core/error.hpp"
#include "ddo/profile/capacity_profile.hpp"

namespace flux {

/// @brief The options that choose what a run measures besides its steps.
struct run_modes {
  std::string capacity_profile;  ///< --capacity-profile NAME ("" when not given)
  bool calibrate = false;        ///< --calibrate
  bool smallest_card = false;    ///< --smallest-card
  bool max_slowdown_given = false;
  double max_slowdown = 1.02;  ///< --max-slowdown X
  bool card_step_given = false;
  double card_step_gib = 0.5;  ///< --card-step-gb GiB
  bool profile = false;        ///< --profile (the timing switch)
  bool check = false;          ///< --check
  bool graph = false;          ///< --graph
  bool lora_switch = false;    ///< --lora-switch (with --lora)
  bool output = false;         ///< --output FILE given
  bool json = false;           ///< --json FILE given
  bool trace = false;          ///< --trace FILE given

  /// @brief Whether the run needs the GPU forward (the CPU path on host_sim refuses these).
  [[nodiscard]] bool needs_gpu() const noexcept {
    return profile || json || !capacity_profile.empty() || smallest_card;
  }
};

/// @brief The message of a run that needs_gpu() where there is none.
inline constexpr const char* gpu_only_modes =
    "--profile, --json, --capacity-profile, --calibrate and --smallest-card need the GPU forward "
    "(a GPU, and ddo-flux built with nvcc)";

/// @brief --graph's refusal on the native VMM route (the CPU and the GPU path).
inline constexpr const char* native_vmm_graph =
    "--graph: the native VMM route (vmm_fast_runtime) does not stream through a captured graph; "
    "graph streaming runs on the linear route and the legacy VMM route (--ddo-execution-mode "
    "vmm_runtime)";

/// @brief Refuses a combination ddo-flux does not run.
/// @throws ddo::usage_error naming the flags and what is allowed.
inline void check_run_modes(const run_modes& m) {
  using ddo::usage_error;
  if (!m.capacity_profile.empty()) {
    try {
      ddo::validate_profile_name(m.capacity_profile);
    } catch (const ddo::config_error&) {
      throw usage_error("--capacity-profile '" + m.capacity_profile +
                        "' is not a valid profile name: use 1-128 letters, digits, '.', '_' or "
                        "'-', not starting with '.'");
    }
  }
  if (m.calibrate && m.capacity_profile.empty())
    throw usage_error(
        "--calibrate needs --capacity-profile NAME (the name the profile is saved "
        "under)");
  if (m.smallest_card && m.capacity_profile.empty())
    throw usage_error(
        "--smallest-card needs --capacity-profile NAME: the stored profile the "
        "overlap planner plans with (calibrate it first with --calibrate)");
  if (m.calibrate && m.smallest_card)
    throw usage_error(
        "--calibrate and --smallest-card run one after the other: calibrate first, "
        "then run --smallest-card with the same --capacity-profile");
  if (m.graph && (m.calibrate || m.smallest_card))
    throw usage_error(
        "--graph runs the plain steps: --calibrate and --smallest-card time every "
        "group with events and run without it");
  if (m.smallest_card && (m.check || m.profile || m.output))
    throw usage_error(
        "--smallest-card measures a fresh offloader per card and no single run: "
        "--check, --profile and --output are for a run on one card (--vram-gb)");
  // --trace records the runtime's spans through timing events, which a captured graph would
  // bake in (the runtime refuses metrics in a capture), of one offloader's steps.
  if (m.trace && m.graph)
    throw usage_error(
        "--trace and --graph: a captured step cannot hold ddo's timing events (the trace's "
        "copies, stalls and compute); trace the eager loop, without --graph");
  if (m.trace && m.smallest_card)
    throw usage_error(
        "--trace and --smallest-card: the sweep sets up a fresh offloader per card and rule; "
        "trace one card's run (--vram-gb, with --capacity-profile NAME for the overlap plan)");
  if (m.max_slowdown_given && !m.smallest_card)
    throw usage_error("--max-slowdown needs --smallest-card");
  if (m.card_step_given && !m.smallest_card)
    throw usage_error("--card-step-gb needs --smallest-card");
  if (!(m.max_slowdown >= 1.0) || m.max_slowdown > 16.0)
    throw usage_error(
        "--max-slowdown must be a factor in 1..16 (1.02: 2% slower than "
        "all-resident), got " +
        std::to_string(m.max_slowdown));
  if (!(m.card_step_gib > 0.0) || m.card_step_gib > 64.0)
    throw usage_error("--card-step-gb must be greater than 0 and at most 64, got " +
                      std::to_string(m.card_step_gib));
  if (m.json && !m.profile && m.capacity_profile.empty())
    throw usage_error("--json FILE needs --profile, --capacity-profile NAME or --smallest-card");
}

}  // namespace flux
