// SPDX-License-Identifier: Apache-2.0
// The plan oracle (tests/plan/plan_oracle.hpp) checked against brute force on small models, and
// ddo's plans checked against the oracle (issue 38): a property test over random layouts, cards,
// RAM and rates, planned as ddo-plan plans them, each of ddo's plans scored by the oracle's
// evaluator.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "plan/oracle_harness.hpp"
#include "plan/oracle_layouts.hpp"
#include "plan/plan_oracle.hpp"
#include "sanitizers.hpp"

namespace plan_oracle_test {

using ddo_test::plan_oracle::machine;
using ddo_test::plan_oracle::model;

/// A tiny model: @p n weights of random sizes (MiB) in random units.
struct tiny {
  ddo::weight_table table;
  model mo;
};

inline tiny make_tiny(std::mt19937_64& rng, std::size_t n) {
  tiny t;
  const std::size_t file = t.table.add_file("/nonexistent/tiny.safetensors");
  for (std::size_t w = 0; w < n; ++w) {
    ddo::weight_info info;
    info.name = "w" + std::to_string(w);
    info.type = ddo::dtype::u8;
    info.shape = {static_cast<std::int64_t>((1 + rng() % 64) * ddo::mib + rng() % 4096)};
    info.source = ddo::file_source{file, 0};
    t.table.add(std::move(info));
  }
  t.mo.table = &t.table;
  t.mo.fixed.assign(n, 0);
  std::size_t units = 1 + rng() % n;
  t.mo.units.resize(units);
  for (std::size_t w = 0; w < n; ++w) t.mo.units[w < units ? w : rng() % units].push_back(w);
  for (std::size_t w = 0; w < n; ++w) t.mo.fixed[w] = rng() % 8 == 0;
  return t;
}

}  // namespace plan_oracle_test

TEST_SUITE("plan") {
  TEST_CASE("plan oracle: its bound is below every plan, its plan is real (brute force)") {
    using namespace plan_oracle_test;
    std::mt19937_64 rng(38);
    const std::size_t cases = DDO_TEST_UNDER_SANITIZER ? 60 : 400;
    std::size_t streamed = 0;
    for (std::size_t c = 0; c < cases; ++c) {
      const std::size_t n = 3 + rng() % 5;
      const tiny t = make_tiny(rng, n);
      machine m;
      m.card_bytes = (16 + rng() % 200) * ddo::mib;
      m.engine_reserve_bytes = rng() % 32 * ddo::mib;
      m.runtime_reserve_bytes = 0;
      m.vram_headroom_bytes = rng() % 3 * 8 * ddo::mib;
      m.ram_bytes = rng() % 256 * ddo::mib;
      m.slot_count = 1 + rng() % 3;
      m.bus_bytes_per_s = 1e9 * static_cast<double>(1 + rng() % 50);
      m.disk_bytes_per_s = 1e9 * static_cast<double>(1 + rng() % 5);
      m.compute_s = static_cast<double>(rng() % 20) / 1000.0;
      const auto r = ddo_test::plan_oracle::solve(t.mo, m);
      CAPTURE(c);
      // Every placement: resident, pinned or file (fixed weights resident).
      double best_all = 1e300;
      std::vector<ddo::placement> where(n);
      std::size_t combos = 1;
      for (std::size_t w = 0; w < n; ++w) combos *= 3;
      const ddo::placement tiers[] = {ddo::placement::gpu_resident, ddo::placement::pinned_host,
                                      ddo::placement::file};
      for (std::size_t code = 0; code < combos; ++code) {
        bool skip = false;
        for (std::size_t w = 0, rest = code; w < n; ++w, rest /= 3) {
          where[w] = tiers[rest % 3];
          skip = skip || (t.mo.fixed[w] && where[w] != ddo::placement::gpu_resident);
        }
        if (skip) continue;
        const auto s = ddo_test::plan_oracle::evaluate(t.table, t.mo.units, where, m);
        // The oracle plans inside the headroom: so is the brute force.
        if (!s.feasible || s.device_bytes() > m.device_room()) continue;
        best_all = std::min(best_all, s.step_s);
      }
      CHECK(r.feasible == (best_all < 1e300));
      if (!r.feasible) continue;
      streamed += r.plan.ring_bytes != 0;
      // The oracle's plan is a plan: the evaluator's score of it, within the headroom.
      const auto again = ddo_test::plan_oracle::evaluate(t.table, t.mo.units, r.where, m);
      CHECK(again.step_s == r.plan.step_s);
      CHECK(again.device_bytes() <= m.device_room());
      CHECK(r.plan.step_s >= best_all * (1 - 1e-12));
      // Its lower bound holds for every plan: units trimmed to any slot included.
      CHECK(r.lower_bound_s <= best_all * (1 + 1e-12));
    }
    CHECK(streamed > cases / 10);
  }

  TEST_CASE("plan oracle: the evaluator scores tiers, the ring and both budgets") {
    using namespace plan_oracle_test;
    ddo::weight_table table;
    const std::size_t file_index = table.add_file("/nonexistent/x.safetensors");
    for (int w = 0; w < 4; ++w) {
      ddo::weight_info info;
      info.name = "blocks." + std::to_string(w) + ".lin.weight";
      info.type = ddo::dtype::u8;
      info.shape = {static_cast<std::int64_t>(100 * ddo::mib + 1)};
      info.source = ddo::file_source{file_index, 0};
      table.add(std::move(info));
    }
    const std::vector<std::vector<std::size_t>> groups = {{0}, {1}, {2}, {3}};
    machine m;
    m.card_bytes = 1 * ddo::gib;
    m.runtime_reserve_bytes = 0;
    m.ram_bytes = 150 * ddo::mib;
    m.bus_bytes_per_s = 1e9;
    m.disk_bytes_per_s = 0.5e9;
    using enum ddo::placement;
    const std::vector<ddo::placement> where = {gpu_resident, pinned_host, pageable_host, file};
    const auto s = ddo_test::plan_oracle::evaluate(table, groups, where, m);
    const std::uint64_t b = 100 * ddo::mib + 1, slot = ddo::round_up(b, 256);
    CHECK(s.feasible);
    CHECK(s.resident_bytes == b);
    CHECK(s.slot_bytes == slot);
    CHECK(s.ring_bytes == 3 * slot);
    // 150 MiB of RAM keep the pinned weight and 50 MiB of the pageable one: the rest is read.
    CHECK(s.disk_bytes == b + (2 * b - 150 * ddo::mib));
    CHECK(s.step_s == doctest::Approx(static_cast<double>(3 * b) / 1e9));
    m.ram_bytes = 50 * ddo::mib;  // pinned bytes beyond the RAM: not a plan
    CHECK_FALSE(ddo_test::plan_oracle::evaluate(table, groups, where, m).feasible);
    m.ram_bytes = 1 * ddo::gib;
    m.card_bytes = b + 3 * slot - 1;  // resident + ring beyond the card: not a plan
    CHECK_FALSE(ddo_test::plan_oracle::evaluate(table, groups, where, m).feasible);
  }
}

namespace plan_oracle_test {

/// One failure class of the property test: how many, the worst ratio and its seed.
struct failure_class {
  std::size_t count = 0;
  double worst = 0.0;
  std::uint64_t worst_seed = 0;
  std::string example;
};

struct case_outcome {
  std::string key;  ///< empty: passed
  double ratio = 0.0;
  std::string detail;
};

/// The classes of the property test the planner still misses (issue 38), each with the most
/// cases of 10,000 it may reach (scaled to the cases run, rounded up): a class above its count,
/// or a class not listed, fails; the list only shrinks.
/// Since the oracle searches units trimmed below the slot (plan_oracle.hpp: part of each unit
/// resident, the rest streamed through a smaller slot), it is an upper bound on ddo's plans, and
/// these counts are against it: ~1,500 of 10,000 cases at first, where the oracle of whole units
/// left ~90. What it shows:
/// - "above the allowed ratio": setup's smaller-ring search (setup/plan_loop.hpp,
///   plan_smaller_rings) tried the groups' distinct streamable sizes as the slot, never a slot
///   below them with every group trimmed to it (seed 4028: a flat model of 11.31 GiB, 2.24 GiB
///   blocks, on 12.25 GiB: ddo kept 3.33 GiB resident beside 2.24 GiB slots and read 3.14 GiB
///   from the file, 26x; the oracle trims each block to 557 MiB and keeps 8.59 GiB resident).
///   It now tries trimmed levels too (trimmed_levels): 4028 at 1.00x, ~1,500 -> ~1,090 cases at
///   base 1000. Then (tiers38f) trimmed levels up to the largest group and at the largest weight,
///   rounded up (the least level fitted by bytes and was skipped), weights_above_slot keeping the
///   fewest bytes (the largest weight alone passed the budget, the group streamed whole and the
///   plan passed its ring), an outsized group trimmed where it cannot stay whole: ~1,090 -> ~600
///   (seed 7176: 5.00x -> 2.06x). Then (tiers38g) each trimmed level lowered to the slot its
///   groups stream at it (whole_weights::snapped: coarse weights stream less than the level,
///   whose ring took the budget the groups' excess needed) and the built-in patterns' weights
///   demoted for that excess (demote_for_slot): one_shot_fast and low_ram_safe ~350 -> ~200 at
///   base 1000 (seed 5183: 2.69x -> 1.00x); and (tiers38h) the trimmed levels whole weights make
///   (plan_loop.hpp, whole_weights: a block whose largest weight is most of it fits no byte-wise
///   level; seed 6975: 5.21x -> 1.00x). one_shot_fast's resident cap (seed 5047) follows the card
///   (residency_planner.hpp, size_budget): 1.00x. Left, not analysed one by one: trimmed levels
///   the ladder still misses; seed 9136 is refused under nvme_baseline's balanced headroom with
///   a 3.77 GiB weight in a 4.96 GiB group (the oracle's slot), its refusal naming 17.18 GiB.
/// - "above the allowed ratio", the rest (the classes the earlier oracle showed): flat
///   nvme_baseline reading more from the file than the oracle (seed 3245: 1.90x), blocks of
///   unequal sizes where the smaller-ring search keeps a larger ring.
/// - "refused where the oracle plans": models over 67 GiB under nvme_baseline (seeds 9136,
///   4521: a 5.3 or 8.8 GB group outside the blocks, one group to ddo, where the oracle streams
///   its modules as units of their own), and a case only a finer trimmed ring fits (seed 2324;
///   6376, its class, plans since tiers38g/h).
/// "ddo's plan passes a budget" is no class (a plan the oracle's evaluator finds over the card or
/// the RAM fails): setup reserves again until the plan fits its ring, or drops it
/// (setup/plan_loop.hpp, fit_ring_to_plan; seed 3328).
struct known_class {
  std::string_view key;
  std::size_t most;  ///< of 10,000 cases
};
// Seen (the comment): the most of 10,000 cases over three seed bases (DDO_PROPERTY_BASE 1000,
// 777777, 31337) against the oracle of trimmed units, with setup's trimmed levels; the most
// allowed is 1.2x that plus 3.
inline constexpr known_class known_classes[] = {
    {"flat, nvme_baseline: above the allowed ratio", 116},                  // 94
    {"flat, one_shot_fast: above the allowed ratio", 84},                   // 67
    {"flat+bundled, nvme_baseline: above the allowed ratio", 50},           // 39
    {"nested, one_shot_fast: above the allowed ratio", 39},                 // 30
    {"flat+bundled, one_shot_fast: above the allowed ratio", 27},           // 20
    {"nested, nvme_baseline: above the allowed ratio", 17},                 // 11
    {"nested+bundled, one_shot_fast: above the allowed ratio", 15},         // 10
    {"flat, low_ram_safe: above the allowed ratio", 13},                    // 8
    {"flat, nvme_baseline: refused where the oracle plans", 11},            // 6
    {"nested+bundled, nvme_baseline: above the allowed ratio", 9},          // 5
    {"flat+bundled, low_ram_safe: above the allowed ratio", 9},             // 5
    {"flat, one_shot_fast: refused where the oracle plans", 8},             // 4
    {"nested, low_ram_safe: above the allowed ratio", 6},                   // 2
    {"flat+bundled, one_shot_fast: refused where the oracle plans", 6},     // 2
    {"flat+bundled, nvme_baseline: refused where the oracle plans", 5},     // 1
    {"nested, one_shot_fast: refused where the oracle plans", 5},           // 1
    {"nested+bundled, one_shot_fast: refused where the oracle plans", 5},   // 1
    {"nested+bundled, low_ram_safe: above the allowed ratio", 5},           // 1
};

/// The cases @p key may reach in @p total (0: not a known class): its share of the 10,000, plus,
/// where fewer cases run (the sanitizer builds run 600), twice the square root of that share (a
/// subset's count of a class varies about so much: the first 600 seeds held 4 cases of a class
/// whose share is 3), and at least 3.
inline std::size_t tolerated_cases(const std::string& key, std::size_t total) {
  for (const auto& k : known_classes)
    if (k.key == key) {
      const double share = static_cast<double>(k.most) * static_cast<double>(total) / 10000.0;
      const double slack = total < 10000 ? 2.0 * std::sqrt(share) : 0.0;
      return std::max<std::size_t>(3, static_cast<std::size_t>(std::ceil(share + slack)));
    }
  return 0;
}

inline double worst_gap = 1.0;  ///< the oracle's plan over its bound, where above 1.01
inline std::map<std::string, ddo::dynamic_offload_settings> settings_by_preset;
/// Plans one random case as ddo-plan does and scores it against the oracle.
/// @p card_gib_instead: a card other than the one drawn (0: the drawn one).
inline case_outcome run_case(std::uint64_t seed, std::size_t& feasible, std::size_t& streaming,
                             std::size_t& uncertified, double card_gib_instead = 0.0) {
  std::mt19937_64 rng(seed);
  const auto layout = ddo_test::oracle_layouts::make_random_layout(rng);
  const ddo::weight_table& table = layout.table;
  const double drawn_card_gib = 4.0 + 0.25 * static_cast<double>(rng() % 81);
  const double card_gib = card_gib_instead > 0.0 ? card_gib_instead : drawn_card_gib;
  const std::uint64_t ram = (8 + rng() % 57) * ddo::gib;
  const std::int64_t tokens = 256 * static_cast<std::int64_t>(1 + rng() % 16);
  ddo_test::oracle_harness::rates at;
  at.bus_bytes_per_s = 1e9 * static_cast<double>(12 + rng() % 44);
  at.disk_bytes_per_s = 1e8 * static_cast<double>(5 + rng() % 66);
  at.flops_per_s = 1e12 * static_cast<double>(80 + rng() % 721);
  namespace h = ddo_test::oracle_harness;
  // Settings differ only by the preset auto picks (the RAM reaches the plan through
  // setup_options::ram_bytes, the CLI helper's VMM budget is min(card, 4 GiB) = 4 GiB on every
  // card drawn): resolved once per preset, so that 10,000 cases stay cheap.
  ddo::preset_context pc;
  pc.available_ram_gb = ddo::bytes_to_gib(ram);
  pc.model_bytes = table.total_bytes();
  const std::string preset = ddo::resolve_preset("auto", pc).name;
  auto cached = settings_by_preset.find(preset);
  if (cached == settings_by_preset.end())
    cached = settings_by_preset
                 .emplace(preset, ddo::resolve_settings(h::plan_inputs(table, card_gib, ram)))
                 .first;
  const auto& settings = cached->second;
  REQUIRE(settings.effective_preset == preset);

  const auto m = h::oracle_machine(table, settings, card_gib, ram, tokens, at);
  const auto mo = h::oracle_model(table, settings.config);
  const auto oracle = ddo_test::plan_oracle::solve(mo, m);
  std::ostringstream what;
  what << layout.kind << " " << ddo::format_bytes(table.total_bytes()) << ", card " << card_gib
       << " GiB, RAM " << ddo::format_bytes(ram) << ", " << tokens << " tokens, preset "
       << settings.effective_preset;
  const std::string family = layout.kind.substr(0, layout.kind.find('+')) +
                             (layout.kind.find("bundled") != std::string::npos ? "+bundled" : "");
  case_outcome out;
  what << "; oracle " << oracle.plan.step_s << " s (slot " << ddo::format_bytes(oracle.slot_bytes)
       << "), lower bound " << oracle.lower_bound_s << " s";
  if (!oracle.feasible) return out;
  if (!oracle.certified()) {
    ++uncertified;
    worst_gap = std::max(worst_gap, oracle.plan.step_s / oracle.lower_bound_s);
  }
  ++feasible;
  streaming += oracle.plan.ring_bytes != 0;
  ddo::offload_setup setup;
  try {
    setup = h::plan_like_ddo_plan(table, settings, card_gib, ram, tokens);
  } catch (const std::exception& e) {
    out.key = family + ", " + settings.effective_preset + ": refused where the oracle plans";
    out.detail = what.str() + ": " + e.what();
    return out;
  }
  const auto ddo_score = ddo_test::plan_oracle::evaluate(table, setup.plan, m);
  out.ratio = ddo_score.step_s / oracle.plan.step_s;
  what << ": ddo resident " << ddo::format_bytes(ddo_score.resident_bytes) << " pinned "
       << ddo::format_bytes(ddo_score.pinned_bytes) << " pageable "
       << ddo::format_bytes(ddo_score.pageable_bytes) << " file "
       << ddo::format_bytes(ddo_score.file_bytes) << " slot "
       << ddo::format_bytes(ddo_score.slot_bytes) << "; oracle resident "
       << ddo::format_bytes(oracle.plan.resident_bytes) << " pinned "
       << ddo::format_bytes(oracle.plan.pinned_bytes) << " file "
       << ddo::format_bytes(oracle.plan.file_bytes) << " slot "
       << ddo::format_bytes(oracle.plan.slot_bytes);
  out.detail = what.str();
  if (!ddo_score.feasible) {
    out.key = family + ", " + settings.effective_preset + ": ddo's plan passes a budget";
    out.detail += " (" + ddo_score.why + ")";
  } else if (out.ratio > h::allowed_ratio(settings.config))
    out.key = family + ", " + settings.effective_preset + ": above the allowed ratio";
  return out;
}

}  // namespace plan_oracle_test

TEST_SUITE("plan") {
  TEST_CASE("property: ddo's plan is within 1.05x (1.10x with headroom presets) of the oracle's") {
    using namespace plan_oracle_test;
    // DDO_PROPERTY_SEED=N replays one case (a failure prints its seed).
    // DDO_PROPERTY_BASE=N runs every case from seed N; the default is seed base 1000, so that
    // CI's counts against the known classes' caps are reproducible (a random base flaked: 47
    // cases of a class capped at 46 under ASan); DDO_PROPERTY_BASE=random draws one.
    const char* replay = std::getenv("DDO_PROPERTY_SEED");
    const char* fixed = std::getenv("DDO_PROPERTY_BASE");
    const bool drawn = fixed != nullptr && std::string_view(fixed) == "random";
    const std::uint64_t base = replay != nullptr            ? std::strtoull(replay, nullptr, 10)
                               : drawn                      ? std::random_device{}()
                               : fixed != nullptr           ? std::strtoull(fixed, nullptr, 10)
                                                            : 1000;
    // Planning is single-threaded: the sanitizer builds (-O0, 20-25x slower here: 1,000 cases
    // took 52 s under ASan on a loaded 2-core machine, the plain 10,000 22 s) run 600, the
    // plain build's first 600 seeds: they check the memory accesses of the planner the plain
    // build's 10,000 judge (issue 38 allows fewer cases under the sanitizers; each known
    // class's cap scales with the count: at 300 the first seeds' share of one class, 12 cases,
    // passed its cap of 11). Where the plain build's time goes (perf, tools/test's step-2
    // build): with the oracle of trimmed units and setup's trimmed levels the 10,000 took
    // 27.7 s of CPU, the residency rules' pattern::find ~30% of it (every planner call of
    // setup searched the module names again); setup now searches them once
    // (match_rule_patterns) and builds plan_cache_key in place: 17.5 s (min of 3, the same
    // loaded 2-core machine, 40-75 s wall at a load of 5-10; every plan bitwise the same). Left:
    // setup ~55% (make_plan ~28%: the rules' and pins' reason strings, the groups copied per
    // call; group inference ~10%), the random layouts ~17% (weight_table::add,
    // infer_module_kinds), the oracle ~10% (fill_two_rooms, fill_exact), malloc/free throughout.
    constexpr std::size_t all_cases = DDO_TEST_UNDER_SANITIZER ? 600 : 10000;
    const std::size_t total = replay != nullptr ? 1 : all_cases;
    const auto start = std::chrono::steady_clock::now();
    std::size_t feasible = 0, streaming = 0, uncertified = 0;
    std::map<std::string, failure_class> failures;
    for (std::size_t c = 0; c < total; ++c) {
      const std::uint64_t seed = base + c;
      const auto o = run_case(seed, feasible, streaming, uncertified);
      if (replay != nullptr) MESSAGE("seed " << seed << ": ratio " << o.ratio << "; " << o.detail);
      if (o.key.empty()) continue;
      auto& f = failures[o.key];
      ++f.count;
      if (f.count == 1 || o.ratio > f.worst) {
        f.worst = o.ratio;
        f.worst_seed = seed;
        f.example = o.detail;
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE(total << " cases in " << seconds << " s: the oracle plans " << feasible << " ("
                  << streaming << " streaming); its plan is within 1% of its bound in all but "
                  << uncertified << " (worst " << worst_gap << ")");
    for (const auto& [key, f] : failures) {
      const std::size_t most = tolerated_cases(key, total);
      if (f.count <= most) {
        MESSAGE("known class, tolerated up to "
                << most << " case(s): " << key << ": " << f.count << " case(s), worst ratio "
                << f.worst << " at seed " << f.worst_seed << ": " << f.example);
        continue;
      }
      const std::string limit =
          most != 0 ? " (a known class, tolerated up to " + std::to_string(most) + ")" : "";
      FAIL_CHECK(key << ": " << f.count << " case(s)" << limit << ", worst ratio " << f.worst
                     << " at seed " << f.worst_seed << " (DDO_PROPERTY_SEED=" << f.worst_seed
                     << " replays it): " << f.example);
    }
    // The certificate (plan_oracle.hpp): within 1% on at least 95% of the cases (3.1-3.4%
    // uncertified over three seed bases since the oracle searches trimmed units, whose bound
    // ignores that a unit's resident part is a subset of that unit; 0.5-0.8% before).
    CHECK(uncertified * 20 <= total);
    if (replay == nullptr) {
      CHECK(feasible > total / 2);
      CHECK(streaming > total / 4);
    }
  }

  TEST_CASE("property replays: the cases fixed by name stay within what their fixes reached") {
    using namespace plan_oracle_test;
    // 3066: a UNet of 16.63 GiB on a 16.75 GiB card (nvme_baseline, 8 GiB of RAM) at 23.5x the
    // oracle of whole units, where the groups above the smaller slots added up to more than the
    // budget and the one left streaming sized the ring again (keep_outsized_first now keeps only
    // what streams above the slot); 3957: four blocks above the budget kept nothing of a block
    // (fill_with_weights); 3328: a head demoted past the smaller slot (demote_in_order). Each
    // reached 1.05x the oracle of whole units; against the oracle of trimmed units 3066 and 3957
    // are the class of a slot below the smallest group (known_classes), capped at what they
    // reach now (1.18x: 139 MiB slots where 38 MiB keep 0.3 GiB more resident; 2.78x: 2.80 GiB
    // slots where the oracle trims every block to 294 MiB). 4028: 2.24 GiB blocks of an
    // 11.31 GiB model on a 12.25 GiB card streamed whole (3.33 GiB resident, 3.14 GiB from the
    // file: 26x the oracle of trimmed units) until setup tried slots below the smallest group
    // (plan_loop.hpp, trimmed_levels): 557 MiB slots, 8.59 GiB resident, 1.00x. 7176: a flat
    // bundled 17.03 GiB model on 18.25 GiB at 5.00x, trimmed levels stopping below the 4th largest
    // group and a group's largest weights kept first; 2.06x with both fixed (tiers38f). 5183: a
    // flat 21.14 GiB model of three 5.88 GiB blocks (3.92, 1.31, 0.65 GiB weights) on 22.5 GiB
    // at 2.69x, each trimmed level's ring sized by the level where its blocks stream less, and
    // two 1.74 GiB groups the built-in patterns kept crowding out the blocks' excess: 1.00x
    // with the levels lowered to what streams (whole_weights::snapped) and those demoted for the
    // excess (demote_for_slot). 6975: f32 blocks of 2.95 GiB with a 1.97 GiB weight each
    // (nvme_baseline, 19.5 GiB card, 10 GiB of RAM) at 5.21x, the byte-wise trimmed levels
    // fitting no whole weight; 1.00x with the levels whole weights make (plan_loop.hpp,
    // whole_weights: each block's largest weight resident, 1008 MiB slots). 6376: a nested f32
    // model of 30.17 GiB whose rule-kept 17.83 GiB and a 3 x 1.80 GiB ring passed a 22.5 GiB card
    // (refused); with both branches' levels and demotions 1.009x. 2027: a flat 49.79 GiB model
    // (nvme_baseline, 17.25 GiB card, 40 GiB of RAM) whose blocks of 1164, 776, 323, 323 and
    // 64 MiB weights kept the 776 MiB weight (the smallest single one that covers the excess)
    // at the oracle's 1.96 GiB slot, where its smaller weights cover it with fewer bytes: the
    // 14 blocks' excess passed the budget, 2.53 GiB slots, 1.29x; 1.03x with the least set of
    // whole weights (plan/smallest_cover.hpp).
    const std::pair<std::uint64_t, double> cases[] = {
        {3066, 1.18}, {3957, 2.78}, {3328, 1.05}, {4028, 1.05}, {7176, 2.10},
        {5183, 1.05}, {6975, 1.05}, {6376, 1.05}, {2027, 1.05}};
    for (const auto& c : cases) {
      // Not a structured binding: INFO captures it in a lambda (clang's C++20 refuses).
      const std::uint64_t seed = c.first;
      const double most = c.second;
      std::size_t feasible = 0, streaming = 0, uncertified = 0;
      const auto o = run_case(seed, feasible, streaming, uncertified);
      INFO("seed " << seed << ": ratio " << o.ratio << "; " << o.detail);
      CHECK(feasible == 1);
      CHECK(o.key.find("refused") == std::string::npos);
      CHECK(o.key.find("passes a budget") == std::string::npos);
      CHECK(o.ratio <= most);
    }
  }

  TEST_CASE("property refusals: the smallest card a refusal names is one ddo plans on") {
    using namespace plan_oracle_test;
    // The refusals the property test still meets (known_classes: flat nvme_baseline 4521, flat
    // and bundled 9136, nested one_shot_fast 2324; nested and bundled 6376 plans since tiers38g
    // and tiers38h, a replay above): each names the
    // smallest card that would do (plan/device_room.hpp), and on that card ddo plans (issue 38:
    // a refusal names a card that works, not one the same rules refuse again).
    for (const std::uint64_t seed : {4521ull, 9136ull, 2324ull}) {
      std::size_t feasible = 0, streaming = 0, uncertified = 0;
      const auto refused = run_case(seed, feasible, streaming, uncertified);
      INFO("seed " << seed << ": " << refused.detail);
      REQUIRE(refused.key.find("refused") != std::string::npos);
      const std::string_view marker = "the smallest card that would do has ";
      const auto at = refused.detail.find(marker);
      REQUIRE(at != std::string::npos);
      const std::string named = refused.detail.substr(at + marker.size());
      REQUIRE(named.find(" GiB") != std::string::npos);
      // format_bytes prints two decimals: the card named, rounded up by their last digit.
      const double card = std::strtod(named.c_str(), nullptr) + 0.01;
      const auto again = run_case(seed, feasible, streaming, uncertified, card);
      INFO("on " << card << " GiB: " << again.key << "; " << again.detail);
      CHECK(again.key.find("refused") == std::string::npos);
      CHECK(again.key.find("passes a budget") == std::string::npos);
    }
  }
}
