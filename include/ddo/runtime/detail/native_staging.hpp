// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The native VMM route's host side (not API): how pageable and file pieces reach the
/// device when runtime_options::native_vmm is enabled (docs/transports.md, "The native route").
///
/// - Registered host windows: vmm_staging_buffer_gb is the TOTAL staging, cut into whole
///   windows (at least two). One host mapping, registered once at setup (register_host, the
///   cudaHostRegister of memory ddo owns), replaces the legacy route's two pinned buffers. The
///   staging thread fills window k while windows k−1, k−2, ... are on the wire, each guarded by
///   an event recorded after its copy.
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
/// Everything is sized and registered at setup; stage() runs on ddo's staging thread (or the
/// constructing thread at setup) and allocates nothing. A failed setup releases what it made.

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
               std::size_t copy_threads, bool allow_fallback);
  [[nodiscard]] bool active() const noexcept { return t_ != nullptr; }

  /// Copies @p pieces (sorted by offset) to dst_base + offset on @p v (see the file comment).
  /// Returns the copies issued.
  std::uint64_t stage(std::byte* dst_base, const std::vector<staged_piece>& pieces, stream_view v,
                      setup_meter* meter = nullptr);

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
  /// Host bytes of piece p read or copied into @p dst (file pieces read, host pieces memcpy'd).
  void fill(std::byte* dst, const staged_piece& p, setup_meter* meter);

  T* t_ = nullptr;
  const source_files* files_ = nullptr;
  native_vmm_options options_;
  std::unique_ptr<parallel_reader> copier_;
  std::vector<read_task> segments_;       // the open window chunk's host copies
  std::vector<read_task> fill_segments_;  // a retained or micro-cache fill
  std::vector<std::byte*> registered_;  // every registered range's start

  host_buffer windows_;
  std::size_t window_count_ = 0;
  std::vector<event> window_free_;
  std::size_t window_ = 0;

  // Per staged piece of a streamed group (ids_ built at setup: lookups never allocate).
  typename native_dependent<T, std::unordered_map<const staged_piece*, std::size_t>>::type ids_;
  std::vector<std::uint64_t> retained_offset_;  // not_retained, or its place in storage_
  std::vector<char> retained_filled_;
  std::vector<std::size_t> cache_slot_;          // none, or its micro-cache slot
  host_buffer storage_;
  std::uint64_t registered_end_ = 0;             // storage_ [0, registered_end_) is registered

  host_buffer cache_;
  std::vector<std::size_t> slot_owner_;
  std::vector<event> slot_free_;
  std::size_t next_slot_ = 0;

  native_vmm_stats stats_;
};

template <class T>
void native_stager<T>::prepare(T& t, const native_vmm_options& o, const group_layout& layout,
                               const source_files& files, std::size_t copy_threads, bool allow_fallback) {
  DDO_EXPECTS(t_ == nullptr, "native_stager: prepared twice (a ddo bug)");
  DDO_EXPECTS(o.window_bytes > 0 && o.segment_bytes > 0, "native_stager: zero window or segment size");
  options_ = o;
  files_ = &files;
  t_ = &t;
  try {
    window_count_ = static_cast<std::size_t>(o.staging_total_bytes / o.window_bytes);
    if (window_count_ < 2)
      throw config_error("transport", "vmm_staging_buffer_gb",
                         "vmm_staging_buffer_gb is the native route's TOTAL host staging (" +
                             std::to_string(o.staging_total_bytes) + " bytes), cut into whole windows of " +
                             std::to_string(o.window_bytes) + " bytes; it holds " +
                             std::to_string(window_count_) + ", and the route needs at least 2 (" +
                             std::to_string(2 * o.window_bytes) + " bytes): raise it");
    if (o.source_registered_bytes % o.segment_bytes != 0 || o.source_registered_bytes > o.source_cache_bytes)
      throw config_error("transport", "vmm_source_registered_gb",
                         "vmm_source_registered_gb = " + std::to_string(o.source_registered_bytes) +
                             " bytes must be whole segments of " + std::to_string(o.segment_bytes) +
                             " bytes within the retained storage vmm_source_cache_gb = " +
                             std::to_string(o.source_cache_bytes) + " bytes (0 registers all of it)");
    copier_ = std::make_unique<parallel_reader>(std::max<std::size_t>(1, copy_threads));
    fill_segments_.reserve(1);
    windows_ = host_buffer(window_count_ * o.window_bytes);
    if (!register_range(windows_.data(), window_count_ * o.window_bytes))
      throw out_of_memory("registered host", window_count_ * o.window_bytes, 0,
                          "ddo: the native VMM route's staging windows (" + std::to_string(window_count_) +
                              " x " + std::to_string(o.window_bytes) +
                              " bytes) could not be registered with the driver; lower "
                              "vmm_staging_buffer_gb or free page-locked memory");
    window_free_.resize(window_count_);
    for (auto& e : window_free_) e = t.make_event(false);

    // Piece ids, and the retained storage's layout in plan order up to the ceiling.
    std::uint64_t end = 0;
    for (std::size_t g : layout.streamed_order)
      for (const auto& p : layout.groups[g].staged) {
        const std::size_t id = ids_.size();
        ids_.emplace(&p, id);
        std::uint64_t at = not_retained;
        const std::uint64_t start = (end + 255) / 256 * 256;
        if (p.host == nullptr && p.bytes > 0 && start + p.bytes <= o.source_cache_bytes) {
          at = start;
          end = start + p.bytes;
        }
        retained_offset_.push_back(at);
      }
    retained_filled_.assign(ids_.size(), 0);
    cache_slot_.assign(ids_.size(), none);
    if (end > 0) {
      storage_ = host_buffer(end);
      stats_.retained_capacity = end;
      const std::uint64_t want = o.source_registered_bytes == 0 ? end : std::min(o.source_registered_bytes, end);
      for (std::uint64_t off = 0; off < want; off += o.segment_bytes) {
        const std::uint64_t n = std::min(o.segment_bytes, want - off);
        if (!register_range(storage_.data() + off, n)) {
          if (!allow_fallback)
            throw out_of_memory("registered host", n, 0,
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
      cache_ = host_buffer(n);
      if (!register_range(cache_.data(), n))
        throw out_of_memory("registered host", n, 0,
                            "ddo: the native micro-cache (vmm_native_source_cache_slots x "
                            "vmm_native_source_cache_slot_mb = " + std::to_string(n) +
                                " bytes) could not be registered; lower or disable it");
      slot_owner_.assign(o.micro_cache_slots, none);
      slot_free_.resize(o.micro_cache_slots);
      for (auto& e : slot_free_) e = t.make_event(false);
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
void native_stager<T>::fill(std::byte* dst, const staged_piece& p, setup_meter* meter) {
  if (p.host != nullptr) {
    // Its own segment list: segments_ may hold the open window chunk's pending copies.
    fill_segments_.clear();
    read_task task;
    task.dst = dst;
    task.bytes = p.bytes;
    task.src = p.host;
    fill_segments_.push_back(task);
    copier_->run(fill_segments_);
  } else {
    (*files_)[p.file]->read(p.file_offset, std::span<std::byte>(dst, p.bytes));
    if (meter != nullptr) meter->advance(setup_phase::reading, p.bytes);
  }
}

template <class T>
std::uint64_t native_stager<T>::stage(std::byte* dst_base, const std::vector<staged_piece>& pieces,
                                      stream_view v, setup_meter* meter) {
  auto& t = *t_;
  const std::uint64_t cap = options_.window_bytes;
  std::uint64_t copies = 0;
  bool filling = false;
  std::uint64_t chunk_start = 0, chunk_end = 0, chunk_weight_bytes = 0;
  segments_.clear();
  auto window = [&] { return windows_.data() + window_ * cap; };
  auto flush = [&] {
    copier_->run(segments_);
    segments_.clear();
    t.copy_to_device(dst_base + chunk_start, window(), chunk_end - chunk_start, v);
    t.record(window_free_[window_], v);
    if (meter != nullptr) meter->advance(setup_phase::uploading, chunk_weight_bytes);
    stats_.window_bytes_staged += chunk_weight_bytes;
    chunk_weight_bytes = 0;
    window_ = (window_ + 1) % window_count_;
    filling = false;
    ++copies;
  };
  // A piece copied straight from registered memory: the open window chunk is sent first, so
  // its copy (which spans alignment gaps) never overwrites the piece.
  auto direct = [&](const staged_piece& p, const std::byte* src) {
    if (filling) flush();
    t.copy_to_device(dst_base + p.slot_offset, src, p.bytes, v);
    if (meter != nullptr) meter->advance(setup_phase::uploading, p.bytes);
    ++copies;
  };
  for (const auto& piece : pieces) {
    const std::byte* host = piece.host;
    const std::size_t id = id_of(piece);
    if (id != none && retained_offset_[id] != not_retained) {
      std::byte* kept = storage_.data() + retained_offset_[id];
      if (retained_filled_[id] == 0) {  // the first read of these bytes, kept from now on
        fill(kept, piece, meter);
        retained_filled_[id] = 1;
        stats_.retained_bytes += piece.bytes;
      }
      if (retained_offset_[id] + piece.bytes <= registered_end_) {
        stats_.retained_direct_bytes += piece.bytes;
        direct(piece, kept);
        continue;
      }
      stats_.retained_staged_bytes += piece.bytes;
      host = kept;
    } else if (id != none && !slot_owner_.empty() && piece.bytes <= options_.micro_cache_slot_bytes) {
      std::size_t s = cache_slot_[id];
      if (s != none) {
        ++stats_.micro_cache_hits;
      } else {
        ++stats_.micro_cache_misses;
        s = next_slot_;
        next_slot_ = (next_slot_ + 1) % slot_owner_.size();
        t.synchronize(slot_free_[s]);  // the copy that last read this slot is done
        if (slot_owner_[s] != none) cache_slot_[slot_owner_[s]] = none;
        slot_owner_[s] = id;
        fill(cache_.data() + s * options_.micro_cache_slot_bytes, piece, meter);
        cache_slot_[id] = s;
      }
      direct(piece, cache_.data() + s * options_.micro_cache_slot_bytes);
      t.record(slot_free_[s], v);
      continue;
    }
    std::uint64_t off = piece.slot_offset;
    std::uint64_t done = 0;
    while (done < piece.bytes) {
      if (filling && off >= chunk_start + cap) flush();
      if (!filling) {
        t.synchronize(window_free_[window_]);  // the copy that last read this window is done
        chunk_start = chunk_end = off;
        filling = true;
      }
      const std::uint64_t take = std::min(piece.bytes - done, chunk_start + cap - off);
      std::byte* dst = window() + (off - chunk_start);
      if (host != nullptr) {
        read_task task;
        task.dst = dst;
        task.bytes = take;
        task.src = host + done;
        segments_.push_back(task);
      } else {
        (*files_)[piece.file]->read(piece.file_offset + done, std::span<std::byte>(dst, take));
        if (meter != nullptr) meter->advance(setup_phase::reading, take);
      }
      off += take;
      done += take;
      chunk_weight_bytes += take;
      chunk_end = off;
      if (chunk_end - chunk_start == cap) flush();
    }
  }
  if (filling) flush();
  return copies;
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
  window_free_.clear();
  slot_free_.clear();
  windows_ = host_buffer{};
  storage_ = host_buffer{};
  cache_ = host_buffer{};
  copier_.reset();
  ids_.clear();
  t_ = nullptr;
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
