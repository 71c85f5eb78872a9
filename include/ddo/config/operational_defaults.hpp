// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The operational defaults from_env() resolves where no source sets a value (reference:
/// detected RAM, 1024 KiB small-tensor threshold, 4 pin workers, built-in always-resident
/// patterns, profile printing off).

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/config/field_id.hpp"
#include "ddo/config/field_value.hpp"
#include "ddo/core/units.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The built-in always-resident patterns: small modules every step touches, whose
/// streaming would cost more in per-copy overhead than they save in VRAM — input/output
/// projections, embeddings (token, position, time, patch), and normalization layers.
[[nodiscard]] inline std::vector<std::string> builtin_always_resident_patterns() {
  return {
      R"((^|\.)(proj_in|proj_out|conv_in|conv_out|lm_head)$)",
      R"((^|\.)[A-Za-z0-9_]*(embed|embedder|embedding|embeddings)[A-Za-z0-9_]*$)",
      R"((^|\.)[A-Za-z0-9_]*(norm|ln)[A-Za-z0-9_]*$)",
  };
}

/// @brief from_env()'s small-tensor threshold: 1024 KiB.
inline constexpr std::uint64_t operational_small_tensor_threshold_bytes = 1024 * kib;
/// @brief from_env()'s pin worker count.
inline constexpr std::int64_t operational_pin_cpu_workers = 4;

/// @brief The operational defaults as (field, value) pairs; available_system_ram_gb is the
/// detected value when one is known (else the field keeps its dataclass default of 0).
[[nodiscard]] inline std::vector<std::pair<field_id, field_value>> operational_defaults(
    double detected_ram_gb) {
  std::vector<std::pair<field_id, field_value>> values = {
      {field_id::small_tensor_threshold_bytes,
       static_cast<std::int64_t>(operational_small_tensor_threshold_bytes)},
      {field_id::pin_cpu_workers, operational_pin_cpu_workers},
      {field_id::always_resident_modules_pattern, builtin_always_resident_patterns()},
      {field_id::show_profile, false},
  };
  if (detected_ram_gb > 0.0)
    values.emplace_back(field_id::available_system_ram_gb, detected_ram_gb);
  return values;
}

}  // namespace v0
}  // namespace ddo
