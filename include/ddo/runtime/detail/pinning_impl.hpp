// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Definitions of pinning.hpp (not API).

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/memory/host_buffer.hpp"
#include "ddo/memory/pinned_weight_cache.hpp"
#include "ddo/memory/shared_weight_store.hpp"
#include "ddo/memory/weight_registry.hpp"
#include "ddo/model/parallel_reader.hpp"
// Part of ddo/runtime/detail/pinning.hpp, which includes it (not back: no include cycles).
#include "ddo/runtime/detail/staging_worker.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

// The helpers below are function templates of a defaulted parameter they never use: a
// non-template inline function is analysed, and the library templates it calls instantiated,
// in every TU that includes the runtime, while these are compiled only where group_pinning<T>
// is (7 MB of GCC's memory in a TU including <ddo/ddo.hpp>; docs/development.md).
template <class>
std::vector<host_page_range> in_place_page_ranges(const group_layout& layout,
                                                         std::uintptr_t page) {
  std::vector<host_page_range> ranges;
  layout.for_each_part([&](const group_runtime& gr) {
    for (const auto& p : gr.in_place) {
      const auto a = reinterpret_cast<std::uintptr_t>(p.host);
      ranges.push_back({a / page * page, (a + p.bytes + page - 1) / page * page, false});
    }
  });
  std::sort(ranges.begin(), ranges.end(),
            [](const host_page_range& x, const host_page_range& y) { return x.begin < y.begin; });
  std::vector<host_page_range> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.begin <= merged.back().end)
      merged.back().end = std::max(merged.back().end, r.end);
    else
      merged.push_back(r);
  }
  return merged;
}

namespace pinning_detail {

/// Whether the weight at position @p i of @p gr is pinned and streamed by this part (a split
/// layout's image and side part share the weights list; each lays out only its own).
template <class = void>
bool pinned_here(const group_runtime& gr, std::size_t i, const offload_plan& plan) {
  return gr.slot_offset[i] != not_streamed &&
         plan.decisions[gr.weights[i]].where == placement::pinned_host;
}

/// Whether the weight at position @p i of @p gr is packed into this part's block.
template <class = void>
bool packed_here(const group_runtime& gr, std::size_t i, const weight_table& table,
                        const offload_plan& plan, const runtime_options& o) {
  return pinned_here(gr, i, plan) && group_layout::packed(table, o, gr.weights[i]);
}

/// What a file's bytes are now: its device, inode, size and modification time (ns), so a
/// shared_weight_store or pinned_weight_cache that outlives a file replaced or rewritten in place
/// reads it again.
/// "unreadable" when stat fails (the read then fails and names the file).
template <class = void>
std::string file_identity(const std::string& path) {
  struct ::stat st {};
  if (::stat(path.c_str(), &st) != 0) return "unreadable";
  return std::to_string(st.st_dev) + ':' + std::to_string(st.st_ino) + ':' +
         std::to_string(st.st_size) + ':' + std::to_string(st.st_mtim.tv_sec) + '.' +
         std::to_string(st.st_mtim.tv_nsec);
}

/// The cache key of a group's packed block: namespace, then each packed weight's identity.
template <class = void>
std::string block_key(const group_runtime& gr, const weight_table& table,
                             const offload_plan& plan, const runtime_options& o) {
  std::string key = o.cache_namespace;
  key += '\x1f';
  for (std::size_t i = 0; i < gr.weights.size(); ++i) {
    const std::size_t w = gr.weights[i];
    if (!packed_here(gr, i, table, plan, o)) continue;
    const auto& info = table[w];
    key += info.name;
    key += '@';
    key += std::to_string(gr.slot_offset[i]);
    key += ':';
    key += std::to_string(info.bytes);
    // As the shared store's keys (store_keys): a reload's table, or a rewritten file, misses.
    if (const auto* h = std::get_if<host_source>(&info.source)) {
      key += "@host:" + std::to_string(table.host_generation()) + ':';
      key += std::to_string(reinterpret_cast<std::uintptr_t>(h->data));
    } else {
      const auto& f = std::get<file_source>(info.source);
      const auto& path = table.files()[f.file_index];
      key += "@file:" + path + '@' + file_identity(path) + ':' + std::to_string(f.offset);
    }
    key += ';';
  }
  return key;
}

/// The shared_weight_store key of each weight of @p table: the namespace, its source and its
/// size (not its name: a shard's table names the same bytes as the whole table's). A host source
/// is its address and the table's host generation (a reload's new weight at a freed weight's
/// address is another weight); a file source its path, the file's identity and the offset.
template <class = void>
std::vector<std::string> store_keys(const weight_table& table, const runtime_options& o) {
  std::vector<std::string> identity;  // per file, stat'ed once
  identity.reserve(table.files().size());
  for (const auto& path : table.files()) identity.push_back(file_identity(path));
  const std::string host_prefix =
      o.cache_namespace + "\x1fhost:" + std::to_string(table.host_generation()) + ':';
  std::vector<std::string> keys;
  keys.reserve(table.size());
  for (const auto& info : table.weights()) {
    std::string key;
    if (const auto* h = std::get_if<host_source>(&info.source)) {
      key = host_prefix + std::to_string(reinterpret_cast<std::uintptr_t>(h->data));
    } else {
      const auto& f = std::get<file_source>(info.source);
      key = o.cache_namespace + "\x1f" + "file:" + table.files()[f.file_index] + '@' +
            identity[f.file_index] + ':' + std::to_string(f.offset);
    }
    key += '+' + std::to_string(info.bytes);
    keys.push_back(std::move(key));
  }
  return keys;
}

/// Bytes of @p table's weights @p store holds already: a plan reuses them, so setup adds them
/// to the RAM it probes (they are out of MemAvailable already; counted once). With @p plan,
/// only those it pins (what it takes from the store).
template <class = void>
std::uint64_t store_bytes_held(const shared_weight_store& store, const weight_table& table,
                                      const runtime_options& o,
                                      const offload_plan* plan = nullptr) {
  const auto keys = store_keys(table, o);
  std::uint64_t bytes = 0;
  for (std::size_t w = 0; w < table.size(); ++w)
    if (table[w].bytes != 0 &&
        (plan == nullptr || plan->decisions[w].where == placement::pinned_host) &&
        store.find(keys[w]).block)
      bytes += table[w].bytes;
  return bytes;
}

/// store_bytes_held for a weight_registry: bytes of @p table's weights (with @p plan, those it
/// pins) that @p registry holds now, each piece once. Templates (Registry: weight_registry;
/// Options: runtime_options), so that the umbrella, which includes this header, does not
/// instantiate the registry's lookup (3 MB of GCC's memory in every TU).
template <class Registry>
std::uint64_t registry_bytes_held(const Registry& registry, const weight_table& table,
                                  const runtime_options& o, const offload_plan* plan = nullptr) {
  const auto keys = store_keys(table, o);
  std::vector<registry_piece> pieces;
  for (std::size_t w = 0; w < table.size(); ++w)
    if (table[w].bytes != 0 &&
        (plan == nullptr || plan->decisions[w].where == placement::pinned_host))
      pieces.push_back({keys[w], table[w].bytes});
  return registry.held_bytes(pieces);
}

/// Bytes of @p table a store or registry of @p o holds (store_bytes_held, registry_bytes_held).
template <class Options>
std::uint64_t shared_bytes_held(const weight_table& table, const Options& o,
                                const offload_plan* plan = nullptr) {
  if (o.registry) return registry_bytes_held(*o.registry, table, o, plan);
  if (o.weight_store) return store_bytes_held(*o.weight_store, table, o, plan);
  return 0;
}

/// The name of @p table's model in runtime_options::registry: registry_model, or the namespace
/// and the table's files (a table without files: its host generation, one per loaded table).
template <class = void>
std::string registry_model_name(const weight_table& table, const runtime_options& o) {
  if (!o.registry_model.empty()) return o.registry_model;
  std::string name = o.cache_namespace;
  for (const auto& path : table.files()) name += (name.empty() ? "" : ";") + path;
  if (table.files().empty())
    name += (name.empty() ? "" : ";") + ("host:" + std::to_string(table.host_generation()));
  return name;
}

/// Page-locks @p block through a copy of @p t (unregistered when the block goes), reporting it.
template <class T>
void register_block(T& t, pinned_block& block, setup_meter& meter) {
  bind_runtime_thread(t);  // this may be a pool thread: the transport's device, once per block
  T copy = t;
  std::byte* p = block.data();
  if (copy.register_host(p, block.size()))
    block.set_registered([copy, p]() mutable { copy.unregister_host(p); });
  meter.advance(setup_phase::pinning, block.size());
}

/// Threads that read @p tasks: no more than there is work for — one per weight, or per smallest
/// grain of the bytes where that is more (50 tiny weights with --ddo-pin-cpu-workers 100000
/// started 100,000 threads) — within the bound.
template <class = void>
std::size_t reader_threads(const std::vector<read_task>& tasks, const runtime_options& o) {
  std::uint64_t task_bytes = 0;
  for (const auto& task : tasks) task_bytes += task.bytes;
  const std::uint64_t work =
      std::max<std::uint64_t>({1, tasks.size(), task_bytes / parallel_reader::min_grain});
  const auto asked = static_cast<std::uint64_t>(std::max(1, o.pin_workers));
  return static_cast<std::size_t>(std::min<std::uint64_t>({asked, work, max_worker_threads}));
}

/// Fills @p task's source from weight @p w's (host memory or its file).
template <class = void>
void set_task_source(read_task& task, const weight_info& info, const source_files& files) {
  if (const auto* h = std::get_if<host_source>(&info.source)) {
    task.src = h->data;
  } else {
    const auto& f = std::get<file_source>(info.source);
    task.file = files[f.file_index].get();
    task.file_offset = f.offset;
  }
}

/// Every part that copies: the groups and, on a split layout, their side parts.
template <class = void>
std::vector<group_runtime*> parts_of(group_layout& layout) {
  std::vector<group_runtime*> parts;
  layout.for_each_part([&](group_runtime& gr) { parts.push_back(&gr); });
  return parts;
}

/// What one part reads into a block: its bytes there and each weight read, at its offset in the
/// part. pin(): a group's packed pinned weights at their slot offsets; pin_from_store(): the
/// weights the store lacks, back to back, each with its in-place piece (which the store's copy
/// replaces).
struct part_reads {
  struct read {
    std::size_t weight = 0;
    std::uint64_t offset = 0;
    std::size_t piece = 0;
  };
  std::uint64_t bytes = 0;
  std::vector<read> reads;
};

/// A weight pin_from_store() copies from the shared_weight_store, and the store's entry for it
/// (empty until read where the store lacked it).
struct store_piece {
  std::size_t weight = 0;
  shared_weight_store::entry entry;
};

/// @p gr's packed pinned weights (with bytes), at their slot offsets.
template <class = void>
part_reads packed_reads(const group_runtime& gr, const weight_table& table,
                               const offload_plan& plan, const runtime_options& o) {
  part_reads r{gr.pinned_bytes, {}};
  for (std::size_t i = 0; i < gr.weights.size(); ++i)
    if (packed_here(gr, i, table, plan, o) && table[gr.weights[i]].bytes != 0)
      r.reads.push_back({gr.weights[i], gr.slot_offset[i], i});
  return r;
}

/// Plans the reading of @p info in @p meter: from its file, or packed from host memory.
template <class = void>
void plan_read(setup_meter& meter, const weight_info& info) {
  meter.plan(std::holds_alternative<file_source>(info.source) ? setup_phase::reading
                                                              : setup_phase::packing,
             info.bytes);
}

/// Throws out_of_memory for a refused page-locking of @p what (@p bytes) unless the options
/// allow the pageable fallback.
template <class = void>
void check_pin_fallback(const runtime_options& o, std::uint64_t bytes,
                               const std::string& what) {
  if (!o.allow_pin_fallback)
    throw out_of_memory(memory_tier::pinned_host, bytes, 0,
                        "offloader setup: page-locking " + what +
                            " failed (cudaHostRegister refused) and "
                            "allow_pin_memory_fallback is false");
}

/// Copies @p piece of @p gr, whose memory could not be page-locked, through pageable staging:
/// its @p weight_bytes move from the pinned source to the staged one (reported in metrics,
/// counted in @p fallback_bytes). The staged pieces stay in slot order, and the layout then
/// needs a staging buffer.
template <class = void>
void move_to_staged(group_layout& layout, group_runtime& gr, staged_piece piece,
                           std::uint64_t weight_bytes, std::uint64_t& fallback_bytes) {
  fallback_bytes += weight_bytes;
  gr.bytes_by_source[static_cast<std::size_t>(transfer_source::pinned)] -= weight_bytes;
  gr.bytes_by_source[static_cast<std::size_t>(transfer_source::pageable_staged)] += weight_bytes;
  piece.source = transfer_source::pageable_staged;
  const auto at = std::upper_bound(
      gr.staged.begin(), gr.staged.end(), piece,
      [](const staged_piece& x, const staged_piece& y) { return x.slot_offset < y.slot_offset; });
  gr.staged.insert(at, piece);
  layout.staging_needed = true;
}

/// move_to_staged for an in-place piece (@p what: its memory), refused unless the options allow
/// the fallback.
template <class = void>
void stage_unpinned(const runtime_options& o, group_layout& layout, group_runtime& gr,
                           const staged_piece& piece, const std::string& what,
                           std::uint64_t& fallback_bytes) {
  check_pin_fallback(o, piece.bytes, what);
  move_to_staged(layout, gr, piece, piece.bytes, fallback_bytes);
}

/// Host blocks of the parts to pin, and each part's offset in its block.
struct block_plan {
  std::uint64_t bytes = 0;
  std::vector<std::pair<std::size_t, std::uint64_t>> groups;  // (part index, offset)
};

/// Groups of at most this many packed bytes share blocks: a block of its own maps whole pages,
/// and 200,000 tiny streamed groups each mapping one 4 KiB page for 64 bytes cost 1.27 GB
/// (issue 30). A larger group keeps its own block (at most one page of rounding, <= 1/16).
inline constexpr std::uint64_t shared_block_group_bytes = 64 * kib;
/// Size of a shared block: large enough that its last page's rounding is negligible, small enough
/// that a pinned_weight_cache entry (a range) does not keep much else alive.
inline constexpr std::uint64_t shared_block_bytes = 2 * mib;

/// Lays out the blocks of @p todo (indices into @p parts, which have bytes): small parts packed
/// back to back at @p align boundaries into shared blocks, in order; the others alone.
template <class = void>
std::vector<block_plan> share_blocks(const std::vector<part_reads>& parts,
                                            const std::vector<std::size_t>& todo,
                                            std::uint64_t align, bool share) {
  std::vector<block_plan> blocks;
  std::size_t open = no_group;  // the shared block being filled (none yet)
  for (std::size_t g : todo) {
    const std::uint64_t bytes = parts[g].bytes;
    if (!share || bytes > shared_block_group_bytes) {
      blocks.push_back({bytes, {{g, 0}}});
      continue;
    }
    if (open != no_group) {
      const std::uint64_t offset = round_up(blocks[open].bytes, align);
      if (offset + bytes <= shared_block_bytes) {
        blocks[open].groups.emplace_back(g, offset);
        blocks[open].bytes = offset + bytes;
        continue;
      }
    }
    open = blocks.size();
    blocks.push_back({bytes, {{g, 0}}});
  }
  return blocks;
}

/// Reads @p todo's parts (indices into @p parts) into page-locked host blocks, which it returns.
/// The blocks are laid out first (share_blocks) and every total planned in @p meter, then
/// @p planned is called. Every block is mapped before any read (not touched: the read is the
/// first touch of its pages), and placed(part, block, offset, alone) says where each part went
/// (alone: the block is its own). pin_workers threads share the bytes in grains
/// (parallel_reader), so a few large groups keep every thread busy; the thread that completes a
/// block page-locks it while the others read on. File bytes are read with positional reads
/// straight into the block, never through a mapping: the file's pages stay in the page cache and
/// are not counted in the process twice (docs/transports.md). @p share false: a block per part
/// (a weight_registry frees each piece on its own, and charges what it maps); then @p given
/// (when not empty) holds a block per part of @p todo, or null: a block given is read into
/// in place, and page-locked only where it is not yet (a weight_registry's recycled block).
template <class T, class Placed>
std::vector<std::shared_ptr<pinned_block>> pin_parts(
    T& t, const std::vector<part_reads>& parts, const std::vector<std::size_t>& todo,
    const weight_table& table, const source_files& files, const runtime_options& options,
    setup_meter& meter, const std::function<void()>& planned, Placed&& placed, bool share = true,
    const std::vector<std::shared_ptr<pinned_block>>& given = {},
    move_sources* from_device = nullptr) {
  const auto blocks = share_blocks(parts, todo, options.alignment, share);
  DDO_EXPECTS(given.empty() || (!share && given.size() == blocks.size()),
              "pin_parts: blocks given for a shared layout, or not one a part");
  const auto given_of = [&](std::size_t b) { return given.empty() ? nullptr : given[b]; };
  const auto on_device = [&](std::size_t w) -> const std::byte* {
    return from_device != nullptr ? from_device->address(w) : nullptr;
  };
  // Totals first: reports never see a total grow.
  for (std::size_t g : todo)
    for (const auto& r : parts[g].reads)
      if (on_device(r.weight) == nullptr) plan_read(meter, table[r.weight]);
  for (std::size_t b = 0; b < blocks.size(); ++b)
    if (!given_of(b) || !given_of(b)->registered())
      meter.plan(setup_phase::pinning, round_up(blocks[b].bytes, host_page_size()));
  if (planned) planned();
  std::vector<read_task> tasks;
  std::vector<std::vector<read_task>> copies(blocks.size());  // per block, src on the device
  std::vector<std::shared_ptr<pinned_block>> mapped(blocks.size());
  std::vector<std::uint64_t> file_bytes(blocks.size(), 0), host_bytes(blocks.size(), 0);
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    mapped[b] = given_of(b) ? given_of(b) : std::make_shared<pinned_block>(blocks[b].bytes);
    for (const auto& [g, part_offset] : blocks[b].groups) {
      placed(g, mapped[b], part_offset, blocks[b].groups.size() == 1);
      for (const auto& r : parts[g].reads) {
        read_task task;
        task.dst = mapped[b]->data() + part_offset + r.offset;
        task.bytes = table[r.weight].bytes;
        task.batch = b;
        if ((task.src = on_device(r.weight)) != nullptr) {
          copies[b].push_back(task);
          continue;
        }
        if (from_device != nullptr && (task.src = from_device->pinned(r.weight)) != nullptr) {
          from_device->repacked_bytes += task.bytes;
          host_bytes[b] += task.bytes;
          tasks.push_back(task);
          continue;
        }
        set_task_source(task, table[r.weight], files);
        (task.file != nullptr ? file_bytes : host_bytes)[b] += task.bytes;
        tasks.push_back(task);
      }
    }
  }
  // A block's copies from the device are queued as soon as it is page-locked (a block of
  // copies only: before any read), so they run beside the other blocks' reads and page-locking;
  // one wait at the end, no synchronisation per weight. Queued under a lock: any pool thread
  // may complete a block.
  std::mutex queue;
  parallel_reader pool(reader_threads(tasks, options));
  try {
    pool.run(tasks, blocks.size(), [&](std::size_t b) {
      if (file_bytes[b] != 0) meter.advance(setup_phase::reading, file_bytes[b]);
      if (host_bytes[b] != 0) meter.advance(setup_phase::packing, host_bytes[b]);
      // A given block page-locked already stays so (a range is locked through its mapping).
      if (!mapped[b]->registered() && &mapped[b]->mapping() == mapped[b].get())
        register_block(t, *mapped[b], meter);
      if (copies[b].empty()) return;
      std::lock_guard lock(queue);
      for (const auto& c : copies[b]) {
        from_device->copy(c.dst, c.src, c.bytes);
        from_device->copied_bytes += c.bytes;
      }
    });
  } catch (...) {
    if (from_device != nullptr) from_device->wait();  // nothing may write the blocks after
    throw;
  }
  if (from_device != nullptr) from_device->wait();
  return mapped;
}

}  // namespace pinning_detail

template <class T>
void group_pinning<T>::pin(T& t, group_layout& layout, const weight_table& table,
                           const offload_plan& plan, const runtime_options& options,
                           const source_files& files, setup_meter& meter,
                           const std::function<void()>& planned, move_sources* from_device) {
  DDO_EXPECTS(!(options.weight_store && options.registry),
              "offloader setup: runtime_options has both a weight_store and a registry; give one "
              "(the registry holds several models' copies, the store one model's)");
  // (planned is not called on these paths: a parallel setup's upload starts when they return)
  if (options.registry)
    return pin_from_registry(t, layout, table, plan, options, files, meter, from_device);
  if (options.weight_store)
    return pin_from_store(t, layout, table, plan, options, files, meter, from_device);
  using pinning_detail::block_key;
  const auto groups = pinning_detail::parts_of(layout);
  // A tiny group holds the shared block and its offset in it (no object of its own: 8 bytes).
  enum : char { from_cache, own_block, shared_block };
  std::vector<char> mapped_here(groups.size(), from_cache);
  std::vector<pinning_detail::part_reads> reads(groups.size());
  std::vector<std::size_t> todo;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto& gr = *groups[g];
    if (gr.pinned_bytes == 0) continue;
    if (options.pinned_cache != nullptr) {
      if (auto hit = options.pinned_cache->find(block_key(gr, table, plan, options))) {
        DDO_EXPECTS(hit->size() >= gr.pinned_bytes, "pinned_weight_cache: entry too small");
        gr.block = std::move(hit);
        ++cached_reused_;
        continue;
      }
    }
    reads[g] = pinning_detail::packed_reads(gr, table, plan, options);
    todo.push_back(g);
  }
  auto ranges = in_place_page_ranges(layout, static_cast<std::uintptr_t>(host_page_size()));
  for (const auto& r : ranges) meter.plan(setup_phase::pinning, r.end - r.begin);
  auto mapped = pinning_detail::pin_parts(
      t, reads, todo, table, files, options, meter, planned,
      [&](std::size_t g, const auto& block, std::uint64_t offset, bool alone) {
        groups[g]->block = block;
        groups[g]->block_offset = offset;
        mapped_here[g] = alone ? own_block : shared_block;
      },
      true, {}, from_device);
  // Page-locked bytes: each block mapped here once, and what the cache gave.
  for (const auto& block : mapped)
    if (block->registered()) pinned_bytes_ += block->size();
  mapped.clear();  // the groups hold their blocks
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto& gr = *groups[g];
    if (!gr.block) continue;
    if (gr.block->registered()) {
      if (mapped_here[g] == from_cache) {
        pinned_bytes_ += gr.block->size();
      } else if (options.pinned_cache != nullptr) {
        // A group of a shared block is cached as its range (which keeps the block alive).
        auto entry = mapped_here[g] == own_block ? gr.block
                                                 : std::make_shared<pinned_block>(
                                                       gr.block, gr.block_offset, gr.pinned_bytes);
        options.pinned_cache->insert(block_key(gr, table, plan, options), std::move(entry));
      }
      continue;
    }
    if (mapped_here[g] != from_cache)
      pinning_detail::check_pin_fallback(
          options, gr.pinned_bytes,
          format_bytes_exact(gr.pinned_bytes) + " for group '" + gr.name + "'");
    // Fallback: the packed block is staged like pageable memory (reported in metrics).
    gr.pinned_staged = true;
    pinning_detail::move_to_staged(
        layout, gr, {.slot_offset = 0, .bytes = gr.pinned_bytes, .host = gr.block_data()},
        gr.packed_weight_bytes, fallback_bytes_);
  }
  pin_in_place(t, layout, options, std::move(ranges), meter);
}

template <class T>
void group_pinning<T>::pin_in_place(T& t, group_layout& layout, const runtime_options& options,
                                    std::vector<host_page_range> merged, setup_meter& meter) {
  if (merged.empty()) return;
  for (auto& r : merged) {
    void* p = reinterpret_cast<void*>(r.begin);
    r.ok = t.register_host(p, r.end - r.begin);
    if (r.ok) {
      registered_.push_back(p);
      pinned_bytes_ += r.end - r.begin;
      in_place_bytes_ += r.end - r.begin;
    }
    meter.advance(setup_phase::pinning, r.end - r.begin);
  }
  auto registered_at = [&](const std::byte* host) {
    const auto a = reinterpret_cast<std::uintptr_t>(host);
    auto it =
        std::upper_bound(merged.begin(), merged.end(), a,
                         [](std::uintptr_t v, const host_page_range& r) { return v < r.begin; });
    return it != merged.begin() && std::prev(it)->ok;
  };
  layout.for_each_part([&](group_runtime& gr) {
    std::vector<staged_piece> kept;
    for (auto piece : gr.in_place) {
      if (registered_at(piece.host)) {
        kept.push_back(piece);
        continue;
      }
      pinning_detail::stage_unpinned(options, layout, gr, piece,
                                     "the engine's memory of group '" + gr.name + "' in place",
                                     fallback_bytes_);
    }
    gr.in_place.swap(kept);
  });
}

template <class T>
void group_pinning<T>::pin_from_store(T& t, group_layout& layout, const weight_table& table,
                                      const offload_plan& plan, const runtime_options& options,
                                      const source_files& files, setup_meter& meter,
                                      move_sources* from_device) {
  auto& store = *options.weight_store;
  const auto one_setup = store.setup_lock();  // a weight two devices lack is read once
  const auto keys = pinning_detail::store_keys(table, options);
  const auto parts = pinning_detail::parts_of(layout);
  // Per part: the weight of each in-place piece (the layout's order) and its store entry; the
  // missing weights of a part laid out back to back at the slot's alignment, so a device that
  // streams the whole group finds its slot's layout in the store (one copy, merged below).
  std::vector<std::vector<pinning_detail::store_piece>> held_of(parts.size());
  std::vector<pinning_detail::part_reads> missing(parts.size());
  std::vector<std::size_t> todo;
  for (std::size_t g = 0; g < parts.size(); ++g) {
    const auto& gr = *parts[g];
    auto& held = held_of[g];
    for (std::size_t i = 0; i < gr.weights.size(); ++i) {
      const std::size_t w = gr.weights[i];
      if (!pinning_detail::pinned_here(gr, i, plan) || table[w].bytes == 0) continue;
      held.push_back({w, store.find(keys[w])});
      if (held.back().entry.block) continue;
      auto& m = missing[g];
      const std::uint64_t offset = round_up(m.bytes, options.alignment);
      m.reads.push_back({w, offset, held.size() - 1});
      m.bytes = offset + table[w].bytes;
    }
    DDO_EXPECTS(held.size() == gr.in_place.size(),
                "offloader setup: group '" + gr.name + "' has " +
                    std::to_string(gr.in_place.size()) +
                    " pieces to copy from the shared weight store but " +
                    std::to_string(held.size()) + " pinned weights");
    if (!missing[g].reads.empty()) todo.push_back(g);
  }
  // Mapped, read by the pool, page-locked as each block completes (as pin() does).
  pinning_detail::pin_parts(t, missing, todo, table, files, options, meter, {},
                            [&](std::size_t g, const auto& block, std::uint64_t offset, bool) {
                              for (const auto& r : missing[g].reads)
                                held_of[g][r.piece].entry = {block, offset + r.offset};
                            },
                            true, {}, from_device);
  // Stored only once every block is read: a failed read leaves the store as it was.
  for (std::size_t g : todo)
    for (const auto& r : missing[g].reads) store.insert(keys[r.weight], held_of[g][r.piece].entry);
  use_held(layout, parts, held_of, table, options);
}

template <class T>
void group_pinning<T>::use_held(
    group_layout& layout, const std::vector<group_runtime*>& parts,
    const std::vector<std::vector<pinning_detail::store_piece>>& held_of, const weight_table& table,
    const runtime_options& options) {
  // The pieces: the held copies' addresses; adjacent ones of one block that lie in the slot as
  // there merged into one copy; refused registrations staged (or refused, without fallback).
  std::vector<const pinned_block*> used;
  for (std::size_t g = 0; g < parts.size(); ++g) {
    auto& gr = *parts[g];
    std::vector<staged_piece> kept;
    const pinned_block* kept_block = nullptr;
    for (std::size_t k = 0; k < gr.in_place.size(); ++k) {
      auto piece = gr.in_place[k];
      const auto& e = held_of[g][k].entry;
      piece.host = e.data();
      if (!e.block->registered()) {
        pinning_detail::stage_unpinned(
            options, layout, gr, piece,
            "the shared copy of '" + table[held_of[g][k].weight].name + "'", fallback_bytes_);
        continue;
      }
      used.push_back(&e.block->mapping());
      auto* last = kept.empty() || kept_block != e.block.get() ? nullptr : &kept.back();
      if (last != nullptr && last->host + (piece.slot_offset - last->slot_offset) == piece.host) {
        last->bytes = piece.slot_offset + piece.bytes - last->slot_offset;
      } else {
        kept.push_back(piece);
        kept_block = e.block.get();
      }
    }
    gr.in_place.swap(kept);
  }
  // Page-locked bytes this offloader copies from: each store block it uses, once.
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  for (const pinned_block* b : used) pinned_bytes_ += b->size();
}

template <class T>
void group_pinning<T>::pin_from_registry(T& t, group_layout& layout, const weight_table& table,
                                         const offload_plan& plan, const runtime_options& options,
                                         const source_files& files, setup_meter& meter,
                                         move_sources* from_device) {
  const auto keys = pinning_detail::store_keys(table, options);
  const auto parts = pinning_detail::parts_of(layout);
  // Per part: the weight of each in-place piece (the layout's order); each weight once a piece.
  std::vector<std::vector<pinning_detail::store_piece>> held_of(parts.size());
  std::vector<registry_piece> pieces;
  std::vector<std::size_t> weight_of_piece;
  std::map<std::string, std::size_t> piece_of_key;
  for (std::size_t g = 0; g < parts.size(); ++g) {
    const auto& gr = *parts[g];
    for (std::size_t i = 0; i < gr.weights.size(); ++i) {
      const std::size_t w = gr.weights[i];
      if (!pinning_detail::pinned_here(gr, i, plan) || table[w].bytes == 0) continue;
      held_of[g].push_back({w, {}});
      if (piece_of_key.emplace(keys[w], pieces.size()).second) {
        pieces.push_back({keys[w], table[w].bytes});
        weight_of_piece.push_back(w);
      }
    }
    DDO_EXPECTS(held_of[g].size() == gr.in_place.size(),
                "offloader setup: group '" + gr.name + "' has " +
                    std::to_string(gr.in_place.size()) +
                    " pieces to copy from the weight registry but " +
                    std::to_string(held_of[g].size()) + " pinned weights");
  }
  // What the registry lacks: each piece read into a block of its own by the pool, page-locked
  // as it completes (as pin() does), or into the evicted block the registry recycled for it
  // (page-locked already: neither unpinned nor locked again).
  auto load = [&](std::span<const registry_piece> missing,
                  std::span<const std::shared_ptr<pinned_block>> recycled) {
    std::vector<pinning_detail::part_reads> reads(missing.size());
    std::vector<std::size_t> todo(missing.size());
    const std::vector<std::shared_ptr<pinned_block>> given(recycled.begin(), recycled.end());
    for (std::size_t i = 0; i < missing.size(); ++i) {
      const std::size_t w = weight_of_piece[piece_of_key.at(missing[i].key)];
      reads[i] = {table[w].bytes, {{w, 0, 0}}};
      todo[i] = i;
    }
    std::vector<std::shared_ptr<pinned_block>> blocks(missing.size());
    pinning_detail::pin_parts(
        t, reads, todo, table, files, options, meter, {},
        [&](std::size_t i, const auto& block, std::uint64_t, bool) { blocks[i] = block; }, false,
        given, from_device);
    return blocks;
  };
  registry_use_ =
      options.registry->acquire(pinning_detail::registry_model_name(table, options), pieces, load);
  for (std::size_t g = 0; g < parts.size(); ++g)
    for (auto& h : held_of[g]) h.entry = {registry_use_.block(piece_of_key.at(keys[h.weight])), 0};
  use_held(layout, parts, held_of, table, options);
}

/// Unregisters the engine's pages registered in place and forgets them; a failure is printed
/// (@p when says during what), never thrown: both callers run where nothing may throw.
template <class T>
void unregister_engine_pages(T& t, std::vector<void*>& pages, const char* when) noexcept {
  for (void* p : pages) {
    try {
      t.unregister_host(p);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddo: %s: %s\n", when, e.what());
    }
  }
  pages.clear();
}

template <class T>
void group_pinning<T>::release_in_place(T& t) noexcept {
  unregister_engine_pages(t, registered_, "budget move: unregistering the engine's pages");
  pinned_bytes_ -= in_place_bytes_;
  in_place_bytes_ = 0;
}

template <class T>
void group_pinning<T>::register_in_place(T& t, group_layout& layout,
                                         const runtime_options& options) {
  if (!options.pin_in_place || options.shared_host_copies()) return;
  setup_meter quiet;
  pin_in_place(t, layout, options,
               in_place_page_ranges(layout, static_cast<std::uintptr_t>(host_page_size())), quiet);
}

template <class T>
void group_pinning<T>::release(T& t) noexcept {
  unregister_engine_pages(t, registered_, "during offloader teardown");
  registry_use_.reset();
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
