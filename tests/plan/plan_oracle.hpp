// SPDX-License-Identifier: Apache-2.0
#pragma once
// The plan oracle (issue 38): the least three-tier step bound a machine allows for a weight
// table, and an evaluator that scores any plan — ddo's included — by the same rules. It lives in
// the tests on purpose: ddo's planner must never grade itself (ddo's plans are scored here from
// their placements, never by a bound ddo prints).
//
// The machine (plan_oracle::machine): a card of V bytes of which the engine's reserve E
// (activations), ddo's runtime reserve (64 MiB) and the preset's VRAM headroom (its
// auto_vram_headroom_gb) are not for weights; RAM of which the preset's system_ram_headroom_gb is
// held back; the ring's slot count and alignment (runtime_options: 3 slots, 256 B); the
// host-to-device bus rate B_bus, the disk's rate B_disk and the step's compute time C.
//
// The step bound of a plan: max(C, (host + file bytes) / B_bus, disk bytes / B_disk), where
// host bytes are the streamed weights held in RAM (pinned, or pageable), file bytes those read
// from their file every step, and disk bytes the file bytes plus the pageable bytes that do not
// fit the RAM beside the pinned ones (the most a perfect page cache could keep: an LRU cache under
// a scan larger than itself keeps less, docs/physical-limits; the evaluator is optimistic for
// pageable plans rather than blame the planner for the page cache). A plan is feasible when its
// resident weights plus its ring fit the card less the engine's and ddo's reserves, and its pinned
// bytes fit the RAM less the headroom. The ring is what the runtime allocates: slot_count slots
// (fewer when fewer groups stream) of the largest group's streamed weights, each weight aligned
// (ddo::slot_bytes_for, ddo::ring_bytes_for).
//
// The oracle (plan_oracle::solve) searches every plan of the model's execution units (the ring's
// groups: the finest repeated units in execution order, given by the test, not by ddo's
// inference) and the weights that cannot stream (residency rules 1-3: skip patterns, kinds
// outside target_module_classes, small tensors). A unit may stream whole, in part (the rest of
// it resident: a unit larger than the slot is trimmed to it, as setup's smaller-ring search
// does) or not at all. The ring's slot σ is some unit's streamed subset (its aligned sum): for
// each unit shape (the units with the same streamable weights) the oracle lists every subset
// sum (detail::subset_sums), and for each σ among them the least bytes the units must keep
// resident to stream at most σ each, forced(σ) (detail::trim_points, one sweep). A slot is
// allowed when the fixed weights, forced(σ) and slot_count x σ fit the card's room. Plans are
// made for the allowed slots, smallest first (each unit streams its largest subset within σ,
// the rest of the card is filled with the largest streamed weights, the RAM with the next, the
// rest comes from the file), and for the whole-unit slots of the first search (every unit above
// s resident whole); the best plan wins.
//
// Why this is the optimum (within 1%, certified per case): the bound is non-increasing in the
// resident bytes R and the host bytes P (for fixed R, the best P is min(RAM room, S - R): the
// disk term is then max(0, S - R - RAM room)), so a plan is as good as its R. In a feasible plan
// that streams anything on a card that cannot hold every streamable byte S, at least slot_count
// units stream (with j < slot_count streaming units the ring is j x slot and the streamed bytes
// at most j x slot, so resident + ring >= S: it would not stream); so the ring is slot_count x
// its slot σ, a subset sum of some unit. Its units keep at least forced(σ) resident, so σ is an
// allowed slot, at least the smallest one σ*; and R <= room - fixed - slot_count x σ <= room -
// fixed - slot_count x σ* — the fractional fill, below every plan (lower_bound_s). The oracle's
// plan is a real placement scored by the evaluator (plan_s), and certified() says whether
// plan_s <= 1.01 x lower_bound_s: then the oracle is within 1% of the optimum of every plan of
// these units, proven for that case. The fill's only loss is granularity (largest-first leaves
// less than the smallest weight that did not fit unused); where it passes 1%, a second pass
// tightens the bound to the exact subset sums (in units of the sizes' greatest common divisor)
// of the streamable weights within the card's room at σ* and within both rooms together (no plan
// keeps more resident, or more off the disk), and fills exactly: over the pairs of (card, RAM)
// sums where they are few enough (a few large weights, the case that needs it), else by
// single-room subset sums. A shape with more than 2^16 subset sums keeps only its largest-first
// prefixes: its forced(σ) is then not a lower bound, and the bound falls back to σ = 0 (the card
// less the fixed weights). The brute-force test checks bound and plan against every placement of
// small models; the property test counts the cases left uncertified (the bound ignores that a
// unit's resident part must be a subset of that unit: with a few large weights per unit it is
// loose, not necessarily the plan) and fails above its limit.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ddo/core/units.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/runtime/device_footprint.hpp"

namespace ddo_test::plan_oracle {

/// The machine a plan runs on, and the reserves ddo keeps (see the file comment).
struct machine {
  std::uint64_t card_bytes = 0;            ///< the card (ddo-plan --vram-gb)
  std::uint64_t engine_reserve_bytes = 0;  ///< activations (ddo-run's at --tokens)
  std::uint64_t runtime_reserve_bytes = ddo::runtime_device_reserve_bytes;
  std::uint64_t vram_headroom_bytes = 0;   ///< the preset's auto_vram_headroom_gb
  std::uint64_t ram_bytes = 0;             ///< available RAM (ddo-plan --ram-gb)
  std::uint64_t ram_headroom_bytes = 0;    ///< the preset's system_ram_headroom_gb
  std::size_t slot_count = 3;              ///< runtime_options::slot_count
  std::uint64_t alignment = 256;           ///< runtime_options::alignment
  double bus_bytes_per_s = 25e9;           ///< host-to-device copies
  double disk_bytes_per_s = 3.5e9;         ///< reads from the model's files
  double compute_s = 0.0;                  ///< the step's compute, all weights resident

  /// Device bytes for resident weights and the ring, the reserves taken.
  [[nodiscard]] std::uint64_t device_limit() const noexcept {
    const std::uint64_t taken = engine_reserve_bytes + runtime_reserve_bytes;
    return card_bytes > taken ? card_bytes - taken : 0;
  }
  /// As device_limit, less the VRAM headroom: what the oracle plans into.
  [[nodiscard]] std::uint64_t device_room() const noexcept {
    const std::uint64_t limit = device_limit();
    return limit > vram_headroom_bytes ? limit - vram_headroom_bytes : 0;
  }
  /// RAM for host-held weights (pinned or pageable).
  [[nodiscard]] std::uint64_t host_room() const noexcept {
    return ram_bytes > ram_headroom_bytes ? ram_bytes - ram_headroom_bytes : 0;
  }
  [[nodiscard]] double step_s(std::uint64_t bus_bytes, std::uint64_t disk_bytes) const noexcept {
    return std::max({compute_s, static_cast<double>(bus_bytes) / bus_bytes_per_s,
                     static_cast<double>(disk_bytes) / disk_bytes_per_s});
  }
};

/// A model as the oracle sees it.
struct model {
  const ddo::weight_table* table = nullptr;
  /// The execution units (the ring's groups), weight-table indices; every weight once.
  std::vector<std::vector<std::size_t>> units;
  /// Per weight, 1 when it cannot stream (residency rules 1-3).
  std::vector<char> fixed;
};

/// What a plan costs and whether it fits.
struct score {
  bool feasible = false;
  std::string why;  ///< the budget it passes, when not feasible
  std::uint64_t resident_bytes = 0;
  std::uint64_t pinned_bytes = 0;
  std::uint64_t pageable_bytes = 0;
  std::uint64_t file_bytes = 0;
  std::uint64_t disk_bytes = 0;  ///< file bytes and pageable bytes RAM cannot keep
  std::uint64_t slot_bytes = 0;
  std::uint64_t ring_bytes = 0;
  double step_s = 0.0;
  [[nodiscard]] std::uint64_t bus_bytes() const noexcept {
    return pinned_bytes + pageable_bytes + file_bytes;
  }
  [[nodiscard]] std::uint64_t device_bytes() const noexcept { return resident_bytes + ring_bytes; }
};

/// Scores a placement of every weight (@p where, indexed as the table) with the groups the
/// runtime streams (@p groups, weight-table indices). Feasible: resident + ring within the card
/// less the reserves (the headroom is the planner's preference, not the card's limit) and pinned
/// bytes within the RAM less its headroom.
[[nodiscard]] inline score evaluate(const ddo::weight_table& table,
                                    std::span<const std::vector<std::size_t>> groups,
                                    std::span<const ddo::placement> where, const machine& m) {
  score s;
  std::size_t streaming = 0;
  std::vector<std::size_t> streamed;
  for (const auto& g : groups) {
    streamed.clear();
    for (std::size_t w : g) {
      const std::uint64_t b = table[w].bytes;
      switch (where[w]) {
        case ddo::placement::gpu_resident: s.resident_bytes += b; continue;
        case ddo::placement::pinned_host: s.pinned_bytes += b; break;
        case ddo::placement::pageable_host: s.pageable_bytes += b; break;
        case ddo::placement::file: s.file_bytes += b; break;
      }
      streamed.push_back(w);
    }
    if (streamed.empty()) continue;
    ++streaming;
    s.slot_bytes = std::max(s.slot_bytes, ddo::slot_bytes_for(table, streamed, m.alignment));
  }
  s.ring_bytes = ddo::ring_bytes_for(s.slot_bytes, std::min(m.slot_count, streaming));
  const std::uint64_t ram = m.host_room();
  const std::uint64_t host = s.pinned_bytes + s.pageable_bytes;
  s.disk_bytes = s.file_bytes + (host > ram ? std::min(host - ram, s.pageable_bytes) : 0);
  s.step_s = m.step_s(s.bus_bytes(), s.disk_bytes);
  s.feasible = true;
  if (s.device_bytes() > m.device_limit()) {
    s.feasible = false;
    s.why = "resident " + std::to_string(s.resident_bytes) + " B + ring " +
            std::to_string(s.ring_bytes) + " B pass the card's " +
            std::to_string(m.device_limit()) + " B beside the reserves";
  } else if (s.pinned_bytes > ram) {
    s.feasible = false;
    s.why = "pinned " + std::to_string(s.pinned_bytes) + " B pass the RAM's " +
            std::to_string(ram) + " B beside its headroom";
  }
  return s;
}

/// Scores ddo's plan: its placements and its groups.
[[nodiscard]] inline score evaluate(const ddo::weight_table& table, const ddo::offload_plan& plan,
                                    const machine& m) {
  std::vector<std::vector<std::size_t>> groups;
  groups.reserve(plan.groups.size());
  for (const auto& g : plan.groups) groups.push_back(g.weights);
  std::vector<ddo::placement> where(plan.decisions.size());
  for (std::size_t w = 0; w < where.size(); ++w) where[w] = plan.decisions[w].where;
  return evaluate(table, groups, where, m);
}

/// The oracle's answer.
struct result {
  bool feasible = false;  ///< some plan fits (the oracle's own plan does)
  std::string why;        ///< why none fits
  score plan;             ///< the oracle's plan, scored by evaluate
  std::vector<ddo::placement> where;  ///< the oracle's plan, per weight
  double lower_bound_s = 0.0;  ///< no plan of the search space is faster
  std::uint64_t slot_bytes = 0;  ///< the slot size s the best plan was filled for
  /// The smallest card (bytes, the reserves included) on which a plan of the space fits.
  std::uint64_t smallest_card_bytes = 0;
  [[nodiscard]] bool certified(double within = 1.01) const noexcept {
    return !feasible || plan.step_s <= within * lower_bound_s;
  }
};

namespace detail {

/// Per unit: its streamable bytes and their aligned slot size.
struct unit_size {
  std::uint64_t bytes = 0;
  std::uint64_t slot = 0;
};

[[nodiscard]] inline std::vector<unit_size> unit_sizes(const model& mo, std::uint64_t alignment) {
  std::vector<unit_size> sizes;
  std::vector<std::size_t> streamable;
  for (const auto& u : mo.units) {
    streamable.clear();
    unit_size z;
    for (std::size_t w : u)
      if (!mo.fixed[w]) {
        streamable.push_back(w);
        z.bytes += (*mo.table)[w].bytes;
      }
    z.slot = ddo::slot_bytes_for(*mo.table, streamable, alignment);
    sizes.push_back(z);
  }
  return sizes;
}

/// Fills @p room with the weights @p order lists (largest first) that @p eligible admits, first
/// fit: each is placed at @p to and the bytes placed are returned.
template <class Eligible>
std::uint64_t fill(const ddo::weight_table& table, std::span<const std::size_t> order,
                   std::uint64_t room, std::vector<ddo::placement>& where, ddo::placement to,
                   Eligible eligible) {
  std::uint64_t placed = 0;
  for (std::size_t w : order) {
    if (!eligible(w) || table[w].bytes > room - placed) continue;
    where[w] = to;
    placed += table[w].bytes;
  }
  return placed;
}

/// Fills @p room with weights of @p candidates, exactly up to @p q bytes a weight (a subset-sum
/// over sizes rounded up to q, so the bytes placed never pass the room), then largest first into
/// what the rounding left.
inline void fill_exact(const ddo::weight_table& table, std::vector<std::size_t> candidates,
                       std::uint64_t room, std::uint64_t q, std::vector<ddo::placement>& where,
                       ddo::placement to) {
  const std::size_t cap = static_cast<std::size_t>(room / q);
  const std::size_t words = cap / 64 + 1;
  const std::size_t n = candidates.size();
  std::vector<std::uint64_t> reach((n + 1) * words, 0);
  reach[0] = 1;
  std::vector<std::size_t> size(n);
  for (std::size_t i = 0; i < n; ++i) {
    size[i] = static_cast<std::size_t>((table[candidates[i]].bytes + q - 1) / q);
    const std::uint64_t* from = &reach[i * words];
    std::uint64_t* into = &reach[(i + 1) * words];
    std::copy(from, from + words, into);
    const std::size_t shift_words = size[i] / 64, shift_bits = size[i] % 64;
    for (std::size_t w = words; w-- > shift_words;) {
      std::uint64_t v = from[w - shift_words] << shift_bits;
      if (shift_bits != 0 && w > shift_words) v |= from[w - shift_words - 1] >> (64 - shift_bits);
      into[w] |= v;
    }
  }
  auto bit = [&](std::size_t row, std::size_t t) {
    return (reach[row * words + t / 64] >> (t % 64)) & 1u;
  };
  std::size_t t = cap;
  while (!bit(n, t)) --t;
  std::uint64_t placed = 0;
  for (std::size_t i = n; i-- > 0;)
    if (!bit(i, t)) {
      where[candidates[i]] = to;
      placed += table[candidates[i]].bytes;
      t -= size[i];
    }
  std::vector<std::size_t> rest;
  for (std::size_t w : candidates)
    if (where[w] != to) rest.push_back(w);
  (void)fill(table, rest, room - placed, where, to, [](std::size_t) { return true; });
}

/// The largest sum of a subset of @p sizes (in units of their greatest common divisor, so
/// exactly) not above @p room, or nullopt when the bitset would pass 2^24 bits.
[[nodiscard]] inline std::optional<std::uint64_t> max_subset_sum(
    std::span<const std::uint64_t> sizes, std::uint64_t room) {
  std::uint64_t g = 0;
  for (std::uint64_t b : sizes) g = std::gcd(g, b);
  if (g == 0) return 0;
  const std::uint64_t cap = room / g;
  if (cap > (std::uint64_t{1} << 24)) return std::nullopt;
  const std::size_t words = static_cast<std::size_t>(cap / 64 + 1);
  std::vector<std::uint64_t> reach(words, 0);
  reach[0] = 1;
  for (std::uint64_t b : sizes) {
    const std::uint64_t shift = b / g;
    if (shift > cap) continue;
    const std::size_t sw = static_cast<std::size_t>(shift / 64), sb = shift % 64;
    for (std::size_t w = words; w-- > sw;) {
      std::uint64_t v = reach[w - sw] << sb;
      if (sb != 0 && w > sw) v |= reach[w - sw - 1] >> (64 - sb);
      reach[w] |= v;
    }
  }
  std::uint64_t t = cap;
  while (((reach[t / 64] >> (t % 64)) & 1u) == 0) --t;
  return t * g;
}

/// The exact fill of two rooms (the card's @p left, the RAM's @p ram) with @p candidates: every
/// pair of sums (card, RAM) reachable with sizes in units of their greatest common divisor, the
/// one @p better prefers placed in @p where. False (nothing placed) when the table of pairs
/// times the candidates would pass 2^25 (a few tens of milliseconds).
template <class Better>
bool fill_two_rooms(const ddo::weight_table& table, std::span<const std::size_t> candidates,
                    std::uint64_t left, std::uint64_t ram, std::vector<ddo::placement>& where,
                    Better better) {
  std::uint64_t g = 0;
  for (std::size_t w : candidates) g = std::gcd(g, table[w].bytes);
  if (g == 0) return true;
  const std::uint64_t rows = left / g + 1, cols = ram / g + 1;
  if (rows * cols * (candidates.size() + 1) > (std::uint64_t{1} << 25)) return false;
  // Per cell: 0 unreached, else 1 + the candidate that first reached it, and from where.
  std::vector<std::uint32_t> by(static_cast<std::size_t>(rows * cols), 0);
  std::vector<char> to_card(by.size(), 0);
  by[0] = ~std::uint32_t{0};
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::uint64_t z = table[candidates[i]].bytes / g;
    for (std::uint64_t a = rows; a-- > 0;)
      for (std::uint64_t b = cols; b-- > 0;) {
        const std::size_t cell = static_cast<std::size_t>(a * cols + b);
        if (by[cell] != 0) continue;
        if (a >= z && by[cell - z * cols] != 0 && by[cell - z * cols] != i + 1) {
          by[cell] = static_cast<std::uint32_t>(i + 1);
          to_card[cell] = 1;
        } else if (b >= z && by[cell - z] != 0 && by[cell - z] != i + 1) {
          by[cell] = static_cast<std::uint32_t>(i + 1);
        }
      }
  }
  std::size_t best = 0;
  for (std::size_t cell = 1; cell < by.size(); ++cell)
    if (by[cell] != 0 && better(cell / cols * g, cell % cols * g, best / cols * g, best % cols * g))
      best = cell;
  for (std::size_t cell = best; cell != 0;) {
    const std::size_t i = by[cell] - 1;
    const std::uint64_t z = table[candidates[i]].bytes / g;
    where[candidates[i]] = to_card[cell] ? ddo::placement::gpu_resident : ddo::placement::pinned_host;
    cell -= static_cast<std::size_t>(to_card[cell] ? z * cols : z);
  }
  return true;
}

/// One subset sum of a unit shape's streamable weights (aligned bytes): the item that first
/// reached it and the sum it was reached from, so that a plan can take that subset.
struct subset_sum {
  std::uint64_t sum = 0;
  std::size_t item = 0;
  std::uint64_t prev = 0;
};

/// Units of one shape: the same streamable weights (aligned sizes, largest first; raw bytes).
struct unit_shape {
  std::vector<std::uint64_t> sizes;
  std::uint64_t raw = 0;
  std::size_t count = 0;
  /// Every distinct subset sum, ascending; where they pass max_subset_sums, only the sums of
  /// the largest-first prefixes (and the shape is not exact).
  std::vector<subset_sum> sums;
  bool exact = true;
};

inline constexpr std::size_t max_subset_sums = std::size_t{1} << 16;

/// The subset sums of @p sizes (see unit_shape::sums); false in the pair when cut to prefixes.
[[nodiscard]] inline std::pair<std::vector<subset_sum>, bool> subset_sums(
    std::span<const std::uint64_t> sizes) {
  std::vector<subset_sum> sums{subset_sum{}}, next;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    next.clear();
    std::size_t a = 0, b = 0;
    while (a < sums.size() || b < sums.size()) {
      const std::uint64_t shifted = b < sums.size() ? sums[b].sum + sizes[i] : UINT64_MAX;
      if (a < sums.size() && sums[a].sum <= shifted) {
        b += sums[a].sum == shifted;  // reached before: keep the earlier items' way
        next.push_back(sums[a++]);
      } else {
        next.push_back({shifted, i, sums[b++].sum});
      }
    }
    if (next.size() > max_subset_sums) {
      std::vector<subset_sum> prefixes{subset_sum{}};
      for (std::size_t j = 0; j < sizes.size(); ++j)
        prefixes.push_back({prefixes.back().sum + sizes[j], j, prefixes.back().sum});
      return {std::move(prefixes), false};
    }
    sums.swap(next);
  }
  return {std::move(sums), true};
}

/// The units' streamable weights by shape.
struct shapes {
  std::vector<unit_shape> of;
  std::vector<std::size_t> shape_of;            ///< per unit; npos: nothing streamable
  std::vector<std::vector<std::size_t>> items;  ///< per unit, as its shape's sizes
  bool exact = true;                            ///< every shape's sums are all its sums
};

[[nodiscard]] inline shapes unit_shapes(const model& mo, std::uint64_t alignment) {
  const ddo::weight_table& table = *mo.table;
  shapes s;
  std::map<std::vector<std::uint64_t>, std::size_t> index;
  for (const auto& u : mo.units) {
    std::vector<std::size_t> items;
    for (std::size_t w : u)
      if (!mo.fixed[w]) items.push_back(w);
    std::stable_sort(items.begin(), items.end(),
                     [&](std::size_t a, std::size_t b) { return table[a].bytes > table[b].bytes; });
    std::vector<std::uint64_t> key;
    std::uint64_t raw = 0;
    for (std::size_t w : items) {
      key.push_back(ddo::round_up(table[w].bytes, alignment));
      raw += table[w].bytes;
    }
    s.items.push_back(std::move(items));
    if (key.empty()) {
      s.shape_of.push_back(static_cast<std::size_t>(-1));
      continue;
    }
    key.push_back(raw);
    const auto [at, added] = index.try_emplace(key, s.of.size());
    if (added) {
      unit_shape z;
      z.sizes.assign(key.begin(), key.end() - 1);
      z.raw = raw;
      std::tie(z.sums, z.exact) = subset_sums(z.sizes);
      s.exact = s.exact && z.exact;
      s.of.push_back(std::move(z));
    }
    ++s.of[at->second].count;
    s.shape_of.push_back(at->second);
  }
  return s;
}

/// A slot size σ (a subset sum of some unit) and what it forces: the streamable bytes the units
/// must keep resident to stream at most σ each (raw bytes less the largest aligned subset sum
/// within σ: a lower bound, exact where the weights' sizes are aligned), and the units that
/// stream something.
struct trim_point {
  std::uint64_t slot = 0;
  std::uint64_t forced = 0;
  std::size_t streaming = 0;
};

/// Every slot size of @p s ascending, by one sweep over the shapes' sums.
[[nodiscard]] inline std::vector<trim_point> trim_points(const shapes& s) {
  std::vector<std::pair<std::uint64_t, std::size_t>> events;
  std::uint64_t forced = 0;
  for (std::size_t i = 0; i < s.of.size(); ++i) {
    forced += s.of[i].count * s.of[i].raw;
    for (const auto& e : s.of[i].sums)
      if (e.sum != 0) events.emplace_back(e.sum, i);
  }
  std::sort(events.begin(), events.end());
  std::vector<std::uint64_t> fit(s.of.size(), 0);
  const auto kept = [&](std::size_t i, std::uint64_t f) {
    return s.of[i].count * (s.of[i].raw - std::min(s.of[i].raw, f));
  };
  std::vector<trim_point> points;
  std::size_t streaming = 0;
  for (std::size_t k = 0; k < events.size();) {
    const std::uint64_t v = events[k].first;
    for (; k < events.size() && events[k].first == v; ++k) {
      const std::size_t i = events[k].second;
      forced = forced - kept(i, fit[i]) + kept(i, v);
      if (fit[i] == 0) streaming += s.of[i].count;
      fit[i] = v;
    }
    points.push_back({v, forced, streaming});
  }
  return points;
}

/// The start of a plan of slot @p slot: each unit streams its largest subset within the slot
/// (from its shape's sums), the rest of it and every fixed weight resident, nothing else placed
/// (file). Returns the streamable bytes it keeps resident.
inline std::uint64_t start_trimmed(const model& mo, const shapes& s, std::uint64_t slot,
                                   std::vector<ddo::placement>& where) {
  const ddo::weight_table& table = *mo.table;
  where.assign(table.size(), ddo::placement::file);
  for (std::size_t w = 0; w < table.size(); ++w)
    if (mo.fixed[w]) where[w] = ddo::placement::gpu_resident;
  std::uint64_t forced = 0;
  for (std::size_t u = 0; u < mo.units.size(); ++u) {
    if (s.shape_of[u] == static_cast<std::size_t>(-1)) continue;
    const auto& sums = s.of[s.shape_of[u]].sums;
    const auto& items = s.items[u];
    std::vector<char> streams(items.size(), 0);
    const auto by_sum = [](const subset_sum& e, std::uint64_t v) { return e.sum < v; };
    auto at = std::upper_bound(sums.begin(), sums.end(), slot,
                               [](std::uint64_t v, const subset_sum& e) { return v < e.sum; });
    for (std::uint64_t sum = std::prev(at)->sum; sum != 0;) {
      const auto& e = *std::lower_bound(sums.begin(), sums.end(), sum, by_sum);
      streams[e.item] = 1;
      sum = e.prev;
    }
    for (std::size_t j = 0; j < items.size(); ++j)
      if (!streams[j]) {
        where[items[j]] = ddo::placement::gpu_resident;
        forced += table[items[j]].bytes;
      }
  }
  return forced;
}

}  // namespace detail

/// The least step bound over every plan of the model's units (see the file comment), its plan
/// and its lower bound.
[[nodiscard]] inline result solve(const model& mo, const machine& m) {
  using enum ddo::placement;
  const ddo::weight_table& table = *mo.table;
  result r;
  std::uint64_t fixed_bytes = 0, streamable = 0;
  for (std::size_t w = 0; w < table.size(); ++w)
    (mo.fixed[w] ? fixed_bytes : streamable) += table[w].bytes;
  const auto sizes = detail::unit_sizes(mo, m.alignment);
  const auto shapes = detail::unit_shapes(mo, m.alignment);
  const std::uint64_t room = m.device_room();
  const std::uint64_t reserves = m.card_bytes - m.device_limit() + m.vram_headroom_bytes;
  const std::uint64_t ram = m.host_room();
  const std::uint64_t k = m.slot_count;
  // Everything resident: no ring.
  std::uint64_t smallest = reserves + fixed_bytes + streamable;
  if (fixed_bytes + streamable <= room) {
    r.feasible = true;
    r.where.assign(table.size(), gpu_resident);
    r.plan = evaluate(table, mo.units, r.where, m);
    r.lower_bound_s = m.compute_s;
  }
  const bool all_resident = r.feasible;
  std::vector<std::size_t> order(table.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return table[a].bytes > table[b].bytes; });
  // The relaxation at slot σ: the card beside the fixed weights and k slots filled to the byte
  // with streamable weights, the RAM with the rest.
  const auto room_at = [&](std::uint64_t slot) {
    const std::uint64_t taken = fixed_bytes + k * slot;
    return room > taken ? room - taken : 0;
  };
  const auto relaxed = [&](std::uint64_t slot) {
    const std::uint64_t bus = streamable - std::min(streamable, room_at(slot));
    return m.step_s(bus, bus - std::min(bus, ram));
  };
  // A plan from a start (resident: the fixed weights and @p forced streamable bytes): the rest
  // of the card (@p left) and then the RAM filled. mode 0: largest first; 1: exact, the card
  // then the RAM; 2: exact, both rooms as one knapsack first (the least disk bytes), then the
  // card's share of it; 3: exact over the pairs of sums of both rooms (empty when too many).
  const auto fill = [&](std::vector<ddo::placement> where, std::uint64_t forced,
                        std::uint64_t left, int mode) {
    auto exact = [&](ddo::placement from, ddo::placement to, std::uint64_t bytes) {
      std::vector<std::size_t> candidates;
      for (std::size_t w : order)
        if (where[w] == from) candidates.push_back(w);
      // Exact in units of the sizes' greatest common divisor where the table of reachable
      // sums stays small (32 MiB), else to 1/65536 of the room.
      std::uint64_t q = 0;
      for (std::size_t w : candidates) q = std::gcd(q, table[w].bytes);
      if (q == 0 || bytes / q / 64 * candidates.size() > (std::uint64_t{1} << 22))
        q = std::max<std::uint64_t>(64 * ddo::kib, bytes / 65536 + 1);
      detail::fill_exact(table, std::move(candidates), bytes, q, where, to);
    };
    if (mode == 0) {
      const auto free = [&](std::size_t w) { return where[w] == file; };
      (void)detail::fill(table, order, left, where, gpu_resident, free);
      (void)detail::fill(table, order, ram, where, pinned_host, free);
    } else if (mode == 3) {
      std::vector<std::size_t> candidates;
      for (std::size_t w : order)
        if (where[w] == file) candidates.push_back(w);
      const auto step = [&](std::uint64_t card, std::uint64_t host) {
        const std::uint64_t bus = streamable - forced - card;
        return m.step_s(bus, bus - host);
      };
      const bool done = detail::fill_two_rooms(
          table, candidates, left, ram, where,
          [&](std::uint64_t a, std::uint64_t b, std::uint64_t best_a, std::uint64_t best_b) {
            const double x = step(a, b), y = step(best_a, best_b);
            return x < y || (x == y && a > best_a);
          });
      if (!done) return std::vector<ddo::placement>();
    } else if (mode == 1) {
      exact(file, gpu_resident, left);
      exact(file, pinned_host, ram);
    } else {
      exact(file, pinned_host, left + ram);
      exact(pinned_host, gpu_resident, left);
    }
    return where;
  };
  const auto take = [&](std::uint64_t s, std::vector<ddo::placement> where) {
    if (where.empty()) return false;
    score sc = evaluate(table, mo.units, where, m);
    if (sc.feasible && (!r.feasible || sc.step_s < r.plan.step_s)) {
      r.feasible = true;
      r.plan = std::move(sc);
      r.where = std::move(where);
      r.slot_bytes = s;
    }
    return true;
  };
  // The start of slot σ with every unit trimmed to its largest subset within σ; false when
  // it does not fit beside k slots.
  const auto trimmed = [&](std::uint64_t slot, std::vector<ddo::placement>& where,
                           std::uint64_t& left, std::uint64_t& forced) {
    forced = detail::start_trimmed(mo, shapes, slot, where);
    if (fixed_bytes + forced + k * slot > room) return false;
    left = room - fixed_bytes - forced - k * slot;
    return true;
  };
  // The slot sizes the card allows (fixed + forced + k x σ within the room), ascending, and
  // the smallest card of all: min over σ of the reserves, the fixed and forced bytes and the
  // ring (fewer slots where fewer units stream).
  std::vector<std::uint64_t> allowed;
  for (const auto& p : detail::trim_points(shapes)) {
    const std::uint64_t ring = std::min<std::uint64_t>(k, p.streaming) * p.slot;
    smallest = std::min(smallest, reserves + fixed_bytes + p.forced + ring);
    if (!all_resident && fixed_bytes + p.forced + k * p.slot <= room) allowed.push_back(p.slot);
  }
  r.smallest_card_bytes = smallest;
  if (!all_resident) {
    // No plan has a slot below the first allowed one (the shapes' sums are exact), and none
    // keeps more resident than room_at(its slot); without exact sums, room_at(0) bounds all.
    r.lower_bound_s = !shapes.exact ? relaxed(0) : allowed.empty() ? 1e300 : relaxed(allowed[0]);
    // Whole units (each unit above s resident whole, the rest of the card largest first): the
    // search this oracle had first, kept as candidates.
    std::vector<std::uint64_t> slots;
    for (const auto& z : sizes)
      if (z.slot != 0) slots.push_back(z.slot);
    std::sort(slots.begin(), slots.end());
    slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
    for (std::uint64_t s : slots) {
      std::vector<ddo::placement> where(table.size(), file);
      std::uint64_t forced = 0;
      for (std::size_t u = 0; u < mo.units.size(); ++u)
        for (std::size_t w : mo.units[u])
          if (mo.fixed[w] || sizes[u].slot > s) {
            where[w] = gpu_resident;
            forced += mo.fixed[w] ? 0 : table[w].bytes;
          }
      if (fixed_bytes + forced + k * s > room) continue;
      (void)take(s, fill(std::move(where), forced, room - fixed_bytes - forced - k * s, 0));
    }
    // Trimmed units, the smallest slots first, while a slot could still beat the best plan.
    std::size_t tried = 0;
    for (std::uint64_t slot : allowed) {
      if (r.feasible && (r.certified() || relaxed(slot) >= r.plan.step_s)) break;
      if (++tried > 24) break;
      std::vector<ddo::placement> where;
      std::uint64_t left = 0, forced = 0;
      if (trimmed(slot, where, left, forced)) (void)take(slot, fill(std::move(where), forced, left, 0));
    }
  }
  // Second pass where largest-first left more than 1%: the bound tightened to the exact subset
  // sums of the streamable weights within the card's room (no plan keeps more resident) and
  // within both rooms (no plan keeps more off the disk), and exact fills tried.
  if (!all_resident && r.feasible && !r.certified()) {
    const std::uint64_t first = shapes.exact && !allowed.empty() ? allowed[0] : 0;
    std::vector<std::uint64_t> all_sizes;
    for (std::size_t w = 0; w < table.size(); ++w)
      if (!mo.fixed[w]) all_sizes.push_back(table[w].bytes);
    const auto best = detail::max_subset_sum(all_sizes, room_at(first));
    const auto both = detail::max_subset_sum(all_sizes, room_at(first) + ram);
    if (best && both) {
      const std::uint64_t bus = streamable - *best, disk = streamable - *both;
      r.lower_bound_s = std::max(r.lower_bound_s, m.step_s(bus, disk));
    }
    std::size_t tried = 0;
    for (std::uint64_t slot : allowed) {
      if (r.certified() || relaxed(slot) >= r.plan.step_s || ++tried > 8) break;
      std::vector<ddo::placement> where;
      std::uint64_t left = 0, forced = 0;
      if (!trimmed(slot, where, left, forced)) continue;
      if (take(slot, fill(where, forced, left, 3))) continue;
      (void)take(slot, fill(where, forced, left, 1));
      (void)take(slot, fill(std::move(where), forced, left, 2));
    }
  }
  if (!r.feasible) {
    r.lower_bound_s = 0.0;
    r.why = "no slot size leaves room: the card holds " + std::to_string(room) +
            " B for weights and the ring; the least plan needs " +
            std::to_string(smallest - reserves) + " B";
  }
  return r;
}

}  // namespace ddo_test::plan_oracle
