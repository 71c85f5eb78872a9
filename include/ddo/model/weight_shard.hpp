// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::shard_weight_table: the part of a weight table one device of a pipeline-parallel
/// engine runs — a range of its execution groups, optionally narrowed by a name pattern — as a
/// table of its own, for an offloader that streams only those layers (issue 28).
///
/// The shard keeps every weight's source (the same file and offset, or the same host address),
/// so offloaders of several shards given one shared_weight_store share its bytes with each other
/// and with an offloader of the whole table. Whole tensors only: slicing one tensor across
/// devices (tensor parallel) is not ddo's (docs/limitations.md).

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/pattern.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Which part of a table a shard holds.
struct weight_shard {
  std::size_t first_group = 0;  ///< first execution group of the whole table's, in order
  /// One past the last group; the default: to the end.
  std::size_t end_group = std::numeric_limits<std::size_t>::max();
  /// Empty: every weight of the groups; else the weights whose name the pattern finds
  /// (core/pattern.hpp, std::regex_search semantics).
  std::string name_pattern;
};

/// @brief A shard's table and its execution groups (indices into that table).
struct sharded_table {
  weight_table table;
  std::vector<execution_group> groups;
  std::vector<std::size_t> whole_index;  ///< per shard weight: its index in the whole table
};

/// @brief Groups [first_group, end_group) of @p groups (the whole table's, e.g.
/// infer_execution_groups) with the weights @p shard.name_pattern finds, as a table of their own
/// with the same files and sources; groups left empty by the pattern are dropped.
/// @throws usage_error when the range is empty or past the groups, or the shard holds no weight;
/// pattern_error for a pattern outside the dialect.
[[nodiscard]] inline sharded_table shard_weight_table(const weight_table& table,
                                                      const std::vector<execution_group>& groups,
                                                      const weight_shard& shard) {
  const std::size_t end = std::min(shard.end_group, groups.size());
  DDO_EXPECTS(shard.first_group < end,
              "shard_weight_table: weight_shard::first_group " + std::to_string(shard.first_group) +
                  " and end_group " +
                  (shard.end_group == std::numeric_limits<std::size_t>::max()
                       ? std::string("(the end)")
                       : std::to_string(shard.end_group)) +
                  " select no group of the " + std::to_string(groups.size()) +
                  "; first_group must be below end_group and the group count");
  std::optional<pattern> filter;
  if (!shard.name_pattern.empty()) filter.emplace(shard.name_pattern);
  sharded_table r;
  for (const auto& path : table.files()) r.table.add_file(path);  // file indices stay valid
  r.table.share_host_generation(table);  // the same host bytes: a weight store shares them
  for (std::size_t g = shard.first_group; g < end; ++g) {
    execution_group part;
    part.name = groups[g].name;
    part.is_block = groups[g].is_block;
    for (std::size_t w : groups[g].weights) {
      if (filter && !filter->search(table[w].name)) continue;
      part.weights.push_back(r.table.add(table[w]));
      r.whole_index.push_back(w);
    }
    if (!part.weights.empty()) r.groups.push_back(std::move(part));
  }
  DDO_EXPECTS(!r.table.empty(), "shard_weight_table: groups [" + std::to_string(shard.first_group) +
                                    ", " + std::to_string(end) + ") hold no weight that '" +
                                    shard.name_pattern + "' finds");
  return r;
}

/// @brief Shard @p index of @p count: the groups split into @p count consecutive ranges of
/// (nearly) equal group counts, the first ones one group longer where they do not divide.
/// @throws usage_error when @p index >= @p count or there are fewer groups than shards.
[[nodiscard]] inline weight_shard even_shard(std::size_t groups, std::size_t index,
                                             std::size_t count) {
  DDO_EXPECTS(index < count && count <= groups,
              "even_shard: shard " + std::to_string(index) + " of " + std::to_string(count) +
                  " over " + std::to_string(groups) +
                  " execution groups; give at most one shard per group");
  const std::size_t base = groups / count, extra = groups % count;
  weight_shard s;
  s.first_group = index * base + std::min(index, extra);
  s.end_group = s.first_group + base + (index < extra ? 1 : 0);
  return s;
}

}  // namespace v0
}  // namespace ddo
