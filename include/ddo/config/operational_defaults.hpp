// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The operational defaults from_env() resolves where no source sets a value (reference:
/// detected RAM, 1024 KiB small-tensor threshold, 4 pin workers, built-in always-resident
/// patterns, profile printing off). The resolver applies them as (field, value) pairs
/// (config/detail/resolve_impl.hpp).

#include <algorithm>
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
/// @brief from_env()'s pin worker count on a machine of @p hardware_threads: the reference
/// resolves 4; ddo takes the machine's hardware threads, at least 4 and at most 16. The workers
/// read the weights into the pinned blocks, and reading from the page cache scales with threads:
/// a 23.8 GB model's setup took 3.41 s with 4 (reading at 7.2 GB/s) and 1.52 s with 16, 1.04x
/// the floor of a 16-thread read and its registration (H100 machine, 16 cores, 5 Dec 2026). The
/// bound keeps a large host from starting a thread per core for a few files. Presets that set a
/// count (low_ram_safe 2, wsl_compat 1, warm_process 8) keep theirs.
[[nodiscard]] constexpr std::int64_t operational_pin_cpu_workers(
    unsigned hardware_threads) noexcept {
  return std::clamp<std::int64_t>(hardware_threads, 4, 16);
}

}  // namespace v0
}  // namespace ddo
