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
/// Recycling (a switch between models of one shape). With a recycling_loader, an evicted block
/// that holds a piece the acquire lacks (at least its bytes, in its whole pages, no other
/// holder) is given to the loader for that piece: read again in place, it is neither unpinned
/// nor page-locked anew (on a GPU, cudaHostUnregister and cudaHostRegister of the evicted bytes
/// were a switch's cost beyond its reads). The other evicted blocks are unpinned on a thread of
/// their own while the loader reads the recycled pieces; the pieces that need new pages are
/// loaded after that, so the page-locked bytes never exceed the budget, at any moment, not only
/// in the ledger. A plain loader gets no block: the evicted ones are unpinned before it runs.
///
/// Why a process-wide instance now exists (pinned_weight_cache has none): the budget is a
/// property of the process — one RAM, one MemAvailable — and two engine-owned caches cannot see
/// each other's bytes, which is how a 64 GB machine ran out of RAM "after 2-3 model switches".
/// process_weight_registry() is that instance (every setup that uses it sets its budget from
/// its settings: setup/registry_budget.hpp); an engine can still make its own
/// (std::make_shared<weight_registry>(budget)) and pass it instead.
/// Thread-safe: loads run one at a time (one admission decision at a time), lookups and releases
/// beside them.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/linkage.hpp"
#include "ddo/memory/pinned_weight_cache.hpp"
#include "ddo/memory/weight_registry_fwd.hpp"

// The registry's classes are templates of one instantiation (weight_registry_fwd.hpp) with their
// state and bodies in detail/weight_registry_impl.hpp: this header is in the umbrella (the runtime
// takes its host bytes from a registry), and a TU that does not use the registry then compiles
// none of its code (as plain classes, their bodies cost every TU including ddo 27 MB of GCC's
// memory, 10% of the umbrella). Compiled once (core/linkage.hpp), the one instantiation of each is
// declared extern below and defined in the TU including ddo/instantiate.hpp.

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
  std::uint64_t evicted_bytes = 0;  ///< taken from models to make room (unpinned or recycled)
  /// Of the evicted bytes, those given to incoming pieces (a recycling_loader): their
  /// pages stayed page-locked, read again in place; evicted - recycled were unpinned.
  std::uint64_t recycled_bytes = 0;
  /// Seconds acquires waited for evicted pages to be unpinned (what no load overlapped), and
  /// spent in their loaders (reading, and page-locking what was not recycled).
  double unpin_wait_seconds = 0.0;
  double load_seconds = 0.0;
  std::size_t pieces = 0;
  std::size_t models = 0;
};

namespace detail::registry_detail {
template <class Tag>
class basic_key_set;
template <class Tag>
struct basic_state;
struct model_state;
}  // namespace detail::registry_detail

/// @brief A model in use: one use of each of its pieces (see the file comment). Move-only; the
/// uses are given back when it goes.
template <class Tag>
class basic_model_use {
 public:
  basic_model_use() = default;
  basic_model_use(const basic_model_use&) = delete;
  basic_model_use& operator=(const basic_model_use&) = delete;
  basic_model_use(basic_model_use&& o) noexcept { swap(o); }
  basic_model_use& operator=(basic_model_use&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  ~basic_model_use() { reset(); }

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
  /// Of loaded_bytes(), the bytes read into an evicted model's pages, page-locked already
  /// (recycling_loader).
  [[nodiscard]] std::uint64_t recycled_bytes() const noexcept { return recycled_; }
  [[nodiscard]] explicit operator bool() const noexcept { return state_ != nullptr; }

  /// Gives the uses back now (as the destructor does).
  void reset() noexcept;

 private:
  friend class basic_weight_registry<Tag>;
  void swap(basic_model_use& o) noexcept {
    std::swap(state_, o.state_);
    std::swap(model_, o.model_);
    std::swap(keys_, o.keys_);
    std::swap(blocks_, o.blocks_);
    std::swap(loaded_, o.loaded_);
    std::swap(reused_, o.reused_);
    std::swap(recycled_, o.recycled_);
  }
  std::shared_ptr<detail::registry_detail::basic_state<Tag>> state_;
  std::string model_;
  std::vector<std::string> keys_;
  std::vector<std::shared_ptr<pinned_block>> blocks_;
  std::uint64_t loaded_ = 0, reused_ = 0, recycled_ = 0;
};

/// @brief One use of one piece, for one copy: taken when the copy is enqueued, given back
/// (release() or destruction) once its event completed. Move-only.
template <class Tag>
class basic_piece_use {
 public:
  basic_piece_use() = default;
  basic_piece_use(const basic_piece_use&) = delete;
  basic_piece_use& operator=(const basic_piece_use&) = delete;
  basic_piece_use(basic_piece_use&& o) noexcept
      : state_(std::move(o.state_)), key_(std::move(o.key_)), block_(std::move(o.block_)) {}
  basic_piece_use& operator=(basic_piece_use&& o) noexcept {
    if (this != &o) {
      release();
      state_ = std::move(o.state_);
      key_ = std::move(o.key_);
      block_ = std::move(o.block_);
    }
    return *this;
  }
  ~basic_piece_use() { release(); }
  [[nodiscard]] const std::byte* data() const noexcept { return block_ ? block_->data() : nullptr; }
  [[nodiscard]] explicit operator bool() const noexcept { return state_ != nullptr; }
  /// Gives the use back (after the copy's event completed).
  void release() noexcept;

 private:
  friend class basic_weight_registry<Tag>;
  std::shared_ptr<detail::registry_detail::basic_state<Tag>> state_;
  std::string key_;
  std::shared_ptr<pinned_block> block_;
};

/// @brief Host copies of several models under one pinned-RAM budget (see the file comment).
template <class Tag>
class basic_weight_registry {
 public:
  /// Reads and page-locks the given pieces, returning one block per piece (in order), each at
  /// least the piece's bytes. Blocks of their own are charged their size, ranges their bytes.
  using loader =
      std::function<std::vector<std::shared_ptr<pinned_block>>(std::span<const registry_piece>)>;
  /// A loader that is also given, per piece, an evicted block to read it into (null: none),
  /// page-locked already where it was (see the file comment): it returns that block for the
  /// piece, or one of its own (the given one is then freed before any other load).
  using recycling_loader = std::function<std::vector<std::shared_ptr<pinned_block>>(
      std::span<const registry_piece>, std::span<const std::shared_ptr<pinned_block>>)>;

  /// @brief A registry of @p budget_bytes page-locked bytes (default: unlimited).
  explicit basic_weight_registry(
      std::uint64_t budget_bytes = std::numeric_limits<std::uint64_t>::max());
  basic_weight_registry(const basic_weight_registry&) = delete;
  basic_weight_registry& operator=(const basic_weight_registry&) = delete;

  /// @brief Uses model @p model with @p pieces (its whole list: a piece it listed before and not
  /// now is no longer its own), loading those not held through @p load within the budget.
  /// @throws registry_full (nothing loaded, nothing evicted) when the pieces lacking do not fit
  /// beside the models in use and kept; what @p load throws (nothing of the call kept).
  [[nodiscard]] basic_model_use<Tag> acquire(const std::string& model,
                                             std::vector<registry_piece> pieces,
                                             const loader& load);
  /// @brief acquire() with a loader given the evicted blocks to recycle (see the file comment).
  [[nodiscard]] basic_model_use<Tag> acquire(const std::string& model,
                                             std::vector<registry_piece> pieces,
                                             const recycling_loader& load);

  /// @brief One use of the held piece @p key for one copy; an empty piece_use when not held.
  [[nodiscard]] basic_piece_use<Tag> use_piece(const std::string& key);

  /// @brief Pins model @p model (@p on) — its pieces are not evicted for another — or lets it
  /// be evicted again. @throws usage_error for a model never acquired.
  void keep(const std::string& model, bool on = true);
  /// @brief The model the engine runs next: evicted last, after every other candidate.
  void hint_next(const std::string& model);
  /// @brief Forgets model @p model: its pieces no other model lists are unpinned now, or when
  /// its last use goes. A released model acquired again loads what is not held.
  void release(const std::string& model);
  /// @brief Sets the budget, evicting unused models' pieces (least recently used first) to fit.
  /// @throws registry_full (budget unchanged, nothing evicted) when what is in use or kept does
  /// not fit it.
  void set_budget(std::uint64_t budget_bytes);

  [[nodiscard]] registry_stats stats() const;
  [[nodiscard]] std::uint64_t pinned_bytes() const { return stats().pinned_bytes; }
  [[nodiscard]] std::uint64_t budget() const { return stats().budget_bytes; }
  /// @brief Whether model @p model is known: acquired, and not released since.
  [[nodiscard]] bool holds_model(const std::string& model) const;
  /// @brief The models known (acquired, not released), by name.
  [[nodiscard]] std::vector<std::string> models() const;
  /// @brief Bytes of @p pieces held now (each key once): what an acquire of them would reuse.
  [[nodiscard]] std::uint64_t held_bytes(std::span<const registry_piece> pieces) const;

 private:
  using state = detail::registry_detail::basic_state<Tag>;
  using key_set = detail::registry_detail::basic_key_set<Tag>;
  detail::registry_detail::model_state& model_or_throw(const std::string& model, const char* what);
  /// Frees room for @p need more bytes (the pieces of @p wanted kept), or throws registry_full.
  void make_room(std::uint64_t need, const std::string& model, const key_set& wanted,
                 std::vector<std::shared_ptr<pinned_block>>& dropped);
  /// Both acquire()s: @p recycle false gives the loader no block (the evicted ones unpinned
  /// first).
  basic_model_use<Tag> acquire_with(const std::string& model, std::vector<registry_piece> pieces,
                                    const recycling_loader& load, bool recycle);
  /// Loads @p missing through @p load: those @p given a block first, while the other @p dropped
  /// blocks are unpinned, then the rest (see the file comment). One block a piece, in order;
  /// @p recycled: the bytes of the given blocks the loader kept.
  std::vector<std::shared_ptr<pinned_block>> load_missing(
      const std::vector<registry_piece>& missing, std::vector<std::shared_ptr<pinned_block>> given,
      std::vector<std::shared_ptr<pinned_block>> dropped, const recycling_loader& load,
      std::uint64_t& recycled);
  /// Stores the loaded pieces and takes the uses (acquire's last step).
  basic_model_use<Tag> commit(const std::string& model, const std::vector<registry_piece>& pieces,
                              const std::vector<registry_piece>& missing,
                              std::vector<std::shared_ptr<pinned_block>>& blocks,
                              std::uint64_t reused, std::uint64_t recycled);

  std::shared_ptr<state> state_;
};

/// @brief The process's registry (see the file comment): unlimited until a setup or
/// set_budget() sets its budget. (A
/// template of one instantiation, as the registry is: called as process_weight_registry().)
template <class Tag = void>
[[nodiscard]] const std::shared_ptr<basic_weight_registry<Tag>>& process_weight_registry();

#if !DDO_HEADER_ONLY
extern template class basic_model_use<void>;
extern template class basic_piece_use<void>;
extern template class basic_weight_registry<void>;
extern template const std::shared_ptr<weight_registry>& process_weight_registry<void>();
#endif

}  // namespace v0
}  // namespace ddo

#if DDO_HEADER_ONLY
#include "ddo/memory/detail/weight_registry_impl.hpp"
#endif
