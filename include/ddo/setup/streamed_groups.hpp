// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief What the groups stream, worked out in one loop (streamed_per_group): the ring slot the
/// largest needs, how many stream at all, and the largest group by its bytes. The machine a plan
/// sees (its ring), the ring a plan needs and the window a transport sizes all read it. Part of
/// the one setup path (setup/setup.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddo/model/weight_table.hpp"
#include "ddo/runtime/device_footprint.hpp"

namespace ddo {
inline namespace v0 {

/// @brief What a set of groups streams (streamed_per_group).
struct streamed_group_sizes {
  /// The largest group's streamed weights laid out as the runtime's slots lay them out.
  std::uint64_t slot_bytes = 0;
  std::size_t streaming_groups = 0;  ///< groups that stream any weight
  std::string largest_name;          ///< the group streaming the most bytes (the first of equals)
  std::uint64_t largest_bytes = 0;   ///< its streamed bytes, unaligned
};

/// @brief What @p groups (execution_group or plan_group: a name and weight indices) stream of
/// @p table when @p streams(w) says which weights stream; slots aligned to @p alignment.
template <class Groups, class Streams>
[[nodiscard]] streamed_group_sizes streamed_per_group(const weight_table& table,
                                                      const Groups& groups, std::uint64_t alignment,
                                                      Streams streams) {
  streamed_group_sizes s;
  std::vector<std::size_t> streamed;
  for (const auto& g : groups) {
    streamed.clear();
    std::uint64_t bytes = 0;
    for (std::size_t w : g.weights)
      if (streams(w)) {
        streamed.push_back(w);
        bytes += table[w].bytes;
      }
    if (streamed.empty()) continue;
    ++s.streaming_groups;
    s.slot_bytes = std::max(s.slot_bytes, slot_bytes_for(table, streamed, alignment));
    if (bytes > s.largest_bytes) {
      s.largest_name = g.name;
      s.largest_bytes = bytes;
    }
  }
  return s;
}

}  // namespace v0
}  // namespace ddo
