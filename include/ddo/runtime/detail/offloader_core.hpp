// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The offloader's engine room: setup (layout, pinning, residents, ring), the acquire /
/// release / prefetch protocol, the staging thread, metrics harvesting. Not API: use
/// ddo::basic_offloader (runtime/basic_offloader.hpp).
///
/// Protocol (docs/transports.md has the long form):
/// - Every slot has a `ready` event (recorded after the last copy into it) and a `release` event
///   (recorded on the engine's stream when a lease on it is dropped).
/// - A copy into a slot is issued only while no lease holds the slot, so its release event has
///   been recorded (or was never needed); the copy stream waits on `release` and `ready` first.
/// - Pinned bytes are copied by the engine's thread on the copy stream; pageable and file bytes
///   by the staging thread on the staging stream, through two pinned buffers. The engine waits
///   (host) for the staging thread to have *recorded* a slot's ready event before it waits on it.
/// - Prefetch ("pump") runs after every acquire and release: it keeps the next prefetch_depth
///   streamed groups (cyclically, so the next step's first groups follow the last) loaded,
///   evicting only slots that are not leased and hold no group of that window.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/memory/pinned_weight_cache.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/runtime/detail/parallel_copy.hpp"
#include "ddo/runtime/lease.hpp"
#include "ddo/runtime/metrics.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/runtime/trace.hpp"
#include "ddo/transport/concepts.hpp"

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define DDO_HAS_NVTX 1
#else
#define DDO_HAS_NVTX 0
#endif

namespace ddo {
inline namespace v0 {
namespace detail {

inline constexpr std::size_t no_group = std::numeric_limits<std::size_t>::max();
inline constexpr std::uint64_t not_streamed = std::numeric_limits<std::uint64_t>::max();

/// Bytes of one streamed weight that go through the staging buffers.
struct staged_piece {
  std::uint64_t slot_offset = 0;
  std::uint64_t bytes = 0;
  const std::byte* host = nullptr;  // host source; null: read from file
  std::size_t file = 0;
  std::uint64_t file_offset = 0;
  transfer_source source = transfer_source::pageable_staged;
};

/// Everything the runtime precomputes about one execution group.
struct group_runtime {
  std::string name;
  std::vector<std::size_t> weights;       // weight-table indices, plan order
  std::vector<std::uint64_t> slot_offset; // per weight; not_streamed for resident ones
  std::vector<std::byte*> resident;       // per weight; resident device address or null
  std::uint64_t pinned_bytes = 0;         // slot bytes [0, pinned_bytes) come from `block`
  std::uint64_t packed_weight_bytes = 0;  // weight bytes in `block` (without alignment)
  std::shared_ptr<pinned_block> block;
  bool pinned_staged = false;             // pinning failed: the block is staged like pageable
  std::vector<staged_piece> in_place;     // pinned weights registered where the engine has them
  std::vector<staged_piece> staged;       // sorted by slot offset
  std::uint64_t slot_bytes = 0;           // bytes of the slot this group uses
  std::array<std::uint64_t, transfer_source_count> bytes_by_source{};
  std::vector<std::byte*> pointers;       // per slot, per weight (or per weight if not streamed)
  std::vector<std::uint32_t> bound;       // positions with a binding
  int leases = 0;
  bool bindings_written = false;
  [[nodiscard]] bool streamed() const noexcept { return slot_bytes > 0; }
  [[nodiscard]] bool has_block_copy() const noexcept { return pinned_bytes > 0 && !pinned_staged; }
  [[nodiscard]] bool has_copy_part() const noexcept { return has_block_copy() || !in_place.empty(); }
  [[nodiscard]] bool has_staged_part() const noexcept { return !staged.empty(); }
};

/// An engine pointer ddo rewrites for leases (swap strategy).
struct binding {
  void* target = nullptr;                     // address of the engine's T*
  void (*write)(void*, void*) = nullptr;      // *static_cast<T**>(target) = value
  void* original = nullptr;                   // the engine's value at bind time
};

/// RAII device allocation through a transport.
template <class T>
struct device_allocation {
  T* transport = nullptr;
  std::byte* data = nullptr;
  std::uint64_t bytes = 0;
  device_allocation() = default;
  device_allocation(T& t, std::uint64_t n) : transport(&t), data(t.allocate_device(n)), bytes(n) {}
  device_allocation(device_allocation&& o) noexcept
      : transport(o.transport), data(std::exchange(o.data, nullptr)), bytes(o.bytes) {}
  device_allocation& operator=(device_allocation&& o) noexcept {
    std::swap(transport, o.transport);
    std::swap(data, o.data);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~device_allocation() {
    if (data == nullptr) return;
    try {
      transport->free_device(data, bytes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddo: freeing device memory failed during cleanup: %s\n", e.what());
    }
  }
};

/// RAII pinned host allocation through a transport.
template <class T>
struct pinned_allocation {
  T* transport = nullptr;
  std::byte* data = nullptr;
  std::uint64_t bytes = 0;
  pinned_allocation() = default;
  pinned_allocation(T& t, std::uint64_t n) : transport(&t), data(t.allocate_pinned(n)), bytes(n) {}
  pinned_allocation(pinned_allocation&& o) noexcept
      : transport(o.transport), data(std::exchange(o.data, nullptr)), bytes(o.bytes) {}
  pinned_allocation& operator=(pinned_allocation&& o) noexcept {
    std::swap(transport, o.transport);
    std::swap(data, o.data);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~pinned_allocation() {
    if (data == nullptr) return;
    try {
      transport->free_pinned(data, bytes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddo: freeing pinned memory failed during cleanup: %s\n", e.what());
    }
  }
};

/// NVTX range guard; a no-op unless enabled and nvtx3 exists.
class nvtx_range {
 public:
  nvtx_range(bool on, const char* name) noexcept : on_(on && DDO_HAS_NVTX) {
#if DDO_HAS_NVTX
    if (on_) nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~nvtx_range() {
#if DDO_HAS_NVTX
    if (on_) nvtxRangePop();
#endif
  }
  nvtx_range(const nvtx_range&) = delete;
  nvtx_range& operator=(const nvtx_range&) = delete;

 private:
  bool on_;
};

[[nodiscard]] inline std::string human_bytes(std::uint64_t b) {
  char buf[64];
  if (b >= gib)
    std::snprintf(buf, sizeof buf, "%llu bytes (%.2f GiB)", static_cast<unsigned long long>(b),
                  bytes_to_gib(b));
  else
    std::snprintf(buf, sizeof buf, "%llu bytes (%.1f MiB)", static_cast<unsigned long long>(b),
                  static_cast<double>(b) / static_cast<double>(mib));
  return buf;
}

template <class Transport>
class offloader_core {
 public:
  using T = Transport;
  using stream_view = typename T::stream_view;
  using event = typename T::event;
  using lease_type = lease<T>;

  offloader_core(T transport, const weight_table& table, offload_plan plan, runtime_options options)
      : t_(std::move(transport)), table_(&table), plan_(std::move(plan)), options_(std::move(options)) {
    const auto setup_start = clock::now();
    nvtx_range range(options_.nvtx, "ddo setup");
    try {
      validate_and_layout();
      check_budgets();
      open_files();
      copy_stream_ = t_.make_stream();
      staging_stream_ = t_.make_stream();
      if (staging_needed_) {
        for (auto& b : staging_) b = pinned_allocation<T>(t_, options_.staging_buffer_bytes);
        for (auto& e : staging_free_) e = t_.make_event(false);
      }
      copier_ = std::make_unique<parallel_copier>(std::max<std::size_t>(1, options_.staging_threads));
      pin_groups();
      upload_residents();
      allocate_ring();
      if (options_.metrics) {
        epoch_event_ = t_.make_event(true);
        for (std::size_t i = 0; i < 64 + 8 * groups_.size() && i < 4096; ++i) {
          timing_pool_.push_back(t_.make_event(true));
          free_timing_.push_back(timing_pool_.size() - 1);
        }
      }
      // Setup is the one place that synchronizes: residents must be on the device before the
      // first lease, and the metrics epoch must be a completed event.
      t_.synchronize(T::view(copy_stream_));
      t_.synchronize(T::view(staging_stream_));
      if (options_.metrics) {
        t_.record(epoch_event_, T::view(copy_stream_));
        t_.synchronize(epoch_event_);
      }
      epoch_ = clock::now();
      if (staging_needed_) worker_ = std::thread([this] { staging_loop(); });
    } catch (...) {
      teardown();
      throw;
    }
    if (options_.trace != nullptr) {
      trace_span s{span_kind::setup, "setup", no_group, 0, -micros(epoch_ - setup_start), 0.0, false};
      options_.trace->on_span(s);
    }
  }

  offloader_core(const offloader_core&) = delete;
  offloader_core& operator=(const offloader_core&) = delete;
  ~offloader_core() {
    if (live_leases_ != 0)
      std::fprintf(stderr,
                   "ddo: offloader destroyed while %d lease(s) are alive; their pointers dangle\n",
                   live_leases_);
    teardown();
  }

  // --- the hot path ---------------------------------------------------------------------------
  lease_type acquire(std::size_t g, stream_view s) {
    DDO_EXPECTS(g < groups_.size(), "acquire: group index " + std::to_string(g) +
                                        " is out of range; the plan has " +
                                        std::to_string(groups_.size()) + " groups");
    nvtx_range range(options_.nvtx, "ddo acquire");
    rethrow_worker_error();
    const auto host_start = tracing() ? clock::now() : clock::time_point{};
    note_step(g);
    auto& gr = groups_[g];
    ++current().acquires;
    int slot = -1;
    if (gr.streamed()) {
      slot = where_[g];
      if (slot >= 0) {
        ++current().hits;
      } else {
        ++current().misses;
        slot = victim_for_miss(g);
        load(g, static_cast<std::size_t>(slot));
      }
      auto& st = slots_[static_cast<std::size_t>(slot)];
      wait_staged(st);
      if (options_.metrics) {
        const std::size_t a = take_timing(), b = take_timing();
        t_.record(timing_pool_[a], s);
        t_.wait(s, st.ready);
        t_.record(timing_pool_[b], s);
        pending_.push_back({span_kind::stall, steps_.size() - 1, g, 0, a, b, 0});
      } else {
        t_.wait(s, st.ready);
      }
      ++st.leases;
    }
    ++gr.leases;
    ++live_leases_;
    std::byte* const* ptrs =
        slot >= 0 ? slots_[static_cast<std::size_t>(slot)].pointers.data() : gr.pointers.data();
    lease_type result(this, g, slot, s, ptrs, gr.weights.size());
    last_group_ = g;
    next_expected_ = (g + 1) % groups_.size();
    pump();
    if (!gr.bound.empty()) write_bindings(gr, ptrs);
    if (tracing()) lease_start_[g] = host_start;
    return result;
  }

  void release(std::size_t g, int slot, stream_view s) {
    nvtx_range range(options_.nvtx, "ddo release");
    auto& gr = groups_[g];
    --live_leases_;
    if (--gr.leases == 0 && gr.bindings_written) restore_bindings(gr);
    if (slot >= 0) {
      auto& st = slots_[static_cast<std::size_t>(slot)];
      // One release event covers every lease of this occupancy: a release on another stream
      // than the previous one first waits on it, so re-recording loses none of the readers.
      if (st.released && !(st.release_stream == s)) t_.wait(s, st.release);
      t_.record(st.release, s);
      st.released = true;
      st.release_stream = s;
      --st.leases;
    }
    if (tracing()) {
      trace_span span{span_kind::lease, gr.name, g, 0, micros(lease_start_[g] - epoch_),
                      micros(clock::now() - epoch_), false};
      options_.trace->on_span(span);
    }
    pump();
  }

  std::byte* lease_data(std::size_t g, std::byte* const* ptrs, std::string_view name) const {
    const auto& gr = groups_[g];
    for (std::size_t i = 0; i < gr.weights.size(); ++i)
      if ((*table_)[gr.weights[i]].name == name) return ptrs[i];
    throw usage_error("lease::data: weight '" + std::string(name) + "' is not in group '" +
                      gr.name + "'");
  }
  std::size_t lease_weight_index(std::size_t g, std::size_t i) const {
    const auto& gr = groups_[g];
    DDO_EXPECTS(i < gr.weights.size(), "lease: weight position " + std::to_string(i) +
                                           " is out of range; group '" + gr.name + "' has " +
                                           std::to_string(gr.weights.size()) + " weights");
    return gr.weights[i];
  }

  // --- steps and metrics ----------------------------------------------------------------------
  void begin_step() {
    start_step();
    explicit_step_ = true;
  }

  offload_metrics metrics(bool wait) {
    harvest(wait);
    offload_metrics m;
    m.route = options_.route;
    m.transport = std::string(t_.name());
    m.timing = options_.metrics;
    m.steps = steps_;
    for (const auto& s : steps_) m.totals += s;
    m.resident_bytes = resident_.bytes;
    m.slot_bytes = slot_bytes_;
    m.slot_count = slots_.size();
    m.pinned_bytes = pinned_bytes_;
    m.pin_fallback_bytes = pin_fallback_bytes_;
    m.staging_bytes = staging_needed_ ? 2 * options_.staging_buffer_bytes : 0;
    m.device_bytes = resident_.bytes + ring_.bytes;
    m.peak_device_bytes = peak_device_bytes_;
    m.cached_blocks_reused = cached_blocks_reused_;
    return m;
  }

  /// Waits for every load ddo issued (not for the engine's streams).
  void synchronize() {
    wait_all_staged();
    t_.synchronize(T::view(copy_stream_));
    t_.synchronize(T::view(staging_stream_));
  }

  // --- bindings ------------------------------------------------------------------------------
  void bind(std::size_t w, void* target, void (*write)(void*, void*), void* original) {
    DDO_EXPECTS(options_.strategy == runtime_strategy::swap,
                "bind: binding engine pointers is the swap strategy; this offloader runs "
                "linear_runtime_strategy=functional (use the lease's pointers, or set swap)");
    DDO_EXPECTS(live_leases_ == 0, "bind: cannot bind while leases are alive");
    DDO_EXPECTS(w < bindings_.size(), "bind: weight index out of range");
    const std::size_t g = group_of_[w];
    DDO_EXPECTS(g != no_group, "bind: weight '" + (*table_)[w].name + "' is in no group");
    bindings_[w] = {target, write, original};
    rebuild_bound(g);
  }
  void unbind(std::size_t w) {
    DDO_EXPECTS(live_leases_ == 0, "unbind: cannot unbind while leases are alive");
    DDO_EXPECTS(w < bindings_.size(), "unbind: weight index out of range");
    if (bindings_[w].target == nullptr) return;
    bindings_[w].write(bindings_[w].target, bindings_[w].original);
    bindings_[w] = {};
    if (group_of_[w] != no_group) rebuild_bound(group_of_[w]);
  }

  // --- queries -------------------------------------------------------------------------------
  [[nodiscard]] std::size_t group_count() const noexcept { return groups_.size(); }
  [[nodiscard]] const std::string& group_name(std::size_t g) const { return groups_.at(g).name; }
  [[nodiscard]] std::optional<std::size_t> find_group(std::string_view name) const {
    auto it = group_index_.find(std::string(name));
    if (it == group_index_.end()) return std::nullopt;
    return it->second;
  }
  [[nodiscard]] std::optional<std::size_t> find_weight(std::string_view name) const {
    return table_->find(name);
  }
  [[nodiscard]] std::byte* resident_data(std::size_t w) const {
    DDO_EXPECTS(w < resident_ptr_.size() && resident_ptr_[w] != nullptr,
                "resident_data: weight is not resident on the device");
    return resident_ptr_[w];
  }
  [[nodiscard]] const offload_plan& plan() const noexcept { return plan_; }
  [[nodiscard]] const runtime_options& options() const noexcept { return options_; }
  [[nodiscard]] std::uint64_t slot_bytes() const noexcept { return slot_bytes_; }
  [[nodiscard]] std::size_t slot_count() const noexcept { return slots_.size(); }
  [[nodiscard]] std::uint64_t device_bytes() const noexcept { return resident_.bytes + ring_.bytes; }
  [[nodiscard]] int live_leases() const noexcept { return live_leases_; }
  [[nodiscard]] T& transport() noexcept { return t_; }
  [[nodiscard]] const weight_table& table() const noexcept { return *table_; }

 private:
  using clock = std::chrono::steady_clock;

  struct slot_state {
    std::byte* base = nullptr;
    std::byte* image = nullptr;        // where the occupant's bytes are (base, or bound)
    std::vector<std::byte*> pointers;  // the occupant's weight addresses (lease pointers)
    std::size_t occupant = no_group;
    int leases = 0;
    bool released = false;       // a lease of the current occupant was dropped
    stream_view release_stream{};  // the stream of that drop
    std::uint64_t staged_ticket = 0;  // latest staging job into this slot
    event ready;
    event release;
  };

  struct staging_job {
    std::size_t group = 0;
    std::size_t slot = 0;
    std::uint64_t ticket = 0;
    bool poison = false;
    std::size_t timing_start = no_group;  // record on the staging stream before the copies
    std::size_t timing_end = no_group;    // record after them
  };

  struct pending_timing {
    span_kind kind;
    std::size_t step;
    std::size_t group;
    std::uint64_t bytes;
    std::size_t start;
    std::size_t end;
    std::uint64_t ticket;  // staging job that records the events (0: recorded by the engine)
  };

  static double micros(clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
  }
  [[nodiscard]] bool tracing() const noexcept { return options_.trace != nullptr; }

  // --- setup ---------------------------------------------------------------------------------
  void validate_and_layout() {
    const auto& table = *table_;
    DDO_EXPECTS(plan_.decisions.size() == table.size(),
                "offloader: the plan has " + std::to_string(plan_.decisions.size()) +
                    " decisions but the weight table has " + std::to_string(table.size()) +
                    " weights; make the plan from this table");
    const std::uint64_t align = options_.alignment;
    DDO_EXPECTS(align != 0 && (align & (align - 1)) == 0,
                "runtime_options::alignment must be a power of two, got " + std::to_string(align));
    group_of_.assign(table.size(), no_group);
    bindings_.assign(table.size(), binding{});
    resident_ptr_.assign(table.size(), nullptr);
    groups_.resize(plan_.groups.size());
    for (std::size_t g = 0; g < plan_.groups.size(); ++g) {
      const auto& pg = plan_.groups[g];
      auto& gr = groups_[g];
      gr.name = pg.name.empty() ? "group " + std::to_string(g) : pg.name;
      group_index_.emplace(gr.name, g);
      gr.weights = pg.weights;
      for (std::size_t w : pg.weights) {
        DDO_EXPECTS(w < table.size(), "offloader: group '" + gr.name + "' names weight index " +
                                          std::to_string(w) + " but the table has " +
                                          std::to_string(table.size()) + " weights");
        DDO_EXPECTS(group_of_[w] == no_group, "offloader: weight '" + table[w].name +
                                                  "' is in two groups ('" +
                                                  groups_[group_of_[w]].name + "' and '" +
                                                  gr.name + "')");
        group_of_[w] = g;
      }
    }
    // Residents: every gpu_resident weight, grouped or not, in one device arena.
    std::uint64_t resident_cursor = 0;
    resident_offset_.assign(table.size(), not_streamed);
    for (std::size_t w = 0; w < table.size(); ++w) {
      const auto& info = table[w];
      check_source(w);
      if (plan_.decisions[w].where == placement::gpu_resident) {
        resident_offset_[w] = resident_cursor;
        resident_cursor = round_up(resident_cursor + std::max<std::uint64_t>(info.bytes, 1), align);
      } else {
        DDO_EXPECTS(group_of_[w] != no_group,
                    "offloader: weight '" + info.name + "' is placed " +
                        std::string(to_string(plan_.decisions[w].where)) +
                        " but belongs to no group, so it would never reach the device");
      }
    }
    resident_bytes_ = resident_cursor;
    // Slot layout: the pinned weights first (one contiguous copy), then staged ones.
    for (auto& gr : groups_) {
      gr.slot_offset.assign(gr.weights.size(), not_streamed);
      std::uint64_t cursor = 0;
      // pass 0: pinned weights packed into a block; 1: pinned in place; 2: staged weights
      for (int pass = 0; pass < 3; ++pass) {
        for (std::size_t i = 0; i < gr.weights.size(); ++i) {
          const std::size_t w = gr.weights[i];
          const auto where = plan_.decisions[w].where;
          if (where == placement::gpu_resident) continue;
          const auto& info = table[w];
          const bool file = std::holds_alternative<file_source>(info.source);
          const bool pinned = where == placement::pinned_host;
          const int weight_pass = !pinned ? 2 : (packed(w) ? 0 : 1);
          if (weight_pass != pass) continue;
          gr.slot_offset[i] = cursor;
          if (pinned) {
            gr.bytes_by_source[static_cast<std::size_t>(transfer_source::pinned)] += info.bytes;
            if (pass == 0) gr.packed_weight_bytes += info.bytes;
            if (pass == 1 && info.bytes > 0) {
              staged_piece piece;
              piece.slot_offset = cursor;
              piece.bytes = info.bytes;
              piece.host = std::get<host_source>(info.source).data;
              piece.source = transfer_source::pinned;
              gr.in_place.push_back(piece);
            }
          } else {
            staged_piece piece;
            piece.slot_offset = cursor;
            piece.bytes = info.bytes;
            if (file) {
              const auto& f = std::get<file_source>(info.source);
              piece.file = f.file_index;
              piece.file_offset = f.offset;
              piece.source = transfer_source::file;
            } else {
              piece.host = std::get<host_source>(info.source).data;
            }
            gr.bytes_by_source[static_cast<std::size_t>(piece.source)] += info.bytes;
            if (piece.bytes > 0) gr.staged.push_back(piece);
          }
          cursor = round_up(cursor + info.bytes, align);
        }
        if (pass == 0) gr.pinned_bytes = cursor;
      }
      gr.slot_bytes = cursor;
      if (!gr.staged.empty()) staging_needed_ = true;
      slot_bytes_ = std::max(slot_bytes_, gr.slot_bytes);
    }
    // Resident uploads go through the staging buffers too.
    if (resident_bytes_ > 0) staging_needed_ = true;
    file_used_.assign(table.files().size(), false);
    for (std::size_t w = 0; w < table.size(); ++w)
      if (const auto* f = std::get_if<file_source>(&table[w].source))
        if (group_of_[w] != no_group || resident_offset_[w] != not_streamed)
          file_used_[f->file_index] = true;
    for (std::size_t g = 0; g < groups_.size(); ++g)
      if (groups_[g].streamed()) streamed_order_.push_back(g);
    // first streamed group at or after g, as a position in streamed_order_
    streamed_pos_.assign(groups_.size(), 0);
    if (!streamed_order_.empty()) {
      std::size_t pos = 0;
      for (std::size_t g = 0; g < groups_.size(); ++g) {
        while (pos < streamed_order_.size() && streamed_order_[pos] < g) ++pos;
        streamed_pos_[g] = pos % streamed_order_.size();
      }
    }
    where_.assign(groups_.size(), -1);
    lease_start_.assign(groups_.size(), clock::time_point{});
    const std::size_t slot_count = std::min(options_.slot_count, streamed_order_.size());
    DDO_EXPECTS(streamed_order_.empty() || slot_count >= 1,
                "runtime_options::slot_count must be at least 1 when groups are streamed");
    slot_count_ = slot_count;
    prefetch_depth_ = std::min(options_.prefetch_depth, slot_count);
    if (options_.max_copy_bytes != 0) options_.max_copy_bytes = std::max(options_.max_copy_bytes, 16 * mib);
    DDO_EXPECTS(options_.staging_buffer_bytes >= 4096,
                "runtime_options::staging_buffer_bytes must be at least 4096, got " +
                    std::to_string(options_.staging_buffer_bytes));
  }

  /// A pinned weight copied into a packed block (not registered where the engine keeps it).
  [[nodiscard]] bool packed(std::size_t w) const {
    return !(options_.pin_in_place && std::holds_alternative<host_source>((*table_)[w].source));
  }

  void check_source(std::size_t w) const {
    const auto& info = (*table_)[w];
    if (const auto* h = std::get_if<host_source>(&info.source)) {
      DDO_EXPECTS(h->data != nullptr || info.bytes == 0,
                  "offloader: weight '" + info.name + "' has a null host pointer");
    }
    if (plan_.decisions[w].where == placement::file)
      DDO_EXPECTS(std::holds_alternative<file_source>(info.source),
                  "offloader: weight '" + info.name +
                      "' is placed 'file' but its source is host memory");
  }

  void check_budgets() {
    const std::uint64_t ring = slot_bytes_ * slot_count_;
    const std::uint64_t need = resident_bytes_ + ring;
    auto describe = [&] {
      return "resident weights " + human_bytes(resident_bytes_) + " + ring of " +
             std::to_string(slot_count_) + " slots x " + human_bytes(slot_bytes_) +
             " (the largest streamed group) = " + human_bytes(need);
    };
    if (options_.device_budget_bytes != 0 && need > options_.device_budget_bytes)
      throw out_of_memory("device", need, options_.device_budget_bytes,
                          "offloader setup refused: " + describe() + " exceeds the device budget of " +
                              human_bytes(options_.device_budget_bytes) +
                              "; lower the resident budget, use smaller groups or fewer slots");
    const auto info = t_.device_memory();
    if (need > info.free_bytes)
      throw out_of_memory("device", need, info.free_bytes,
                          "offloader setup refused: " + describe() + " but only " +
                              human_bytes(info.free_bytes) + " of device memory are free");
    std::uint64_t pinned = 0;  // weight bytes, as the planner counted them (not aligned)
    for (const auto& gr : groups_) pinned += gr.bytes_by_source[static_cast<std::size_t>(transfer_source::pinned)];
    const std::uint64_t pin_budget = options_.pinned_budget_bytes != 0
                                         ? options_.pinned_budget_bytes
                                         : plan_.budgets.pin_budget_bytes;
    if (pin_budget != 0 && pinned > pin_budget)
      throw out_of_memory("pinned host", pinned, pin_budget,
                          "offloader setup refused: the plan pins " + human_bytes(pinned) +
                              " but the pinned budget is " + human_bytes(pin_budget));
  }

  void open_files() {
    files_.resize(table_->files().size());
    for (std::size_t f = 0; f < file_used_.size(); ++f)
      if (file_used_[f])
        files_[f] = std::make_unique<file_reader>(
            table_->files()[f], options_.file_backend,
            file_reader_options{.direct_io = false, .faults = options_.file_faults});
  }

  std::string block_key(const group_runtime& gr) const {
    std::string key = options_.cache_namespace;
    key += '\x1f';
    for (std::size_t i = 0; i < gr.weights.size(); ++i) {
      const std::size_t w = gr.weights[i];
      if (plan_.decisions[w].where != placement::pinned_host || !packed(w)) continue;
      const auto& info = (*table_)[w];
      key += info.name;
      key += '@';
      key += std::to_string(gr.slot_offset[i]);
      key += ':';
      key += std::to_string(info.bytes);
      if (const auto* h = std::get_if<host_source>(&info.source)) {
        key += "@host:";
        key += std::to_string(reinterpret_cast<std::uintptr_t>(h->data));
      } else {
        const auto& f = std::get<file_source>(info.source);
        key += "@file:" + table_->files()[f.file_index] + ":" + std::to_string(f.offset);
      }
      key += ';';
    }
    return key;
  }

  void fill_block(group_runtime& gr) {
    const auto& table = *table_;
    for (std::size_t i = 0; i < gr.weights.size(); ++i) {
      const std::size_t w = gr.weights[i];
      if (plan_.decisions[w].where != placement::pinned_host || !packed(w)) continue;
      const auto& info = table[w];
      if (info.bytes == 0) continue;
      std::byte* dst = gr.block->data() + gr.slot_offset[i];
      if (const auto* h = std::get_if<host_source>(&info.source)) {
        std::memcpy(dst, h->data, info.bytes);
      } else {
        const auto& f = std::get<file_source>(info.source);
        // The file read is the first touch of these pages (physical-limits.md).
        files_[f.file_index]->read(f.offset, std::span<std::byte>(dst, info.bytes));
      }
    }
  }

  /// Packs each group's pinned weights into a page-aligned block (first touch), then
  /// page-locks it with register_host — several workers, one group at a time each.
  void pin_groups() {
    std::vector<std::size_t> todo;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      auto& gr = groups_[g];
      if (gr.pinned_bytes == 0) continue;
      if (options_.pinned_cache != nullptr) {
        if (auto hit = options_.pinned_cache->find(block_key(gr))) {
          DDO_EXPECTS(hit->size() >= gr.pinned_bytes, "pinned_weight_cache: entry too small");
          gr.block = std::move(hit);
          ++cached_blocks_reused_;
          continue;
        }
      }
      todo.push_back(g);
    }
    std::atomic<std::size_t> next{0};
    std::mutex error_mutex;
    std::exception_ptr error;
    auto work = [&] {
      try {
        bind_this_thread();
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        return;
      }
      for (;;) {
        const std::size_t k = next.fetch_add(1);
        if (k >= todo.size()) return;
        {
          std::lock_guard lock(error_mutex);
          if (error) return;
        }
        try {
          auto& gr = groups_[todo[k]];
          auto block = std::make_shared<pinned_block>(gr.pinned_bytes);
          gr.block = block;
          fill_block(gr);
          T t = t_;
          std::byte* p = block->data();
          if (t.register_host(p, block->size()))
            block->set_registered([t, p]() mutable { t.unregister_host(p); });
        } catch (...) {
          std::lock_guard lock(error_mutex);
          if (!error) error = std::current_exception();
        }
      }
    };
    const std::size_t workers =
        std::min<std::size_t>(static_cast<std::size_t>(std::max(1, options_.pin_workers)), todo.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 1; i < workers; ++i) threads.emplace_back(work);
    work();
    for (auto& th : threads) th.join();
    if (error) std::rethrow_exception(error);
    for (std::size_t g : todo) {
      auto& gr = groups_[g];
      if (!gr.block->registered()) {
        if (!options_.allow_pin_fallback)
          throw out_of_memory("pinned host", gr.pinned_bytes, 0,
                              "offloader setup: page-locking " + human_bytes(gr.pinned_bytes) +
                                  " for group '" + gr.name +
                                  "' failed (cudaHostRegister refused) and "
                                  "allow_pin_memory_fallback is false");
        continue;
      }
      if (options_.pinned_cache != nullptr) options_.pinned_cache->insert(block_key(gr), gr.block);
    }
    for (auto& gr : groups_) {
      if (!gr.block) continue;
      if (gr.block->registered()) {
        pinned_bytes_ += gr.block->size();
        continue;
      }
      // Fallback: the packed block is staged like pageable memory (reported in metrics).
      gr.pinned_staged = true;
      pin_fallback_bytes_ += gr.packed_weight_bytes;
      staged_piece piece;
      piece.slot_offset = 0;
      piece.bytes = gr.pinned_bytes;
      piece.host = gr.block->data();
      piece.source = transfer_source::pageable_staged;
      gr.staged.insert(gr.staged.begin(), piece);
      auto& by = gr.bytes_by_source;
      by[static_cast<std::size_t>(transfer_source::pageable_staged)] += gr.packed_weight_bytes;
      by[static_cast<std::size_t>(transfer_source::pinned)] -= gr.packed_weight_bytes;
      ensure_staging();
    }
    pin_in_place();
  }

  void ensure_staging() {
    if (staging_buffers_missing()) {
      for (auto& b : staging_) b = pinned_allocation<T>(t_, options_.staging_buffer_bytes);
      for (auto& e : staging_free_) e = t_.make_event(false);
    }
    staging_needed_ = true;
  }

  /// pin_in_place: page-locks the engine's own pages under the in-place weights (whole pages,
  /// overlapping and adjacent ranges merged, each registered once). Weights on a range the
  /// driver refuses are staged (fallback) or setup fails.
  void pin_in_place() {
    struct range {
      std::uintptr_t begin, end;
      bool ok;
    };
    std::vector<range> ranges;
    const std::uintptr_t page = host_page_size();
    for (const auto& gr : groups_)
      for (const auto& p : gr.in_place) {
        const auto a = reinterpret_cast<std::uintptr_t>(p.host);
        ranges.push_back({a / page * page, (a + p.bytes + page - 1) / page * page, false});
      }
    if (ranges.empty()) return;
    std::sort(ranges.begin(), ranges.end(), [](const range& x, const range& y) { return x.begin < y.begin; });
    std::vector<range> merged;
    for (const auto& r : ranges) {
      if (!merged.empty() && r.begin <= merged.back().end)
        merged.back().end = std::max(merged.back().end, r.end);
      else
        merged.push_back(r);
    }
    for (auto& r : merged) {
      void* p = reinterpret_cast<void*>(r.begin);
      r.ok = t_.register_host(p, r.end - r.begin);
      if (r.ok) {
        registered_.push_back(p);
        pinned_bytes_ += r.end - r.begin;
      }
    }
    auto registered_at = [&](const std::byte* host) {
      const auto a = reinterpret_cast<std::uintptr_t>(host);
      auto it = std::upper_bound(merged.begin(), merged.end(), a,
                                 [](std::uintptr_t v, const range& r) { return v < r.begin; });
      return it != merged.begin() && std::prev(it)->ok;
    };
    for (auto& gr : groups_) {
      std::vector<staged_piece> kept;
      for (auto piece : gr.in_place) {
        if (registered_at(piece.host)) {
          kept.push_back(piece);
          continue;
        }
        if (!options_.allow_pin_fallback)
          throw out_of_memory("pinned host", piece.bytes, 0,
                              "offloader setup: page-locking the engine's memory of group '" +
                                  gr.name + "' in place failed (cudaHostRegister refused) and "
                                  "allow_pin_memory_fallback is false");
        pin_fallback_bytes_ += piece.bytes;
        gr.bytes_by_source[static_cast<std::size_t>(transfer_source::pinned)] -= piece.bytes;
        gr.bytes_by_source[static_cast<std::size_t>(transfer_source::pageable_staged)] += piece.bytes;
        piece.source = transfer_source::pageable_staged;
        gr.staged.push_back(piece);
      }
      gr.in_place.swap(kept);
      std::sort(gr.staged.begin(), gr.staged.end(),
                [](const staged_piece& x, const staged_piece& y) { return x.slot_offset < y.slot_offset; });
      if (!gr.staged.empty()) ensure_staging();
    }
  }

  [[nodiscard]] bool staging_buffers_missing() const noexcept { return staging_[0].data == nullptr; }

  void upload_residents() {
    if (resident_bytes_ == 0) return;
    resident_ = device_allocation<T>(t_, resident_bytes_);
    note_device_peak();
    std::vector<staged_piece> pieces;
    const auto& table = *table_;
    for (std::size_t w = 0; w < table.size(); ++w) {
      if (resident_offset_[w] == not_streamed) continue;
      resident_ptr_[w] = resident_.data + resident_offset_[w];
      const auto& info = table[w];
      if (info.bytes == 0) continue;
      staged_piece p;
      p.slot_offset = resident_offset_[w];
      p.bytes = info.bytes;
      if (const auto* h = std::get_if<host_source>(&info.source)) {
        p.host = h->data;
      } else {
        const auto& f = std::get<file_source>(info.source);
        p.file = f.file_index;
        p.file_offset = f.offset;
      }
      pieces.push_back(p);
    }
    stage_pieces(resident_.data, pieces, T::view(copy_stream_));
  }

  void allocate_ring() {
    if (slot_count_ == 0) {
      for (auto& gr : groups_) fill_pointers(gr);
      return;
    }
    ring_ = device_allocation<T>(t_, slot_bytes_ * slot_count_);
    note_device_peak();
    for (auto& gr : groups_) fill_pointers(gr);
    slots_.resize(slot_count_);
    protect_.assign(slot_count_, 0);
    for (std::size_t s = 0; s < slot_count_; ++s) {
      slots_[s].base = ring_.data + s * slot_bytes_;
      slots_[s].image = slots_[s].base;
      slots_[s].pointers.assign(max_group_weights_, nullptr);
      slots_[s].ready = t_.make_event(false);
      slots_[s].release = t_.make_event(false);
      if (options_.poison_slots) t_.fill_device(slots_[s].base, 0xCD, slot_bytes_, T::view(copy_stream_));
    }
  }

  void fill_pointers(group_runtime& gr) {
    const std::size_t n = gr.weights.size();
    gr.resident.assign(n, nullptr);
    for (std::size_t i = 0; i < n; ++i) gr.resident[i] = resident_ptr_[gr.weights[i]];
    if (!gr.streamed()) {
      gr.pointers = gr.resident;
      return;
    }
    max_group_weights_ = std::max(max_group_weights_, n);
  }

  /// Where group g's image goes in slot st: the slot's base, or (a transport with slot binding,
  /// e.g. VMM) the address the transport maps for g — asked at load time, after the previous
  /// occupant's release event was recorded (the transport may wait on it before remapping).
  void bind_slot_to(slot_state& st, std::size_t g) {
    if constexpr (transport_with_slot_binding<T>)
      st.image = t_.bind_slot(st.base, slot_bytes_, g, st.release);
    else
      st.image = st.base;
    const auto& gr = groups_[g];
    for (std::size_t i = 0; i < gr.weights.size(); ++i)
      st.pointers[i] = gr.slot_offset[i] == not_streamed ? gr.resident[i] : st.image + gr.slot_offset[i];
  }

  void note_device_peak() {
    peak_device_bytes_ = std::max(peak_device_bytes_, resident_.bytes + ring_.bytes);
  }

  // --- loading -------------------------------------------------------------------------------
  /// Copies @p pieces (sorted by offset) to dst_base + offset through the two staging buffers:
  /// while buffer b's bytes travel, the other is being filled. Runs on the staging thread (or
  /// at setup before it exists).
  std::uint64_t stage_pieces(std::byte* dst_base, const std::vector<staged_piece>& pieces,
                             stream_view v) {
    const std::uint64_t cap = options_.staging_buffer_bytes;
    std::uint64_t copies = 0;
    bool filling = false;
    std::uint64_t chunk_start = 0, chunk_end = 0;
    segments_.clear();
    auto flush = [&] {
      copier_->copy(segments_);
      segments_.clear();
      t_.copy_to_device(dst_base + chunk_start, staging_[stage_buffer_].data, chunk_end - chunk_start, v);
      t_.record(staging_free_[stage_buffer_], v);
      stage_buffer_ ^= 1u;
      filling = false;
      ++copies;
    };
    for (const auto& piece : pieces) {
      std::uint64_t off = piece.slot_offset;
      std::uint64_t done = 0;
      while (done < piece.bytes) {
        if (filling && off >= chunk_start + cap) flush();
        if (!filling) {
          // The host waits (on this thread) until the copy that last read this buffer is done.
          t_.synchronize(staging_free_[stage_buffer_]);
          chunk_start = chunk_end = off;
          filling = true;
        }
        const std::uint64_t take = std::min(piece.bytes - done, chunk_start + cap - off);
        std::byte* dst = staging_[stage_buffer_].data + (off - chunk_start);
        if (piece.host != nullptr)
          segments_.push_back({dst, piece.host + done, static_cast<std::size_t>(take)});
        else
          files_[piece.file]->read(piece.file_offset + done, std::span<std::byte>(dst, take));
        off += take;
        done += take;
        chunk_end = off;
        if (chunk_end - chunk_start == cap) flush();
      }
    }
    if (filling) flush();
    return copies;
  }

  void wait_staged(slot_state& st) {
    if (st.staged_ticket == 0) return;
    std::unique_lock lock(worker_mutex_);
    if (jobs_recorded_ >= st.staged_ticket && !worker_error_) return;
    const auto start = clock::now();
    worker_cv_.wait(lock, [&] { return jobs_recorded_ >= st.staged_ticket || worker_error_; });
    if (worker_error_) {
      lock.unlock();
      rethrow_worker_error();
    }
    if (!steps_.empty())
      current().host_wait_ms += std::chrono::duration<double, std::milli>(clock::now() - start).count();
  }

  void wait_all_staged() {
    std::unique_lock lock(worker_mutex_);
    worker_cv_.wait(lock, [&] { return jobs_recorded_ >= jobs_submitted_ || worker_error_ != nullptr; });
  }

  void rethrow_worker_error() {
    std::exception_ptr e;
    {
      std::lock_guard lock(worker_mutex_);
      e = worker_error_;
    }
    if (e) std::rethrow_exception(e);
  }

  /// Starts bringing group g into slot s (which no lease holds). A failure part-way (a copy
  /// that could not be issued) leaves the slot empty rather than claiming g with half its bytes,
  /// and is kept like a staging failure: pump() runs inside release(), whose caller (a lease's
  /// destructor) cannot throw, so the next acquire() rethrows it.
  void load(std::size_t g, std::size_t s) {
    try {
      load_unguarded(g, s);
    } catch (...) {
      auto& st = slots_[s];
      if (st.occupant == g) st.occupant = no_group;
      where_[g] = -1;
      {
        std::lock_guard lock(worker_mutex_);
        if (!worker_error_) worker_error_ = std::current_exception();
      }
      throw;
    }
  }

  void load_unguarded(std::size_t g, std::size_t s) {
    auto& st = slots_[s];
    auto& gr = groups_[g];
    wait_staged(st);  // the previous occupant's staging job must have recorded its events
    if (st.occupant != no_group) where_[st.occupant] = -1;
    st.occupant = g;
    bind_slot_to(st, g);
    st.released = false;
    where_[g] = static_cast<int>(s);
    auto& step = current();
    ++step.group_loads;
    for (std::size_t i = 0; i < transfer_source_count; ++i) step.bytes_by_source[i] += gr.bytes_by_source[i];
    const std::uint64_t bytes = gr.bytes_by_source[0] + gr.bytes_by_source[1] + gr.bytes_by_source[2];
    std::size_t t_start = no_group, t_end = no_group;
    if (options_.metrics) {
      t_start = take_timing();
      t_end = take_timing();
    }
    if (gr.has_copy_part()) {
      const auto v = T::view(copy_stream_);
      t_.wait(v, st.release);
      t_.wait(v, st.ready);
      if (options_.poison_slots) t_.fill_device(st.image, 0xCD, gr.slot_bytes, v);
      if (t_start != no_group) t_.record(timing_pool_[t_start], v);
      if (gr.has_block_copy()) {
        const std::uint64_t chunk = options_.max_copy_bytes == 0 ? gr.pinned_bytes : options_.max_copy_bytes;
        for (std::uint64_t off = 0; off < gr.pinned_bytes; off += chunk) {
          t_.copy_to_device(st.image + off, gr.block->data() + off, std::min(chunk, gr.pinned_bytes - off), v);
          ++step.copies;
        }
      }
      for (const auto& piece : gr.in_place) {
        t_.copy_to_device(st.image + piece.slot_offset, piece.host, piece.bytes, v);
        ++step.copies;
      }
      if (!gr.has_staged_part()) {
        if (t_end != no_group) t_.record(timing_pool_[t_end], v);
        t_.record(st.ready, v);
        if (t_start != no_group) pending_.push_back({span_kind::copy, steps_.size() - 1, g, bytes, t_start, t_end, 0});
        return;
      }
      t_.record(st.ready, v);  // the staging job waits on it, then re-records it
    }
    staging_job job;
    job.group = g;
    job.slot = s;
    job.poison = options_.poison_slots && !gr.has_copy_part();
    job.timing_start = gr.has_copy_part() ? no_group : t_start;
    job.timing_end = t_end;
    step.copies += estimate_staged_copies(gr);
    {
      std::lock_guard lock(worker_mutex_);
      job.ticket = ++jobs_submitted_;
      jobs_.push_back(job);
    }
    st.staged_ticket = job.ticket;
    worker_cv_.notify_all();
    if (t_start != no_group) pending_.push_back({span_kind::copy, steps_.size() - 1, g, bytes, t_start, t_end, job.ticket});
  }

  std::uint64_t estimate_staged_copies(const group_runtime& gr) const {
    if (gr.staged.empty()) return 0;
    const std::uint64_t span = gr.staged.back().slot_offset + gr.staged.back().bytes - gr.staged.front().slot_offset;
    return (span + options_.staging_buffer_bytes - 1) / options_.staging_buffer_bytes;
  }

  void bind_this_thread() {
    if constexpr (transport_with_thread_binding<T>) t_.bind_thread();
  }

  void staging_loop() {
    try {
      bind_this_thread();
    } catch (...) {
      std::lock_guard lock(worker_mutex_);
      if (!worker_error_) worker_error_ = std::current_exception();
    }
    for (;;) {
      staging_job job;
      {
        std::unique_lock lock(worker_mutex_);
        worker_cv_.wait(lock, [&] { return stop_worker_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = jobs_.front();
        jobs_.pop_front();
      }
      std::exception_ptr failure;
      try {
        run_staging_job(job);
      } catch (...) {
        failure = std::current_exception();
      }
      {
        std::lock_guard lock(worker_mutex_);
        jobs_recorded_ = job.ticket;
        if (failure && !worker_error_) worker_error_ = failure;
      }
      worker_cv_.notify_all();
    }
  }

  void run_staging_job(const staging_job& job) {
    auto& st = slots_[job.slot];
    const auto& gr = groups_[job.group];
    const auto v = T::view(staging_stream_);
    t_.wait(v, st.release);
    t_.wait(v, st.ready);
    if (job.poison) t_.fill_device(st.image, 0xCD, gr.slot_bytes, v);
    if (job.timing_start != no_group) t_.record(timing_pool_[job.timing_start], v);
    stage_pieces(st.image, gr.staged, v);
    if (job.timing_end != no_group) t_.record(timing_pool_[job.timing_end], v);
    t_.record(st.ready, v);
  }

  // --- the ring ------------------------------------------------------------------------------
  /// Cyclic distance from the engine's next expected group: how soon g will be needed.
  [[nodiscard]] std::size_t distance(std::size_t g) const noexcept {
    return (g + groups_.size() - next_expected_) % groups_.size();
  }

  int victim_for_miss(std::size_t g) {
    int best = -1;
    std::size_t best_distance = 0;
    const std::size_t saved = next_expected_;
    next_expected_ = (g + 1) % groups_.size();
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      const auto& st = slots_[s];
      if (st.leases > 0) continue;
      const std::size_t d = st.occupant == no_group ? groups_.size() : distance(st.occupant);
      if (best < 0 || d > best_distance) {
        best = static_cast<int>(s);
        best_distance = d;
      }
    }
    next_expected_ = saved;
    if (best < 0) {
      std::string held;
      for (const auto& st : slots_) {
        if (!held.empty()) held += ", ";
        held += "'" + groups_[st.occupant].name + "'";
      }
      throw usage_error("acquire('" + groups_[g].name + "'): all " + std::to_string(slots_.size()) +
                        " slots of the ring are held by live leases (" + held +
                        "); drop a lease before acquiring another group, or raise slot_count");
    }
    return best;
  }

  /// Keeps the next prefetch_depth streamed groups loaded or loading (see file comment).
  void pump() {
    if (prefetch_depth_ == 0 || streamed_order_.empty()) return;
    for (std::size_t s = 0; s < slots_.size(); ++s) protect_[s] = slots_[s].leases > 0;
    const std::size_t count = streamed_order_.size();
    const std::size_t first = streamed_pos_[next_expected_];
    const std::size_t window = std::min(prefetch_depth_, count);
    for (std::size_t k = 0; k < window; ++k) {
      const std::size_t g = streamed_order_[(first + k) % count];
      if (where_[g] >= 0) {
        protect_[static_cast<std::size_t>(where_[g])] = 1;
        continue;
      }
      int victim = -1;
      std::size_t victim_distance = 0;
      for (std::size_t s = 0; s < slots_.size(); ++s) {
        if (protect_[s]) continue;
        const std::size_t d = slots_[s].occupant == no_group ? groups_.size() : distance(slots_[s].occupant);
        if (victim < 0 || d > victim_distance) {
          victim = static_cast<int>(s);
          victim_distance = d;
        }
      }
      if (victim < 0) {
        ++current().deferred_prefetches;
        return;
      }
      load(g, static_cast<std::size_t>(victim));
      protect_[static_cast<std::size_t>(victim)] = 1;
    }
  }

  // --- bindings ------------------------------------------------------------------------------
  void rebuild_bound(std::size_t g) {
    auto& gr = groups_[g];
    gr.bound.clear();
    for (std::size_t i = 0; i < gr.weights.size(); ++i)
      if (bindings_[gr.weights[i]].target != nullptr) gr.bound.push_back(static_cast<std::uint32_t>(i));
  }
  void write_bindings(group_runtime& gr, std::byte* const* ptrs) {
    for (std::uint32_t i : gr.bound) {
      const auto& b = bindings_[gr.weights[i]];
      b.write(b.target, ptrs[i]);
    }
    gr.bindings_written = true;
  }
  void restore_bindings(group_runtime& gr) noexcept {
    for (std::uint32_t i : gr.bound) {
      const auto& b = bindings_[gr.weights[i]];
      b.write(b.target, b.original);
    }
    gr.bindings_written = false;
  }

  // --- steps, timing -------------------------------------------------------------------------
  step_metrics& current() {
    if (steps_.empty()) start_step();
    return steps_.back();
  }
  void note_step(std::size_t g) {
    if (explicit_step_) {
      explicit_step_ = false;
      return;
    }
    if (steps_.empty() || (acquired_any_ && g <= last_group_)) start_step();
    acquired_any_ = true;
  }
  void start_step() {
    if (tracing() && !steps_.empty()) {
      const std::string name = "step " + std::to_string(steps_.size() - 1);
      trace_span span{span_kind::step, name, no_group, steps_.back().bytes(),
                      micros(step_start_ - epoch_), micros(clock::now() - epoch_), false};
      options_.trace->on_span(span);
    }
    step_metrics m;
    m.step = steps_.size();
    steps_.push_back(m);
    step_start_ = clock::now();
    if (options_.metrics) harvest(false);
  }

  std::size_t take_timing() {
    if (free_timing_.empty()) {
      harvest(false);
      if (free_timing_.empty()) {
        timing_pool_.push_back(t_.make_event(true));
        return timing_pool_.size() - 1;
      }
    }
    const std::size_t i = free_timing_.back();
    free_timing_.pop_back();
    return i;
  }

  void harvest(bool wait) {
    if (pending_.empty()) return;
    std::uint64_t recorded = 0;
    {
      std::lock_guard lock(worker_mutex_);
      recorded = jobs_recorded_;
    }
    std::deque<pending_timing> keep;
    for (auto& p : pending_) {
      if (p.ticket > recorded) {
        if (!wait) {
          keep.push_back(p);
          continue;
        }
        std::unique_lock lock(worker_mutex_);
        worker_cv_.wait(lock, [&] { return jobs_recorded_ >= p.ticket || worker_error_; });
        recorded = jobs_recorded_;
        if (p.ticket > recorded) {  // the staging job failed: its events are never recorded
          free_timing_.push_back(p.start);
          free_timing_.push_back(p.end);
          continue;
        }
      }
      if (!wait && !t_.ready(timing_pool_[p.end])) {
        keep.push_back(p);
        continue;
      }
      const double ms = t_.elapsed_ms(timing_pool_[p.start], timing_pool_[p.end]);
      auto& step = steps_[p.step];
      if (p.kind == span_kind::copy) {
        step.copy_ms += ms;
        step.timed_bytes += p.bytes;
      } else {
        step.stall_ms += ms;
      }
      if (tracing()) {
        const double a = t_.elapsed_ms(epoch_event_, timing_pool_[p.start]) * 1000.0;
        trace_span span{p.kind, groups_[p.group].name, p.group, p.bytes, a, a + ms * 1000.0, true};
        options_.trace->on_span(span);
      }
      free_timing_.push_back(p.start);
      free_timing_.push_back(p.end);
    }
    pending_.swap(keep);
  }

  // --- teardown ------------------------------------------------------------------------------
  void teardown() noexcept {
    {
      std::lock_guard lock(worker_mutex_);
      stop_worker_ = true;
    }
    worker_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    auto quiet = [](auto&& f) {
      try {
        f();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ddo: during offloader teardown: %s\n", e.what());
      }
    };
    // Engine work reading the slots ends with their release events; ddo's own loads with the
    // copy and staging streams. Only then is the memory freed.
    for (auto& st : slots_) {
      quiet([&] { t_.synchronize(st.release); });
      quiet([&] { t_.synchronize(st.ready); });
    }
    if (copy_stream_.get() != nullptr) quiet([&] { t_.synchronize(T::view(copy_stream_)); });
    if (staging_stream_.get() != nullptr) quiet([&] { t_.synchronize(T::view(staging_stream_)); });
    for (std::size_t w = 0; w < bindings_.size(); ++w)
      if (bindings_[w].target != nullptr) bindings_[w].write(bindings_[w].target, bindings_[w].original);
    slots_.clear();
    timing_pool_.clear();
    epoch_event_ = event{};
    for (auto& e : staging_free_) e = event{};
    ring_ = device_allocation<T>{};
    resident_ = device_allocation<T>{};
    for (auto& b : staging_) b = pinned_allocation<T>{};
    for (auto& gr : groups_) gr.block.reset();
    for (void* p : registered_) quiet([&] { t_.unregister_host(p); });
    registered_.clear();
    files_.clear();
    copier_.reset();
    copy_stream_ = typename T::stream{};
    staging_stream_ = typename T::stream{};
  }

  T t_;
  const weight_table* table_;
  offload_plan plan_;
  runtime_options options_;

  std::vector<group_runtime> groups_;
  std::unordered_map<std::string, std::size_t> group_index_;
  std::vector<std::size_t> group_of_;
  std::vector<binding> bindings_;
  std::vector<std::uint64_t> resident_offset_;
  std::vector<std::byte*> resident_ptr_;
  std::vector<bool> file_used_;
  std::vector<std::unique_ptr<file_reader>> files_;
  std::vector<std::size_t> streamed_order_;
  std::vector<std::size_t> streamed_pos_;
  std::vector<int> where_;
  std::vector<char> protect_;
  std::uint64_t resident_bytes_ = 0;
  std::uint64_t slot_bytes_ = 0;
  std::size_t slot_count_ = 0;
  std::size_t prefetch_depth_ = 0;
  std::size_t max_group_weights_ = 0;
  bool staging_needed_ = false;
  std::uint64_t pinned_bytes_ = 0;
  std::vector<void*> registered_;  // engine pages registered in place (pin_in_place)
  std::uint64_t pin_fallback_bytes_ = 0;
  std::uint64_t peak_device_bytes_ = 0;
  std::uint64_t cached_blocks_reused_ = 0;

  typename T::stream copy_stream_;
  typename T::stream staging_stream_;
  device_allocation<T> resident_;
  device_allocation<T> ring_;
  std::vector<slot_state> slots_;
  std::array<pinned_allocation<T>, 2> staging_{};
  std::array<event, 2> staging_free_{};
  unsigned stage_buffer_ = 0;  // touched by setup, then only by the staging thread
  std::vector<copy_segment> segments_;       // likewise
  std::unique_ptr<parallel_copier> copier_;  // likewise

  // engine ↔ staging thread
  std::mutex worker_mutex_;
  std::condition_variable worker_cv_;
  std::deque<staging_job> jobs_;
  std::uint64_t jobs_submitted_ = 0;
  std::uint64_t jobs_recorded_ = 0;
  bool stop_worker_ = false;
  std::exception_ptr worker_error_;
  std::thread worker_;

  // engine thread state
  std::size_t next_expected_ = 0;
  std::size_t last_group_ = 0;
  bool acquired_any_ = false;
  bool explicit_step_ = false;
  int live_leases_ = 0;
  std::vector<step_metrics> steps_;
  std::vector<event> timing_pool_;
  std::vector<std::size_t> free_timing_;
  std::deque<pending_timing> pending_;
  event epoch_event_;
  clock::time_point epoch_{};
  clock::time_point step_start_{};
  std::vector<clock::time_point> lease_start_;
};

}  // namespace detail

// --- lease members (need the core) -----------------------------------------------------------
template <class Transport>
std::byte* lease<Transport>::data(std::size_t i) const {
  DDO_EXPECTS(core_ != nullptr, "lease::data: the lease is empty (moved from or released)");
  DDO_EXPECTS(i < count_, "lease::data: weight position " + std::to_string(i) +
                              " is out of range; the group has " + std::to_string(count_));
  return pointers_[i];
}
template <class Transport>
std::byte* lease<Transport>::data(std::string_view name) const {
  DDO_EXPECTS(core_ != nullptr, "lease::data: the lease is empty (moved from or released)");
  return core_->lease_data(group_, pointers_, name);
}
template <class Transport>
std::size_t lease<Transport>::weight_index(std::size_t i) const {
  DDO_EXPECTS(core_ != nullptr, "lease::weight_index: the lease is empty");
  return core_->lease_weight_index(group_, i);
}
template <class Transport>
void lease<Transport>::reset() noexcept {
  if (core_ == nullptr) return;
  auto* core = std::exchange(core_, nullptr);
  try {
    core->release(group_, slot_, stream_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddo: releasing group %zu failed: %s\n", group_, e.what());
  }
}

}  // namespace v0
}  // namespace ddo
