// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::weight_registry: the page-locked host copies of several models of one process
/// under one pinned-RAM budget (issue 42). A model is a named list of pieces, each keyed by its
/// identity (shared_weight_store's keys: a file weight by path, file identity and offset, a host
/// weight by address and its table's host generation), so a piece two models share — the same
/// file, or the same tensor in both — is held once, and a file replaced on disk is a new piece
/// (its identity changed): never a stale byte.
///
/// Eviction protocol. Every piece has a use count; an address read from the registry is valid
/// only while a use of its piece lives. acquire() takes one use of each piece of a model (a
/// model_use: an offloader holds one for its life, so every copy it enqueues reads a piece in
/// use; its teardown synchronises its streams before letting go), and use_piece() takes one for
/// a single copy (taken at enqueue, released once the copy's event completed). A piece is
/// evicted only at use count 0; a model is in use while a model_use of it lives.
///
/// Admission: acquire() counts the bytes of the pieces it lacks; when they do not fit the budget
/// beside what is held, it unpins the least recently used models' pieces — never one of a model
/// in use, never one of a kept model (keep()), the model named by hint_next() last — and when
/// that is not enough it throws registry_full naming the models to release, having loaded
/// nothing. A failed load leaves nothing of the call behind. Released models (release()) and
/// pieces no model lists are dropped once unused; after the last release nothing is pinned.
///
/// Why a process-wide instance now exists (pinned_weight_cache has none): the budget is a
/// property of the process — one RAM, one MemAvailable — and two engine-owned caches cannot see
/// each other's bytes, which is how a 64 GB machine ran out of RAM "after 2-3 model switches".
/// process_weight_registry() is that instance (unlimited until set_budget()); an engine can
/// still make its own (std::make_shared<weight_registry>(budget)) and pass it instead.
/// Thread-safe: loads run one at a time (one admission decision at a time), lookups and releases
/// beside them.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/units.hpp"
#include "ddo/memory/host_buffer.hpp"
#include "ddo/memory/pinned_weight_cache.hpp"

namespace ddo {
inline namespace v0 {

/// @brief A load the budget cannot take: the models to release (least recently used first) and
/// the bytes. Thrown before anything was loaded or evicted.
class registry_full : public out_of_memory {
 public:
  registry_full(std::uint64_t needed, std::uint64_t budget, std::vector<std::string> release,
                const std::string& message)
      : out_of_memory(memory_tier::pinned_host, needed, budget, message),
        release_(std::move(release)) {}
  /// Models in use or kept whose release would make room, least recently used first.
  [[nodiscard]] const std::vector<std::string>& models_to_release() const noexcept {
    return release_;
  }

 private:
  std::vector<std::string> release_;
};

/// @brief One piece of a model: its identity and its bytes.
struct registry_piece {
  std::string key;
  std::uint64_t bytes = 0;
};

/// @brief Counters of a registry (what it holds now, what it did so far).
struct registry_stats {
  std::uint64_t budget_bytes = 0;
  std::uint64_t pinned_bytes = 0;  ///< held now (each piece once)
  std::uint64_t peak_pinned_bytes = 0;
  std::uint64_t loaded_bytes = 0;   ///< read and pinned so far
  std::uint64_t reused_bytes = 0;   ///< given to an acquire from what was held
  std::uint64_t evicted_bytes = 0;  ///< unpinned to make room
  std::size_t pieces = 0;
  std::size_t models = 0;
};

namespace detail::registry_detail {

/// A set of keys: a sorted vector (not std::set: this header is in the umbrella, whose include
/// cost CI caps).
class key_set {
 public:
  /// Adds @p key; false when it was there.
  bool insert(const std::string& key) {
    const auto it = std::lower_bound(keys_.begin(), keys_.end(), key);
    if (it != keys_.end() && *it == key) return false;
    keys_.insert(it, key);
    return true;
  }
  template <class It>
  void insert(It first, It last) {
    keys_.insert(keys_.end(), first, last);
    std::sort(keys_.begin(), keys_.end());
    keys_.erase(std::unique(keys_.begin(), keys_.end()), keys_.end());
  }
  [[nodiscard]] bool contains(const std::string& key) const {
    return std::binary_search(keys_.begin(), keys_.end(), key);
  }

 private:
  std::vector<std::string> keys_;
};

struct piece_state {
  std::shared_ptr<pinned_block> block;
  std::uint64_t charged = 0;  // bytes against the budget (the block's)
  std::size_t uses = 0;
};

struct model_state {
  std::vector<std::string> keys;  // its pieces, each once
  std::size_t uses = 0;           // live model_use objects
  std::uint64_t last_used = 0;    // LRU tick
  bool keep = false;
  bool released = false;  // forget once unused
};

/// The shared state: model_use and piece_use objects keep it alive past the registry object.
struct state {
  mutable std::mutex mutex;
  std::mutex load_mutex;  // one admission + load at a time
  std::uint64_t budget = std::numeric_limits<std::uint64_t>::max();
  std::map<std::string, piece_state> pieces;
  std::map<std::string, model_state> models;
  std::string next;  // hint_next()
  std::uint64_t tick = 0;
  registry_stats stats;

  /// Bytes of pieces held now.
  std::uint64_t held() const { return stats.pinned_bytes; }

  /// Drops pieces at use 0 that no model (but a released one) lists. Caller holds mutex; the
  /// blocks are moved to @p out so they unmap after the lock is let go.
  void collect(std::vector<std::shared_ptr<pinned_block>>& out) {
    std::vector<std::string> all;
    for (auto it = models.begin(); it != models.end();) {
      if (it->second.released && it->second.uses == 0) {
        it = models.erase(it);
        continue;
      }
      all.insert(all.end(), it->second.keys.begin(), it->second.keys.end());
      ++it;
    }
    key_set listed;
    listed.insert(all.begin(), all.end());
    for (auto it = pieces.begin(); it != pieces.end();) {
      if (it->second.uses == 0 && !listed.contains(it->first)) {
        stats.pinned_bytes -= it->second.charged;
        out.push_back(std::move(it->second.block));
        it = pieces.erase(it);
      } else {
        ++it;
      }
    }
    stats.pieces = pieces.size();
    stats.models = models.size();
  }

  /// Takes (+1) or gives back (-1) one use of each of @p keys and of model @p name.
  void count_uses(const std::string& name, const std::vector<std::string>& keys, int delta) {
    for (const auto& k : keys) {
      auto& p = pieces.at(k);
      p.uses = delta > 0 ? p.uses + 1 : p.uses - 1;
    }
    auto& m = models.at(name);
    m.uses = delta > 0 ? m.uses + 1 : m.uses - 1;
    m.last_used = ++tick;
  }
};

/// Rounds @p bytes up to whole pages: what a block of its own maps.
inline std::uint64_t page_bytes(std::uint64_t bytes) {
  return round_up(bytes, host_page_size());
}

}  // namespace detail::registry_detail

/// @brief A model in use: one use of each of its pieces (see the file comment). Move-only; the
/// uses are given back when it goes.
class model_use {
 public:
  model_use() = default;
  model_use(const model_use&) = delete;
  model_use& operator=(const model_use&) = delete;
  model_use(model_use&& o) noexcept { swap(o); }
  model_use& operator=(model_use&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  ~model_use() { reset(); }

  /// The model's name.
  [[nodiscard]] const std::string& model() const noexcept { return model_; }
  /// The block holding piece @p i (the acquire's order of distinct keys): valid while this lives.
  [[nodiscard]] const std::shared_ptr<pinned_block>& block(std::size_t i) const {
    return blocks_.at(i);
  }
  /// The block of the piece keyed @p key (null when the model has no such piece).
  [[nodiscard]] std::shared_ptr<pinned_block> block(const std::string& key) const {
    const auto it = std::find(keys_.begin(), keys_.end(), key);
    return it == keys_.end() ? nullptr : blocks_[static_cast<std::size_t>(it - keys_.begin())];
  }
  [[nodiscard]] const std::vector<std::string>& keys() const noexcept { return keys_; }
  /// Bytes of this acquire read and pinned, and bytes found held (another model's or an
  /// earlier run's).
  [[nodiscard]] std::uint64_t loaded_bytes() const noexcept { return loaded_; }
  [[nodiscard]] std::uint64_t reused_bytes() const noexcept { return reused_; }
  [[nodiscard]] explicit operator bool() const noexcept { return state_ != nullptr; }

  /// Gives the uses back now (as the destructor does).
  void reset() noexcept {
    if (!state_) return;
    std::vector<std::shared_ptr<pinned_block>> dropped;
    {
      std::lock_guard lock(state_->mutex);
      state_->count_uses(model_, keys_, -1);
      state_->collect(dropped);
    }
    blocks_.clear();
    state_.reset();
  }

 private:
  friend class weight_registry;
  void swap(model_use& o) noexcept {
    std::swap(state_, o.state_);
    std::swap(model_, o.model_);
    std::swap(keys_, o.keys_);
    std::swap(blocks_, o.blocks_);
    std::swap(loaded_, o.loaded_);
    std::swap(reused_, o.reused_);
  }
  std::shared_ptr<detail::registry_detail::state> state_;
  std::string model_;
  std::vector<std::string> keys_;
  std::vector<std::shared_ptr<pinned_block>> blocks_;
  std::uint64_t loaded_ = 0, reused_ = 0;
};

/// @brief One use of one piece, for one copy: taken when the copy is enqueued, given back
/// (release() or destruction) once its event completed. Move-only.
class piece_use {
 public:
  piece_use() = default;
  piece_use(const piece_use&) = delete;
  piece_use& operator=(const piece_use&) = delete;
  piece_use(piece_use&& o) noexcept
      : state_(std::move(o.state_)), key_(std::move(o.key_)), block_(std::move(o.block_)) {}
  piece_use& operator=(piece_use&& o) noexcept {
    if (this != &o) {
      release();
      state_ = std::move(o.state_);
      key_ = std::move(o.key_);
      block_ = std::move(o.block_);
    }
    return *this;
  }
  ~piece_use() { release(); }
  [[nodiscard]] const std::byte* data() const noexcept { return block_ ? block_->data() : nullptr; }
  [[nodiscard]] explicit operator bool() const noexcept { return state_ != nullptr; }
  /// Gives the use back (after the copy's event completed).
  void release() noexcept {
    if (!state_) return;
    std::vector<std::shared_ptr<pinned_block>> dropped;
    {
      std::lock_guard lock(state_->mutex);
      --state_->pieces.at(key_).uses;
      state_->collect(dropped);
    }
    block_.reset();
    state_.reset();
  }

 private:
  friend class weight_registry;
  std::shared_ptr<detail::registry_detail::state> state_;
  std::string key_;
  std::shared_ptr<pinned_block> block_;
};

/// @brief Host copies of several models under one pinned-RAM budget (see the file comment).
class weight_registry {
 public:
  /// Reads and page-locks the given pieces, returning one block per piece (in order), each at
  /// least the piece's bytes. Blocks of their own are charged their size, ranges their bytes.
  using loader =
      std::function<std::vector<std::shared_ptr<pinned_block>>(std::span<const registry_piece>)>;

  /// @brief A registry of @p budget_bytes page-locked bytes (default: unlimited).
  explicit weight_registry(std::uint64_t budget_bytes = std::numeric_limits<std::uint64_t>::max())
      : state_(std::make_shared<detail::registry_detail::state>()) {
    state_->budget = budget_bytes;
    state_->stats.budget_bytes = budget_bytes;
  }
  weight_registry(const weight_registry&) = delete;
  weight_registry& operator=(const weight_registry&) = delete;

  /// @brief Uses model @p model with @p pieces (its whole list: a piece it listed before and not
  /// now is no longer its own), loading those not held through @p load within the budget.
  /// @throws registry_full (nothing loaded, nothing evicted) when the pieces lacking do not fit
  /// beside the models in use and kept; what @p load throws (nothing of the call kept).
  [[nodiscard]] model_use acquire(const std::string& model, std::vector<registry_piece> pieces,
                                  const loader& load);

  /// @brief One use of the held piece @p key for one copy; an empty piece_use when not held.
  [[nodiscard]] piece_use use_piece(const std::string& key) {
    std::lock_guard lock(state_->mutex);
    piece_use u;
    const auto it = state_->pieces.find(key);
    if (it == state_->pieces.end()) return u;
    ++it->second.uses;
    u.state_ = state_;
    u.key_ = key;
    u.block_ = it->second.block;
    return u;
  }

  /// @brief Pins model @p model (@p on) — its pieces are not evicted for another — or lets it
  /// be evicted again. @throws usage_error for a model never acquired.
  void keep(const std::string& model, bool on = true) {
    std::lock_guard lock(state_->mutex);
    model_or_throw(model, "keep").keep = on;
  }
  /// @brief The model the engine runs next: evicted last, after every other candidate.
  void hint_next(const std::string& model) {
    std::lock_guard lock(state_->mutex);
    state_->next = model;
  }
  /// @brief Forgets model @p model: its pieces no other model lists are unpinned now, or when
  /// its last use goes. A released model acquired again loads what is not held.
  void release(const std::string& model) {
    std::vector<std::shared_ptr<pinned_block>> dropped;
    std::lock_guard lock(state_->mutex);
    auto& m = model_or_throw(model, "release");
    m.released = true;
    m.keep = false;
    state_->collect(dropped);
  }
  /// @brief Sets the budget, evicting unused models' pieces (least recently used first) to fit.
  /// @throws registry_full (budget unchanged, nothing evicted) when what is in use or kept does
  /// not fit it.
  void set_budget(std::uint64_t budget_bytes);

  [[nodiscard]] registry_stats stats() const {
    std::lock_guard lock(state_->mutex);
    return state_->stats;
  }
  [[nodiscard]] std::uint64_t pinned_bytes() const { return stats().pinned_bytes; }
  [[nodiscard]] std::uint64_t budget() const { return stats().budget_bytes; }
  /// @brief Whether model @p model is known: acquired, and not released since.
  [[nodiscard]] bool holds_model(const std::string& model) const {
    std::lock_guard lock(state_->mutex);
    const auto it = state_->models.find(model);
    return it != state_->models.end() && !it->second.released;
  }
  /// @brief The models known (acquired, not released), by name.
  [[nodiscard]] std::vector<std::string> models() const {
    std::lock_guard lock(state_->mutex);
    std::vector<std::string> names;
    for (const auto& [name, m] : state_->models)
      if (!m.released) names.push_back(name);
    return names;
  }
  /// @brief Bytes of @p pieces held now (each key once): what an acquire of them would reuse.
  [[nodiscard]] std::uint64_t held_bytes(std::span<const registry_piece> pieces) const {
    std::lock_guard lock(state_->mutex);
    detail::registry_detail::key_set seen;
    std::uint64_t bytes = 0;
    for (const auto& p : pieces)
      if (seen.insert(p.key) && state_->pieces.contains(p.key)) bytes += p.bytes;
    return bytes;
  }

 private:
  detail::registry_detail::model_state& model_or_throw(const std::string& model, const char* what) {
    const auto it = state_->models.find(model);
    DDO_EXPECTS(
        it != state_->models.end() && !it->second.released,
        std::string("weight_registry::") + what + ": no model '" + model + "' (acquire it first)");
    return it->second;
  }
  /// Frees room for @p need more bytes (the pieces of @p wanted kept), or throws registry_full.
  void make_room(std::uint64_t need, const std::string& model,
                 const detail::registry_detail::key_set& wanted,
                 std::vector<std::shared_ptr<pinned_block>>& dropped);
  /// Stores the loaded pieces and takes the uses (acquire's last step).
  model_use commit(const std::string& model, const std::vector<registry_piece>& pieces,
                   const std::vector<registry_piece>& missing,
                   std::vector<std::shared_ptr<pinned_block>>& blocks, std::uint64_t reused);

  std::shared_ptr<detail::registry_detail::state> state_;
};

/// @brief The process's registry (see the file comment): unlimited until set_budget().
[[nodiscard]] inline const std::shared_ptr<weight_registry>& process_weight_registry() {
  static const auto registry = std::make_shared<weight_registry>();
  return registry;
}

}  // namespace v0
}  // namespace ddo

#include "ddo/memory/detail/weight_registry_impl.hpp"
