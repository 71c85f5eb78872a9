// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The operational defaults from_env() resolves where no source sets a value (reference:
/// detected RAM, 1024 KiB small-tensor threshold, 4 pin workers, built-in always-resident
/// patterns, profile printing off). The resolver applies them as (field, value) pairs
/// (config/detail/resolve_impl.hpp).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace v0
}  // namespace ddo
