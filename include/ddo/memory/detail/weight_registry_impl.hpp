// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief weight_registry's state, admission and eviction (not API; memory/weight_registry.hpp).
/// Header-only, memory/weight_registry.hpp includes it; compiled once (core/linkage.hpp),
/// ddo/instantiate.hpp does, and instantiates the registry's one instantiation there.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddo/core/chrono.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/units.hpp"
#include "ddo/memory/host_buffer.hpp"

// Part of ddo/memory/weight_registry.hpp (not included back: no include cycles).

namespace ddo {
inline namespace v0 {
namespace detail::registry_detail {

/// T named through Tag: the registry's own containers are then dependent types, instantiated
/// with the registry where it is used, not in every TU that includes it (GCC instantiates what
/// the non-dependent code of a template names where the template is defined: 8 MB here).
template <class Tag, class T>
struct tagged {
  using type = T;
};
template <class Tag, class T>
using tagged_t = typename tagged<Tag, T>::type;

/// A set of keys: a sorted vector (not std::set: the registry is in the umbrella, whose include
/// cost CI caps).
template <class Tag>
class basic_key_set {
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
  tagged_t<Tag, std::vector<std::string>> keys_;
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
template <class Tag>
struct basic_state {
  mutable std::mutex mutex;
  std::mutex load_mutex;  // one admission + load at a time
  std::uint64_t budget = std::numeric_limits<std::uint64_t>::max();
  tagged_t<Tag, std::map<std::string, piece_state>> pieces;
  tagged_t<Tag, std::map<std::string, model_state>> models;
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
    basic_key_set<Tag> listed;
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

/// Models that may lose their pieces: unused, not kept; @p model first (what it lists and no
/// longer asks for is stale: a file replaced on disk), then least recently used first, the
/// hinted next model last.
template <class Tag>
std::vector<std::string> eviction_order(const basic_state<Tag>& s, const std::string& model) {
  tagged_t<Tag, std::vector<std::pair<std::uint64_t, std::string>>> order;
  for (const auto& [name, m] : s.models)
    if (m.uses == 0 && !m.keep)
      order.emplace_back(name == model    ? 0
                         : name == s.next ? std::numeric_limits<std::uint64_t>::max()
                                          : m.last_used,
                         name);
  std::sort(order.begin(), order.end());
  std::vector<std::string> names;
  for (auto& o : order) names.push_back(std::move(o.second));
  return names;
}

/// Keys no eviction may touch: of models in use or kept, and @p wanted.
template <class Tag>
basic_key_set<Tag> protected_keys(const basic_state<Tag>& s, const basic_key_set<Tag>& wanted) {
  basic_key_set<Tag> keys = wanted;
  std::vector<std::string> used;
  for (const auto& [name, m] : s.models)
    if (m.uses != 0 || m.keep) used.insert(used.end(), m.keys.begin(), m.keys.end());
  keys.insert(used.begin(), used.end());
  return keys;
}

/// The registry_full of a load of @p need bytes for @p model that does not fit (@p stuck: bytes
/// no eviction frees).
template <class Tag>
registry_full no_room(const basic_state<Tag>& s, const std::string& model, std::uint64_t need,
                      std::uint64_t stuck) {
  tagged_t<Tag, std::vector<std::pair<std::uint64_t, std::string>>> order;
  for (const auto& [name, m] : s.models)
    if (name != model && (m.uses != 0 || m.keep)) order.emplace_back(m.last_used, name);
  std::sort(order.begin(), order.end());
  std::vector<std::string> names;
  std::string list;
  for (auto& [tick, name] : order) {
    const auto& m = s.models.at(name);
    list += (list.empty() ? "" : ", ") + ("'" + name + "'") + (m.keep ? " (kept)" : " (in use)");
    names.push_back(name);
  }
  const std::string who = model.empty() ? "the new budget" : "model '" + model + "'";
  if (need > s.budget)
    return registry_full(need, s.budget, {},
                         "weight_registry: " + who + " needs " + format_bytes_exact(need) +
                             " of page-locked memory, more than the whole pinned-RAM budget of " +
                             format_bytes_exact(s.budget) + ". Nothing was loaded or evicted.");
  return registry_full(
      need, s.budget, names,
      "weight_registry: " + who + " needs " + format_bytes_exact(need) +
          " more page-locked bytes, and " + format_bytes_exact(stuck) +
          " of the pinned-RAM budget of " + format_bytes_exact(s.budget) +
          " are held by models in use or kept; " +
          (names.empty() ? std::string("copies in flight hold them (piece_use); retry once their "
                                       "events completed")
                         : "release (or stop keeping) one of: " + list) +
          ". Nothing was loaded or evicted.");
}

/// Unpins the unused, unprotected pieces of @p victim; stops once @p need fits. Caller holds
/// the mutex.
template <class Tag>
void evict_model(basic_state<Tag>& s, const std::string& victim, const basic_key_set<Tag>& keep,
                 std::uint64_t need, std::vector<std::shared_ptr<pinned_block>>& dropped) {
  for (const auto& key : s.models.at(victim).keys) {
    if (s.held() + need <= s.budget) return;
    const auto it = s.pieces.find(key);
    if (it == s.pieces.end() || it->second.uses != 0 || keep.contains(key)) continue;
    s.stats.pinned_bytes -= it->second.charged;
    s.stats.evicted_bytes += it->second.charged;
    dropped.push_back(std::move(it->second.block));
    s.pieces.erase(it);
  }
  s.stats.pieces = s.pieces.size();
}

/// Gives blocks of @p dropped to the @p missing pieces they hold (@p given, a block or null per
/// piece): for each piece the smallest block of at least its bytes and at most its whole pages,
/// of no other holder (a block someone still holds may still be read). Those given leave
/// @p dropped.
template <class Tag>
std::vector<std::shared_ptr<pinned_block>> recycle(
    const std::vector<registry_piece>& missing,
    std::vector<std::shared_ptr<pinned_block>>& dropped) {
  std::vector<std::shared_ptr<pinned_block>> given(missing.size());
  tagged_t<Tag, std::vector<std::pair<std::uint64_t, std::size_t>>> free;  // (size, index)
  for (std::size_t i = 0; i < dropped.size(); ++i)
    if (dropped[i] && dropped[i].use_count() == 1) free.emplace_back(dropped[i]->size(), i);
  if (free.empty()) return given;
  std::sort(free.begin(), free.end());
  for (std::size_t i = 0; i < missing.size(); ++i) {
    const std::uint64_t bytes = missing[i].bytes;
    const auto it =
        std::lower_bound(free.begin(), free.end(), std::make_pair(bytes, std::size_t{0}));
    if (it == free.end() || it->first > page_bytes(bytes)) continue;
    given[i] = std::move(dropped[it->second]);
    free.erase(it);
  }
  std::erase(dropped, nullptr);
  return given;
}

/// Checks the loader's @p blocks for @p pieces: one each, holding its bytes in whole pages. (A
/// template of no use but its own, as the registry's classes are: compiled only where used.)
template <class = void>
void check_loaded(std::span<const registry_piece> pieces,
                         const std::vector<std::shared_ptr<pinned_block>>& blocks) {
  DDO_EXPECTS(blocks.size() == pieces.size(), "weight_registry::acquire: the loader returned " +
                                                  std::to_string(blocks.size()) + " blocks for " +
                                                  std::to_string(pieces.size()) + " pieces");
  for (std::size_t i = 0; i < pieces.size(); ++i)
    DDO_EXPECTS(blocks[i] && blocks[i]->size() >= pieces[i].bytes &&
                    blocks[i]->size() <= page_bytes(pieces[i].bytes),
                "weight_registry::acquire: the loader's block for '" + pieces[i].key +
                    "' does not hold its " + std::to_string(pieces[i].bytes) + " bytes in " +
                    "whole pages");
}

template <class = void>
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace detail::registry_detail

template <class Tag>
void basic_model_use<Tag>::reset() noexcept {
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

template <class Tag>
void basic_piece_use<Tag>::release() noexcept {
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

template <class Tag>
basic_weight_registry<Tag>::basic_weight_registry(std::uint64_t budget_bytes)
    : state_(std::make_shared<state>()) {
  state_->budget = budget_bytes;
  state_->stats.budget_bytes = budget_bytes;
}

template <class Tag>
basic_piece_use<Tag> basic_weight_registry<Tag>::use_piece(const std::string& key) {
  std::lock_guard lock(state_->mutex);
  basic_piece_use<Tag> u;
  const auto it = state_->pieces.find(key);
  if (it == state_->pieces.end()) return u;
  ++it->second.uses;
  u.state_ = state_;
  u.key_ = key;
  u.block_ = it->second.block;
  return u;
}

template <class Tag>
void basic_weight_registry<Tag>::keep(const std::string& model, bool on) {
  std::lock_guard lock(state_->mutex);
  model_or_throw(model, "keep").keep = on;
}

template <class Tag>
void basic_weight_registry<Tag>::hint_next(const std::string& model) {
  std::lock_guard lock(state_->mutex);
  state_->next = model;
}

template <class Tag>
void basic_weight_registry<Tag>::release(const std::string& model) {
  std::vector<std::shared_ptr<pinned_block>> dropped;
  std::lock_guard lock(state_->mutex);
  auto& m = model_or_throw(model, "release");
  m.released = true;
  m.keep = false;
  state_->collect(dropped);
}

template <class Tag>
registry_stats basic_weight_registry<Tag>::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

template <class Tag>
bool basic_weight_registry<Tag>::holds_model(const std::string& model) const {
  std::lock_guard lock(state_->mutex);
  const auto it = state_->models.find(model);
  return it != state_->models.end() && !it->second.released;
}

template <class Tag>
std::vector<std::string> basic_weight_registry<Tag>::models() const {
  std::lock_guard lock(state_->mutex);
  std::vector<std::string> names;
  for (const auto& [name, m] : state_->models)
    if (!m.released) names.push_back(name);
  return names;
}

template <class Tag>
std::uint64_t basic_weight_registry<Tag>::held_bytes(std::span<const registry_piece> pieces) const {
  std::lock_guard lock(state_->mutex);
  key_set seen;
  std::uint64_t bytes = 0;
  for (const auto& p : pieces)
    if (seen.insert(p.key) && state_->pieces.contains(p.key)) bytes += p.bytes;
  return bytes;
}

template <class Tag>
detail::registry_detail::model_state& basic_weight_registry<Tag>::model_or_throw(
    const std::string& model, const char* what) {
  const auto it = state_->models.find(model);
  DDO_EXPECTS(
      it != state_->models.end() && !it->second.released,
      std::string("weight_registry::") + what + ": no model '" + model + "' (acquire it first)");
  return it->second;
}

template <class Tag>
void basic_weight_registry<Tag>::make_room(std::uint64_t need, const std::string& model,
                                           const key_set& wanted,
                                           std::vector<std::shared_ptr<pinned_block>>& dropped) {
  namespace rd = detail::registry_detail;
  auto& s = *state_;
  if (s.held() + need <= s.budget) return;
  // Dry run first: throw before evicting anything.
  const auto keep = rd::protected_keys(s, wanted);
  std::uint64_t stuck = 0;
  for (const auto& [key, p] : s.pieces)
    if (p.uses != 0 || keep.contains(key)) stuck += p.charged;
  if (need > s.budget || stuck + need > s.budget) throw rd::no_room(s, model, need, stuck);
  for (const auto& victim : rd::eviction_order(s, model)) {
    rd::evict_model(s, victim, keep, need, dropped);
    if (s.held() + need <= s.budget) return;
  }
  // Pieces at use 0 that no model lists are collected as they go: none is left here.
  DDO_EXPECTS(s.held() + need <= s.budget, "weight_registry: eviction did not free the room");
}

template <class Tag>
basic_model_use<Tag> basic_weight_registry<Tag>::acquire(const std::string& model,
                                                         std::vector<registry_piece> pieces,
                                                         const loader& load) {
  return acquire_with(
      model, std::move(pieces),
      [&](std::span<const registry_piece> p, std::span<const std::shared_ptr<pinned_block>>) {
        return load(p);
      },
      false);
}

template <class Tag>
basic_model_use<Tag> basic_weight_registry<Tag>::acquire(const std::string& model,
                                                         std::vector<registry_piece> pieces,
                                                         const recycling_loader& load) {
  return acquire_with(model, std::move(pieces), load, true);
}

template <class Tag>
basic_model_use<Tag> basic_weight_registry<Tag>::acquire_with(const std::string& model,
                                                              std::vector<registry_piece> pieces,
                                                              const recycling_loader& load,
                                                              bool recycle) {
  DDO_EXPECTS(!model.empty(), "weight_registry::acquire: the model needs a name");
  key_set wanted;
  std::erase_if(pieces, [&](const registry_piece& p) { return !wanted.insert(p.key); });
  std::unique_lock one_load(state_->load_mutex);
  std::vector<std::shared_ptr<pinned_block>> dropped;
  detail::registry_detail::tagged_t<Tag, std::vector<registry_piece>> missing;
  std::uint64_t reused = 0;
  {
    std::lock_guard lock(state_->mutex);
    std::uint64_t need = 0;
    for (const auto& p : pieces) {
      if (state_->pieces.contains(p.key)) {
        reused += p.bytes;
      } else {
        missing.push_back(p);
        need += detail::registry_detail::page_bytes(p.bytes);
      }
    }
    make_room(need, model, wanted, dropped);
  }
  auto given = recycle ? detail::registry_detail::recycle<Tag>(missing, dropped)
                       : std::vector<std::shared_ptr<pinned_block>>(missing.size());
  // Read and pinned outside the lock (lookups and releases go on); only releases change what is
  // held meanwhile, and they lower it: the room made stays.
  std::uint64_t recycled = 0;
  auto blocks = load_missing(missing, std::move(given), std::move(dropped), load, recycled);
  return commit(model, pieces, missing, blocks, reused, recycled);
}

template <class Tag>
std::vector<std::shared_ptr<pinned_block>> basic_weight_registry<Tag>::load_missing(
    const std::vector<registry_piece>& missing, std::vector<std::shared_ptr<pinned_block>> given,
    std::vector<std::shared_ptr<pinned_block>> dropped, const recycling_loader& load,
    std::uint64_t& recycled) {
  namespace rd = detail::registry_detail;
  std::vector<std::shared_ptr<pinned_block>> blocks(missing.size());
  std::vector<std::size_t> again, fresh;  // pieces given a block, and the others
  for (std::size_t i = 0; i < missing.size(); ++i) (given[i] ? again : fresh).push_back(i);
  const auto load_some = [&](const std::vector<std::size_t>& which) {
    if (which.empty()) return;
    std::vector<registry_piece> some;
    std::vector<std::shared_ptr<pinned_block>> into;
    for (const std::size_t i : which) {
      some.push_back(missing[i]);
      into.push_back(given[i]);
    }
    auto got = load(some, into);
    rd::check_loaded(some, got);
    for (std::size_t k = 0; k < which.size(); ++k) blocks[which[k]] = std::move(got[k]);
  };
  const auto t0 = std::chrono::steady_clock::now();
  double waited = 0.0;
  std::uint64_t recycled_pages = 0;
  {
    // The evicted blocks no piece took are unpinned beside the recycled pieces' reads (joined
    // as this scope ends, a throwing load included); new pages are locked after them.
    std::jthread unpin;
    if (!again.empty() && !dropped.empty())
      unpin = std::jthread([d = std::move(dropped)]() mutable { d.clear(); });
    load_some(again);
    for (const std::size_t i : again) {
      if (blocks[i] == given[i]) {
        recycled += missing[i].bytes;
        recycled_pages += blocks[i]->size();
      }
      given[i].reset();  // one the loader did not keep: freed before new pages are locked
    }
    const auto w0 = std::chrono::steady_clock::now();
    if (unpin.joinable()) unpin.join();
    dropped.clear();  // none recycled: unpinned here
    waited = rd::seconds_since(w0);
  }
  load_some(fresh);
  std::lock_guard lock(state_->mutex);
  state_->stats.recycled_bytes += recycled_pages;
  state_->stats.unpin_wait_seconds += waited;
  state_->stats.load_seconds += rd::seconds_since(t0) - waited;
  return blocks;
}

template <class Tag>
basic_model_use<Tag> basic_weight_registry<Tag>::commit(
    const std::string& model, const std::vector<registry_piece>& pieces,
    const std::vector<registry_piece>& missing, std::vector<std::shared_ptr<pinned_block>>& blocks,
    std::uint64_t reused, std::uint64_t recycled) {
  std::vector<std::shared_ptr<pinned_block>> dropped;
  basic_model_use<Tag> use;
  std::lock_guard lock(state_->mutex);
  auto& s = *state_;
  std::uint64_t loaded = 0;
  for (std::size_t i = 0; i < missing.size(); ++i) {
    auto& p = s.pieces[missing[i].key];
    p.block = std::move(blocks[i]);
    p.charged = p.block->size();
    s.stats.pinned_bytes += p.charged;
    loaded += missing[i].bytes;
  }
  s.stats.loaded_bytes += loaded;
  s.stats.reused_bytes += reused;
  s.stats.peak_pinned_bytes = std::max(s.stats.peak_pinned_bytes, s.stats.pinned_bytes);
  auto& m = s.models[model];
  m.keys.clear();
  for (const auto& p : pieces) m.keys.push_back(p.key);
  m.released = false;
  s.count_uses(model, m.keys, +1);
  use.state_ = state_;
  use.model_ = model;
  use.keys_ = m.keys;
  for (const auto& k : m.keys) use.blocks_.push_back(s.pieces.at(k).block);
  use.loaded_ = loaded;
  use.reused_ = reused;
  use.recycled_ = recycled;
  s.collect(dropped);  // the model's pieces it no longer lists (a file replaced on disk)
  return use;
}

template <class Tag>
void basic_weight_registry<Tag>::set_budget(std::uint64_t budget_bytes) {
  std::unique_lock one_load(state_->load_mutex);
  std::vector<std::shared_ptr<pinned_block>> dropped;
  std::lock_guard lock(state_->mutex);
  const std::uint64_t old = state_->budget;
  state_->budget = budget_bytes;
  try {
    make_room(0, "", {}, dropped);
  } catch (...) {
    state_->budget = old;
    throw;
  }
  state_->stats.budget_bytes = budget_bytes;
}

template <class Tag>
const std::shared_ptr<basic_weight_registry<Tag>>& process_weight_registry() {
  static const auto registry = std::make_shared<basic_weight_registry<Tag>>();
  return registry;
}

}  // namespace v0
}  // namespace ddo
