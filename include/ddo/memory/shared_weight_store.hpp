// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::shared_weight_store: one page-locked host copy of a model's streamed weights,
/// shared by several offloaders of one process — one per device (data parallel), or one per
/// layer shard (pipeline parallel) — each with its own transport, budget, ring, copy stream and
/// plan (issue 28).
///
/// The application makes the store (`std::make_shared<ddo::shared_weight_store>()`) and puts it in
/// `runtime_options::weight_store` of every offloader that shares it. An offloader's setup asks it
/// for every weight its plan streams from pinned memory: a weight the store holds is used where
/// it is; the others are read (file) or copied (host) and page-locked once, into blocks laid out
/// like the group's ring slot (so a device that streams the whole group copies it in one piece),
/// and kept. Plans may differ per device: the store holds the union of what any of them streams,
/// each weight once, keyed by its source and byte count — a file weight by path, offset and the
/// file's identity (device, inode, size, modification time), a host weight by address and its
/// table's host_generation() — so a shard's table (model/weight_shard.hpp) shares the whole
/// table's bytes, and a store that outlives a reload (a table built anew, a file rewritten) never
/// serves the old bytes for a new weight at the same address: it reads the new one. The old
/// copies stay until the store goes.
///
/// Lifetime: every offloader holds the store (a shared_ptr in its options), so the store outlives
/// them all; the last holder frees it, and each block is unregistered and unmapped then. A store
/// never drops a block while it lives (an offloader copies from its addresses without a lock).
/// Registration is portable (linear_transport registers with cudaHostRegisterPortable), so a block
/// page-locked through one device's transport is pinned for every device of the process.
///
/// Counting: setup adds the store's bytes to the RAM it probes (setup/machine.hpp), since they are
/// already out of MemAvailable and a plan reuses them: N offloaders count the copy once.

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ddo/memory/host_buffer.hpp"
#include "ddo/memory/pinned_weight_cache.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Where the pages of a store live: pages sampled per NUMA node.
struct numa_placement {
  int nodes_online = 1;  ///< NUMA nodes of the host (/sys/devices/system/node/online; 1 if absent)
  /// Sampled pages per node (index = node); pages the kernel has not placed yet are not counted.
  std::vector<std::uint64_t> pages_on_node;
  std::uint64_t pages_sampled = 0;
  /// Why placement is unknown (empty when known): no pages, or move_pages refused.
  std::string unknown_reason;
};

namespace detail {

/// NUMA nodes online: the count in a range list such as "0-1,3"; 1 when the file is missing.
template <class = void>
int numa_nodes_online(const char* path = "/sys/devices/system/node/online") {
  // POSIX reads, not <fstream>: this header is in the umbrella, whose include cost CI caps.
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  char text[256] = {};
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return 1;
  std::string list(text, static_cast<std::size_t>(n));
  while (!list.empty() && (list.back() == '\n' || list.back() == ' ')) list.pop_back();
  if (list.empty()) return 1;
  int count = 0;
  std::size_t pos = 0;
  while (pos < list.size()) {
    const std::size_t comma = std::min(list.find(',', pos), list.size());
    const std::string part = list.substr(pos, comma - pos);
    const std::size_t dash = part.find('-');
    try {
      count +=
          dash == std::string::npos ? 1 : std::stoi(part.substr(dash + 1)) - std::stoi(part) + 1;
    } catch (...) {
      return 1;
    }
    pos = comma + 1;
  }
  return std::max(count, 1);
}

}  // namespace detail

/// @brief One host copy of the streamed weights, shared by several offloaders (file comment).
/// Thread-safe. The members whose bodies use the maps are function templates of a defaulted
/// parameter callers do not see: GCC compiles a plain inline body's map and vector code in
/// every TU including the umbrella, used or not (docs/development.md, "What including ddo
/// costs").
class shared_weight_store {
 public:
  /// @brief Where one weight's bytes are: inside @p block at @p offset.
  struct entry {
    std::shared_ptr<pinned_block> block;
    std::uint64_t offset = 0;
    [[nodiscard]] const std::byte* data() const noexcept { return block->data() + offset; }
  };

  shared_weight_store() = default;
  shared_weight_store(const shared_weight_store&) = delete;
  shared_weight_store& operator=(const shared_weight_store&) = delete;

  /// @brief Held by an offloader's setup while it looks up and adds weights, so two devices
  /// starting at once read each weight once (the second finds what the first pinned).
  [[nodiscard]] std::unique_lock<std::mutex> setup_lock() { return std::unique_lock(setup_); }

  /// @brief The weight stored under @p key, or an entry with a null block.
  template <class = void>
  [[nodiscard]] entry find(const std::string& key) const {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    return it == entries_.end() ? entry{} : it->second;
  }
  /// @brief Stores @p e under @p key; the store keeps its block while it lives.
  template <class = void>
  void insert(std::string key, entry e) {
    std::lock_guard lock(mutex_);
    blocks_.emplace(e.block.get(), e.block);
    entries_[std::move(key)] = std::move(e);
  }

  /// @brief Weights stored.
  [[nodiscard]] std::size_t weights() const {
    std::lock_guard lock(mutex_);
    return entries_.size();
  }
  /// @brief Blocks mapped.
  [[nodiscard]] std::size_t blocks() const {
    std::lock_guard lock(mutex_);
    return blocks_.size();
  }
  /// @brief Host bytes the store maps (whole pages), each block once.
  template <class = void>
  [[nodiscard]] std::uint64_t bytes() const {
    std::lock_guard lock(mutex_);
    std::uint64_t total = 0;
    for (const auto& kv : blocks_) total += kv.second->size();
    return total;
  }
  /// @brief Of bytes(), those page-locked (the rest were refused and are staged by the users).
  template <class = void>
  [[nodiscard]] std::uint64_t registered_bytes() const {
    std::lock_guard lock(mutex_);
    std::uint64_t total = 0;
    for (const auto& kv : blocks_)
      if (kv.second->registered()) total += kv.second->size();
    return total;
  }

  /// @brief Where the store's pages live: up to @p max_samples pages, spread over its blocks,
  /// asked of the kernel (move_pages without moving). One node on a single-node host.
  template <class = void>
  [[nodiscard]] numa_placement placement(std::size_t max_samples = 4096) const {
    numa_placement p;
    p.nodes_online = detail::numa_nodes_online<>();
    std::vector<void*> pages;
    {
      std::lock_guard lock(mutex_);
      std::uint64_t total_pages = 0;
      const std::uint64_t page = host_page_size();
      for (const auto& kv : blocks_) total_pages += kv.second->size() / page;
      const std::uint64_t stride =
          std::max<std::uint64_t>(1, total_pages / std::max<std::size_t>(max_samples, 1));
      for (const auto& kv : blocks_)
        for (std::uint64_t off = 0; off < kv.second->size(); off += stride * page)
          pages.push_back(kv.second->data() + off);
    }
    if (pages.empty()) {
      p.unknown_reason = "the store holds no pages";
      return p;
    }
    std::vector<int> status(pages.size(), -1);
#ifdef SYS_move_pages
    // nodes = null: report each page's node, move nothing.
    const long rc =
        ::syscall(SYS_move_pages, 0, pages.size(), pages.data(), nullptr, status.data(), 0);
    if (rc != 0) {
      p.unknown_reason = "move_pages failed";
      return p;
    }
#else
    p.unknown_reason = "move_pages is not available on this platform";
    return p;
#endif
    p.pages_on_node.assign(static_cast<std::size_t>(p.nodes_online), 0);
    for (int node : status) {
      if (node < 0) continue;  // -ENOENT: not placed (never touched), or another error
      if (static_cast<std::size_t>(node) >= p.pages_on_node.size())
        p.pages_on_node.resize(static_cast<std::size_t>(node) + 1, 0);
      ++p.pages_on_node[static_cast<std::size_t>(node)];
      ++p.pages_sampled;
    }
    if (p.pages_sampled == 0) p.unknown_reason = "no sampled page is placed yet";
    return p;
  }

 private:
  std::mutex setup_;          // one offloader setup at a time (setup_lock)
  mutable std::mutex mutex_;  // the maps
  std::map<std::string, entry> entries_;
  std::map<const pinned_block*, std::shared_ptr<pinned_block>> blocks_;  // each block once
};

}  // namespace v0
}  // namespace ddo
