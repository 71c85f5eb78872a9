// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The native VMM route's host side (not API): how pageable and file pieces reach the
/// device when runtime_options::native_vmm is enabled (docs/transports.md, "The native route").
///
/// - Registered host windows: vmm_staging_buffer_gb is the TOTAL staging, a ceiling cut into
///   whole windows (at least two), of which ddo registers at most window_cap_bytes (a ring that
///   stays in the CPU's cache fills ~1.7x faster: native_vmm_options). One host mapping,
///   registered once at setup (register_host, the cudaHostRegister of memory ddo owns),
///   replaces the legacy route's two pinned buffers. The windows are cut into chunks of at most
///   max_staging_chunk_bytes, the staging loop's ring: the threads fill chunk k while chunks
///   k−1, k−2, ... are on the wire, each guarded by an event recorded after its copy.
/// - Retained source storage (vmm_source_cache_gb): file pieces of streamed groups, in plan
///   order, get a place in one host mapping up to the ceiling; the first load reads the file
///   there, later loads use the retained bytes. The first vmm_source_registered_gb of it (whole
///   segments; 0: all of it) is registered segment by segment: retained bytes inside registered
///   segments are copied straight to the device, the others go through the windows.
/// - The slot micro-cache (vmm_native_source_cache_slot_mb × _slots): registered slots keeping
///   the most recently staged pieces that are not retained and fit a slot (pageable, or file
///   bytes beyond the ceiling); a piece found there is copied straight from its slot. Slots are
///   reused round robin, each after the copy that last read it completed.
///
/// Everything is sized and registered at setup. stage() decides where each piece goes and plans
/// it onto the one staging loop (staging_pipeline.hpp: the windows are its ring, the micro-cache
/// slots its addressed buffers), which fills and copies; it runs on ddo's staging thread (or
/// the constructing thread at setup). A failed setup releases what it made.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/memory/host_buffer.hpp"
#include "ddo/model/parallel_reader.hpp"
#include "ddo/runtime/detail/group_layout.hpp"
#include "ddo/runtime/detail/setup_meter.hpp"
#include "ddo/runtime/detail/staging_pipeline.hpp"
#include "ddo/runtime/native_vmm_options.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// X, named through T: a member type that depends on the template parameter is instantiated with
/// the class, not where the template is defined. Non-dependent uses of std::unordered_map in
/// the member functions below were instantiated in every TU including the offloader (3 MB of
/// template instantiation in the umbrella's compile, tests/build_checks/include_cost.py).
template <class, class X>
struct native_dependent {
  using type = X;
};

template <class T>
class native_stager {
 public:
  using stream_view = typename T::stream_view;
  using event = typename T::event;

  native_stager() = default;
  native_stager(const native_stager&) = delete;
  native_stager& operator=(const native_stager&) = delete;
  ~native_stager() { release(); }

  /// Sizes and registers the windows, the retained storage and the micro-cache for @p layout's
  /// streamed groups. @p t and @p files must outlive the stager (until release()).
  /// @throws config_error (window count, registered segments), out_of_memory (registration
  /// refused where no fallback is allowed).
  void prepare(T& t, const native_vmm_options& o, const group_layout& layout, const source_files& files,
               bool allow_fallback);
  [[nodiscard]] bool active() const noexcept { return t_ != nullptr; }

  /// The staging loop's buffer set: the windows' chunks (its ring), then the micro-cache slots.
  [[nodiscard]] std::vector<std::byte*> buffers() const {
    std::vector<std::byte*> b;
    for (std::size_t i = 0; i < ring_count(); ++i) b.push_back(windows_.data() + i * chunk_bytes_);
    for (std::size_t i = 0; i < slot_owner_.size(); ++i)
      b.push_back(cache_.data() + i * options_.micro_cache_slot_bytes);
    return b;
  }
  /// Chunks in the ring (every window cut alike) and the bytes of one.
  [[nodiscard]] std::size_t ring_count() const noexcept { return window_count_ * chunks_per_window_; }
  [[nodiscard]] std::uint64_t chunk_bytes() const noexcept { return chunk_bytes_; }

  /// Copies @p pieces (sorted by offset) to dst_base + offset on @p v through @p loop, whose
  /// buffer set is buffers() (see the file comment); @p before runs before the first copy,
  /// while the loop's threads fill (staging_pipeline::run). Returns the copies issued.
  std::uint64_t stage(staging_pipeline<T>& loop, std::byte* dst_base, const std::vector<staged_piece>& pieces,
                      stream_view v, setup_meter* meter = nullptr, pre_copy_hook before = {});

  /// Host staging bytes: windows + micro-cache slots (the retained storage is reported apart).
  [[nodiscard]] std::uint64_t staging_bytes() const noexcept {
    return windows_.size() + cache_.size();
  }
  [[nodiscard]] native_vmm_stats stats() const noexcept { return stats_; }

  /// Unregisters and unmaps everything (no throw). The caller has synchronized every stream
  /// that may still read the memory.
  void release() noexcept;

 private:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  static constexpr std::uint64_t not_retained = static_cast<std::uint64_t>(-1);

  /// Sizes the ring from @p o: the windows (as many as vmm_staging_buffer_gb holds, at least 2,
  /// within the cap) and their chunks.
  /// @throws config_error (window count, registered segments).
  void size_windows(const native_vmm_options& o);
  /// A host mapping of @p n bytes, registered whole (register_range).
  /// @throws out_of_memory(registered_host) naming @p what, with @p advice, when it is refused.
  host_buffer registered_buffer(std::uint64_t n, const std::string& what, const char* advice);
  /// Registers [p, p + n) through the transport and remembers it for release().
  bool register_range(std::byte* p, std::uint64_t n) {
    if (!t_->register_host(p, n)) return false;
    registered_.push_back(p);
    return true;
  }
  [[nodiscard]] std::size_t id_of(const staged_piece& p) const {
    auto it = ids_.find(&p);
    return it == ids_.end() ? none : it->second;
  }
  T* t_ = nullptr;
  const source_files* files_ = nullptr;
  native_vmm_options options_;
  std::vector<read_task> first_reads_;  // a job's first reads into the retained storage
  std::vector<std::byte*> registered_;  // every registered range's start

  host_buffer windows_;
  std::size_t window_count_ = 0;
  std::size_t chunks_per_window_ = 1;
  std::uint64_t chunk_bytes_ = 0;

  // Per staged piece of a streamed group (ids_ built at setup: lookups never allocate).
  typename native_dependent<T, std::unordered_map<const staged_piece*, std::size_t>>::type ids_;
  std::vector<std::uint64_t> retained_offset_;  // not_retained, or its place in storage_
  std::vector<char> retained_filled_;
  std::vector<std::size_t> cache_slot_;          // none, or its micro-cache slot
  host_buffer storage_;
  std::uint64_t registered_end_ = 0;             // storage_ [0, registered_end_) is registered

  host_buffer cache_;
  std::vector<std::size_t> slot_owner_;
  std::size_t next_slot_ = 0;

  native_vmm_stats stats_;
};

template <class T>
void native_stager<T>::size_windows(const native_vmm_options& o) {
  const auto allowed = static_cast<std::size_t>(o.staging_total_bytes / o.window_bytes);
  if (allowed < 2)
    throw config_error(origin::transport, "vmm_staging_buffer_gb",
                       "vmm_staging_buffer_gb is the native route's TOTAL host staging (" +
                           std::to_string(o.staging_total_bytes) +
                           " bytes), cut into whole windows of " + std::to_string(o.window_bytes) +
                           " bytes; it holds " + std::to_string(allowed) +
                           ", and the route needs at least 2 (" +
                           std::to_string(2 * o.window_bytes) + " bytes): raise it");
  if (o.source_registered_bytes % o.segment_bytes != 0 ||
      o.source_registered_bytes > o.source_cache_bytes)
    throw config_error(origin::transport, "vmm_source_registered_gb",
                       "vmm_source_registered_gb = " + std::to_string(o.source_registered_bytes) +
                           " bytes must be whole segments of " + std::to_string(o.segment_bytes) +
                           " bytes within the retained storage vmm_source_cache_gb = " +
                           std::to_string(o.source_cache_bytes) + " bytes (0 registers all of it)");
  window_count_ = std::min(allowed, std::max<std::size_t>(2, o.window_cap_bytes / o.window_bytes));
  stats_.windows_allowed = allowed;
  chunks_per_window_ = static_cast<std::size_t>((o.window_bytes + max_staging_chunk_bytes - 1) /
                                                max_staging_chunk_bytes);
  chunk_bytes_ = o.window_bytes / chunks_per_window_;
  if (chunks_per_window_ > 1) chunk_bytes_ -= chunk_bytes_ % 4096;  // whole pages (O_DIRECT reads)
}

template <class T>
host_buffer native_stager<T>::registered_buffer(std::uint64_t n, const std::string& what,
                                                const char* advice) {
  host_buffer b(n);
  if (!register_range(b.data(), n))
    throw out_of_memory(memory_tier::registered_host, n, 0,
                        "ddo: " + what + " could not be registered" + advice);
  return b;
}

template <class T>
void native_stager<T>::prepare(T& t, const native_vmm_options& o, const group_layout& layout,
                               const source_files& files, bool allow_fallback) {
  DDO_EXPECTS(t_ == nullptr, "native_stager: prepared twice (a ddo bug)");
  DDO_EXPECTS(o.window_bytes > 0 && o.segment_bytes > 0,
              "native_stager: zero window or segment size");
  options_ = o;
  files_ = &files;
  t_ = &t;
  try {
    size_windows(o);
    windows_ = registered_buffer(
        window_count_ * o.window_bytes,
        "the native VMM route's staging windows (" + std::to_string(window_count_) + " x " +
            std::to_string(o.window_bytes) + " bytes)",
        " with the driver; lower vmm_staging_buffer_gb or free page-locked memory");

    // Piece ids, and the retained storage's layout in plan order up to the ceiling (each
    // group's side part after it).
    std::uint64_t end = 0;
    const auto retain = [&](const group_runtime& part) {
      for (const auto& p : part.staged) {
        ids_.emplace(&p, ids_.size());
        const std::uint64_t start = round_up(end, 256);
        const bool kept =
            p.host == nullptr && p.bytes > 0 && start + p.bytes <= o.source_cache_bytes;
        retained_offset_.push_back(kept ? start : not_retained);
        if (kept) end = start + p.bytes;
      }
    };
    for (std::size_t g : layout.streamed_order) {
      retain(layout.groups[g]);
      if (layout.groups[g].side != no_group) retain(layout.side_parts[layout.groups[g].side]);
    }
    retained_filled_.assign(ids_.size(), 0);
    cache_slot_.assign(ids_.size(), none);
    if (end > 0) {
      storage_ = host_buffer(end);
      stats_.retained_capacity = end;
      const std::uint64_t want =
          o.source_registered_bytes == 0 ? end : std::min(o.source_registered_bytes, end);
      for (std::uint64_t off = 0; off < want; off += o.segment_bytes) {
        const std::uint64_t n = std::min(o.segment_bytes, want - off);
        if (!register_range(storage_.data() + off, n)) {
          if (!allow_fallback)
            throw out_of_memory(
                memory_tier::registered_host, n, 0,
                "ddo: a retained-source segment of " + std::to_string(n) +
                    " bytes could not be registered (vmm_source_registered_gb); lower "
                    "it, or allow_pin_memory_fallback to stage those bytes");
          stats_.registration_fallbacks += (want - off + o.segment_bytes - 1) / o.segment_bytes;
          break;
        }
        registered_end_ = off + n;
      }
      stats_.retained_registered = registered_end_;
    }
    if (o.micro_cache_slots > 0 && o.micro_cache_slot_bytes > 0) {
      const std::uint64_t n = o.micro_cache_slots * o.micro_cache_slot_bytes;
      cache_ = registered_buffer(n,
                                 "the native micro-cache (vmm_native_source_cache_slots x "
                                 "vmm_native_source_cache_slot_mb = " +
                                     std::to_string(n) + " bytes)",
                                 "; lower or disable it");
      slot_owner_.assign(o.micro_cache_slots, none);
    }
  } catch (...) {
    release();
    throw;
  }
  stats_.enabled = true;
  stats_.windows = window_count_;
  stats_.window_bytes = o.window_bytes;
}

template <class T>
std::uint64_t native_stager<T>::stage(staging_pipeline<T>& loop, std::byte* dst_base,
                                      const std::vector<staged_piece>& pieces, stream_view v,
                                      setup_meter* meter, pre_copy_hook before) {
  // First reads into the retained storage, all of this job's at once on the loop's threads:
  // those bytes were never copied, so no copy in flight reads them.
  first_reads_.clear();
  std::uint64_t first_bytes = 0;
  for (const auto& piece : pieces) {
    const std::size_t id = id_of(piece);
    if (id == none || retained_offset_[id] == not_retained || retained_filled_[id] != 0) continue;
    read_task task;
    task.dst = storage_.data() + retained_offset_[id];
    task.bytes = piece.bytes;
    task.file = (*files_)[piece.file].get();
    task.file_offset = piece.file_offset;
    first_reads_.push_back(task);
    first_bytes += piece.bytes;
  }
  if (!first_reads_.empty()) {
    loop.pool().run(first_reads_);
    for (const auto& piece : pieces)
      if (const std::size_t id = id_of(piece); id != none && retained_offset_[id] != not_retained &&
                                               retained_filled_[id] == 0) {
        retained_filled_[id] = 1;
        stats_.retained_bytes += piece.bytes;
      }
    if (meter != nullptr) meter->advance(setup_phase::reading, first_bytes);
  }
  loop.begin(dst_base);
  for (const auto& piece : pieces) {
    const std::byte* host = piece.host;
    const std::size_t id = id_of(piece);
    if (id != none && retained_offset_[id] != not_retained) {
      const std::byte* kept = storage_.data() + retained_offset_[id];
      if (retained_offset_[id] + piece.bytes <= registered_end_) {
        stats_.retained_direct_bytes += piece.bytes;
        loop.add_direct(piece, kept);
        continue;
      }
      stats_.retained_staged_bytes += piece.bytes;
      host = kept;
    } else if (id != none && !slot_owner_.empty() && piece.bytes <= options_.micro_cache_slot_bytes) {
      std::size_t s = cache_slot_[id];
      const bool miss = s == none;
      if (miss) {
        ++stats_.micro_cache_misses;
        s = next_slot_;
        next_slot_ = (next_slot_ + 1) % slot_owner_.size();
        if (slot_owner_[s] != none) cache_slot_[slot_owner_[s]] = none;
        slot_owner_[s] = id;
        cache_slot_[id] = s;
      } else {
        ++stats_.micro_cache_hits;
      }
      // The loop fills the slot once the copy that last read it completed.
      loop.add_buffered(piece, ring_count() + s, miss);
      continue;
    }
    stats_.window_bytes_staged += piece.bytes;
    loop.add_staged(piece, host);
  }
  return loop.run(v, meter, before);
}

template <class T>
void native_stager<T>::release() noexcept {
  if (t_ == nullptr) return;
  for (auto* p : registered_) {
    try {
      t_->unregister_host(p);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddo: unregistering native VMM host memory failed: %s\n", e.what());
    }
  }
  registered_.clear();
  windows_ = host_buffer{};
  storage_ = host_buffer{};
  cache_ = host_buffer{};
  ids_.clear();
  t_ = nullptr;
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
