// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The adapters attached to one offloader (not API: basic_offloader::attach_adapter):
/// their factors on the device, the merge job of every weight they change, and the base bytes
/// of the resident weights they change, kept in pinned host memory so that a detach or a scale
/// change writes the base back and merges again — exactly, however many switches (a resident
/// merged once has no other copy of its base: its source may be a file or a host copy that
/// setup dropped). Streamed weights need no such copy: every load copies their base again.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddo/adapter/lora_delta.hpp"
#include "ddo/core/error.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/runtime/detail/owned_memory.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

template <class T>
class adapter_deltas {
 public:
  using stream_view = typename T::stream_view;

  [[nodiscard]] bool any() const noexcept { return !attached_.empty(); }
  /// The factors of every attached adapter on the device.
  [[nodiscard]] std::uint64_t device_bytes() const noexcept {
    std::uint64_t n = 0;
    for (const auto& a : attached_) n += a.factors.bytes;
    return n;
  }
  /// Pinned host bytes holding the base of merged resident weights.
  [[nodiscard]] std::uint64_t kept_base_bytes() const noexcept {
    std::uint64_t n = 0;
    for (const auto& [w, base] : resident_base_) n += base.bytes;
    return n;
  }
  /// Weight @p w's merge (its address left null), or null when no attached adapter changes it.
  [[nodiscard]] const lora_merge_job* job_for(std::size_t w) const noexcept {
    return w < jobs_.size() && jobs_[w].term_count > 0 ? &jobs_[w] : nullptr;
  }
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& a : attached_) out.push_back(a.name);
    return out;
  }
  /// Every weight an attached adapter changes (sorted, unique).
  [[nodiscard]] std::vector<std::size_t> touched() const {
    std::vector<std::size_t> out;
    for (const auto& a : attached_)
      for (const auto& d : a.host->deltas) out.push_back(d.weight);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  /// Uploads @p adapter's factors in their factor_type (through a pinned buffer, synchronizing @p
  /// v: attach is not the hot path) and adds it last in the merge order.
  /// @throws usage_error (a name in use, more than max_lora_terms adapters on one weight, an
  /// adapter loaded against another table), out_of_memory.
  void add(T& t, stream_view v, const weight_table& table, std::string name,
           std::shared_ptr<const lora_adapter> adapter, float scale) {
    DDO_EXPECTS(adapter != nullptr, "attach_adapter('" + name + "'): no adapter given");
    DDO_EXPECTS(!name.empty(), "attach_adapter: an adapter needs a name (e.g. its file)");
    DDO_EXPECTS(find(name) == attached_.end(),
                "attach_adapter('" + name +
                    "'): an adapter of that name is attached already; "
                    "detach it first or change its scale with set_adapter_scale");
    for (const auto& d : adapter->deltas) {
      DDO_EXPECTS(d.weight < table.size() && table[d.weight].name == d.target &&
                      !table[d.weight].shape.empty() && table[d.weight].shape[0] == d.rows,
                  "attach_adapter('" + name + "'): its delta on '" + d.target +
                      "' does not match this offloader's table: load the adapter "
                      "(load_lora_adapter) against the table the offloader runs");
      const auto terms = jobs_.size() > d.weight ? jobs_[d.weight].term_count : 0;
      DDO_EXPECTS(terms < max_lora_terms,
                  "attach_adapter('" + name + "'): weight '" + d.target + "' has " +
                      std::to_string(terms) + " adapters merged already; at most " +
                      std::to_string(max_lora_terms) + " change one weight at once");
    }
    attached a{std::move(name), std::move(adapter), scale, {}};
    upload(t, v, a);
    attached_.push_back(std::move(a));
    rebuild(table);
  }
  /// @throws usage_error naming the attached adapters when none is called @p name.
  void remove(const std::string& name, const weight_table& table) {
    attached_.erase(find_or_throw(name, "detach_adapter"));
    rebuild(table);
  }
  void set_scale(const std::string& name, float scale, const weight_table& table) {
    find_or_throw(name, "set_adapter_scale")->scale = scale;
    rebuild(table);
  }

  /// Writes the base of every resident weight in @p weights back (keeping it first: one copy to
  /// the host, the first time) and merges the weight's current terms, in order on @p v; then
  /// synchronizes @p v once and drops the kept bases no adapter needs any more. @p resident gives
  /// a weight's device address (null: not resident). @p launch issues a merge job on @p v.
  /// Batched: the pinned buffers of the bases kept now are allocated first (an out_of_memory
  /// leaves every resident as it was), their copies to the host and then the merges go on @p v
  /// in stream order (a merge runs after the copy of its base on the same stream), and one
  /// synchronize ends it: an attach costs one synchronization, not one per resident weight.
  template <class Resident, class Launch>
  void remerge_residents(T& t, stream_view v, const weight_table& table,
                         const std::vector<std::size_t>& weights, Resident&& resident,
                         Launch&& launch) {
    std::vector<std::pair<std::size_t, pinned_allocation<T>>> fresh;  // bases kept now
    for (const std::size_t w : weights)
      if (resident(w) != nullptr && !resident_base_.contains(w) && job_for(w) != nullptr)
        fresh.emplace_back(w, allocate_pinned_bytes(t, table[w].bytes));
    std::vector<bool> kept_now(table.size());
    for (auto& [w, base] : fresh) {
      t.copy_to_host(base.data, resident(w), table[w].bytes, v);
      resident_base_.emplace(w, std::move(base));
      kept_now[w] = true;
    }
    for (const std::size_t w : weights) {
      std::byte* dev = resident(w);
      const auto it = dev == nullptr ? resident_base_.end() : resident_base_.find(w);
      if (it == resident_base_.end()) continue;  // not resident, or never merged
      if (!kept_now[w]) t.copy_to_device(dev, it->second.data, table[w].bytes, v);
      if (const auto* job = job_for(w)) {
        lora_merge_job j = *job;
        j.weight = dev;
        launch(j, v);
      }
    }
    t.synchronize(v);  // the copies above read the kept bases: they stay until done
    // Kept bases no adapter needs, or of weights no longer resident (a budget move demoted them:
    // their slot loads copy the base from its source).
    for (auto it = resident_base_.begin(); it != resident_base_.end();)
      it = job_for(it->first) == nullptr || resident(it->first) == nullptr
               ? resident_base_.erase(it)
               : std::next(it);
  }

 private:
  struct attached {
    std::string name;
    std::shared_ptr<const lora_adapter> host;
    float scale = 1.0f;
    device_allocation<T> factors;
  };

  auto find(const std::string& name) {
    return std::find_if(attached_.begin(), attached_.end(),
                        [&](const attached& a) { return a.name == name; });
  }
  auto find_or_throw(const std::string& name, const char* what) {
    auto it = find(name);
    if (it != attached_.end()) return it;
    std::string names;
    for (const auto& a : attached_) names += (names.empty() ? "'" : ", '") + a.name + "'";
    throw usage_error(std::string(what) + "('" + name +
                      "'): no adapter of that name is "
                      "attached (attached: " +
                      (names.empty() ? "none" : names) + ")");
  }

  static void upload(T& t, stream_view v, attached& a) {
    const std::uint64_t bytes = a.host->factor_bytes();
    if (bytes == 0) return;
    auto staging = allocate_pinned_bytes(t, bytes);
    std::byte* p = staging.data;
    for (const auto& d : a.host->deltas) {
      for (const auto* factor : {&d.down, &d.up}) {
        for (std::size_t k = 0; k < factor->size(); ++k)
          store_weight_element(p, d.factor_type, k, (*factor)[k]);  // exact: see lora_delta
        p += size_of(d.factor_type) * factor->size();
      }
    }
    a.factors = allocate_device_bytes(t, bytes);
    t.copy_to_device(a.factors.data, staging.data, bytes, v);
    t.synchronize(v);  // the staging buffer goes at the end of this scope
  }

  /// Every weight's job from the attached adapters, in attach order.
  void rebuild(const weight_table& table) {
    jobs_.assign(table.size(), lora_merge_job{});
    for (const auto& a : attached_) {
      const std::byte* base = a.factors.data;
      for (const auto& d : a.host->deltas) {
        auto& job = jobs_[d.weight];
        job.type = table[d.weight].type;
        job.rows = d.rows;
        job.cols = d.cols;
        const std::size_t down_bytes = size_of(d.factor_type) * d.down.size();
        job.terms[job.term_count++] =
            lora_term{base, base + down_bytes, d.rank, a.scale * d.alpha_scale, d.factor_type};
        base += d.factor_bytes();
      }
    }
  }

  std::vector<attached> attached_;
  std::vector<lora_merge_job> jobs_;  // per weight
  std::unordered_map<std::size_t, pinned_allocation<T>> resident_base_;
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo
