// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The emulated card of `--vram-gb N` (ddo-run, ddo-plan): its size, what of it is not
/// ddo's (the CUDA context measured at start, the engine's reserve: activations and cuBLAS
/// workspace), the device limit ddo's transport gets, and the check that everything the run
/// accounts for stayed inside the card.
///
/// One card of V bytes holds the CUDA context C (measured as used device memory just after CUDA
/// started; 0 on host_sim, which has none), the engine's reserve R and ddo's own bytes (resident
/// weights, the ring, staging). ddo's transport is capped at V − C (linear_options::
/// device_limit_bytes, host_sim's device capacity), and the plan sees that minus R, the ring and
/// ddo's 64 MiB reserve (setup/machine.hpp machine_for), so a plan that fits leaves R free. After
/// the run, C + R + ddo's peak device bytes (its allocation ledger) must be ≤ V: that is the
/// accounted peak. On a GPU the runner also samples cudaMemGetInfo, which sees what the
/// accounting cannot (allocation rounding, cuBLAS's own handle state).
///
/// What the emulation cannot reproduce: the host side. The copies still run at this machine's
/// host→device bandwidth, and the kernel's page cache still holds what this machine's RAM holds;
/// `--ram-gb` shapes the plan and the pin budget, not the cache. Example code (examples/runner/).

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/transport/allocation_ledger.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief The largest size `--vram-gb` and `--ram-gb` take, in GiB (far above any machine, low
/// enough that the byte arithmetic cannot overflow).
inline constexpr double max_size_gib = 65536.0;

/// @brief The emulated card used when a GPU run names none: a 12 GiB consumer card (an RTX 3060
/// / 4070 class), so the default Flux-sized model streams.
inline constexpr double default_gpu_vram_gib = 12.0;

/// @brief What emulation cannot reproduce, printed with every emulated run.
inline constexpr const char* emulation_caveat =
    "emulation holds ddo's device bytes, the engine's reserve and the CUDA context to the card's "
    "size; it cannot reproduce the host side: copies run at this machine's host-to-device "
    "bandwidth, and the page cache holds what this machine's RAM holds (--ram-gb shapes the plan "
    "and the pin budget, not the kernel's cache)";

/// @brief Parses one size in GiB for @p option: a decimal number > 0 and ≤ max_size_gib.
/// @throws usage_error naming the option, the text and the allowed range.
[[nodiscard]] inline double parse_size_gib(std::string_view text, std::string_view option,
                                           std::string_view whole = {}) {
  auto refuse = [&](const std::string& why) {
    return usage_error(std::string(option) + " = \"" +
                       std::string(whole.empty() ? text : whole) + "\": " + why +
                       "; expected a size in GiB greater than 0 and at most 65536" +
                       (option == "--vram-gb" ? ", or several separated by commas (4,8,12,24)"
                                              : ""));
  };
  double value = 0.0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec != std::errc() || end != last || !std::isfinite(value))
    throw refuse("\"" + std::string(text) + "\" is not a number");
  if (!(value > 0.0) || value > max_size_gib)
    throw refuse(std::string(text) + " is outside the range");
  return value;
}

/// @brief Parses `--vram-gb`: one size or a comma-separated list (a sweep), each as
/// parse_size_gib. @throws usage_error naming the option and the offending entry.
[[nodiscard]] inline std::vector<double> parse_size_list_gib(std::string_view text,
                                                             std::string_view option) {
  std::vector<double> sizes;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    sizes.push_back(parse_size_gib(item, option, text));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return sizes;
}

/// @brief One emulated card and what of it is not ddo's.
struct vram_budget {
  std::uint64_t vram_bytes = 0;            ///< the card (--vram-gb)
  std::uint64_t context_bytes = 0;         ///< CUDA context measured at start (0: host_sim)
  std::uint64_t engine_reserve_bytes = 0;  ///< activations, workspaces

  /// @brief The cap on ddo's own device bytes: the card minus the context.
  /// @throws usage_error when the card cannot hold the context, the reserve and ddo's 64 MiB.
  [[nodiscard]] std::uint64_t ddo_limit_bytes(std::uint64_t runtime_reserve_bytes) const {
    const std::uint64_t taken = context_bytes + engine_reserve_bytes + runtime_reserve_bytes;
    if (vram_bytes <= taken)
      throw usage_error("--vram-gb " + gib_text(vram_bytes) +
                        ": the emulated card does not hold the CUDA context (" +
                        gib_text(context_bytes) + " GiB measured), the engine's reserve (" +
                        gib_text(engine_reserve_bytes) + " GiB) and ddo's reserve (" +
                        gib_text(runtime_reserve_bytes) + " GiB); give a larger size");
    return vram_bytes - context_bytes;
  }

  [[nodiscard]] static std::string gib_text(std::uint64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / static_cast<double>(gib));
    return buf;
  }
};

/// @brief The accounted peak of a run on an emulated card: context + reserve + ddo's peak.
struct budget_check {
  std::uint64_t accounted_peak_bytes = 0;
  std::uint64_t vram_bytes = 0;
  [[nodiscard]] bool within() const noexcept { return accounted_peak_bytes <= vram_bytes; }
};

/// @brief ddo's peak device bytes: the larger of the offloader's own count (resident + ring, VMM
/// handles) and, where the transport keeps one, its allocation ledger's peak (every device byte
/// ddo allocated through it, transient ones included).
template <class Transport>
[[nodiscard]] std::uint64_t ddo_peak_device_bytes(const Transport& t, std::uint64_t offloader_peak) {
  if constexpr (requires { t.ledger().peak(ledger_kind::device); })
    return std::max<std::uint64_t>(offloader_peak, t.ledger().peak(ledger_kind::device));
  else
    return offloader_peak;
}

/// @brief Checks ddo's peak device bytes against @p budget.
[[nodiscard]] inline budget_check check_accounted_peak(const vram_budget& budget,
                                                       std::uint64_t ddo_peak_bytes) {
  return {budget.context_bytes + budget.engine_reserve_bytes + ddo_peak_bytes, budget.vram_bytes};
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
