// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux's --lora-switch: after the eager loop, the adapters are switched between
/// steps as an engine switches them, each switch timed with the device work it queued (the
/// factors copied, the adapted residents' kept bases written back and merged again, the ring's
/// occupied slots reloaded) finished; then the loop runs again on the adapters it started
/// with, and its latents must be bitwise equal to the first loop's (no drift after switches).
/// A switch against the loop's median step is issue 43's "switching adapters between steps
/// costs less than one step". Example code (docs/adapters.md).

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <vector>

#include "ddo/core/format_bytes.hpp"
#include "ddo_flux/latents.hpp"
#include "ddo_flux/lora_option.hpp"
#include "flux/flux_step_time.hpp"

namespace ddo_flux {

/// @brief The switches of each kind --lora-switch times: half of them to half each adapter's
/// scale and half back, so that the last leaves the adapters as the loop had them.
inline constexpr int lora_switches_per_kind = 4;

/// @brief What --lora-switch measured and checked.
struct lora_switch_result {
  std::vector<double> reattach_ms;  ///< every adapter detached, then attached again
  std::vector<double> scale_ms;     ///< every adapter's scale set (set_adapter_scale)
  bool loop_again_equal = false;    ///< the loop after the switches vs the loop before
};

/// @brief Switches @p loras on @p off, lora_switches_per_kind of each kind, each timed through
/// @p finish (returns when the device work the switch queued is done). Adapters are detached
/// in reverse order and attached in the order given: the merge sums them in that order.
template <class Offloader, class Finish>
lora_switch_result time_lora_switches(Offloader& off, const std::vector<lora_choice>& loras,
                                      Finish finish) {
  lora_switch_result out;
  for (int k = 0; k < lora_switches_per_kind; ++k) {
    const float factor = k % 2 == 0 ? 0.5f : 1.0f;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto l = loras.rbegin(); l != loras.rend(); ++l) off.detach_adapter(l->file);
    for (const auto& l : loras) off.attach_adapter(l.file, l.adapter, l.scale * factor);
    finish();
    out.reattach_ms.push_back(flux::ms_since(t0));
  }
  for (int k = 0; k < lora_switches_per_kind; ++k) {
    const float factor = k % 2 == 0 ? 0.5f : 1.0f;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& l : loras) off.set_adapter_scale(l.file, l.scale * factor);
    finish();
    out.scale_ms.push_back(flux::ms_since(t0));
  }
  return out;
}

/// @brief Prints --lora-switch's figures against @p step_ms (the eager loop's median step) and
/// the check of the loop after the switches. Returns whether that loop's latents differ.
inline bool print_lora_switches(const lora_switch_result& s, const std::vector<lora_choice>& loras,
                                double step_ms) {
  std::uint64_t factors = 0;
  for (const auto& l : loras) factors += l.adapter->factor_bytes();
  const double reattach = flux::steady_median(s.reattach_ms);
  const double scale = flux::steady_median(s.scale_ms);
  std::printf("lora switch: %zu adapter(s), %s of factors; detach and attach again: median "
              "%.2f ms = %.3f of a step (%.2f ms); a scale change: median %.2f ms = %.3f of a "
              "step (goal: below one step)\n",
              loras.size(), ddo::format_bytes(factors).c_str(), reattach, reattach / step_ms,
              step_ms, scale, scale / step_ms);
  std::printf("check: the loop again after %zu switches vs the loop before them: %s\n",
              s.reattach_ms.size() + s.scale_ms.size(),
              s.loop_again_equal ? "bitwise equal" : "DIFFERENT");
  return !s.loop_again_equal;
}

}  // namespace ddo_flux
