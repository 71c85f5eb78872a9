// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::setup_progress: what an offloader's setup reports while it reads, packs, pins and
/// uploads weights, so an engine or the runner can show progress for a setup that takes minutes.
/// Set runtime_options::on_setup_progress to receive it.

#include <array>
#include <cstdint>
#include <functional>
#include <string_view>

#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The phases of setup, in the order they start (they may overlap: pin workers read,
/// pack and pin group after group).
enum class setup_phase : unsigned char {
  reading,    ///< weight bytes read from files (pinned blocks, resident weights)
  packing,    ///< host weight bytes copied into pinned blocks
  pinning,    ///< host bytes page-locked (packed blocks, the engine's pages in place)
  uploading,  ///< resident weight bytes copied to the device
};
inline constexpr std::size_t setup_phase_count = 4;

template <>
struct enum_names<setup_phase> {
  static constexpr std::array<std::string_view, 4> values = {"reading", "packing", "pinning",
                                                             "uploading"};
};
static_assert(enum_names<setup_phase>::values.size() == setup_phase_count,
              "a name for every setup_phase");

/// @brief "reading", "packing", "pinning", "uploading".
[[nodiscard]] constexpr std::string_view to_string(setup_phase p) noexcept {
  return enum_name(p);
}

/// @brief One report: @p bytes_done of @p bytes_total of one phase.
struct setup_progress {
  setup_phase phase = setup_phase::reading;
  std::uint64_t bytes_done = 0;   ///< never decreases within a phase; ends at bytes_total
  std::uint64_t bytes_total = 0;  ///< fixed for the whole setup; phases with nothing to do are not reported
};

/// @brief Receives setup reports. Called from the thread running the constructor or from ddo's
/// pin workers, one call at a time (never concurrently); it should return quickly and not throw
/// (an exception aborts setup). Pinned blocks reused from a pinned_weight_cache are not counted.
using setup_progress_callback = std::function<void(const setup_progress&)>;

}  // namespace v0
}  // namespace ddo
