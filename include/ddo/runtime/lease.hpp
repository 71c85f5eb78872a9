// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::lease: the device pointers of one execution group, valid for work the engine
/// enqueues on the acquiring stream after acquire() returned. Move-only; destroying it (or
/// reset()) releases the group by recording an event on that stream — never a host sync.

#include <cstddef>
#include <string_view>
#include <utility>

namespace ddo {
inline namespace v0 {

namespace detail {
template <class Transport>
class offloader_core;
}

/// @brief A held execution group. See the file comment.
/// @tparam Transport the offloader's transport.
template <class Transport>
class lease {
 public:
  using stream_view = typename Transport::stream_view;

  lease() = default;
  lease(const lease&) = delete;
  lease& operator=(const lease&) = delete;
  lease(lease&& o) noexcept
      : core_(std::exchange(o.core_, nullptr)),
        group_(o.group_),
        slot_(o.slot_),
        stream_(o.stream_),
        pointers_(o.pointers_),
        count_(o.count_) {}
  lease& operator=(lease&& o) noexcept {
    if (this != &o) {
      reset();
      core_ = std::exchange(o.core_, nullptr);
      group_ = o.group_;
      slot_ = o.slot_;
      stream_ = o.stream_;
      pointers_ = o.pointers_;
      count_ = o.count_;
    }
    return *this;
  }
  ~lease() { reset(); }

  /// @brief True while the lease holds a group.
  explicit operator bool() const noexcept { return core_ != nullptr; }
  /// @brief The group's index in the plan.
  [[nodiscard]] std::size_t group() const noexcept { return group_; }
  /// @brief Number of weights in the group.
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  /// @brief Device address of the group's @p i-th weight (plan order). @throws usage_error.
  [[nodiscard]] std::byte* data(std::size_t i) const;
  /// @brief Device address of the weight called @p name. @throws usage_error if it is not in
  /// this group.
  [[nodiscard]] std::byte* data(std::string_view name) const;
  /// @brief Weight-table index of the group's @p i-th weight.
  [[nodiscard]] std::size_t weight_index(std::size_t i) const;
  /// @brief data(i) as T* (no check of T against the weight's dtype).
  template <class T>
  [[nodiscard]] T* data_as(std::size_t i) const {
    return reinterpret_cast<T*>(data(i));
  }
  /// @brief The stream the lease was acquired for.
  [[nodiscard]] stream_view stream() const noexcept { return stream_; }
  /// @brief Releases now: records the release event on the acquiring stream and restores bound
  /// engine pointers. Never throws (a failure is reported on stderr).
  void reset() noexcept;

 private:
  friend class detail::offloader_core<Transport>;
  lease(detail::offloader_core<Transport>* core, std::size_t group, int slot, stream_view stream,
        std::byte* const* pointers, std::size_t count) noexcept
      : core_(core), group_(group), slot_(slot), stream_(stream), pointers_(pointers), count_(count) {}

  detail::offloader_core<Transport>* core_ = nullptr;
  std::size_t group_ = 0;
  int slot_ = -1;
  stream_view stream_{};
  std::byte* const* pointers_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace v0
}  // namespace ddo
