// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::nvme_transport<Inner>: the file route. Weights placed `file` are read from their
/// files straight into two pinned staging slots (page-locked once, at setup) by a pool of reader
/// threads, many reads in flight, and each slot's host→device copy overlaps the next reads; a
/// slot is refilled only after its copy's event completed. Everything else (streams, events,
/// device memory, the ring or VMM's stable addresses) is @p Inner's, which it holds and forwards to
/// (detail::transport_adaptor): nvme_transport<linear_transport>
/// feeds the linear ring, nvme_transport<vmm_transport> the VMM route (nvme_baseline: the legacy
/// VMM route fed from files), and the host_sim variants do the same without a GPU.
///
/// I/O mode: O_DIRECT where the file system allows it (reads bypass the page cache, so neither
/// the process's RSS nor the page cache grows with the weights), buffered positional reads
/// otherwise (tmpfs and some overlay file systems refuse O_DIRECT) — file_io_description() says
/// which, once, for the run's output. O_DIRECT needs offset, length and address aligned to
/// direct_io_alignment: each piece is read as its aligned range and copied from its first byte.
///
/// Errors: a read error or a file that ends early (truncated while ddo streams it) is an
/// io_error naming the file and the offset (model/file_reader.hpp), raised on the thread
/// that loads the group and rethrown to the engine by the runtime — never a signal (nothing is
/// mapped) and never wrong bytes (a copy is issued only after its read completed in full).
///
/// The runtime drives it through transport_with_file_staging (transport/concepts.hpp):
/// prepare_file_reads() at setup, read_file_to_device() for every file piece (staging worker
/// and resident upload; one caller at a time, serialized here), release_file_reads() at
/// teardown, after the streams were synchronized. One offloader per transport object.

#include <algorithm>
#include <array>
#include <exception>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/core/chrono.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/units.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/parallel_reader.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/detail/transport_adaptor.hpp"

namespace ddo {
inline namespace v0 {

/// @brief How the file route reads.
enum class file_io_mode {
  automatic,  ///< O_DIRECT where the file system allows it, buffered otherwise
  direct,     ///< O_DIRECT or a setup error naming the file
  buffered,   ///< positional reads through the page cache
};

/// @brief The file route's settings (from vmm_staging_buffer_gb; runtime/transport_setup.hpp).
struct nvme_options {
  /// One of the two pinned staging slots (vmm_staging_buffer_gb; --ddo-vmm-total-staging-gb
  /// splits a total over the two). A plan whose group streams more is refused at setup.
  std::uint64_t staging_slot_bytes = 640 * mib;
  /// Reader threads (the loading thread is one of them).
  std::size_t read_threads = 8;
  /// Largest read request: a fill is split over the reader threads in parts of at most this
  /// (and at least 64 KiB), so one weight keeps every reader busy.
  std::uint64_t request_bytes = 8 * mib;
  file_io_mode io = file_io_mode::automatic;
};

/// @brief What the file route did so far (bytes and time are the runtime's, not the disk's).
struct nvme_stats {
  std::uint64_t bytes_delivered = 0;  ///< weight bytes copied to the device
  std::uint64_t bytes_read = 0;       ///< bytes read from files (aligned ranges with O_DIRECT)
  std::uint64_t slot_fills = 0;       ///< staging slot loads (one read batch + one copy each)
  double read_seconds = 0.0;          ///< wall time spent reading (the loading thread's view)
};

namespace detail {

struct nvme_file {
  std::string path;
  std::unique_ptr<file_reader> reader;
};

/// One copy out of a fill: @p bytes from the slot at @p slot_offset to @p dst.
struct nvme_fill_copy {
  std::byte* dst;
  std::uint64_t slot_offset;
  std::uint64_t bytes;
};
/// One slot fill of a batch: its slot, its copies [first_copy, end_copy) and read bytes.
struct nvme_slot_fill {
  unsigned slot;
  std::size_t first_copy, end_copy;
  std::uint64_t read_bytes = 0, used = 0;
};
/// The batch being read (capacity kept across batches; under nvme_state's mutex).
struct nvme_batch {
  std::vector<read_task> tasks;  // task.batch: its fill
  std::vector<nvme_fill_copy> copies;
  std::vector<nvme_slot_fill> fills;
};

template <class Inner>
struct nvme_state {
  explicit nvme_state(const nvme_options& o) : options(o) {}
  nvme_options options;
  std::mutex mutex;  // prepare, reads and release: one caller at a time
  bool prepared = false;
  std::vector<nvme_file> files;  // by the weight table's file index (unused: empty)
  std::array<std::byte*, 2> slot{};  // each slot's 4096-aligned start (O_DIRECT reads there)
  std::array<std::byte*, 2> slot_allocation{};  // what allocate_pinned returned, for free_pinned
  std::array<std::uint64_t, 2> slot_allocation_bytes{};
  std::array<typename Inner::event, 2> slot_free{};
  std::uint64_t slot_alloc_bytes = 0;
  unsigned next = 0;
  std::unique_ptr<parallel_reader> reader;
  std::string description;     // io_description and the slots
  std::string io_description;  // how the files are read (prepare_file_reads)
  bool direct = false;
  nvme_stats stats;
  nvme_batch batch;  // the batch being read
};

}  // namespace detail

/// @brief The file route over @p Inner (see the file comment). Models ddo::transport, every
/// capability @p Inner models, and transport_with_file_staging.
/// @tparam Inner linear_transport, vmm_transport, host_sim_transport or host_sim_vmm_transport.
template <class Inner>
class nvme_transport : public detail::transport_adaptor<Inner> {
  using adaptor = detail::transport_adaptor<Inner>;

 public:
  using typename adaptor::stream_view;
  using typename adaptor::event;

  /// @throws usage_error for options out of range (named, with the allowed values).
  explicit nvme_transport(Inner inner = Inner{}, nvme_options options = {})
      : adaptor(std::move(inner)), nvme_(std::make_shared<detail::nvme_state<Inner>>(options)) {
    DDO_EXPECTS(options.staging_slot_bytes >= 2 * direct_io_alignment,
                "nvme_options::staging_slot_bytes (vmm_staging_buffer_gb) must be at least " +
                    std::to_string(2 * direct_io_alignment) + " bytes, got " +
                    std::to_string(options.staging_slot_bytes));
    DDO_EXPECTS(options.read_threads >= 1 && options.read_threads <= 64,
                "nvme_options::read_threads must be 1..64, got " + std::to_string(options.read_threads));
    DDO_EXPECTS(options.request_bytes >= 64 * kib && options.request_bytes % direct_io_alignment == 0,
                "nvme_options::request_bytes must be a multiple of 4096 of at least 64 KiB, got " +
                    std::to_string(options.request_bytes));
  }

  [[nodiscard]] std::string_view name() const noexcept { return "nvme"; }
  [[nodiscard]] const nvme_options& nvme_settings() const noexcept { return nvme_->options; }

  /// @brief One staging slot's bytes: the most one execution group may stream (the plan is
  /// refused at setup otherwise: setup/window_sizing.hpp sets machine_capacity::max_group_bytes).
  [[nodiscard]] std::uint64_t staging_slot_bytes() const noexcept {
    return nvme_->options.staging_slot_bytes;
  }

  /// @brief Grows each staging slot to at least @p bytes (rounded up to 4096) before setup: the
  /// setup path does this when the slot size came from a preset, not from the user, and the
  /// largest streamed group needs more (setup/window_sizing.hpp). Page-locked memory is still sized to
  /// the largest piece at prepare_file_reads.
  /// @throws usage_error once prepared.
  void grow_staging_slot(std::uint64_t bytes) {
    std::lock_guard lock(nvme_->mutex);
    DDO_EXPECTS(!nvme_->prepared, "nvme_transport::grow_staging_slot: already prepared");
    const std::uint64_t grown =
        std::max(nvme_->options.staging_slot_bytes, round_up(bytes, direct_io_alignment));
    // Over the legacy VMM route the window checks each group's staged bytes against the same
    // setting: it follows the slot, or a plan the slot holds would be refused at the window.
    // First, so that a refusal there (window already prepared) leaves the slot as it was.
    if constexpr (requires(Inner& i) { i.grow_staging_buffer(bytes); })
      this->upstream().grow_staging_buffer(grown);
    nvme_->options.staging_slot_bytes = grown;
  }

  /// @brief transport_with_window_sizing: a group is staged through one of the two slots, so a
  /// slot is the most one group may stream (make_plan refuses a group over it, with the numbers).
  /// A preset's (or the default) vmm_staging_buffer_gb grows to the largest group that may
  /// stream: the setting costs nothing, the page-locked buffers are allocated at the largest
  /// piece the plan stages. A size the user set is honoured. Over a VMM transport the window
  /// also shares its resident budget (detail::stable_addresses::share_resident_budget).
  window_sizing size_window(const window_sizing_request& r) {
    if (!r.staging_stated && r.largest_group_bytes > staging_slot_bytes())
      grow_staging_slot(r.largest_group_bytes);
    window_sizing a;
    a.group_limit_bytes = a.staging_bytes = staging_slot_bytes();
    a.grown = !r.staging_stated &&
              a.staging_bytes > round_up(r.staging_setting_bytes, direct_io_alignment);
    if constexpr (requires { Inner::share_resident_budget(r, a); })
      Inner::share_resident_budget(r, a);
    return a;
  }

  /// @brief At setup: opens the files the plan reads (O_DIRECT per file_io_mode), page-locks the
  /// two staging slots and starts the readers. On failure nothing stays allocated or open.
  /// @throws usage_error when already prepared (one offloader per transport object);
  /// io_error (a file); config_error (O_DIRECT demanded but refused); out_of_memory/cuda_error.
  void prepare_file_reads(const file_staging_request& r) {
    auto& st = *nvme_;
    std::lock_guard lock(st.mutex);
    DDO_EXPECTS(!st.prepared,
                "nvme_transport: prepare_file_reads called twice; use one transport object per "
                "offloader");
    DDO_EXPECTS(r.paths != nullptr && r.used.size() == r.paths->size(),
                "nvme_transport::prepare_file_reads: the request must name every file of the table");
    try {
      const auto& o = st.options;
      st.files.clear();
      st.files.resize(r.paths->size());
      std::string refused;
      std::size_t opened = 0, direct = 0;
      for (std::size_t f = 0; f < r.paths->size(); ++f) {
        if (!r.used[f]) continue;
        const std::string& path = (*r.paths)[f];
        st.files[f].path = path;
        st.files[f].reader = std::make_unique<file_reader>(
            path, safetensors_backend::pread,
            file_reader_options{.direct_io = o.io != file_io_mode::buffered, .faults = r.faults});
        ++opened;
        if (st.files[f].reader->direct_io_active()) {
          ++direct;
        } else if (o.io != file_io_mode::buffered && refused.empty()) {
          refused = path;
        }
      }
      if (o.io == file_io_mode::direct && !refused.empty())
        throw config_error(origin::transport, "file_io_mode",
                           "O_DIRECT was required but the file system of '" + refused +
                               "' refuses it; use buffered or automatic I/O");
      st.direct = opened != 0 && direct == opened;
      // Mixed file systems: read all of them buffered, so one mode is said and measured.
      if (!st.direct)
        for (auto& f : st.files)
          if (f.reader && f.reader->direct_io_active())
            f.reader = std::make_unique<file_reader>(f.path, safetensors_backend::pread,
                                                     file_reader_options{.direct_io = false, .faults = r.faults});
      st.slot_alloc_bytes = slot_bytes_for(o, r.largest_piece_bytes);
      for (std::size_t s = 0; s < 2; ++s) allocate_slot(st, s);
      // ddo's one read pool (model/parallel_reader.hpp), its requests at most request_bytes.
      // In a gated run the caller issues copies while the helpers read: read_threads helpers.
      st.reader = std::make_unique<parallel_reader>(o.read_threads + 1, o.request_bytes);
      st.next = 0;
      st.stats = {};
      st.io_description =
          std::string(st.direct ? "O_DIRECT reads" : "buffered reads") +
          (st.direct || o.io == file_io_mode::buffered
               ? std::string()
               : " (O_DIRECT refused by the file system of '" + refused + "')") +
          ", " + std::to_string(o.read_threads) + " reader thread(s), " +
          format_bytes(o.request_bytes) + " requests";
      describe(st);
      st.prepared = true;
    } catch (...) {
      release_locked();
      throw;
    }
  }

  /// @brief A budget move (issue 41): sizes the two staging slots for @p largest_piece_bytes, the
  /// largest file piece the new plan reads, as prepare_file_reads sizes them for a fresh setup;
  /// the files, readers and statistics stay. Waits for the slots' copies first (the caller has
  /// no read in flight). When the new slots cannot be page-locked the old ones come back and
  /// the failure is rethrown. @return whether the slots changed size.
  /// @throws usage_error when not prepared; out_of_memory/cuda_error (the slots as before).
  bool resize_file_staging(std::uint64_t largest_piece_bytes) {
    auto& st = *nvme_;
    std::lock_guard lock(st.mutex);
    DDO_EXPECTS(st.prepared, "nvme_transport::resize_file_staging before prepare_file_reads");
    const std::uint64_t old = st.slot_alloc_bytes;
    const std::uint64_t bytes = slot_bytes_for(st.options, largest_piece_bytes);
    if (bytes == old) return false;
    free_slots(st);
    try {
      st.slot_alloc_bytes = bytes;
      for (std::size_t s = 0; s < 2; ++s) allocate_slot(st, s);
    } catch (...) {
      free_slots(st);
      st.slot_alloc_bytes = old;
      try {
        for (std::size_t s = 0; s < 2; ++s) allocate_slot(st, s);  // freed just now: they fit
      } catch (...) {
        release_locked();  // reads are then refused (not prepared), never given a null slot
      }
      throw;
    }
    st.next = 0;
    describe(st);
    return true;
  }

  /// @brief Reads [offset, offset + bytes) of @p path into the device at @p dst, ordered on
  /// @p s like a copy: read_files_to_device of this one piece.
  /// @throws io_error naming the file and the offset; usage_error when not prepared or
  /// @p path is not one of the prepared files.
  void read_file_to_device(std::byte* dst, const std::string& path, std::uint64_t offset,
                           std::size_t bytes, stream_view s) {
    const device_file_read piece{dst, &path, offset, bytes};
    read_files_to_device(std::span<const device_file_read>(&piece, 1), s);
  }

  /// @brief Reads @p pieces into the device, ordered on @p s like copies: the pieces are packed
  /// into slot fills (each piece's aligned range at a 4096-aligned slot offset; a piece larger
  /// than a slot over several fills), and the readers fill the two slots in turn without a
  /// barrier between fills: while one fill's copies are issued and travel, the next fill's reads
  /// are in flight, so the disk's queue drains only at the batch's end. A slot is refilled after
  /// its copies' event. Returns once the copies are enqueued. Bytes read per piece: its aligned
  /// range with O_DIRECT (at most 2 x 4095 bytes more than the piece), the piece otherwise.
  /// @throws io_error naming the file and the offset; usage_error when not prepared or a path is
  /// not one of the prepared files. The readers have stopped touching the slots when it throws.
  void read_files_to_device(std::span<const device_file_read> pieces, stream_view s) {
    auto& st = *nvme_;
    std::lock_guard lock(st.mutex);
    DDO_EXPECTS(st.prepared, "nvme_transport::read_file_to_device before prepare_file_reads");
    plan_fills(st, pieces);
    if (st.batch.fills.empty()) return;
    run_fills(st, s);
  }

  /// @brief At teardown (after the streams were synchronized): waits for the slots' copies,
  /// frees the slots, stops the readers, closes the files. Never throws; idempotent.
  void release_file_reads() noexcept {
    std::lock_guard lock(nvme_->mutex);
    release_locked();
  }

  /// @brief What the route reads with, for the run's output ("O_DIRECT reads, 8 reader
  /// thread(s), ..."); empty before prepare_file_reads.
  [[nodiscard]] std::string file_io_description() const {
    std::lock_guard lock(nvme_->mutex);
    return nvme_->description;
  }
  /// @brief Whether the files are read with O_DIRECT (after prepare_file_reads).
  [[nodiscard]] bool direct_io() const {
    std::lock_guard lock(nvme_->mutex);
    return nvme_->direct;
  }
  [[nodiscard]] nvme_stats file_stats() const {
    std::lock_guard lock(nvme_->mutex);
    return nvme_->stats;
  }

 private:
  [[nodiscard]] static const file_reader& reader_of(const detail::nvme_state<Inner>& st,
                                                    const std::string& path) {
    for (const auto& f : st.files)
      if (f.reader && f.path == path) return *f.reader;
    throw usage_error("nvme_transport::read_file_to_device: '" + path +
                      "' is not a file the plan reads (prepare_file_reads)");
  }

  /// Packs @p pieces into fills of at most one slot each (see read_files_to_device).
  void plan_fills(detail::nvme_state<Inner>& st, std::span<const device_file_read> pieces) {
    auto& b = st.batch;
    b.tasks.clear();
    b.copies.clear();
    b.fills.clear();
    const std::uint64_t cap = st.slot_alloc_bytes;
    for (const auto& p : pieces) {
      DDO_EXPECTS(p.path != nullptr,
                  "nvme_transport::read_files_to_device: a piece without a path");
      const file_reader& fr = reader_of(st, *p.path);
      if (p.bytes == 0) continue;
      // The range read: the piece itself, or its aligned widening for O_DIRECT.
      const aligned_range ar =
          st.direct ? align_range(p.offset, p.bytes) : aligned_range{p.offset, p.bytes, 0};
      for (std::uint64_t c = 0; c < ar.aligned_length; c += cap) {
        const std::uint64_t at = ar.aligned_offset + c;
        const std::uint64_t len = std::min(cap, ar.aligned_length - c);
        const std::uint64_t lo = std::max(at, p.offset);
        const std::uint64_t hi = std::min(at + len, p.offset + p.bytes);
        if (lo >= hi) continue;
        if (b.fills.empty() || b.fills.back().used + len > cap) {
          const auto slot = static_cast<unsigned>((st.next + b.fills.size()) % 2);
          b.fills.push_back({slot, b.copies.size(), b.copies.size()});
        }
        detail::nvme_slot_fill& f = b.fills.back();
        // With O_DIRECT the aligned range, of which the bytes up to hi must arrive (the rest
        // may be cut by the end of the file).
        read_task t;
        t.file = &fr;
        t.file_offset = at;
        t.dst = st.slot[f.slot] + f.used;
        t.bytes = st.direct ? len : hi - at;
        t.direct = st.direct;
        t.required = hi - at;
        t.batch = b.fills.size() - 1;
        b.tasks.push_back(t);
        b.copies.push_back({p.dst + (lo - p.offset), f.used + (lo - at), hi - lo});
        f.end_copy = b.copies.size();
        f.read_bytes += t.bytes;
        f.used += round_up(len, direct_io_alignment);
      }
    }
  }

  /// Reads the planned fills (a gated run of the reader pool: fill k + 2 opens once fill k's
  /// copies completed, its slot free) and issues each fill's copies on @p s as it lands.
  void run_fills(detail::nvme_state<Inner>& st, stream_view s) {
    auto& b = st.batch;
    const std::size_t n = b.fills.size();
    auto& pool = *st.reader;
    using clock = std::chrono::steady_clock;
    const auto seconds = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
    // read_seconds: while the readers have an open fill to read; the waits for the slots'
    // copies that leave them none (the previous batch's, a copy behind the engine's compute)
    // do not count.
    for (std::size_t k = 0; k < std::min<std::size_t>(n, 2); ++k)
      this->upstream().synchronize(st.slot_free[b.fills[k].slot]);  // the previous batch's copies
    const auto start = clock::now();
    clock::duration idle{};
    pool.start_gated(b.tasks, n);
    try {
      pool.open_through(std::min<std::size_t>(n, 2) - 1);
      for (std::size_t k = 0; k < n; ++k) {
        const detail::nvme_slot_fill& f = b.fills[k];
        if (!pool.wait_batch(k)) break;  // a reader failed: finish() throws it
        for (std::size_t c = f.first_copy; c < f.end_copy; ++c) {
          const detail::nvme_fill_copy& cp = b.copies[c];
          this->upstream().copy_to_device(cp.dst, st.slot[f.slot] + cp.slot_offset, cp.bytes, s);
          st.stats.bytes_delivered += cp.bytes;
        }
        this->upstream().record(st.slot_free[f.slot], s);
        st.stats.bytes_read += f.read_bytes;
        ++st.stats.slot_fills;
        if (k + 2 < n) {
          const auto wait = clock::now();
          // The next fill's reads run meanwhile.
          this->upstream().synchronize(st.slot_free[f.slot]);
          if (pool.batch_filled(k + 1)) idle += clock::now() - wait;
          pool.open_through(k + 2);
        }
      }
    } catch (...) {
      try {
        pool.finish(true);
      } catch (...) {  // the copy's failure is the one reported
      }
      st.next = static_cast<unsigned>((st.next + n) % 2);
      throw;
    }
    st.next = static_cast<unsigned>((st.next + n) % 2);
    pool.finish();
    st.stats.read_seconds += seconds(clock::now() - start - idle);
  }

  /// Slot @p s: page-locked, and 4096-aligned where O_DIRECT reads into it. cudaHostAlloc does
  /// not promise page alignment (an H100 with CUDA 13 returned a 1 MiB slot 256 bytes past a page
  /// after ddo-flux's small pinned allocations): then the slot is allocated again one alignment
  /// larger and used from its first aligned byte. The event first, so that release_locked never
  /// waits on an event that was not made.
  void allocate_slot(detail::nvme_state<Inner>& st, std::size_t s) {
    st.slot_free[s] = this->upstream().make_event(false);
    // Bytes from p to its first 4096-aligned byte.
    const auto to_aligned = [](const std::byte* p) {
      const auto at = reinterpret_cast<std::uintptr_t>(p);
      return round_up(at, direct_io_alignment) - at;
    };
    std::uint64_t bytes = st.slot_alloc_bytes;
    std::byte* p = this->upstream().allocate_pinned(bytes);
    if (to_aligned(p) != 0) {
      this->upstream().free_pinned(p, bytes);
      bytes += direct_io_alignment;
      p = this->upstream().allocate_pinned(bytes);
    }
    st.slot_allocation[s] = p;
    st.slot_allocation_bytes[s] = bytes;
    st.slot[s] = p + to_aligned(p);
  }

  /// The slots' size for a plan whose largest file piece is @p largest_piece_bytes: no more
  /// than it needs (its O_DIRECT widening included), so a small model does not page-lock the
  /// whole configured staging; the configured size when unknown (0).
  static std::uint64_t slot_bytes_for(const nvme_options& o, std::uint64_t largest_piece_bytes) {
    const std::uint64_t configured = round_up(o.staging_slot_bytes, direct_io_alignment);
    if (largest_piece_bytes == 0) return configured;
    return std::min(configured,
                    round_up(largest_piece_bytes, direct_io_alignment) + 2 * direct_io_alignment);
  }

  static void describe(detail::nvme_state<Inner>& st) {
    st.description =
        st.io_description + ", 2 x " + format_bytes(st.slot_alloc_bytes) + " pinned staging";
  }

  /// Waits for each slot's copies and frees it (teardown, a resize). Never throws.
  void free_slots(detail::nvme_state<Inner>& st) noexcept {
    for (std::size_t s = 0; s < 2; ++s) {
      try {
        if (st.slot_allocation[s] != nullptr) {
          this->upstream().synchronize(st.slot_free[s]);
          this->upstream().free_pinned(st.slot_allocation[s], st.slot_allocation_bytes[s]);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ddo: nvme transport teardown: %s\n", e.what());
      }
      st.slot[s] = nullptr;
      st.slot_allocation[s] = nullptr;
      st.slot_free[s] = event{};
    }
  }

  void release_locked() noexcept {
    auto& st = *nvme_;
    free_slots(st);
    st.reader.reset();
    st.files.clear();
    st.prepared = false;
  }
  std::shared_ptr<detail::nvme_state<Inner>> nvme_;
};

}  // namespace v0
}  // namespace ddo
