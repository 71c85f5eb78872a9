// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::host_buffer: page-aligned anonymous host memory (mmap), the storage ddo packs
/// pinned weights into before page-locking them with cudaHostRegister.
///
/// Fresh pages are not touched here: the first write (the loader's copy or file read) is the
/// first touch, so the memory is touched once (physical-limits.md: first touch dominates).

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The host page size (sysconf), 4096 when unknown.
[[nodiscard]] inline std::uint64_t host_page_size() noexcept {
  const long page = ::sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<std::uint64_t>(page) : 4096;
}

/// @brief Move-only page-aligned host allocation; its size is rounded up to whole pages.
class host_buffer {
 public:
  host_buffer() = default;
  /// @brief Maps @p bytes (rounded up to pages). @throws out_of_memory(memory_tier::host, ...) on
  /// failure.
  explicit host_buffer(std::uint64_t bytes) : size_(round_up(bytes, host_page_size())) {
    if (size_ == 0) return;
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      const std::uint64_t requested = size_;
      size_ = 0;
      throw out_of_memory(memory_tier::host, requested, 0,
                          "ddo: mmap of " + std::to_string(requested) +
                              " bytes of host memory failed (errno " + std::to_string(err) + ")");
    }
    data_ = static_cast<std::byte*>(p);
  }
  host_buffer(host_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  host_buffer& operator=(host_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~host_buffer() { reset(); }

  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  /// @brief Mapped bytes (a whole number of pages).
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

 private:
  void reset() noexcept {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
  }
  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace v0
}  // namespace ddo
