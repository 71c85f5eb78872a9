// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::plan_cache: plans kept by the application for reuse (`cache_plan`, "cache
/// structural planning in-process"). The application may own the object and pass it to setup
/// (setup_options::plans); without one, `cache_plan` (on by default) uses the process's
/// (process_plan_cache(), issue 42: the reference's "in-process" cache acts by default).
///
/// A plan is found again when the weight table (names, modules, kinds, dtypes, shapes, bytes,
/// source kinds), the execution groups, every config field but available_system_ram_gb, the
/// planning policies and the budgets (total device memory, the engine's reserve, the ring, the
/// RAM set or stated, a capacity profile's budget) are the same. The RAM field is left to the
/// budgets: setup passes the figure the plan used (setup/machine_inputs.hpp), and momentary free
/// device memory and probed RAM are not part of the key: a cached plan is reused while its
/// resident bytes still fit what is free now (setup checks this and plans again when they do not).

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/config/field_registry.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Plans by key. Thread-safe; copies plans in and out. Must outlive nothing: setup only
/// reads and writes it during the call.
class plan_cache {
 public:
  /// @brief The plan stored under @p key, if any (counts a hit or a miss).
  [[nodiscard]] std::optional<offload_plan> find(const std::string& key) const {
    std::lock_guard lock(mutex_);
    const auto it = plans_.find(key);
    if (it == plans_.end()) {
      ++misses_;
      return std::nullopt;
    }
    ++hits_;
    return it->second;
  }
  /// @brief Stores @p plan under @p key (replacing what was there).
  void insert(std::string key, offload_plan plan) {
    std::lock_guard lock(mutex_);
    plans_.insert_or_assign(std::move(key), std::move(plan));
  }
  /// @brief Forgets every plan.
  void clear() {
    std::lock_guard lock(mutex_);
    plans_.clear();
  }
  [[nodiscard]] std::size_t size() const {
    std::lock_guard lock(mutex_);
    return plans_.size();
  }
  [[nodiscard]] std::uint64_t hits() const {
    std::lock_guard lock(mutex_);
    return hits_;
  }
  [[nodiscard]] std::uint64_t misses() const {
    std::lock_guard lock(mutex_);
    return misses_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, offload_plan> plans_;
  mutable std::uint64_t hits_ = 0;
  mutable std::uint64_t misses_ = 0;
};

/// @brief The process's plan cache: setup's when the engine passes none and `cache_plan` is on.
/// Plans are small (a decision per weight); a key per model, machine and settings.
[[nodiscard]] inline plan_cache& process_plan_cache() {
  static plan_cache plans;
  return plans;
}

namespace detail {
inline void append_key_value(std::string& out, const field_value& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          out += x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          out += std::to_string(x.size()) + ':' + x;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          out += '[';
          for (const auto& s : x) out += std::to_string(s.size()) + ':' + s + ',';
          out += ']';
        } else {
          out += std::to_string(x);
        }
      },
      v);
}
}  // namespace detail

/// @brief The cache key of a plan: the table, the groups, every config field but the RAM (a
/// budget), @p policies (a name for the planning policies) and @p budgets (name, bytes) — see
/// the file comment.
[[nodiscard]] inline std::string plan_cache_key(
    const weight_table& table, std::span<const execution_group> groups,
    const dynamic_offload_config& config, std::string_view policies,
    std::span<const std::pair<std::string_view, std::uint64_t>> budgets) {
  // Appended in place (no temporaries): setup builds the key once per plan, and the operator+
  // chains here were ~9% of the oracle property test's setups (issue 38).
  std::string key;
  key.reserve(64 * table.size() + 1024);
  const auto number = [&key](auto value) {
    char digits[24];
    key.append(digits, std::to_chars(digits, digits + sizeof digits, value).ptr);
  };
  key += "policies=";
  key += policies;
  key += ";weights=";
  number(table.size());
  key += ';';
  for (const auto& w : table.weights()) {
    number(w.name.size());
    key += ':';
    key += w.name;
    key += '|';
    key += w.module_name;
    key += '|';
    key += to_string(w.kind);
    key += '|';
    key += to_string(w.type);
    key += '|';
    number(w.bytes);
    key += '|';
    key += std::holds_alternative<file_source>(w.source) ? 'f' : 'h';
    for (auto d : w.shape) {
      key += ',';
      number(d);
    }
    key += ';';
  }
  key += "groups=";
  for (const auto& g : groups) {
    key += g.name;
    key += g.is_block ? "#b:" : "#o:";
    for (std::size_t w : g.weights) {
      number(w);
      key += ',';
    }
    key += ';';
  }
  key += "config=";
  for (const auto& f : config_fields()) {
    if (f.name == field(field_id::available_system_ram_gb).name) continue;
    key += f.name;
    key += '=';
    detail::append_key_value(key, f.get(config));
    key += ';';
  }
  key += "budgets=";
  for (const auto& [name, bytes] : budgets) {
    key += name;
    key += '=';
    number(bytes);
    key += ';';
  }
  return key;
}

}  // namespace v0
}  // namespace ddo
