// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::log_sink: where ddo writes what it says about a run — the setup details
/// (`verbose`), notes and the profile summary (`show_profile`). The default writes lines to
/// stderr; an engine replaces it with its own logger (a callable taking a severity and one line).
///
/// A FILE* still converts (setup_options::log was one): `options.log = stderr`, `= my_file`,
/// `= nullptr` (silent) keep compiling.

#include <concepts>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace ddo {
inline namespace v0 {

/// @brief How a line matters: `info` (setup details, the profile summary), `note` (a decision
/// a user should know), `warning` (a setting that does not do what it says).
enum class log_severity { info, note, warning };

/// @brief A destination for ddo's lines (see the file comment). Cheap to copy.
class log_sink {
 public:
  /// The engine's logger: called with each line (no trailing newline), from the thread that
  /// set ddo up or drops the offloader.
  using function_type = std::function<void(log_severity, std::string_view)>;

  /// @brief stderr.
  log_sink() noexcept : file_(stderr) {}
  /// @brief Lines to @p file (not owned); nullptr: silent.
  log_sink(std::FILE* file) noexcept : file_(file) {}  // NOLINT(google-explicit-constructor)
  /// @brief Silent.
  log_sink(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor)
  /// @brief Lines to the engine's callable.
  template <class F>
    requires(!std::is_convertible_v<F, std::FILE*> &&
             std::invocable<F&, log_severity, std::string_view>)
  log_sink(F function)  // NOLINT(google-explicit-constructor)
      : function_(std::move(function)) {}

  /// @brief Whether lines go anywhere.
  explicit operator bool() const noexcept { return file_ != nullptr || function_ != nullptr; }

  /// @brief Writes one line (without its newline).
  void operator()(log_severity severity, std::string_view line) const {
    if (function_) {
      function_(severity, line);
    } else if (file_ != nullptr) {
      std::fprintf(file_, "%.*s\n", static_cast<int>(line.size()), line.data());
    }
  }

 private:
  std::FILE* file_ = nullptr;
  function_type function_;
};

}  // namespace v0
}  // namespace ddo
