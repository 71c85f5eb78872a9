// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::allocation_ledger: the one account of device, pinned and registered host bytes a
/// transport hands out — bytes in use, peaks, allocation and free counts (budgets, leak checks,
/// metrics) — shared by every transport (host_sim, linear; vmm and nvme when they exist).
///
/// Cost model: allocations, frees and registrations (setup-time calls) take a mutex and update a
/// range map, so a free of a pointer/size pair that was never handed out is a usage_error. The
/// counters are atomics: reading them never locks. The per-copy range checks (contains()) are
/// what a transport calls on its copy path; they take the mutex and search the map, so transports
/// call them only when `ledger_checks_copies` is true: in builds without NDEBUG, or when
/// DDO_CHECKED_TRANSPORTS is defined. A release build's copy path touches no lock and no map.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "ddo/core/enum_names.hpp"
#include "ddo/core/error.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Whether transports check every copy against their allocations (see the file comment).
#if defined(DDO_CHECKED_TRANSPORTS) || !defined(NDEBUG)
inline constexpr bool ledger_checks_copies = true;
#else
inline constexpr bool ledger_checks_copies = false;
#endif

/// @brief The kinds of memory a transport accounts for.
enum class ledger_kind : unsigned char {
  device,      ///< device memory (allocate_device)
  pinned,      ///< pinned host memory the transport allocated (allocate_pinned)
  registered,  ///< existing host memory page-locked in place (register_host)
};
inline constexpr std::size_t ledger_kind_count = 3;

template <>
struct enum_names<ledger_kind> {
  static constexpr std::array<std::string_view, 3> values = {"device", "pinned", "registered"};
};
static_assert(enum_names<ledger_kind>::values.size() == ledger_kind_count,
              "a name for every ledger_kind");

/// @brief "device", "pinned", "registered".
[[nodiscard]] constexpr std::string_view to_string(ledger_kind k) noexcept {
  return enum_name(k);
}

/// @brief Counters of one kind at one moment.
struct ledger_counts {
  std::uint64_t in_use = 0;       ///< bytes held now
  std::uint64_t peak = 0;         ///< most bytes held at once (since the last reset_peak)
  std::uint64_t allocations = 0;  ///< successful allocations / registrations so far
  std::uint64_t frees = 0;        ///< frees / unregistrations so far
  std::uint64_t bytes_allocated = 0;  ///< total bytes ever allocated
  std::uint64_t bytes_freed = 0;      ///< total bytes ever freed
  /// @brief Allocations not freed yet (a leak when non-zero at the end of a run).
  [[nodiscard]] std::uint64_t live() const noexcept { return allocations - frees; }
};

/// @brief The account of one transport's memory. Thread-safe; see the file comment for costs.
/// Transports keep one in their shared state, so copies of a transport share it.
class allocation_ledger {
 public:
  allocation_ledger() = default;
  allocation_ledger(const allocation_ledger&) = delete;
  allocation_ledger& operator=(const allocation_ledger&) = delete;

  /// @brief Records [p, p + bytes) as handed out. @throws usage_error when it overlaps a range
  /// of the same kind that is still held (a transport bug, or a double registration).
  void add(ledger_kind k, const void* p, std::uint64_t bytes, std::string_view who);
  /// @brief Forgets the range starting at @p p; returns its bytes.
  /// @param bytes the size the caller states (0: take the recorded size, e.g. unregister_host).
  /// @throws usage_error when no range starts at @p p, or its size is not @p bytes.
  std::uint64_t remove(ledger_kind k, const void* p, std::uint64_t bytes, std::string_view who);

  /// @brief Whether [p, p + bytes) lies inside one held range of kind @p k (locks; see file).
  [[nodiscard]] bool contains(ledger_kind k, const void* p, std::uint64_t bytes) const;
  /// @brief Whether [p, p + bytes) overlaps a held range of kind @p k (locks).
  [[nodiscard]] bool overlaps(ledger_kind k, const void* p, std::uint64_t bytes) const;

  /// @brief Bytes of kind @p k held now (lock-free).
  [[nodiscard]] std::uint64_t in_use(ledger_kind k) const noexcept {
    return kinds_[index(k)].in_use.load(std::memory_order_relaxed);
  }
  /// @brief Peak bytes of kind @p k (lock-free).
  [[nodiscard]] std::uint64_t peak(ledger_kind k) const noexcept {
    return kinds_[index(k)].peak.load(std::memory_order_relaxed);
  }
  /// @brief All counters of kind @p k (lock-free; the fields are read one by one).
  [[nodiscard]] ledger_counts counts(ledger_kind k) const noexcept;
  /// @brief Sets the peak of kind @p k to its current use (between phases of a test or a run).
  void reset_peak(ledger_kind k) noexcept {
    auto& c = kinds_[index(k)];
    c.peak.store(c.in_use.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }

 private:
  struct counters {
    std::atomic<std::uint64_t> in_use{0}, peak{0}, allocations{0}, frees{0}, allocated{0}, freed{0};
  };
  using range_map = std::map<const std::byte*, std::uint64_t>;
  static constexpr std::size_t index(ledger_kind k) noexcept { return static_cast<std::size_t>(k); }
  static bool range_contains(const range_map& m, const std::byte* p, std::uint64_t n) noexcept;
  static bool range_overlaps(const range_map& m, const std::byte* p, std::uint64_t n) noexcept;

  mutable std::mutex mutex_;
  std::array<range_map, ledger_kind_count> ranges_;
  std::array<counters, ledger_kind_count> kinds_;
};

// --- implementation -----------------------------------------------------------------------------

inline void allocation_ledger::add(ledger_kind k, const void* p, std::uint64_t bytes,
                                   std::string_view who) {
  const auto* b = static_cast<const std::byte*>(p);
  {
    std::lock_guard lock(mutex_);
    auto& m = ranges_[index(k)];
    if (range_overlaps(m, b, bytes))
      throw usage_error(std::string(who) + ": " + std::to_string(bytes) + " " +
                        std::string(to_string(k)) +
                        " bytes overlap a range the transport already holds");
    m.emplace(b, bytes);
  }
  auto& c = kinds_[index(k)];
  const std::uint64_t now = c.in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::uint64_t seen = c.peak.load(std::memory_order_relaxed);
  while (now > seen && !c.peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
  c.allocations.fetch_add(1, std::memory_order_relaxed);
  c.allocated.fetch_add(bytes, std::memory_order_relaxed);
}

inline std::uint64_t allocation_ledger::remove(ledger_kind k, const void* p, std::uint64_t bytes,
                                               std::string_view who) {
  std::uint64_t held = 0;
  {
    std::lock_guard lock(mutex_);
    auto& m = ranges_[index(k)];
    auto it = m.find(static_cast<const std::byte*>(p));
    if (it == m.end() || (bytes != 0 && it->second != bytes))
      throw usage_error(std::string(who) + ": the pointer" + (bytes != 0 ? "/size pair" : "") +
                        " was not handed out as " + std::string(to_string(k)) +
                        " memory by this transport" +
                        (it != m.end() ? " (recorded size " + std::to_string(it->second) +
                                             ", given " + std::to_string(bytes) + ")"
                                       : std::string()));
    held = it->second;
    m.erase(it);
  }
  auto& c = kinds_[index(k)];
  c.in_use.fetch_sub(held, std::memory_order_relaxed);
  c.frees.fetch_add(1, std::memory_order_relaxed);
  c.freed.fetch_add(held, std::memory_order_relaxed);
  return held;
}

inline bool allocation_ledger::contains(ledger_kind k, const void* p, std::uint64_t bytes) const {
  std::lock_guard lock(mutex_);
  return range_contains(ranges_[index(k)], static_cast<const std::byte*>(p), bytes);
}

inline bool allocation_ledger::overlaps(ledger_kind k, const void* p, std::uint64_t bytes) const {
  std::lock_guard lock(mutex_);
  return range_overlaps(ranges_[index(k)], static_cast<const std::byte*>(p), bytes);
}

inline ledger_counts allocation_ledger::counts(ledger_kind k) const noexcept {
  const auto& c = kinds_[index(k)];
  ledger_counts r;
  r.in_use = c.in_use.load(std::memory_order_relaxed);
  r.peak = c.peak.load(std::memory_order_relaxed);
  r.allocations = c.allocations.load(std::memory_order_relaxed);
  r.frees = c.frees.load(std::memory_order_relaxed);
  r.bytes_allocated = c.allocated.load(std::memory_order_relaxed);
  r.bytes_freed = c.freed.load(std::memory_order_relaxed);
  return r;
}

inline bool allocation_ledger::range_contains(const range_map& m, const std::byte* p,
                                              std::uint64_t n) noexcept {
  auto it = m.upper_bound(p);
  if (it == m.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second;
}

inline bool allocation_ledger::range_overlaps(const range_map& m, const std::byte* p,
                                              std::uint64_t n) noexcept {
  auto it = m.upper_bound(p);
  if (it != m.end() && it->first < p + n) return true;
  if (it == m.begin()) return false;
  --it;
  return it->first + it->second > p;
}

}  // namespace v0
}  // namespace ddo
