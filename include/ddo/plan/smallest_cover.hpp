// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::smallest_cover: which whole weights of a group to keep resident so that what it
/// streams fits a ring slot, fewest bytes kept (issue 38).
///
/// A weight does not split, so a group trimmed to a slot keeps a set of whole weights whose
/// bytes cover its excess above the slot. The least such set is a subset-sum choice: the
/// greedy "smallest weight that covers the excess, else the largest and on" keeps one large
/// weight where two smaller ones cover the excess with fewer bytes, so at the oracle's slot
/// the groups kept more than the budget held and the level was skipped (the oracle's property
/// test, seed 2027: 2.53 GiB slots, 1.29x, where the oracle streams 1.96 GiB). The search is a
/// branch and bound over the weights largest first (equal sizes taken as a prefix, since any
/// two are interchangeable), seeded with the greedy choice and bounded to
/// smallest_cover_nodes steps: exact where it ends within them (a group of up to ~20 weights,
/// or more with repeated sizes, does), else the best set found, never more bytes than the
/// greedy's. Deterministic: the same sizes give the same set.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ddo {
inline namespace v0 {

/// @brief The search steps smallest_cover takes at most per group (see the file comment).
inline constexpr std::size_t smallest_cover_nodes = 1u << 14;

/// @brief What a group keeps so that the rest fits the slot: positions into the sizes given,
/// and their bytes.
struct cover_choice {
  std::vector<std::size_t> kept;  ///< positions, ascending
  std::uint64_t kept_bytes = 0;
};

namespace detail {

/// The greedy choice (the seed): the smallest weight that covers what is left above @p cap,
/// else the largest and on. @p sizes largest first.
inline std::vector<char> greedy_cover(std::span<const std::uint64_t> sizes, std::uint64_t cap,
                                      std::uint64_t total) {
  std::vector<char> keep(sizes.size(), 0);
  std::uint64_t streams = total;
  for (std::size_t next = 0; next < sizes.size() && streams > cap;) {
    std::size_t covers = sizes.size();
    for (std::size_t k = next; k < sizes.size() && sizes[k] >= streams - cap; ++k) covers = k;
    if (covers != sizes.size()) {
      keep[covers] = 1;
      break;
    }
    keep[next] = 1;
    streams -= sizes[next++];
  }
  return keep;
}

/// Branch and bound for the most bytes streamed at most @p cap (the fewest kept).
struct cover_search {
  std::span<const std::uint64_t> sizes;  ///< largest first
  std::uint64_t cap = 0;
  std::vector<std::uint64_t> suffix;  ///< bytes of sizes[k..]
  std::vector<char> streamed, best_streamed;
  std::uint64_t best = 0;
  std::size_t steps = 0;

  void record(std::uint64_t s, std::size_t from) {
    best = s;
    best_streamed = streamed;
    for (std::size_t k = from; k < sizes.size(); ++k) best_streamed[k] = 1;
  }
  void search(std::size_t k, std::uint64_t s) {
    if (++steps > smallest_cover_nodes || best == cap) return;
    if (s + suffix[k] <= best) return;  // cannot stream more than the best
    if (s + suffix[k] <= cap) {         // the rest all fit
      record(s + suffix[k], k);
      return;
    }
    if (s > best) record(s, sizes.size());
    if (s + sizes[k] <= cap) {
      streamed[k] = 1;
      search(k + 1, s + sizes[k]);
      streamed[k] = 0;
    }
    std::size_t next = k + 1;  // leaving k out leaves its equals out too (a prefix is taken)
    while (next < sizes.size() && sizes[next] == sizes[k]) ++next;
    if (next < sizes.size()) search(next, s);
  }
};

}  // namespace detail

/// @brief The whole weights of @p sizes (largest first) to keep so that the rest add up to at
/// most @p cap, fewest bytes kept (see the file comment): none when all fit, and never more
/// bytes than the greedy choice.
inline cover_choice smallest_cover(std::span<const std::uint64_t> sizes, std::uint64_t cap) {
  detail::cover_search s;
  s.sizes = sizes;
  s.cap = cap;
  s.suffix.assign(sizes.size() + 1, 0);
  for (std::size_t k = sizes.size(); k-- > 0;) s.suffix[k] = s.suffix[k + 1] + sizes[k];
  cover_choice out;
  if (s.suffix[0] <= cap) return out;
  const std::vector<char> greedy = detail::greedy_cover(sizes, cap, s.suffix[0]);
  s.streamed.assign(sizes.size(), 0);
  s.best_streamed.assign(sizes.size(), 0);
  for (std::size_t k = 0; k < sizes.size(); ++k)
    if (!greedy[k]) {
      s.best_streamed[k] = 1;
      s.best += sizes[k];
    }
  s.search(0, 0);
  for (std::size_t k = 0; k < sizes.size(); ++k)
    if (!s.best_streamed[k]) {
      out.kept.push_back(k);
      out.kept_bytes += sizes[k];
    }
  return out;
}

}  // namespace v0
}  // namespace ddo
