// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::pinned_block (a packed, page-locked host copy of one execution group's streamed
/// weights, or a range of a block that tiny groups share) and ddo::pinned_weight_cache, the
/// in-process cache of such blocks that
/// `cache_pinned_weights` turns on, keyed by `pinned_weight_cache_namespace` and the group's
/// layout.
///
/// The cache is an object the application owns and passes to the offloaders that may share
/// blocks (no process-wide singleton): blocks live while the cache or an offloader holds them,
/// and are unregistered and unmapped when the last holder lets go.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/memory/host_buffer.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Packed host bytes of one group; page-locked when registered() is true. Either a mapping
/// of its own (whole pages) or a range of a shared block: groups far smaller than a page share
/// one mapping, so a 64-byte group does not cost a 4 KiB page (issue 30).
class pinned_block {
 public:
  /// @brief Maps @p bytes of page-aligned host memory (not touched yet).
  explicit pinned_block(std::uint64_t bytes) : buffer_(bytes) {}
  /// @brief Bytes [offset, offset + bytes) of @p shared, which this range keeps alive; registered
  /// when @p shared is. @throws usage_error when the range is not inside @p shared.
  pinned_block(std::shared_ptr<pinned_block> shared, std::uint64_t offset, std::uint64_t bytes)
      : shared_(std::move(shared)), offset_(offset), range_bytes_(bytes) {
    DDO_EXPECTS(
        shared_ != nullptr && offset <= shared_->size() && bytes <= shared_->size() - offset,
        "pinned_block: the range [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
            ") is not inside the shared block");
  }
  pinned_block(const pinned_block&) = delete;
  pinned_block& operator=(const pinned_block&) = delete;
  /// @brief Undoes the registration (if any) before the memory is unmapped.
  ~pinned_block() {
    if (unregister_) {
      try {
        unregister_();
      } catch (...) {  // destructors never throw; the transport reports in its own words
      }
    }
  }

  [[nodiscard]] std::byte* data() const noexcept {
    return shared_ ? shared_->data() + offset_ : buffer_.data();
  }
  /// @brief Mapped bytes (whole pages), or the range's bytes.
  [[nodiscard]] std::uint64_t size() const noexcept {
    return shared_ ? range_bytes_ : buffer_.size();
  }
  /// @brief The block that maps these bytes: this one, or a range's shared block.
  [[nodiscard]] const pinned_block& mapping() const noexcept { return shared_ ? *shared_ : *this; }
  [[nodiscard]] bool registered() const noexcept {
    return shared_ ? shared_->registered() : static_cast<bool>(unregister_);
  }
  /// @brief Marks the block registered; @p unregister runs once, at destruction. A range is
  /// registered through its shared block.
  void set_registered(std::function<void()> unregister) {
    DDO_EXPECTS(!shared_, "pinned_block: a range is registered through its shared block");
    unregister_ = std::move(unregister);
  }

 private:
  host_buffer buffer_;  // declared first: unmapped after unregister_ ran
  std::function<void()> unregister_;
  std::shared_ptr<pinned_block> shared_;  // a range's block (null: this block maps its own)
  std::uint64_t offset_ = 0, range_bytes_ = 0;
};

/// @brief In-process cache of pinned blocks, shared by the offloaders given a pointer to it.
/// Thread-safe. The key is built by the runtime from the namespace and the group's layout
/// (weight names, sizes and sources), so two models never share a block by accident. The members
/// whose bodies use the map are function templates of a defaulted parameter callers do not see
/// (shared_weight_store says why).
class pinned_weight_cache {
 public:
  pinned_weight_cache() = default;
  pinned_weight_cache(const pinned_weight_cache&) = delete;
  pinned_weight_cache& operator=(const pinned_weight_cache&) = delete;

  /// @brief The block stored under @p key, or null.
  template <class = void>
  [[nodiscard]] std::shared_ptr<pinned_block> find(const std::string& key) const {
    std::lock_guard lock(mutex_);
    auto it = blocks_.find(key);
    return it == blocks_.end() ? nullptr : it->second;
  }
  /// @brief Stores @p block under @p key (replacing any previous one).
  template <class = void>
  void insert(std::string key, std::shared_ptr<pinned_block> block) {
    std::lock_guard lock(mutex_);
    blocks_[std::move(key)] = std::move(block);
  }
  /// @brief Number of cached blocks.
  [[nodiscard]] std::size_t size() const {
    std::lock_guard lock(mutex_);
    return blocks_.size();
  }
  /// @brief Host bytes mapped by the cached blocks (a block that ranges share counted once).
  template <class = void>
  [[nodiscard]] std::uint64_t bytes() const {
    std::lock_guard lock(mutex_);
    // A sorted vector, not std::set: this header is in the umbrella, whose include cost CI caps.
    std::vector<const pinned_block*> mappings;
    mappings.reserve(blocks_.size());
    for (const auto& [key, block] : blocks_) mappings.push_back(&block->mapping());
    std::sort(mappings.begin(), mappings.end());
    mappings.erase(std::unique(mappings.begin(), mappings.end()), mappings.end());
    std::uint64_t total = 0;
    for (const pinned_block* m : mappings) total += m->size();
    return total;
  }
  /// @brief Drops every block (each is freed once no offloader holds it).
  template <class = void>
  void clear() {
    std::map<std::string, std::shared_ptr<pinned_block>> dropped;
    {
      std::lock_guard lock(mutex_);
      dropped.swap(blocks_);
    }
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<pinned_block>> blocks_;
};

}  // namespace v0
}  // namespace ddo
