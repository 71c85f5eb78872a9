// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo's exception types and the checking macros every other header uses.
///
/// Every error is rooted in a standard exception so engines can catch std::runtime_error,
/// std::invalid_argument or std::bad_alloc without knowing ddo. Messages are written for a person
/// at a terminal: what was wrong, the value seen, what is allowed.
///
/// A message echoes input (a flag, a variable, a TOML value, a file name, a tensor name, a
/// profile file's text), which is bytes, not text: every exception below passes its message
/// through ddo::sanitize_utf8 (core/text.hpp), the one escaping function, so what() is always
/// valid UTF-8 on one line, whatever the source and whichever site built the message. Text
/// already escaped passes unchanged (`\xHH` is ASCII). The structured fields (path(), key(),
/// tensor()) keep the bytes as given, for programs that use them.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

#include "ddo/core/memory_tier.hpp"
#include "ddo/core/origin.hpp"
#include "ddo/core/text.hpp"

namespace ddo {
inline namespace v0 {

/// @brief A setting that is invalid: names the origin of the value (ddo::origin: default, preset,
/// config, toml, env, cli, component; engine or transport for a check outside the settings) and
/// the key (field name, `DDO_*` variable or `--ddo-*` flag) it came from.
class config_error : public std::invalid_argument {
 public:
  config_error(origin source, std::string key, const std::string& what)
      : std::invalid_argument(sanitize_utf8(what)), source_(source), key_(std::move(key)) {}
  /// @brief The origin of the refused value.
  [[nodiscard]] origin source() const noexcept { return source_; }
  /// @brief Its canonical name ("toml", "env", "cli", ...).
  [[nodiscard]] std::string_view source_name() const noexcept { return to_string(source_); }
  [[nodiscard]] const std::string& key() const noexcept { return key_; }

 private:
  origin source_;
  std::string key_;
};

/// @brief A failed CUDA runtime or driver call: the error name, the call text, file and line.
class cuda_error : public std::runtime_error {
 public:
  cuda_error(int code, std::string error_name, std::string call, std::string file, int line,
             const std::string& what)
      : std::runtime_error(what),
        code_(code),
        error_name_(std::move(error_name)),
        call_(std::move(call)),
        file_(std::move(file)),
        line_(line) {}
  [[nodiscard]] int code() const noexcept { return code_; }
  [[nodiscard]] const std::string& error_name() const noexcept { return error_name_; }
  [[nodiscard]] const std::string& call() const noexcept { return call_; }
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  [[nodiscard]] int line() const noexcept { return line_; }

 private:
  int code_;
  std::string error_name_;
  std::string call_;
  std::string file_;
  int line_;
};

/// @brief A memory tier (device, pinned host, VMM backing, staging) could not hold a request.
class out_of_memory : public std::bad_alloc {
 public:
  /// @brief Names the tier by ddo::memory_tier, never by free text: a handler switches on it,
  /// and its printed name (tier_name()) is the canonical one.
  out_of_memory(memory_tier tier, std::uint64_t requested, std::uint64_t available,
                std::string what)
      : tier_(tier), requested_(requested), available_(available), what_(sanitize_utf8(what)) {}
  [[nodiscard]] const char* what() const noexcept override { return what_.c_str(); }
  /// @brief The tier that could not hold the request.
  [[nodiscard]] memory_tier tier() const noexcept { return tier_; }
  /// @brief Its canonical name ("device", "pinned_host", "registered_host", ...).
  [[nodiscard]] std::string_view tier_name() const noexcept { return to_string(tier_); }
  [[nodiscard]] std::uint64_t requested_bytes() const noexcept { return requested_; }
  [[nodiscard]] std::uint64_t available_bytes() const noexcept { return available_; }

 private:
  memory_tier tier_;
  std::uint64_t requested_;
  std::uint64_t available_;
  std::string what_;
};

/// @brief A file could not be opened, read or mapped: the path and errno.
class io_error : public std::runtime_error {
 public:
  io_error(std::string path, int error_number, const std::string& what)
      : std::runtime_error(sanitize_utf8(what)), path_(std::move(path)), errno_(error_number) {}
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] int error_number() const noexcept { return errno_; }

 private:
  std::string path_;
  int errno_;
};

/// @brief A model file is malformed: the file and, where known, the tensor.
class format_error : public std::runtime_error {
 public:
  format_error(std::string file, std::string tensor, const std::string& what)
      : std::runtime_error(sanitize_utf8(what)),
        file_(std::move(file)),
        tensor_(std::move(tensor)) {}
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  [[nodiscard]] const std::string& tensor() const noexcept { return tensor_; }

 private:
  std::string file_;
  std::string tensor_;
};

/// @brief A precondition of a ddo API was violated by the caller (std::logic_error).
class usage_error : public std::logic_error {
 public:
  explicit usage_error(const std::string& what) : std::logic_error(sanitize_utf8(what)) {}
  explicit usage_error(const char* what) : usage_error(std::string(what)) {}
};

/// @brief A regular expression outside the dialect ddo accepts (core/pattern.hpp): names the
/// pattern, the offset of the offending construct and what is allowed (std::invalid_argument).
class pattern_error : public std::invalid_argument {
 public:
  pattern_error(std::string pattern, std::size_t offset, const std::string& what)
      : std::invalid_argument(sanitize_utf8(what)), pattern_(std::move(pattern)), offset_(offset) {}
  [[nodiscard]] const std::string& pattern() const noexcept { return pattern_; }
  [[nodiscard]] std::size_t offset() const noexcept { return offset_; }

 private:
  std::string pattern_;
  std::size_t offset_ = 0;
};

namespace detail {

[[noreturn]] inline void throw_usage_error(const char* condition, std::string_view message,
                                           const char* file, int line) {
  throw usage_error(std::string(message) + " (expected " + condition + " at " + file + ":" +
                    std::to_string(line) + ")");
}

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                          int line) {
  const char* name = cudaGetErrorName(status);
  const char* text = cudaGetErrorString(status);
  std::string what = std::string("CUDA call failed: ") + call + " returned " +
                     (name ? name : "unknown error") + " (" + (text ? text : "") + ") at " +
                     file + ":" + std::to_string(line);
  throw cuda_error(static_cast<int>(status), name ? name : "unknown", call, file, line, what);
}

/// Driver API results arrive as plain ints (CUresult) because ddo never includes or links the
/// driver library; the name is looked up by the caller through the entry-point table when
/// available and passed in here.
[[noreturn]] inline void throw_driver_error(int status, const char* error_name, const char* call,
                                            const char* file, int line) {
  std::string what = std::string("CUDA driver call failed: ") + call + " returned " +
                     (error_name ? error_name : "CUresult") + " (" + std::to_string(status) +
                     ") at " + file + ":" + std::to_string(line);
  throw cuda_error(status, error_name ? error_name : "CUresult", call, file, line, what);
}

/// Used in destructors: they must never throw, and at process exit CUDA may already be shutting
/// down (cudaErrorCudartUnloading), which is not worth reporting.
inline void report_cuda_error_in_destructor(cudaError_t status, const char* call, const char* file,
                                            int line) noexcept {
  if (status == cudaSuccess || status == cudaErrorCudartUnloading) return;
  const char* name = cudaGetErrorName(status);
  std::fprintf(stderr, "ddo: ignored CUDA failure during cleanup: %s returned %s at %s:%d\n", call,
               name ? name : "unknown", file, line);
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo

/// Throws ddo::usage_error with @p msg when @p cond is false.
#define DDO_EXPECTS(cond, msg)                                                  \
  do {                                                                          \
    if (!(cond)) ::ddo::detail::throw_usage_error(#cond, (msg), __FILE__, __LINE__); \
  } while (0)

/// Runs a CUDA runtime call and throws ddo::cuda_error naming it when it fails.
#define DDO_CUDA_TRY(call)                                                              \
  do {                                                                                  \
    const ::cudaError_t ddo_status_ = (call);                                           \
    if (ddo_status_ != ::cudaSuccess) {                                                 \
      (void)::cudaGetLastError(); /* clear the sticky-free error so later calls work */ \
      ::ddo::detail::throw_cuda_error(ddo_status_, #call, __FILE__, __LINE__);          \
    }                                                                                   \
  } while (0)

/// Runs a CUDA runtime call in a destructor or cleanup path: reports, never throws.
#define DDO_CUDA_TRY_NOTHROW(call) \
  ::ddo::detail::report_cuda_error_in_destructor((call), #call, __FILE__, __LINE__)
