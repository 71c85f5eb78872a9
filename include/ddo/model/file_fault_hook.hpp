// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::file_fault_hook: lets a test make ddo::file_reader's reads fail (EIO, a short
/// count, an early end of file) at a chosen call, so the error paths of everything that reads
/// model files can be exercised without a broken disk. See ddo/transport/fault_injection.hpp
/// for the injector that implements it together with transport faults.

#include <cerrno>
#include <cstdint>
#include <string>

namespace ddo {
inline namespace v0 {

/// @brief What one positional read should do instead of (or before) reading.
struct file_read_fault {
  /// @brief The kinds of injected read faults.
  enum class kind {
    none,         ///< read normally
    error,        ///< the read fails with error_number (like pread returning -1)
    short_count,  ///< the read returns fewer bytes than asked (the reader must go on reading)
    end_of_file,  ///< the read returns 0 bytes before the file's end (a file that shrank)
  };
  kind what = kind::none;
  int error_number = EIO;  ///< errno for kind::error
};

/// @brief Consulted by ddo::file_reader before every positional read it makes (any thread).
class file_fault_hook {
 public:
  virtual ~file_fault_hook() = default;
  /// @brief Decides the fate of a read of @p length bytes at @p offset of @p path.
  /// @note Called concurrently from the reader's callers: implementations must be thread-safe.
  [[nodiscard]] virtual file_read_fault before_read(const std::string& path,
                                                    std::uint64_t offset,
                                                    std::uint64_t length) = 0;
};

}  // namespace v0
}  // namespace ddo
