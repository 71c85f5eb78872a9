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
// The oracle (plan_oracle::solve) searches, for a model's execution units (the ring's groups:
// the finest repeated units in execution order, given by the test, not by ddo's inference) and
// the weights that cannot stream (residency rules 1-3: skip patterns, kinds outside
// target_module_classes, small tensors), the plans in which every unit larger than the ring's
// slot stays resident whole. For each slot size s among the units' streamed sizes (aligned), the
// units larger than s are resident, the rest of the card (less the ring, slot_count x s, and the
// VRAM headroom) is filled with the largest remaining weights first, the RAM (less its headroom)
// with the largest streamed weights first, and the rest comes from the file; the best s wins.
//
// Why this is the optimum (within 1%, certified per case): the bound is non-increasing in the
// resident bytes R and the host bytes P (for fixed R, the best P is min(RAM room, S - R); the
// disk term is then max(0, S - R - RAM room)), so a plan is as good as its R. In a feasible plan
// that streams anything on a card that cannot hold every streamable byte S, at least slot_count
// units stream (with j < slot_count streaming units the ring is j x slot and the streamed bytes
// at most j x slot, so resident + ring >= S: it would not stream); so the ring is slot_count x
// the slot. Let s be the largest unit size not above the plan's slot: the units above s are
// resident whole (the search space), the ring is at least slot_count x s, so
// R <= min(S, D - slot_count x s) with D the card's room for streamable weights — the fractional
// fill. The least such bound over every s (lower_bound_s) is below every plan of the space; the
// oracle's plan is a real placement scored by the evaluator (plan_s), and certified() says
// whether plan_s <= 1.01 x lower_bound_s: then the oracle is within 1% of the optimum of its
// space, proven for that case. The fill's only loss is granularity (largest-first leaves less
// than the smallest weight that did not fit unused); where it passes 1%, a second pass tightens
// each slot size's bound to the exact subset sums (in units of the sizes' greatest common
// divisor) of the card's room and of both rooms together, and fills exactly: over the pairs of
// (card, RAM) sums where they are few enough (a few large weights, the case that needs it), else
// by single-room subset sums. The brute-force test checks bound and plan on small models; the
// property test counts the cases left uncertified (0.5-0.8% of its random layouts: a few large
// weights with too many pairs of sums for the exact pass, where the bound, not necessarily the
// plan, is loose: up to 2.2x seen) and fails above 2% of them.
//
// Outside the space, and not searched: trimming units larger than the slot (keeping part of every
// block resident so that the slot shrinks). docs/planning.md ("The plan oracle") says so.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <string>
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

}  // namespace detail

/// The least step bound of the search space (see the file comment), its plan and its lower
/// bound.
[[nodiscard]] inline result solve(const model& mo, const machine& m) {
  const ddo::weight_table& table = *mo.table;
  result r;
  std::uint64_t fixed_bytes = 0, streamable = 0;
  for (std::size_t w = 0; w < table.size(); ++w)
    (mo.fixed[w] ? fixed_bytes : streamable) += table[w].bytes;
  const auto sizes = detail::unit_sizes(mo, m.alignment);
  const std::uint64_t room = m.device_room();
  const std::uint64_t reserves = m.card_bytes - m.device_limit() + m.vram_headroom_bytes;
  // Everything resident: no ring.
  std::uint64_t smallest = reserves + fixed_bytes + streamable;
  if (fixed_bytes + streamable <= room) {
    r.feasible = true;
    r.where.assign(table.size(), ddo::placement::gpu_resident);
    r.plan = evaluate(table, mo.units, r.where, m);
    r.lower_bound_s = m.compute_s;
  }
  std::vector<std::size_t> order(table.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return table[a].bytes > table[b].bytes; });
  std::vector<std::uint64_t> slots;
  for (const auto& z : sizes)
    if (z.slot != 0) slots.push_back(z.slot);
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  const std::uint64_t ram = m.host_room();
  const std::uint64_t k = m.slot_count;
  std::vector<std::size_t> unit_of(table.size());
  for (std::size_t u = 0; u < mo.units.size(); ++u)
    for (std::size_t w : mo.units[u]) unit_of[w] = u;
  const bool all_resident = r.feasible;  // the loop then only sizes the smallest card
  if (!all_resident) r.lower_bound_s = 1e300;
  // The plan of slot size s: forced units resident, the rest of the card and then the RAM
  // filled largest first (exact: by subset sum, for the certificate's second pass).
  // mode 0: largest first; 1: exact, the card then the RAM; 2: exact, both rooms as one
  // knapsack first (the least disk bytes), then the card's share of it.
  auto plan_for = [&](std::uint64_t s, std::uint64_t left, int mode) {
    std::vector<ddo::placement> where(table.size(), ddo::placement::file);
    for (std::size_t w = 0; w < table.size(); ++w)
      if (mo.fixed[w] || sizes[unit_of[w]].slot > s) where[w] = ddo::placement::gpu_resident;
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
    using enum ddo::placement;
    if (mode == 0) {
      const auto free = [&](std::size_t w) { return where[w] == file; };
      (void)detail::fill(table, order, left, where, gpu_resident, free);
      (void)detail::fill(table, order, ram, where, pinned_host, free);
    } else if (mode == 3) {
      std::vector<std::size_t> candidates;
      for (std::size_t w : order)
        if (where[w] == file) candidates.push_back(w);
      std::uint64_t forced = 0;
      for (std::size_t w = 0; w < table.size(); ++w)
        if (!mo.fixed[w] && where[w] == gpu_resident) forced += table[w].bytes;
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
  auto take = [&](std::uint64_t s, std::vector<ddo::placement> where) {
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
  struct candidate {
    double lower_bound_s;
    std::uint64_t slot, left;
  };
  std::vector<candidate> candidates;
  for (std::uint64_t s : slots) {
    std::uint64_t forced = 0;
    std::size_t small = 0;
    for (const auto& z : sizes)
      if (z.slot > s) forced += z.bytes;
      else if (z.slot != 0) ++small;
    if (small < k) continue;  // fewer units than slots stream: nothing gained by streaming
    const std::uint64_t need = fixed_bytes + forced + k * s;
    smallest = std::min(smallest, reserves + need);
    if (need > room || all_resident) continue;
    const std::uint64_t left = room - need;
    // The relaxation: the rest of the card filled to the byte.
    const std::uint64_t resident_lb = forced + std::min(left, streamable - forced);
    const std::uint64_t bus_lb = streamable - resident_lb;
    const double bound = m.step_s(bus_lb, bus_lb - std::min(bus_lb, ram));
    r.lower_bound_s = std::min(r.lower_bound_s, bound);
    candidates.push_back({bound, s, left});
    (void)take(s, plan_for(s, left, 0));
  }
  // Second pass where largest-first left more than 1% on the table. The relaxation's bound of
  // each slot size is tightened to the exact subset sum of the weights that may fill the card
  // (no plan of that slot size keeps more), and exact fills are tried for the slot sizes whose
  // bound could still beat the plan found, most promising first.
  if (!r.certified()) {
    r.lower_bound_s = 1e300;
    for (auto& c : candidates) {
      std::uint64_t forced = 0;
      std::vector<std::uint64_t> fill_sizes;
      for (std::size_t w = 0; w < table.size(); ++w) {
        if (mo.fixed[w]) continue;
        if (sizes[unit_of[w]].slot > c.slot)
          forced += table[w].bytes;
        else
          fill_sizes.push_back(table[w].bytes);
      }
      // The card's fill alone bounds the bus bytes; the card's and the RAM's together (one
      // knapsack of both rooms: any plan's two fills are a subset of it) the disk bytes.
      const auto best = detail::max_subset_sum(fill_sizes, c.left);
      const auto both = detail::max_subset_sum(fill_sizes, c.left + ram);
      if (best && both) {
        const std::uint64_t bus = streamable - forced - *best;
        const std::uint64_t disk = streamable - forced - *both;
        c.lower_bound_s = std::max(c.lower_bound_s, m.step_s(bus, disk));
      }
      r.lower_bound_s = std::min(r.lower_bound_s, c.lower_bound_s);
    }
    std::sort(candidates.begin(), candidates.end(), [](const candidate& a, const candidate& b) {
      return a.lower_bound_s < b.lower_bound_s;
    });
    for (auto& c : candidates) {
      if (r.certified() || c.lower_bound_s * 1.01 >= r.plan.step_s) break;
      // Exact for this slot size where the pairs of sums are few (large weights, where the
      // largest-first fill loses most): its plan is then the slot size's optimum, and so its
      // bound.
      auto where = plan_for(c.slot, c.left, 3);
      if (!where.empty()) {
        const double step = evaluate(table, mo.units, where, m).step_s;
        (void)take(c.slot, std::move(where));
        c.lower_bound_s = std::max(c.lower_bound_s, step);
        r.lower_bound_s = 1e300;
        for (const auto& d : candidates) r.lower_bound_s = std::min(r.lower_bound_s, d.lower_bound_s);
        continue;
      }
      (void)take(c.slot, plan_for(c.slot, c.left, 1));
      (void)take(c.slot, plan_for(c.slot, c.left, 2));
    }
  }
  r.smallest_card_bytes = smallest;
  if (!r.feasible) {
    r.lower_bound_s = 0.0;
    r.why = "no slot size leaves room: the card holds " + std::to_string(room) +
            " B for weights and the ring; the least plan needs " +
            std::to_string(smallest - reserves) + " B";
  }
  return r;
}

}  // namespace ddo_test::plan_oracle
