// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::limited_ledger: "check the limit, then add to the ledger" as one step, the way
/// rmm's limiting_resource_adaptor wraps an upstream resource. A transport hands it the upstream
/// allocation (cudaMalloc, operator new) as a callable; the adaptor refuses a request over the
/// kind's limit with out_of_memory before the upstream runs, and records what the upstream
/// returned in its allocation_ledger. Check, upstream call and record happen under one mutex, so
/// two threads cannot both pass the check with the same last free bytes (allocations are
/// setup-time calls: the lock costs nothing on the copy path).

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "ddo/core/error.hpp"
#include "ddo/core/memory_tier.hpp"
#include "ddo/transport/allocation_ledger.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The limit of a ledger_kind without one.
inline constexpr std::uint64_t unlimited_bytes = std::numeric_limits<std::uint64_t>::max();

/// @brief Bytes each ledger_kind may hold at once (unlimited unless set).
struct ledger_limits {
  std::uint64_t device = unlimited_bytes;
  std::uint64_t pinned = unlimited_bytes;
  std::uint64_t registered = unlimited_bytes;
};

/// @brief An allocation_ledger behind a byte limit per ledger_kind (see the file comment).
class limited_ledger {
 public:
  /// @param owner names the transport in refusals ("linear", "host_sim")
  /// @param limit_name what the limit is, for refusals ("the transport's device limit")
  explicit limited_ledger(std::string_view owner, ledger_limits l = {},
                          std::string_view limit_name = "limit")
      : owner_(owner), limit_name_(limit_name), limits_{l.device, l.pinned, l.registered} {}

  /// @brief Runs @p upstream (a callable returning the new block) when @p bytes fit under the
  /// limit of @p k, and records the block as held by @p who.
  /// @throws out_of_memory over the limit (naming the owner, the limit and the bytes in use);
  /// whatever @p upstream throws.
  template <class Upstream>
  [[nodiscard]] std::byte* allocate(ledger_kind k, std::uint64_t bytes, std::string_view who,
                                    Upstream&& upstream) {
    std::lock_guard lock(mutex_);
    check(k, bytes);
    std::byte* p = std::forward<Upstream>(upstream)();
    ledger_.add(k, p, bytes, who);
    return p;
  }

  /// @brief Records [p, p + bytes) (memory an extension of the transport holds, e.g. a VMM
  /// handle) under the limit of @p k. @throws out_of_memory over the limit.
  void add(ledger_kind k, const void* p, std::uint64_t bytes, std::string_view who) {
    std::lock_guard lock(mutex_);
    check(k, bytes);
    ledger_.add(k, p, bytes, who);
  }

  /// @brief Records [p, p + bytes) when it fits under the limit of @p k and overlaps no held
  /// range of kind @p k or of @p disjoint_from; false otherwise (a refused registration).
  [[nodiscard]] bool try_add(ledger_kind k, const void* p, std::uint64_t bytes,
                             std::string_view who,
                             std::optional<ledger_kind> disjoint_from = std::nullopt) {
    std::lock_guard lock(mutex_);
    if (bytes > available(k)) return false;
    if (ledger_.overlaps(k, p, bytes)) return false;
    if (disjoint_from && ledger_.overlaps(*disjoint_from, p, bytes)) return false;
    ledger_.add(k, p, bytes, who);
    return true;
  }

  /// @brief Forgets the block at @p p (see allocation_ledger::remove); returns its bytes.
  std::uint64_t remove(ledger_kind k, const void* p, std::uint64_t bytes, std::string_view who) {
    return ledger_.remove(k, p, bytes, who);
  }

  /// @brief Bytes of kind @p k that still fit under its limit (lock-free).
  [[nodiscard]] std::uint64_t available(ledger_kind k) const noexcept {
    const std::uint64_t limit = limit_of(k);
    const std::uint64_t used = ledger_.in_use(k);
    return limit > used ? limit - used : 0;
  }
  [[nodiscard]] std::uint64_t limit_of(ledger_kind k) const noexcept {
    return limits_[static_cast<std::size_t>(k)];
  }
  [[nodiscard]] const allocation_ledger& ledger() const noexcept { return ledger_; }
  /// @brief Sets the peak of kind @p k to its current use (between phases of a test).
  void reset_peak(ledger_kind k) noexcept { ledger_.reset_peak(k); }

 private:
  static memory_tier tier_of(ledger_kind k) noexcept {
    return k == ledger_kind::device ? memory_tier::device : memory_tier::pinned_host;
  }
  void check(ledger_kind k, std::uint64_t bytes) const {
    const std::uint64_t avail = available(k);
    if (bytes <= avail) return;
    throw out_of_memory(tier_of(k), bytes, avail,
                        owner_ + ": " + std::string(to_string(k)) + " allocation of " +
                            std::to_string(bytes) + " bytes refused: " + limit_name_ + " is " +
                            std::to_string(limit_of(k)) + " bytes and " +
                            std::to_string(ledger_.in_use(k)) + " are in use");
  }

  std::string owner_;
  std::string limit_name_;
  std::array<std::uint64_t, ledger_kind_count> limits_;
  std::mutex mutex_;
  allocation_ledger ledger_;
};

}  // namespace v0
}  // namespace ddo
