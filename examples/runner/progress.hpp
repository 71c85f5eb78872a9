// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief A progress bar for ddo-run's long phases (writing the model, pinning, loading, steps).
///
/// On a terminal (stderr is a TTY) it redraws one line in place: `label [#####.....] 45% 1.2/2.7
/// GB 3.1 s`. Elsewhere (CI logs, pipes) it prints plain lines at 0%, 25%, 50%, 75% and 100%,
/// so a log shows progress without carriage-return noise. Example code (examples/runner/).

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief How a progress bar draws: in place on a terminal, or plain milestone lines.
enum class progress_style { automatic, terminal, plain, quiet };

/// @brief One progress bar over a known total (bytes or items).
class progress_bar {
 public:
  /// @param label what is in progress ("writing model", "steps").
  /// @param total the amount that means done (> 0).
  /// @param unit "bytes" prints GB, anything else prints counts with that unit.
  /// @param out where to draw (stderr by default).
  progress_bar(std::string label, std::uint64_t total, std::string unit = "bytes",
               progress_style style = progress_style::automatic, std::FILE* out = stderr)
      : label_(std::move(label)),
        unit_(std::move(unit)),
        total_(total == 0 ? 1 : total),
        out_(out),
        start_(std::chrono::steady_clock::now()) {
    if (style == progress_style::automatic)
      style = ::isatty(::fileno(out_)) != 0 ? progress_style::terminal : progress_style::plain;
    style_ = style;
  }
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;
  ~progress_bar() { finish(); }

  /// @brief Reports @p done of the total; draws when something visible changed.
  void update(std::uint64_t done) {
    if (finished_ || style_ == progress_style::quiet) return;
    done_ = done > total_ ? total_ : done;
    const int percent = static_cast<int>(done_ * 100 / total_);
    if (style_ == progress_style::terminal) {
      if (percent == last_percent_) return;
      last_percent_ = percent;
      draw_terminal(percent);
    } else {
      const int milestone = percent / 25 * 25;
      if (milestone <= last_percent_) return;
      last_percent_ = milestone;
      std::fprintf(out_, "%s: %d%% %s\n", label_.c_str(), milestone, amount().c_str());
      std::fflush(out_);
    }
  }

  /// @brief Marks the bar done (draws 100% and ends the line). Idempotent.
  void finish() {
    if (finished_ || style_ == progress_style::quiet) {
      finished_ = true;
      return;
    }
    update(total_);
    if (style_ == progress_style::terminal) std::fputc('\n', out_);
    std::fflush(out_);
    finished_ = true;
  }

  /// @brief Prints something else (through @p print) without tearing the bar: on a terminal the
  /// bar's line is cleared first and redrawn after.
  template <class Print>
  void interrupt(Print&& print) {
    if (style_ == progress_style::terminal && !finished_) {
      std::fputs("\r\x1b[K", out_);
      std::fflush(out_);
    }
    print();
    if (style_ == progress_style::terminal && !finished_ && last_percent_ >= 0)
      draw_terminal(last_percent_);
  }

  /// @brief The style chosen (automatic resolved).
  [[nodiscard]] progress_style style() const noexcept { return style_; }

 private:
  [[nodiscard]] std::string amount() const {
    char buf[96];
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (unit_ == "bytes")
      std::snprintf(buf, sizeof buf, "%.2f/%.2f GB %.1f s", static_cast<double>(done_) / 1e9,
                    static_cast<double>(total_) / 1e9, seconds);
    else
      std::snprintf(buf, sizeof buf, "%llu/%llu %s %.1f s", static_cast<unsigned long long>(done_),
                    static_cast<unsigned long long>(total_), unit_.c_str(), seconds);
    return buf;
  }

  void draw_terminal(int percent) {
    constexpr int width = 30;
    const int filled = percent * width / 100;
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.append(static_cast<std::size_t>(width - filled), '.');
    std::fprintf(out_, "\r%s [%s] %3d%% %s\x1b[K", label_.c_str(), bar.c_str(), percent,
                 amount().c_str());
    std::fflush(out_);
  }

  std::string label_;
  std::string unit_;
  std::uint64_t total_;
  std::uint64_t done_ = 0;
  std::FILE* out_;
  progress_style style_ = progress_style::plain;
  std::chrono::steady_clock::time_point start_;
  int last_percent_ = -1;
  bool finished_ = false;
};

}  // namespace runner
}  // namespace v0
}  // namespace ddo
