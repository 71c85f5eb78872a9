// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Counts setup work per phase and forwards it to runtime_options::on_setup_progress
/// (not API). Totals are fixed before any work starts; advance() may be called from several pin
/// workers: calls are serialised, so the callback sees bytes_done grow monotonically per phase.

#include <array>
#include <cstdint>
#include <mutex>

#include "ddo/core/error.hpp"
#include "ddo/runtime/setup_progress.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

class setup_meter {
 public:
  setup_meter() = default;
  explicit setup_meter(setup_progress_callback callback) : callback_(std::move(callback)) {}
  setup_meter(const setup_meter&) = delete;
  setup_meter& operator=(const setup_meter&) = delete;

  [[nodiscard]] bool active() const noexcept { return static_cast<bool>(callback_); }
  /// Adds @p bytes of planned work to @p phase (before its work starts).
  void plan(setup_phase phase, std::uint64_t bytes) noexcept { state_[index(phase)].total += bytes; }
  /// Reports @p phase as started (bytes_done 0) when it has work.
  void start(setup_phase phase);
  /// Adds @p bytes of finished work to @p phase and reports it (clamped to the total).
  void advance(setup_phase phase, std::uint64_t bytes);
  /// Reports @p phase complete when it has not reached its total yet (work that was skipped,
  /// e.g. a block that could not be page-locked, still counts as processed).
  void finish(setup_phase phase);
  [[nodiscard]] std::uint64_t done(setup_phase phase) const noexcept { return state_[index(phase)].done; }
  [[nodiscard]] std::uint64_t total(setup_phase phase) const noexcept { return state_[index(phase)].total; }

 private:
  struct phase_state {
    std::uint64_t total = 0;
    std::uint64_t done = 0;
    bool started = false;
  };
  static constexpr std::size_t index(setup_phase p) noexcept { return static_cast<std::size_t>(p); }
  void report(setup_phase phase, const phase_state& s) {
    callback_(setup_progress{phase, s.done, s.total});
  }

  setup_progress_callback callback_;
  std::mutex mutex_;
  std::array<phase_state, setup_phase_count> state_{};
};

inline void setup_meter::start(setup_phase phase) {
  if (!active()) return;
  std::lock_guard lock(mutex_);
  auto& s = state_[index(phase)];
  if (s.started || s.total == 0) return;
  s.started = true;
  report(phase, s);
}

inline void setup_meter::advance(setup_phase phase, std::uint64_t bytes) {
  if (!active() || bytes == 0) return;
  std::lock_guard lock(mutex_);
  auto& s = state_[index(phase)];
  if (s.total == 0) return;
  s.started = true;
  const std::uint64_t before = s.done;
  s.done = s.done + bytes > s.total ? s.total : s.done + bytes;
  if (s.done != before) report(phase, s);
}

inline void setup_meter::finish(setup_phase phase) {
  if (!active()) return;
  std::lock_guard lock(mutex_);
  auto& s = state_[index(phase)];
  if (s.total == 0 || s.done == s.total) return;
  s.started = true;
  s.done = s.total;
  report(phase, s);
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
