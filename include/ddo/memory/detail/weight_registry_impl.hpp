// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief weight_registry's admission and eviction (not API; memory/weight_registry.hpp).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

// Part of ddo/memory/weight_registry.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {
namespace detail::registry_detail {

/// Models that may lose their pieces: unused, not kept; @p model first (what it lists and no
/// longer asks for is stale: a file replaced on disk), then least recently used first, the
/// hinted next model last.
inline std::vector<std::string> eviction_order(const state& s, const std::string& model) {
  std::vector<std::pair<std::uint64_t, std::string>> order;
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
inline key_set protected_keys(const state& s, const key_set& wanted) {
  key_set keys = wanted;
  std::vector<std::string> used;
  for (const auto& [name, m] : s.models)
    if (m.uses != 0 || m.keep) used.insert(used.end(), m.keys.begin(), m.keys.end());
  keys.insert(used.begin(), used.end());
  return keys;
}

/// The registry_full of a load of @p need bytes for @p model that does not fit (@p stuck: bytes
/// no eviction frees).
inline registry_full no_room(const state& s, const std::string& model, std::uint64_t need,
                             std::uint64_t stuck) {
  std::vector<std::pair<std::uint64_t, std::string>> order;
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
inline void evict_model(state& s, const std::string& victim, const key_set& keep,
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

}  // namespace detail::registry_detail

inline void weight_registry::make_room(std::uint64_t need, const std::string& model,
                                       const detail::registry_detail::key_set& wanted,
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

inline model_use weight_registry::acquire(const std::string& model,
                                          std::vector<registry_piece> pieces, const loader& load) {
  DDO_EXPECTS(!model.empty(), "weight_registry::acquire: the model needs a name");
  detail::registry_detail::key_set wanted;
  std::erase_if(pieces, [&](const registry_piece& p) { return !wanted.insert(p.key); });
  std::unique_lock one_load(state_->load_mutex);
  std::vector<std::shared_ptr<pinned_block>> dropped;
  std::vector<registry_piece> missing;
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
  dropped.clear();  // unmapped outside the lock
  // Read and pinned outside the lock (lookups and releases go on); only releases change what is
  // held meanwhile, and they lower it: the room made stays.
  std::vector<std::shared_ptr<pinned_block>> blocks;
  if (!missing.empty()) blocks = load(missing);
  DDO_EXPECTS(blocks.size() == missing.size(), "weight_registry::acquire: the loader returned " +
                                                   std::to_string(blocks.size()) + " blocks for " +
                                                   std::to_string(missing.size()) + " pieces");
  for (std::size_t i = 0; i < missing.size(); ++i)
    DDO_EXPECTS(blocks[i] && blocks[i]->size() >= missing[i].bytes &&
                    blocks[i]->size() <= detail::registry_detail::page_bytes(missing[i].bytes),
                "weight_registry::acquire: the loader's block for '" + missing[i].key +
                    "' does not hold its " + std::to_string(missing[i].bytes) + " bytes in " +
                    "whole pages");
  return commit(model, pieces, missing, blocks, reused);
}

inline model_use weight_registry::commit(const std::string& model,
                                         const std::vector<registry_piece>& pieces,
                                         const std::vector<registry_piece>& missing,
                                         std::vector<std::shared_ptr<pinned_block>>& blocks,
                                         std::uint64_t reused) {
  std::vector<std::shared_ptr<pinned_block>> dropped;
  model_use use;
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
  s.collect(dropped);  // the model's pieces it no longer lists (a file replaced on disk)
  return use;
}

inline void weight_registry::set_budget(std::uint64_t budget_bytes) {
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

}  // namespace v0
}  // namespace ddo
