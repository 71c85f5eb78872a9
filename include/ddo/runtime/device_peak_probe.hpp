// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief device_peak_probe: what measures the device's peak use over a span of an engine's
/// work (measure_workload_reserve, setup/workload_reserve.hpp, reads the engine's reserve per
/// workload size through it). ledger_peak_probe is host_sim's (its ledger: exact); on a GPU,
/// cudaMemGetInfo sampled on a thread (examples/runner/device_memory_sampler.hpp models it).

#include <concepts>
#include <cstdint>

namespace ddo {
inline namespace v0 {

/// @brief The opt-in tag of a device_peak_probe: `using probe_category = device_peak_probe_tag;`.
struct device_peak_probe_tag {};
/// @brief An instance of the tag, for the `_tag` convention.
inline constexpr device_peak_probe_tag device_peak_probe_v{};

/// @brief Measures the device's peak use over a span of work: start() marks its beginning (the
/// bytes in use then are the baseline), peak_bytes() the most in use above that baseline since.
template <class P>
concept device_peak_probe = std::same_as<typename P::probe_category, device_peak_probe_tag> &&
                            requires(P& p) {
                              p.start();
                              { p.peak_bytes() } -> std::convertible_to<std::uint64_t>;
                            };

/// @brief The probe of a transport that accounts its device bytes in a ledger (host_sim and its
/// VMM variant): exact, every allocation counted, nothing sampled.
template <class Transport>
  requires requires(Transport& t) {
    { t.device_bytes_in_use() } -> std::convertible_to<std::uint64_t>;
    { t.peak_device_bytes() } -> std::convertible_to<std::uint64_t>;
    t.reset_peak_device_bytes();
  }
class ledger_peak_probe {
 public:
  using probe_category = device_peak_probe_tag;
  explicit ledger_peak_probe(Transport& transport) noexcept : transport_(&transport) {}
  void start() {
    transport_->reset_peak_device_bytes();
    baseline_ = transport_->device_bytes_in_use();
  }
  [[nodiscard]] std::uint64_t peak_bytes() const {
    const std::uint64_t peak = transport_->peak_device_bytes();
    return peak > baseline_ ? peak - baseline_ : 0;
  }

 private:
  Transport* transport_;
  std::uint64_t baseline_ = 0;
};

}  // namespace v0
}  // namespace ddo
