// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief From a capacity profile to what the overlap-aware planner plans with: per-group times
/// at a token count (compute interpolated between the two calibrated counts), and whether a
/// profile may be applied here at all (same device, same model).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/plan/group_timing.hpp"
#include "ddo/profile/capacity_profile.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {
/// Linear through (tokens_low, @p low_ns) and (tokens_high, @p high_ns), in ms, never below 0.
[[nodiscard]] inline double interpolate_ms(const capacity_profile& p, std::uint64_t low_ns,
                                           std::uint64_t high_ns, std::uint64_t tokens) noexcept {
  const double lo = static_cast<double>(low_ns) * 1e-6;
  const double hi = static_cast<double>(high_ns) * 1e-6;
  if (p.tokens_high <= p.tokens_low) return lo;
  const double f = (static_cast<double>(tokens) - static_cast<double>(p.tokens_low)) /
                   static_cast<double>(p.tokens_high - p.tokens_low);
  return std::max(0.0, lo + (hi - lo) * f);
}
}  // namespace detail

/// @brief Group @p g's compute at @p tokens: linear through the two calibrated points
/// (tokens_low, compute_ns_low) and (tokens_high, compute_ns_high) — compute scales with tokens
/// — extrapolated outside them, never below 0; one calibrated count: that time.
[[nodiscard]] inline double compute_ms_at(const capacity_profile& p, const group_profile& g,
                                          std::uint64_t tokens) noexcept {
  return detail::interpolate_ms(p, g.compute_ns_low, g.compute_ns_high, tokens);
}

/// @brief Group @p g's compute at @p tokens timed back to back (the sustained clock),
/// interpolated as compute_ms_at; 0 when the profile did not measure it (format 3).
[[nodiscard]] inline double sustained_compute_ms_at(const capacity_profile& p,
                                                    const group_profile& g,
                                                    std::uint64_t tokens) noexcept {
  if (!g.has_sustained_compute()) return 0.0;
  return detail::interpolate_ms(p, g.sustained_compute_ns_low, g.sustained_compute_ns_high, tokens);
}

/// @brief Group @p g's lead-in at @p tokens, interpolated as compute_ms_at (0 from a format 2
/// profile).
[[nodiscard]] inline double lead_in_ms_at(const capacity_profile& p, const group_profile& g,
                                          std::uint64_t tokens) noexcept {
  return detail::interpolate_ms(p, g.lead_in_ns_low, g.lead_in_ns_high, tokens);
}

/// @brief The per-group times of @p p at @p tokens (tokens 0: the higher calibrated count):
/// compute_ms is the sustained (back-to-back) compute and streaming_compute_ms the streaming
/// pass's where the profile has both; else compute_ms is the streaming pass's and
/// streaming_compute_ms 0.
/// @param note set to a warning when @p tokens lies outside the calibrated range (extrapolated).
/// @throws usage_error for a profile without group timings (format 1, or written by a
/// budget-only calibration), naming the profile and what to do.
[[nodiscard]] inline std::vector<group_timing> timings_at(const capacity_profile& p,
                                                          std::uint64_t tokens,
                                                          std::string* note = nullptr) {
  if (p.groups.empty())
    throw usage_error("capacity profile '" + p.name + "' " +
                      (p.format < capacity_profile_format
                           ? "was written in format " + std::to_string(p.format) +
                                 " (a resident budget only, no per-group timings)"
                           : std::string("has no per-group timings")) +
                      ": the overlap-aware planner needs them; calibrate again with build_profile "
                      "and this profile_name");
  if (tokens == 0) tokens = p.tokens_high;
  if (note != nullptr) {
    note->clear();
    if (tokens < p.tokens_low || tokens > p.tokens_high)
      *note = "warning: capacity profile '" + p.name + "' timed compute at " +
              std::to_string(p.tokens_low) + " and " + std::to_string(p.tokens_high) +
              " tokens; " + std::to_string(tokens) + " tokens is extrapolated";
  }
  std::vector<group_timing> out;
  out.reserve(p.groups.size());
  for (const auto& g : p.groups) {
    const double streaming = compute_ms_at(p, g, tokens);
    const bool sustained = g.has_sustained_compute();
    out.push_back({g.name, g.bytes(), sustained ? sustained_compute_ms_at(p, g, tokens) : streaming,
                   static_cast<double>(g.transfer_ns) * 1e-6, lead_in_ms_at(p, g, tokens),
                   sustained ? streaming : 0.0});
  }
  return out;
}

/// @brief Why @p p must not be applied here, or nullopt when it may: a profile measured on
/// another device (name, or total memory when both are known) or another model (fingerprint,
/// when the profile has one) would give numbers that do not hold.
[[nodiscard]] inline std::optional<std::string> profile_mismatch(
    const capacity_profile& p, std::string_view model_fingerprint, std::string_view device_name,
    std::uint64_t total_vram_bytes) {
  const std::string head = "warning: capacity profile '" + p.name + "' not applied: ";
  if (total_vram_bytes != 0 && p.total_vram_bytes != 0 && p.total_vram_bytes != total_vram_bytes)
    return head + "measured on a device with " + std::to_string(p.total_vram_bytes) +
           " B, this one has " + std::to_string(total_vram_bytes) + " B (calibrate again)";
  if (!device_name.empty() && !p.device_name.empty() && p.device_name != device_name)
    return head + "measured on '" + p.device_name + "', this device is '" +
           std::string(device_name) + "' (calibrate again)";
  if (!model_fingerprint.empty() && !p.model_fingerprint.empty() &&
      p.model_fingerprint != model_fingerprint)
    return head + "measured with another model (fingerprint " + p.model_fingerprint +
           ", this model's is " + std::string(model_fingerprint) + "; calibrate again)";
  return std::nullopt;
}

}  // namespace v0
}  // namespace ddo
