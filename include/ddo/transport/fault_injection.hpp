// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Fault injection for failure tests: ddo::fault_injector fails the Nth call of a chosen
/// kind, and ddo::fault_injection_transport wraps any ddo transport so that its pinned
/// allocations, host registrations, device allocations and host-to-device copies go through the
/// injector. The injector is also a ddo::file_fault_hook: give it to file_reader_options::faults
/// (or runtime_options::file_faults) to fail a file read with EIO, a short count or an early end.
///
/// What each injected fault looks like to the code under test — the same as the real failure:
/// | point             | injected failure                                                    |
/// |-------------------|---------------------------------------------------------------------|
/// | allocate_pinned   | throws out_of_memory(memory_tier::pinned_host, n, 0, ...) | |
/// register_host     | returns false (as a failed cudaHostRegister)                         | |
/// allocate_device   | throws out_of_memory(memory_tier::device, n, 0, ...) | | copy_to_device    |
/// throws cuda_error (on whichever thread copies: the staging thread    | |                   | for
/// pageable and file bytes, so this is "a staging thread throws")   | | file_read         | the
/// read fails (EIO or chosen errno), returns short, or returns 0    |
///
/// Calls are counted per point from 1 across every copy of the transport and every thread; an
/// armed fault fires once, at the Nth call, and is then spent (arm it again for another).
/// Example:
/// @code
///   auto faults = std::make_shared<ddo::fault_injector>();
///   ddo::fault_injection_transport ft(ddo::host_sim_transport{}, faults);
///   faults->fail_nth(ddo::fault_point::allocate_device, 3);
///   ddo::basic_offloader<decltype(ft)> off(ft, table, plan, options);  // throws out_of_memory
/// @endcode

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "ddo/core/enum_names.hpp"
#include "ddo/core/error.hpp"
#include "ddo/model/file_fault_hook.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/detail/transport_adaptor.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The calls a fault can be injected into.
enum class fault_point : std::size_t {
  allocate_pinned,
  register_host,
  allocate_device,
  copy_to_device,
  file_read,
};

/// @brief Number of fault points.
inline constexpr std::size_t fault_point_count = 5;

template <>
struct enum_names<fault_point> {
  static constexpr std::array<std::string_view, 5> values = {
      "allocate_pinned", "register_host", "allocate_device", "copy_to_device", "file_read"};
};
static_assert(enum_names<fault_point>::values.size() == fault_point_count,
              "a name for every fault_point");

/// @brief The name of a fault point, for messages.
[[nodiscard]] inline std::string_view fault_point_name(fault_point p) noexcept {
  return enum_name(p);
}

/// @brief Counts calls per fault point and fails the armed one. Thread-safe; share it with
/// std::shared_ptr between the transport wrapper and the file readers.
class fault_injector : public file_fault_hook {
 public:
  /// @brief Arms @p point: its @p n th call (counted from 1 since construction or reset())
  /// fails. @p read_fault says how a file_read fails (kind::error uses its error_number).
  /// @throws usage_error when @p n is 0 or already passed.
  void fail_nth(fault_point point, std::uint64_t n,
                file_read_fault read_fault = {file_read_fault::kind::error, EIO}) {
    std::lock_guard lock(mutex_);
    auto& s = slot(point);
    DDO_EXPECTS(n > s.calls, "fault_injector::fail_nth: call #" + std::to_string(n) + " of " +
                                 std::string(fault_point_name(point)) +
                                 " is not in the future (" + std::to_string(s.calls) +
                                 " calls made so far; calls count from 1)");
    s.armed_at = n;
    s.read_fault = read_fault;
  }

  /// @brief Disarms every point and zeroes the counters.
  void reset() {
    std::lock_guard lock(mutex_);
    slots_ = {};
  }

  /// @brief Calls of @p point made so far.
  [[nodiscard]] std::uint64_t calls(fault_point point) const {
    std::lock_guard lock(mutex_);
    return slots_[static_cast<std::size_t>(point)].calls;
  }

  /// @brief How many armed faults of @p point have fired.
  [[nodiscard]] std::uint64_t fired(fault_point point) const {
    std::lock_guard lock(mutex_);
    return slots_[static_cast<std::size_t>(point)].fired;
  }

  /// @brief Counts one call of @p point; returns its number when it is the armed one (the
  /// fault then fires and is spent), 0 otherwise.
  [[nodiscard]] std::uint64_t hit(fault_point point) {
    std::lock_guard lock(mutex_);
    auto& s = slot(point);
    ++s.calls;
    if (s.armed_at == 0 || s.calls != s.armed_at) return 0;
    s.armed_at = 0;
    ++s.fired;
    return s.calls;
  }

  /// @brief file_fault_hook: counts a file_read and fails it when armed.
  [[nodiscard]] file_read_fault before_read(const std::string&, std::uint64_t,
                                            std::uint64_t) override {
    std::lock_guard lock(mutex_);
    auto& s = slot(fault_point::file_read);
    ++s.calls;
    if (s.armed_at == 0 || s.calls != s.armed_at) return {};
    s.armed_at = 0;
    ++s.fired;
    return s.read_fault;
  }

 private:
  struct point_state {
    std::uint64_t calls = 0;
    std::uint64_t armed_at = 0;  // 0: not armed
    std::uint64_t fired = 0;
    file_read_fault read_fault{};
  };
  point_state& slot(fault_point p) { return slots_[static_cast<std::size_t>(p)]; }

  mutable std::mutex mutex_;
  std::array<point_state, fault_point_count> slots_{};
};

/// @brief Wraps a transport: every call is forwarded to @p Inner (detail::transport_adaptor),
/// and the calls named by fault_point fail when the shared fault_injector says so. Models
/// ddo::transport and every optional capability @p Inner models.
/// @tparam Inner any ddo::transport (host_sim_transport, linear_transport, ...).
template <class Inner>
class fault_injection_transport : public detail::transport_adaptor<Inner> {
  using adaptor = detail::transport_adaptor<Inner>;

 public:
  using typename adaptor::stream_view;

  /// @brief Wraps @p inner; faults come from @p faults (a fresh injector when null).
  explicit fault_injection_transport(Inner inner, std::shared_ptr<fault_injector> faults = nullptr)
      : adaptor(std::move(inner)),
        faults_(faults ? std::move(faults) : std::make_shared<fault_injector>()) {}

  /// @brief The injector shared by every copy of this wrapper.
  [[nodiscard]] fault_injector& faults() const noexcept { return *faults_; }
  [[nodiscard]] const std::shared_ptr<fault_injector>& faults_ptr() const noexcept {
    return faults_;
  }

  [[nodiscard]] std::string_view name() const noexcept { return "fault_injection"; }

  [[nodiscard]] std::byte* allocate_device(std::size_t bytes) {
    if (const auto n = faults_->hit(fault_point::allocate_device))
      throw out_of_memory(memory_tier::device, bytes, 0,
                          injected(fault_point::allocate_device, n) + " (device allocation of " +
                              std::to_string(bytes) + " bytes)");
    return this->upstream().allocate_device(bytes);
  }
  [[nodiscard]] std::byte* allocate_pinned(std::size_t bytes) {
    if (const auto n = faults_->hit(fault_point::allocate_pinned))
      throw out_of_memory(memory_tier::pinned_host, bytes, 0,
                          injected(fault_point::allocate_pinned, n) +
                              " (pinned host allocation of " + std::to_string(bytes) + " bytes)");
    return this->upstream().allocate_pinned(bytes);
  }
  [[nodiscard]] bool register_host(void* p, std::size_t bytes) {
    if (faults_->hit(fault_point::register_host) != 0) return false;
    return this->upstream().register_host(p, bytes);
  }
  void copy_to_device(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s) {
    if (const auto n = faults_->hit(fault_point::copy_to_device))
      throw cuda_error(999, "cudaErrorUnknown", "copy_to_device", __FILE__, __LINE__,
                       injected(fault_point::copy_to_device, n) + " (copy of " +
                           std::to_string(bytes) + " bytes to the device)");
    this->upstream().copy_to_device(dst, src, bytes, s);
  }

 private:
  static std::string injected(fault_point p, std::uint64_t n) {
    return "fault injection: " + std::string(fault_point_name(p)) + " call #" + std::to_string(n) +
           " failed";
  }

  std::shared_ptr<fault_injector> faults_;
};

}  // namespace v0
}  // namespace ddo
