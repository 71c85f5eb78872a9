// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief RAII device and pinned host allocations made through a transport (not API). Destructors
/// never throw: a failure to free is reported on stderr.

#include <cstdint>
#include <cstdio>
#include <exception>
#include <utility>

namespace ddo {
inline namespace v0 {
namespace detail {

/// Calls Free(transport, data, bytes) at destruction; moves transfer ownership.
template <class T, class Free>
class owned_bytes {
 public:
  owned_bytes() = default;
  owned_bytes(T& t, std::byte* p, std::uint64_t n) noexcept : transport_(&t), data(p), bytes(n) {}
  owned_bytes(owned_bytes&& o) noexcept
      : transport_(o.transport_), data(std::exchange(o.data, nullptr)), bytes(o.bytes) {}
  owned_bytes& operator=(owned_bytes&& o) noexcept {
    std::swap(transport_, o.transport_);
    std::swap(data, o.data);
    std::swap(bytes, o.bytes);
    return *this;
  }
  owned_bytes(const owned_bytes&) = delete;
  owned_bytes& operator=(const owned_bytes&) = delete;
  ~owned_bytes() {
    if (data == nullptr) return;
    try {
      Free{}(*transport_, data, bytes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddo: freeing %s memory failed during cleanup: %s\n", Free::what, e.what());
    }
  }

 private:
  T* transport_ = nullptr;

 public:
  std::byte* data = nullptr;
  std::uint64_t bytes = 0;
};

struct free_device_bytes {
  static constexpr const char* what = "device";
  template <class T>
  void operator()(T& t, std::byte* p, std::uint64_t n) const {
    t.free_device(p, n);
  }
};
struct free_pinned_bytes {
  static constexpr const char* what = "pinned";
  template <class T>
  void operator()(T& t, std::byte* p, std::uint64_t n) const {
    t.free_pinned(p, n);
  }
};

/// Device bytes owned through a transport.
template <class T>
using device_allocation = owned_bytes<T, free_device_bytes>;
/// Pinned host bytes owned through a transport.
template <class T>
using pinned_allocation = owned_bytes<T, free_pinned_bytes>;

/// Allocates @p n device bytes through @p t.
template <class T>
[[nodiscard]] device_allocation<T> allocate_device_bytes(T& t, std::uint64_t n) {
  return device_allocation<T>(t, t.allocate_device(n), n);
}
/// Allocates @p n pinned host bytes through @p t.
template <class T>
[[nodiscard]] pinned_allocation<T> allocate_pinned_bytes(T& t, std::uint64_t n) {
  return pinned_allocation<T>(t, t.allocate_pinned(n), n);
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
