// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The VMM window (not API): stable addresses for streamed groups inside a planned mapped
/// budget, shared by the CUDA VMM transport (transport/vmm.hpp) and host_sim's VMM mode
/// (transport/host_sim_vmm.hpp). The memory operations come from a Driver (the CUDA driver API,
/// or host_sim's mmap simulation); this class decides what is mapped where.
///
/// - One address reservation per offloader (component): every streamed group gets a range
///   rounded up to the allocation granularity, so each group is one contiguous range and keeps
///   its address for the whole run.
/// - Physical handles are all created at setup: each ring slot owns ceil(slot / handle) of them.
///   The number of slots is what the budget holds after the resident set (budget − resident) /
///   (handles per slot × handle bytes), at most one per streamed group; nothing is created or
///   released after setup.
/// - bind(slot, g) (on ddo's staging thread, after the previous occupant's release and ready
///   events completed) unmaps the previous occupant's range and maps g's range on the slot's
///   handles, then sets access over g's whole range. CUDA_ERROR_NOT_READY is retried a bounded
///   number of times.
/// - Page tables are warmed at setup: every group range is mapped, made accessible and unmapped
///   once (the first set-access on a fresh range is the slow one).
///
/// Driver requirements (each call returns a driver_result, 0 = success):
///   using handle_type;  std::uint64_t granularity();
///   reserve(std::byte** p, std::uint64_t bytes, std::uint64_t alignment); free_reservation(p, bytes);
///   create(handle_type* h, std::uint64_t bytes); release(handle_type h, std::uint64_t bytes);
///   map(std::byte* p, std::uint64_t bytes, handle_type h); unmap(std::byte* p, std::uint64_t bytes);
///   set_access(std::byte* p, std::uint64_t bytes);
///   [[noreturn]] fail(driver_result r, const char* call);  static constexpr driver_result not_ready.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "ddo/core/chrono.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/platform/cuda_driver.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/vmm_stats.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Settings of a VMM window (the mapped budget), common to the CUDA and host_sim modes.
struct vmm_window_options {
  /// vmm_resident_weight_budget_gb in bytes: resident set + mapped window. 0 is refused.
  std::uint64_t budget_bytes = 0;
  /// vmm_page_mb in bytes: physical handle size; 0 picks 64 MiB (physical-limits.md), or the
  /// largest group rounded to the granularity when that is smaller. Must be a granularity multiple.
  std::uint64_t handle_bytes = 0;
  /// vmm_staging_buffer_gb in bytes: the pinned staging buffer must fit the largest group's
  /// staged bytes (0: not checked — no staging buffer is configured).
  std::uint64_t staging_buffer_bytes = 0;
  /// Attempts for a call that answers CUDA_ERROR_NOT_READY before it is reported.
  int max_attempts = 8;
  /// Map, set access and unmap every group range once at setup.
  bool warm_page_tables = true;
  /// Fault injection (tests): handle creation answers CUDA_ERROR_OUT_OF_MEMORY once this many
  /// handles exist (0: never).
  std::size_t fail_create_after = 0;
  /// Fault injection (tests): every n-th map answers CUDA_ERROR_NOT_READY once (0: never).
  std::size_t not_ready_every = 0;
};

namespace detail {

/// The physical handle size of a VMM window: vmm_page_mb where stated (@p page_bytes), else
/// 64 MiB or, when smaller, the largest group's slot (@p slot_bytes, at least one granule) in
/// whole granules of @p granularity (physical-limits.md). The window and the planning estimate
/// (stable_addresses::share_resident_budget, 2 MiB granules) both size by it.
[[nodiscard]] constexpr std::uint64_t vmm_handle_bytes(std::uint64_t page_bytes,
                                                       std::uint64_t slot_bytes,
                                                       std::uint64_t granularity) noexcept {
  if (page_bytes != 0) return page_bytes;
  return std::min(ddo::round_up(64 * mib, granularity),
                  ddo::round_up(std::max<std::uint64_t>(slot_bytes, 1), granularity));
}

template <class Driver>
class vmm_window {
 public:
  using handle_type = typename Driver::handle_type;

  vmm_window() = default;
  vmm_window(const vmm_window&) = delete;
  vmm_window& operator=(const vmm_window&) = delete;
  ~vmm_window() { release(); }

  /// Reserves the ranges, creates the handles and warms the page tables; returns the slot count.
  /// @throws config_error (budget), out_of_memory (handles), cuda_error (driver).
  std::size_t prepare(Driver& d, const vmm_window_options& o, const stable_address_request& r) {
    DDO_EXPECTS(driver_ == nullptr, "vmm window: prepared twice (a ddo bug)");
    driver_ = &d;
    options_ = o;
    gran_ = d.granularity();
    DDO_EXPECTS(gran_ > 0, "vmm window: the driver reports a zero allocation granularity");
    if (o.handle_bytes % gran_ != 0)
      throw config_error(origin::transport, "vmm_page_mb",
                         "vmm_page_mb = " + std::to_string(o.handle_bytes / mib) +
                             " MiB is not a multiple of the device's VMM allocation "
                             "granularity (" +
                             std::to_string(gran_) + " bytes); use a multiple of " +
                             std::to_string(std::max<std::uint64_t>(1, gran_ / mib)) +
                             " MiB, or 0 for the measured default");
    // Where no group has a mapped range (every streamed weight is one the route does not cover)
    // the handle is one granule, so the arithmetic below holds; no handle is created.
    handle_ = vmm_handle_bytes(o.handle_bytes, r.slot_bytes, gran_);
    per_slot_ = static_cast<std::size_t>(round_up(r.slot_bytes, handle_) / handle_);
    // A slot is its handles plus the runtime's linear side image (uncovered weights).
    const std::uint64_t slot_device = per_slot_ * handle_ + r.side_slot_bytes;
    check_budget(o, r, slot_device);
    offsets_.assign(r.group_bytes.size(), not_reserved);
    ranges_.assign(r.group_bytes.size(), 0);
    std::uint64_t total = 0;
    for (std::size_t g = 0; g < r.group_bytes.size(); ++g) {
      if (r.group_bytes[g] == 0) continue;
      offsets_[g] = total;
      // cuMemMap maps whole handles only (offset 0, size = the handle's size; a smaller size is
      // CUDA_ERROR_NOT_SUPPORTED), so a group's range is a whole number of handles. The padding
      // costs address space only: a slot holds per_slot_ whole handles either way.
      ranges_[g] = round_up(r.group_bytes[g], handle_);
      total += ranges_[g];
    }
    const auto streamed = std::max<std::size_t>(
        r.streamed_groups, std::ranges::count_if(r.group_bytes, [](auto b) { return b != 0; }));
    if (slot_device == 0) return 0;  // nothing streamed
    const std::size_t fit =
        static_cast<std::size_t>((o.budget_bytes - r.resident_bytes) / slot_device);
    std::size_t slots = std::min({fit, streamed, r.max_slots == 0 ? streamed : r.max_slots});
    if (slots == 0) return 0;
    reserved_ = total;
    if (total != 0) call("reserve", [&] { return d.reserve(&base_, total, gran_); });
    handles_.reserve(slots * per_slot_);
    for (std::size_t i = 0; i < slots * per_slot_; ++i) {
      handle_type h{};
      call("create", [&] {
        if (o.fail_create_after != 0 && handles_.size() >= o.fail_create_after)
          return out_of_memory_result;
        return d.create(&h, handle_);
      });
      handles_.push_back(h);
    }
    occupant_.assign(slots, no_occupant);
    if (o.warm_page_tables)
      for (std::size_t g = 0; g < offsets_.size(); ++g)
        if (offsets_[g] != not_reserved) {
          map_range(0, g);
          unmap_range(0, g);
        }
    stats_ = {.handle_bytes = handle_,
              .handle_count = handles_.size(),
              .reserved_bytes = reserved_,
              .slots = slots};
    return slots;
  }

  [[nodiscard]] std::byte* address(std::size_t g) const {
    DDO_EXPECTS(g < offsets_.size() && offsets_[g] != not_reserved,
                "vmm window: group " + std::to_string(g) + " has no reserved range (not streamed)");
    return base_ + offsets_[g];
  }

  /// Maps group g on slot s (the previous occupant's range is unmapped first). The caller
  /// guarantees no kernel or copy still uses the previous occupant (its events completed). A
  /// group without a range (all its streamed weights in the runtime's side image) leaves the
  /// slot's handles unmapped: its previous occupant must not stay mapped there, or loading that
  /// group into another slot would map its range twice.
  void bind(std::size_t s, std::size_t g) {
    DDO_EXPECTS(s < occupant_.size(), "vmm window: slot out of range (a ddo bug)");
    if (occupant_[s] == g) return;
    if (occupant_[s] != no_occupant) unmap_range(s, occupant_[s]);
    if (g >= offsets_.size() || offsets_[g] == not_reserved) return;
    map_range(s, g);
    ++stats_.binds;
    stats_.bytes_mapped += ranges_[g];
  }

  /// Unmaps everything, releases the handles and the reservation (no throw; errors printed).
  void release() noexcept {
    if (driver_ == nullptr) return;
    auto& d = *driver_;
    for (std::size_t s = 0; s < occupant_.size(); ++s)
      if (occupant_[s] != no_occupant) {
        const std::size_t g = occupant_[s];
        for (std::size_t i = 0; i < handles_of(g); ++i) quiet(d.unmap(base_ + offsets_[g] + i * handle_, handle_), "unmap");
        occupant_[s] = no_occupant;
      }
    for (auto h : handles_) quiet(d.release(h, handle_), "release");
    handles_.clear();
    if (base_ != nullptr) quiet(d.free_reservation(base_, reserved_), "free_reservation");
    base_ = nullptr;
    driver_ = nullptr;
  }

  [[nodiscard]] vmm_window_stats stats() const noexcept { return stats_; }
  [[nodiscard]] std::uint64_t physical_bytes() const noexcept { return handles_.size() * handle_; }
  [[nodiscard]] bool prepared() const noexcept { return driver_ != nullptr; }
  /// Whether [p, p + n) lies inside this window's reservation.
  [[nodiscard]] bool reserves(const std::byte* p, std::uint64_t n) const noexcept {
    return base_ != nullptr && p >= base_ && p + n <= base_ + reserved_;
  }

 private:
  static constexpr driver_result out_of_memory_result = 2;  // CUDA_ERROR_OUT_OF_MEMORY
  static constexpr std::size_t no_occupant = static_cast<std::size_t>(-1);
  static constexpr std::uint64_t not_reserved = static_cast<std::uint64_t>(-1);

  /// Refuses a budget that holds no slot beside the resident set, or a staging buffer smaller
  /// than the largest group's staged bytes (@p slot_device: one slot on the device).
  void check_budget(const vmm_window_options& o, const stable_address_request& r,
                    std::uint64_t slot_device) const {
    if (o.budget_bytes == 0)
      throw config_error(
          origin::transport, "vmm_resident_weight_budget_gb",
          "vmm_resident_weight_budget_gb is 0: the VMM route maps streamed groups "
          "inside this budget, so it needs at least the resident set plus one group (" +
              std::to_string(r.resident_bytes + slot_device) + " bytes here)");
    if (o.budget_bytes < r.resident_bytes + slot_device)
      throw config_error(
          origin::transport, "vmm_resident_weight_budget_gb",
          "vmm_resident_weight_budget_gb is " + std::to_string(o.budget_bytes) +
              " bytes, smaller than the resident set (" + std::to_string(r.resident_bytes) +
              " bytes) plus the largest group's slot (" + std::to_string(slot_device) +
              " bytes: " + std::to_string(per_slot_) + " handle(s) of " + std::to_string(handle_) +
              (r.side_slot_bytes == 0
                   ? std::string()
                   : " + " + std::to_string(r.side_slot_bytes) +
                         " bytes of linear side image for the weights VMM does not cover") +
              "); raise the budget or plan fewer weights resident");
    if (o.staging_buffer_bytes != 0 && r.largest_staged_bytes > o.staging_buffer_bytes)
      throw config_error(origin::transport, "vmm_staging_buffer_gb",
                         "vmm_staging_buffer_gb holds " + std::to_string(o.staging_buffer_bytes) +
                             " bytes but the largest group stages " +
                             std::to_string(r.largest_staged_bytes) +
                             " bytes through it; raise vmm_staging_buffer_gb to at least that");
  }

  /// Group g's range is whole handles (prepare rounds it), so piece i is handle i of its slot.
  [[nodiscard]] std::size_t handles_of(std::size_t g) const noexcept {
    return static_cast<std::size_t>(ranges_[g] / handle_);
  }

  /// Maps group g's range on slot s's handles, one whole handle per piece. A failure unmaps the
  /// handles already mapped before it propagates, so the slot stays empty and teardown can free
  /// the reservation.
  void map_range(std::size_t s, std::size_t g) {
    auto& d = *driver_;
    std::byte* p = base_ + offsets_[g];
    std::size_t mapped = 0;
    try {
      for (; mapped < handles_of(g); ++mapped) {
        const auto h = handles_[s * per_slot_ + mapped];
        timed(stats_.map_ms, [&] {
          call("map", [&] {
            const std::size_t n = options_.not_ready_every;
            if (n != 0 && ++map_calls_ % n == 0) return Driver::not_ready;
            return d.map(p + mapped * handle_, handle_, h);
          });
        });
        ++stats_.maps;
      }
      timed(stats_.access_ms, [&] { call("set_access", [&] { return d.set_access(p, ranges_[g]); }); });
      ++stats_.access_calls;
    } catch (...) {
      for (std::size_t i = 0; i < mapped; ++i) quiet(d.unmap(p + i * handle_, handle_), "unmap");
      throw;
    }
    occupant_[s] = g;
  }

  void unmap_range(std::size_t s, std::size_t g) {
    auto& d = *driver_;
    std::byte* p = base_ + offsets_[g];
    for (std::size_t i = 0; i < handles_of(g); ++i) {
      timed(stats_.unmap_ms, [&] { call("unmap", [&] { return d.unmap(p + i * handle_, handle_); }); });
      ++stats_.unmaps;
    }
    occupant_[s] = no_occupant;
  }

  template <class F>
  static void timed(double& into, F&& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    into += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }

  /// Runs a driver call, retrying CUDA_ERROR_NOT_READY (bounded, with a growing pause).
  template <class F>
  void call(const char* what, F&& f) {
    const int attempts = std::max(1, options_.max_attempts);
    for (int a = 1;; ++a) {
      const driver_result r = f();
      if (r == 0) return;
      if (r == Driver::not_ready && a < attempts) {
        ++stats_.retries;
        std::this_thread::sleep_for(std::chrono::microseconds(20 * a));
        continue;
      }
      driver_->fail(r, (std::string("vmm ") + what + (r == Driver::not_ready
                                                          ? " (still CUDA_ERROR_NOT_READY after " +
                                                                std::to_string(attempts) + " attempts)"
                                                          : std::string()))
                           .c_str());
    }
  }

  static void quiet(driver_result r, const char* what) noexcept {
    if (r != 0) std::fprintf(stderr, "ddo: vmm %s during teardown failed with driver result %d\n", what, r);
  }

  Driver* driver_ = nullptr;
  vmm_window_options options_;
  std::uint64_t gran_ = 0;
  std::uint64_t handle_ = 0;
  std::size_t per_slot_ = 0;
  std::byte* base_ = nullptr;
  std::uint64_t reserved_ = 0;
  std::vector<std::uint64_t> offsets_;  // per group
  std::vector<std::uint64_t> ranges_;   // per group: whole handles
  std::vector<handle_type> handles_;    // slot-major
  std::vector<std::size_t> occupant_;   // per slot
  vmm_window_stats stats_;
  std::uint64_t map_calls_ = 0;
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo
