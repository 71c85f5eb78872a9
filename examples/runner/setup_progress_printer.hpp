// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Shows ddo's setup progress (runtime/setup_progress.hpp: reading, packing, pinning,
/// uploading) with bytes and rates: on a terminal one line redrawn in place with every active
/// phase, in a log (not a terminal) plain lines at each phase's start, 25/50/75% and end.
/// Set `runtime_options::on_setup_progress = printer.callback()`, call finish() after the
/// offloader's constructor returned. Example code (examples/runner/).

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "ddo/runtime/setup_progress.hpp"
#include "runner/progress.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief Prints setup reports (see the file comment). ddo calls it one report at a time.
class setup_progress_printer {
 public:
  using clock = std::chrono::steady_clock;

  explicit setup_progress_printer(progress_style style = progress_style::automatic,
                                  std::FILE* out = stderr)
      : out_(out) {
    if (style == progress_style::automatic)
      style = ::isatty(::fileno(out_)) != 0 ? progress_style::terminal : progress_style::plain;
    style_ = style;
  }
  setup_progress_printer(const setup_progress_printer&) = delete;
  setup_progress_printer& operator=(const setup_progress_printer&) = delete;

  /// @brief The callback to put in runtime_options::on_setup_progress (refers to this object).
  [[nodiscard]] setup_progress_callback callback() {
    return [this](const setup_progress& p) { report(p); };
  }

  /// @brief One report, with the time it was made (tests pass their own clock).
  void report(const setup_progress& p, clock::time_point now = clock::now()) {
    if (style_ == progress_style::quiet) return;
    auto& s = phases_[static_cast<std::size_t>(p.phase)];
    if (!s.started) {
      s.started = true;
      s.start = now;
    }
    s.done = p.bytes_done;
    s.total = p.bytes_total == 0 ? 1 : p.bytes_total;
    s.last = now;
    const int percent = static_cast<int>(s.done >= s.total ? 100 : s.done * 100 / s.total);
    if (style_ == progress_style::terminal) {
      if (percent == s.percent) return;
      s.percent = percent;
      std::fprintf(out_, "\rsetup:%s\x1b[K", line().c_str());
      std::fflush(out_);
      drawn_ = true;
      return;
    }
    const int milestone = percent / 25 * 25;
    if (milestone <= s.percent) return;
    // The first report may already be past 0%: print where the phase is, once per quarter.
    s.percent = milestone;
    std::fprintf(out_, "setup: %s\n", phase_text(p.phase, s).c_str());
    std::fflush(out_);
  }

  /// @brief Ends the terminal line. Idempotent.
  void finish() {
    if (style_ == progress_style::terminal && drawn_) {
      std::fputc('\n', out_);
      std::fflush(out_);
      drawn_ = false;
    }
  }

  [[nodiscard]] progress_style style() const noexcept { return style_; }

 private:
  struct phase_state {
    bool started = false;
    clock::time_point start{};
    clock::time_point last{};
    std::uint64_t done = 0;
    std::uint64_t total = 1;
    int percent = -1;
  };

  [[nodiscard]] static std::string phase_text(setup_phase phase, const phase_state& s) {
    const double seconds = std::chrono::duration<double>(s.last - s.start).count();
    char buf[128];
    if (seconds > 0.0)
      std::snprintf(buf, sizeof buf, "%s %3d%% %.2f/%.2f GB %.2f GB/s",
                    std::string(to_string(phase)).c_str(), s.percent < 0 ? 0 : s.percent,
                    static_cast<double>(s.done) / 1e9, static_cast<double>(s.total) / 1e9,
                    static_cast<double>(s.done) / 1e9 / seconds);
    else
      std::snprintf(buf, sizeof buf, "%s %3d%% %.2f/%.2f GB", std::string(to_string(phase)).c_str(),
                    s.percent < 0 ? 0 : s.percent, static_cast<double>(s.done) / 1e9,
                    static_cast<double>(s.total) / 1e9);
    return buf;
  }

  [[nodiscard]] std::string line() const {
    std::string text;
    for (std::size_t i = 0; i < phases_.size(); ++i) {
      if (!phases_[i].started) continue;
      text += text.empty() ? " " : " | ";
      text += phase_text(static_cast<setup_phase>(i), phases_[i]);
    }
    return text;
  }

  std::FILE* out_;
  progress_style style_ = progress_style::plain;
  std::array<phase_state, setup_phase_count> phases_{};
  bool drawn_ = false;
};

}  // namespace runner
}  // namespace v0
}  // namespace ddo
