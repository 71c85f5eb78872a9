// SPDX-License-Identifier: Apache-2.0
// A device budget that moves (issue 41): set_device_budget on a running offloader over host_sim.
// Random sequences of budgets between steps, some with a lease held across the call: the bytes
// every lease sees (the runner's --verify check), ddo's device bytes within every budget at every
// moment (the transport's ledger, its peak reset before each move and each step), and the plan
// after each move equal to a fresh plan for that budget. Seeded: DDO_BUDGET_MOVE_SEED=N chooses
// another seed (printed), "random" a random one.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "ddo/setup/setup.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/nvme.hpp"
#include "lease_check.hpp"
#include "seeded_file_model.hpp"
#include "sanitizers.hpp"

namespace budget_move_test {

/// Blocks of a linear layer each (host memory), a file-backed one and a small norm (kept
/// resident by the rules), then an embedding: every placement a plan can choose.
/// @p all_from_file: every weight in the file (a test that attributes the file's reads).
struct move_model : ddo_test::seeded_file_model {
  move_model(std::uint32_t seed, int blocks, bool all_from_file = false)
      : seeded_file_model("ddo_budget_move_", seed, static_cast<std::size_t>(blocks) * 3 + 1) {
    for (int b = 0; b < blocks; ++b) {
      const std::string p = "transformer_blocks." + std::to_string(b) + ".";
      ddo::execution_group g;
      g.name = "transformer_blocks." + std::to_string(b);
      // Unequal blocks, so that the largest streamed group (the ring's slot) changes too.
      const std::int64_t scale = 1 + b % 3;
      // MiB-sized: the plan leaves 64 MiB of every budget to the runtime (its reserve).
      g.weights.push_back(
          add(p + "attn.to_q.weight", scale * (1500000 + rng() % 1000000), all_from_file));
      g.weights.push_back(add(p + "ff.up.weight", 1000000 + rng() % 1000000,
                              all_from_file || b % 2 == 1));
      g.weights.push_back(add(p + "norm.weight", 256, all_from_file));
      groups.push_back(std::move(g));
    }
    ddo::execution_group embed;
    embed.name = "embed";
    embed.weights.push_back(add("embed.weight", 500000, all_from_file));
    groups.push_back(std::move(embed));
    finish();
  }
};

ddo::setup_options options_for(const move_model& m) {
  ddo::setup_options o;
  o.inputs.environment = std::map<std::string, std::string>{};
  // The balanced budget decides (no full-pin zero-resident rule); about a third pinned, the
  // rest pageable or in its file: every tier moves.
  o.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}},
                        {ddo::field_id::auto_full_pin_min_model_to_vram_ratio, 0.0},
                        {ddo::field_id::pin_weight_budget_gb, 0.04},
                        {ddo::field_id::show_profile, false}};
  o.ram_bytes = 8 * ddo::gib;
  // The preset named: auto decides on this machine's MemAvailable (one_shot_fast from 16 GiB,
  // else low_ram_safe), which a loaded machine lowers: the reserve case then once saw no move
  // change the placement.
  o.inputs.preset = "one_shot_fast";
  o.groups = m.groups;
  return o;
}

std::uint32_t seed_from_env() {
  const char* s = std::getenv("DDO_BUDGET_MOVE_SEED");
  if (s == nullptr || *s == '\0') return 41;
  if (std::string(s) == "random") return std::random_device{}();
  return static_cast<std::uint32_t>(std::strtoul(s, nullptr, 10));
}

/// The route a random sequence runs on: host_sim itself (a handle sharing its state).
struct sim_route {
  ddo::host_sim_transport operator()(const ddo::host_sim_transport& sim) const { return sim; }
};

/// The file route over host_sim (nvme_transport: its own pinned staging slots, sized for the
/// plan's largest file piece): the weights a plan leaves in the file read from it.
struct file_route {
  ddo::nvme_transport<ddo::host_sim_transport> operator()(
      const ddo::host_sim_transport& sim) const {
    ddo::nvme_options o;
    o.staging_slot_bytes = 64 * ddo::mib;
    o.read_threads = 2;
    o.request_bytes = 256 * 1024;
    return ddo::nvme_transport<ddo::host_sim_transport>(sim, o);
  }
};

/// The placements of a fresh setup's plan for @p budget, on a transport of its own (@p route
/// over a fresh host_sim).
template <class Route = sim_route>
std::vector<ddo::placement> fresh_placements(const move_model& m,
                                             const ddo::dynamic_offload_settings& settings,
                                             const ddo::setup_options& o, std::uint64_t card,
                                             std::uint64_t budget, Route route = {}) {
  auto fresh = route(ddo::host_sim_transport({.device_capacity_bytes = card}));
  const auto setup = ddo::plan_for_device_budget(m.table, settings, o, fresh, budget);
  std::vector<ddo::placement> out;
  for (const auto& d : setup.plan.decisions) out.push_back(d.where);
  return out;
}

std::vector<ddo::placement> move_placements(const ddo::offload_plan& plan) {
  std::vector<ddo::placement> out;
  for (const auto& d : plan.decisions) out.push_back(d.where);
  return out;
}

using offloader_t = ddo::offloader<ddo::host_sim_transport>;

/// With pin_in_place: checks that @p plan's pinned host weights are registered where they are
/// and that a host weight it does not pin is not (its middle page shares no page with a pinned
/// one: the pages an earlier plan registered were let go). @return the weights checked.
std::size_t check_in_place_pages(const ddo::weight_table& table, const ddo::offload_plan& plan,
                                 const ddo::host_sim_transport& sim) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto registered = [&](const void* p, std::uint64_t bytes) {
    return sim.ledger().contains(ddo::ledger_kind::registered, p, bytes);
  };
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> pinned;  // page ranges
  for (std::size_t w = 0; w < table.size(); ++w) {
    const auto* h = std::get_if<ddo::host_source>(&table[w].source);
    if (h == nullptr || plan.decisions[w].where != ddo::placement::pinned_host) continue;
    const auto a = reinterpret_cast<std::uintptr_t>(h->data);
    pinned.emplace_back(a / page * page, (a + table[w].bytes + page - 1) / page * page);
    CHECK(registered(h->data, table[w].bytes));
  }
  std::size_t checked = pinned.size();
  for (std::size_t w = 0; w < table.size(); ++w) {
    const auto* h = std::get_if<ddo::host_source>(&table[w].source);
    if (h == nullptr || plan.decisions[w].where == ddo::placement::pinned_host) continue;
    const auto mid = reinterpret_cast<std::uintptr_t>(h->data) + table[w].bytes / 2;
    const bool shared = std::any_of(pinned.begin(), pinned.end(), [&](const auto& r) {
      return mid / page * page >= r.first && mid / page * page < r.second;
    });
    if (shared) continue;
    CHECK_FALSE(registered(h->data + table[w].bytes / 2, 1));
    ++checked;
  }
  return checked;
}

/// The model file's reads, by range (runtime_options::file_faults sees every read ddo makes,
/// from any thread; it fails none).
struct read_log final : ddo::file_fault_hook {
  std::mutex mutex;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> reads;  // [offset, end)
  std::uint64_t total = 0;  ///< every byte of the reads take() saw, as read
  ddo::file_read_fault before_read(const std::string&, std::uint64_t offset,
                                   std::uint64_t length) override {
    std::lock_guard lock(mutex);
    reads.emplace_back(offset, offset + length);
    return {};
  }
  /// Per weight of @p table (all in the one file), the bytes of its range read since the last
  /// call (at most its size). A direct read is widened to the disk's alignment, so a weight
  /// next to one read may see a few KiB of its range read: read_slack.
  std::vector<std::uint64_t> take(const ddo::weight_table& table) {
    std::lock_guard lock(mutex);
    std::vector<std::uint64_t> of(table.size(), 0);
    total = 0;
    for (const auto& [b, e] : reads) total += e - b;
    for (std::size_t w = 0; w < table.size(); ++w) {
      const auto begin = std::get<ddo::file_source>(table[w].source).offset;
      const auto end = begin + table[w].bytes;
      for (const auto& [b, e] : reads)
        if (b < end && e > begin) of[w] += std::min(e, end) - std::max(b, begin);
      of[w] = std::min<std::uint64_t>(of[w], table[w].bytes);
    }
    reads.clear();
    return of;
  }
};

/// A direct read's widening at both ends of a weight (read_log::take).
constexpr std::uint64_t read_slack = 2 * 4096;

/// Whether @p p holds a weight's bytes (the device or a page-locked host copy).
bool held(ddo::placement p) {
  return p == ddo::placement::gpu_resident || p == ddo::placement::pinned_host;
}

/// Random budgets on a model held wholly in its file, the host copies as @p tweak makes them
/// (a fresh registry or store per call): every move reads no weight whose bytes the offloader
/// held (on the device or in a page-locked copy) and holds after it — a demoted weight is copied
/// back from the device, a promoted one uploaded from its pinned copy — save those of a resident
/// piece allocated anew; and it reads no more of the file than a fresh setup for the new budget.
template <class Tweak>
void moves_read_what_they_lack(std::uint32_t seed, Tweak tweak) {
  std::mt19937 rng(seed);
  const move_model m(seed, 8, true);
  auto o = options_for(m);
  tweak(o);
  read_log log;
  o.runtime.file_faults = &log;
  const auto settings = ddo::resolve_settings(o.inputs);
  const std::uint64_t card = 8 * ddo::gib, total = m.table.total_bytes();
  ddo::host_sim_transport sim({.device_capacity_bytes = card});
  const auto least =
      ddo::smallest_device_budget(m.table, settings, o, sim, 0, 0, 2 * total + 64 * ddo::mib);
  REQUIRE(least.has_value());
  // Low and high budgets in turn, so that every move demotes or promotes (both, over two).
  const std::uint64_t most = 2 * total + 64 * ddo::mib, middle = *least + (most - *least) / 2;
  std::uniform_int_distribution<std::uint64_t> low(*least, middle), high(middle, most);
  offloader_t off(m.table, ddo::plan_for_device_budget(m.table, settings, o, sim, high(rng)), sim);
  CHECK(ddo_test::count_mismatches(off, sim, m.expected, 1) == 0);
  std::uint64_t copied_back = 0, from_pinned = 0, reread = 0;
  // Each move sets up a fresh offloader beside it: fewer under the sanitizers (TSan's time).
  for (int k = 0; k < (DDO_TEST_UNDER_SANITIZER ? 6 : 16); ++k) {
    const std::uint64_t budget = k % 2 == 0 ? low(rng) : high(rng);
    const auto before = move_placements(off.plan());
    (void)log.take(m.table);
    REQUIRE(ddo::set_device_budget(off, settings, o, budget));
    const auto read = log.take(m.table);  // (log.total: the move's reads as made)
    const auto after = move_placements(off.plan());
    const auto mv = off.metrics().budget_moves.back();
    std::uint64_t moved_read = 0, slack = 0;
    for (std::size_t w = 0; w < m.table.size(); ++w) {
      if (!held(after[w])) continue;  // (a streamed weight's loads are not the move's)
      moved_read += read[w];
      slack += read[w] != 0 ? read_slack : 0;
      const bool stays_resident = before[w] == ddo::placement::gpu_resident &&
                                  after[w] == ddo::placement::gpu_resident;
      if (held(before[w]) && !stays_resident &&
          read[w] > std::min(read_slack, m.table[w].bytes / 2)) {
        MESSAGE("move " << k << ": '" << m.table[w].name << "' read " << read[w] << " bytes");
        reread += read[w];
      }
    }
    // A fresh setup for this budget (its own host copies) reads at least as much.
    auto fo = options_for(m);
    tweak(fo);
    read_log fresh_log;
    fo.runtime.file_faults = &fresh_log;
    ddo::host_sim_transport fresh_sim({.device_capacity_bytes = card});
    const offloader_t fresh(
        m.table, ddo::plan_for_device_budget(m.table, settings, fo, fresh_sim, budget), fresh_sim);
    const std::uint64_t move_total = log.total;
    (void)fresh_log.take(m.table);
    CHECK(move_total <= fresh_log.total);
    // Every source is the file here: what the move counts is what it read.
    CHECK(mv.bytes_read <= moved_read);
    CHECK(moved_read <= mv.bytes_read + slack);
    copied_back += mv.bytes_copied_to_host;
    from_pinned += mv.bytes_uploaded_from_pinned;
    CHECK(ddo_test::count_mismatches(off, sim, m.expected, 1) == 0);
  }
  CHECK(reread == 0);
  MESSAGE(copied_back << " bytes copied back from the device, " << from_pinned
                      << " uploaded from pinned copies");
  CHECK(copied_back > 0);
  CHECK(from_pinned > 0);
}

/// What a random sequence of moves saw (random_moves).
struct move_totals {
  std::size_t promoted = 0, demoted = 0, deferred = 0, slot_changes = 0;
  std::uint64_t read = 0;  ///< bytes_read over every move
};

/// Budgets in one random sequence: under the sanitizers (-O0, every copied byte checked) a
/// sequence of 24 cost 48-171 s of ThreadSanitizer's time each, five sequences past the suite's
/// 300 s timeout on CI's loaded cores; 8 still move every tier both ways (the cases check it).
inline constexpr int budgets_per_sequence = DDO_TEST_UNDER_SANITIZER ? 8 : 24;

/// A random sequence of budgets_per_sequence budgets between steps on an offloader of move_model(@p seed, 8) set
/// up with options_for's options as @p tweak changes them (the host copies' source: packed
/// blocks, a registry, a store, in place), a lease held across about a third of the moves; after
/// setup and each move @p after_move (the offloader, the transport, the move: null after the
/// setup) checks what the configuration adds.
/// Checks the bytes, the ledger within every budget, and the plan equal to a fresh plan.
template <class Tweak, class AfterMove, class Route = sim_route>
move_totals random_moves(std::uint32_t seed, Tweak tweak, AfterMove after_move, Route route = {}) {
  std::mt19937 rng(seed);
  const move_model m(seed, 8);
  auto o = options_for(m);
  tweak(o);
  const auto settings = ddo::resolve_settings(o.inputs);
  // Never the limit (budget + the balanced rule's headroom): the budgets are.
  const std::uint64_t card = 8 * ddo::gib;
  ddo::host_sim_transport sim({.device_capacity_bytes = card});
  auto transport = route(sim);  // the offloader's: sim's ledger counts its device bytes
  std::uint64_t total = 0;
  for (std::size_t w = 0; w < m.table.size(); ++w) total += m.table[w].bytes;
  const auto least =
      ddo::smallest_device_budget(m.table, settings, o, transport, 0, 0, 2 * total + 64 * ddo::mib);
  REQUIRE(least.has_value());
  std::uniform_int_distribution<std::uint64_t> pick(*least, 2 * total + 64 * ddo::mib);
  std::uint64_t budget = pick(rng);
  using route_offloader = ddo::offloader<decltype(transport)>;
  route_offloader off(m.table, ddo::plan_for_device_budget(m.table, settings, o, transport, budget),
                      transport);
  CHECK(ddo_test::count_mismatches(off, sim, m.expected, 1) == 0);
  after_move(off, sim, static_cast<const ddo::budget_move*>(nullptr));
  move_totals t;
  for (int k = 0; k < budgets_per_sequence; ++k) {
    const std::uint64_t next = pick(rng);
    const bool hold = rng() % 3 == 0;
    auto s = sim.make_stream();
    std::optional<typename route_offloader::lease_type> held;
    const std::size_t g = rng() % off.group_count();
    if (hold) held.emplace(off.acquire(g, sim.view(s)));
    const auto before = move_placements(off.plan());
    sim.reset_peak_device_bytes();
    const bool now = ddo::set_device_budget(off, settings, o, next);
    CHECK(now == !hold);
    CHECK(off.budget_move_pending() == hold);
    if (hold) {
      // The held group is untouched (its bytes right), and the move waits for the boundary.
      for (std::size_t i = 0; i < held->size(); ++i) {
        const std::byte* p = held->data(i);
        const auto& e = m.expected[held->weight_index(i)];
        sim.synchronize(sim.view(s));
        CHECK(std::memcmp(p, e.data(), e.size()) == 0);
      }
      held.reset();
      sim.synchronize(sim.view(s));
      CHECK(off.budget_move_pending());  // not a boundary yet: the next step starts one
      off.begin_step();
      ++t.deferred;
    }
    CHECK_FALSE(off.budget_move_pending());
    const std::uint64_t peak = sim.peak_device_bytes();
    // Through the move, ddo's device bytes stayed within max(old, new) budget (ledger).
    CHECK(sim.peak_device_bytes() <= std::max(budget, next));
    CHECK(sim.device_bytes_in_use() == off.device_bytes());
    CHECK(off.device_bytes() <= next);
    CHECK(move_placements(off.plan()) == fresh_placements(m, settings, o, card, next, route));
    if constexpr (requires { off.transport().file_io_description(); }) {
      // The file route's staging slots are what a fresh setup for this budget page-locks.
      auto other = route(ddo::host_sim_transport({.device_capacity_bytes = card}));
      route_offloader fresh(m.table, ddo::plan_for_device_budget(m.table, settings, o, other, next),
                            other);
      CHECK(off.transport().file_io_description() == fresh.transport().file_io_description());
    }
    const auto moves = off.metrics().budget_moves;
    REQUIRE(moves.size() == static_cast<std::size_t>(k) + 1);
    const auto& mv = moves.back();
    CHECK(mv.deferred == hold);
    CHECK(mv.device_peak_bytes <= std::max(budget, next));
    // Stronger, and what the order of frees and allocations gives: never more than the
    // larger of ddo's own bytes before and after (the ledger's peak since the reset).
    CHECK(peak <= std::max(mv.device_before_bytes, mv.device_after_bytes));
    CHECK(mv.device_peak_bytes == peak);
    CHECK(mv.budget_after_bytes == next);
    t.promoted += mv.weights_promoted;
    t.demoted += mv.weights_demoted;
    t.read += mv.bytes_read;
    t.slot_changes += mv.slot_bytes_before != mv.slot_bytes_after ? 1 : 0;
    // Each byte read at most once: only groups whose placement changed read anything.
    const auto after = move_placements(off.plan());
    std::uint64_t changed = 0;
    for (const auto& eg : m.groups) {
      bool differs = false;
      for (std::size_t w : eg.weights) differs |= before[w] != after[w];
      if (differs)
        for (std::size_t w : eg.weights) changed += m.table[w].bytes;
    }
    CHECK(mv.bytes_read <= changed);
    sim.reset_peak_device_bytes();
    CHECK(ddo_test::count_mismatches(off, sim, m.expected, 2) == 0);
    CHECK(sim.peak_device_bytes() <= next);
    after_move(off, sim, &mv);
    budget = next;
  }
  MESSAGE(t.promoted << " weights promoted, " << t.demoted << " demoted, " << t.deferred
                     << " moves deferred, " << t.slot_changes << " ring slot changes");
  CHECK(t.promoted > 0);
  CHECK(t.demoted > 0);
  return t;
}

}  // namespace budget_move_test

TEST_SUITE("runtime") {
  using budget_move_test::move_model;
  using budget_move_test::move_placements;
  using budget_move_test::offloader_t;
  using budget_move_test::options_for;

  TEST_CASE("set_device_budget: random budgets between steps, leases held across some") {
    const std::uint32_t seed = budget_move_test::seed_from_env();
    MESSAGE("budget move seed " << seed << " (DDO_BUDGET_MOVE_SEED=N or =random to choose)");
    (void)budget_move_test::random_moves(
        seed, [](ddo::setup_options&) {},
        [](auto&, ddo::host_sim_transport&, const ddo::budget_move*) {});
  }

  TEST_CASE("set_device_budget, random moves: host copies from a weight registry") {
    const std::uint32_t seed = budget_move_test::seed_from_env() + 1;
    std::shared_ptr<ddo::weight_registry> registry;
    std::uint64_t loaded = 0;
    (void)budget_move_test::random_moves(
        seed,
        [&](ddo::setup_options& o) {
          o.inputs.overrides.emplace_back(ddo::field_id::cache_pinned_weights, true);
          o.runtime.registry = registry = std::make_shared<ddo::weight_registry>();
        },
        [&](auto& off, ddo::host_sim_transport&, const ddo::budget_move* mv) {
          // The registry's reads for the move are the move's packed bytes (each piece once).
          const auto now = registry->stats().loaded_bytes;
          if (mv != nullptr) CHECK(mv->bytes_packed == now - loaded);
          loaded = now;
          CHECK(off.metrics().pin_fallback_bytes == 0);
          // What the plan pins is held in use (a budget of 1 byte evicts none of it: the
          // offloader copies from it); what only earlier plans pinned is let go.
          if (off.plan().total_bytes(ddo::placement::pinned_host) == 0)
            CHECK(registry->pinned_bytes() == 0);
          else
            CHECK_THROWS_AS(registry->set_budget(1), ddo::registry_full);
        });
  }

  TEST_CASE("set_device_budget, random moves: host copies from a shared_weight_store") {
    const std::uint32_t seed = budget_move_test::seed_from_env() + 2;
    std::shared_ptr<ddo::shared_weight_store> store;
    std::uint64_t held = 0;
    std::size_t pinned_plans = 0;
    (void)budget_move_test::random_moves(
        seed,
        [&](ddo::setup_options& o) {
          o.runtime.weight_store = store = std::make_shared<ddo::shared_weight_store>();
        },
        [&](auto& off, ddo::host_sim_transport&, const ddo::budget_move* mv) {
          // The store keeps every copy: what it gained is what the move read into it, each
          // weight at most once over the whole sequence (demoted again, it finds its copy).
          const auto now =
              ddo::detail::pinning_detail::store_bytes_held(*store, off.table(), off.options());
          if (mv != nullptr) CHECK(mv->bytes_packed == now - held);
          held = now;
          CHECK(off.metrics().pin_fallback_bytes == 0);
          pinned_plans += off.plan().total_bytes(ddo::placement::pinned_host) != 0 ? 1 : 0;
        });
    CHECK(pinned_plans > 0);
  }

  TEST_CASE("set_device_budget, random moves: pin_in_place registers the engine's pages") {
    const std::uint32_t seed = budget_move_test::seed_from_env() + 3;
    std::size_t with_pages = 0;
    (void)budget_move_test::random_moves(
        seed, [](ddo::setup_options& o) { o.runtime.pin_in_place = true; },
        [&](auto& off, ddo::host_sim_transport& sim, const ddo::budget_move*) {
          // The plan's pinned host weights registered where they are, whole pages, none staged;
          // the pages only the old plan pinned let go (a page it shares with the new plan is
          // registered again: CUDA refuses a second registration of a page).
          CHECK(off.metrics().pin_fallback_bytes == 0);
          const std::size_t checked =
              budget_move_test::check_in_place_pages(off.table(), off.plan(), sim);
          with_pages += checked != 0 ? 1 : 0;
        });
    CHECK(with_pages > 0);
  }

  TEST_CASE("set_device_budget, random moves: the file route") {
    const std::uint32_t seed = budget_move_test::seed_from_env() + 4;
    std::size_t from_file = 0, resized = 0;
    std::string slots;
    (void)budget_move_test::random_moves(
        seed,
        [](ddo::setup_options& o) {
          // backend nvme: what the plan does not pin stays in its file (placement file).
          o.inputs.overrides.emplace_back(ddo::field_id::backend, std::string("nvme"));
        },
        [&](auto& off, ddo::host_sim_transport&, const ddo::budget_move*) {
          // Weights the plan leaves in their file stream from it (random_moves checks the bytes
          // and that the staging slots are what a fresh setup page-locks).
          const auto& plan = off.plan();
          for (std::size_t w = 0; w < plan.decisions.size(); ++w)
            from_file += plan.decisions[w].where == ddo::placement::file ? 1 : 0;
          const auto io = off.transport().file_io_description();
          resized += !slots.empty() && io != slots ? 1 : 0;
          slots = io;
        },
        budget_move_test::file_route{});
    MESSAGE(from_file << " file placements over the sequence, " << resized
                      << " staging slot resizes");
    CHECK(from_file > 0);
  }

  TEST_CASE("set_device_budget reads only what the offloader lacks: packed host copies") {
    budget_move_test::moves_read_what_they_lack(budget_move_test::seed_from_env() + 5,
                                                [](ddo::setup_options&) {});
  }

  TEST_CASE("set_device_budget reads only what the offloader lacks: a weight registry") {
    budget_move_test::moves_read_what_they_lack(
        budget_move_test::seed_from_env() + 6, [](ddo::setup_options& o) {
          o.inputs.overrides.emplace_back(ddo::field_id::cache_pinned_weights, true);
          o.runtime.registry = std::make_shared<ddo::weight_registry>();
        });
  }

  TEST_CASE("set_device_budget reads only what the offloader lacks: a shared_weight_store") {
    budget_move_test::moves_read_what_they_lack(
        budget_move_test::seed_from_env() + 7, [](ddo::setup_options& o) {
          o.runtime.weight_store = std::make_shared<ddo::shared_weight_store>();
        });
  }

  TEST_CASE("set_device_budget: the same budget moves nothing; a budget too small is refused") {
    const move_model m(7, 6);
    const auto o = options_for(m);
    const auto settings = ddo::resolve_settings(o.inputs);
    ddo::host_sim_transport sim({.device_capacity_bytes = 8 * ddo::gib});
    std::uint64_t total = 0;
    for (std::size_t w = 0; w < m.table.size(); ++w) total += m.table[w].bytes;
    const auto least =
        ddo::smallest_device_budget(m.table, settings, o, sim, 0, 0, 2 * total + 64 * ddo::mib);
    REQUIRE(least.has_value());
    const std::uint64_t budget = (*least + total) / 2;
    offloader_t off(m.table, ddo::plan_for_device_budget(m.table, settings, o, sim, budget), sim);
    CHECK(ddo::set_device_budget(off, settings, o, budget));
    const auto same = off.metrics().budget_moves.back();
    CHECK(same.bytes_read == 0);
    CHECK(same.pieces_moved == 0);
    CHECK(same.weights_promoted + same.weights_demoted == 0);

    const auto before = move_placements(off.plan());
    const std::uint64_t device = off.device_bytes();
    const std::uint64_t pinned = sim.pinned_bytes_in_use();
    std::uint64_t named = 0;
    try {
      (void)ddo::set_device_budget(off, settings, o, 4096);
      FAIL("a 4 KiB budget was accepted");
    } catch (const ddo::out_of_memory& e) {
      CHECK(e.tier() == ddo::memory_tier::device);
      CHECK(std::string(e.what()).find("smallest device budget") != std::string::npos);
      named = e.requested_bytes();
    }
    // Nothing half-done: the same plan, device and pinned bytes, and the bytes still right.
    CHECK(move_placements(off.plan()) == before);
    CHECK(off.device_bytes() == device);
    CHECK(sim.pinned_bytes_in_use() == pinned);
    CHECK(off.metrics().budget_moves.size() == 1);
    CHECK(ddo_test::count_mismatches(off, sim, m.expected, 1) == 0);
    // The budget the refusal named runs, and one MiB less does not.
    REQUIRE(named > ddo::mib);
    CHECK(ddo::set_device_budget(off, settings, o, named));
    CHECK(off.device_bytes() <= named);
    CHECK(ddo_test::count_mismatches(off, sim, m.expected, 1) == 0);
    CHECK_THROWS_AS((void)ddo::set_device_budget(off, settings, o, named - ddo::mib),
                    ddo::out_of_memory);
  }

  TEST_CASE("set_device_budget after release_device: the plan moves, restore_device brings it up") {
    const move_model m(9, 4);
    const auto o = options_for(m);
    const auto settings = ddo::resolve_settings(o.inputs);
    ddo::host_sim_transport sim({.device_capacity_bytes = 8 * ddo::gib});
    std::uint64_t total = 0;
    for (std::size_t w = 0; w < m.table.size(); ++w) total += m.table[w].bytes;
    const std::uint64_t roomy = 2 * total + 64 * ddo::mib;
    offloader_t off(m.table, ddo::plan_for_device_budget(m.table, settings, o, sim, roomy), sim);
    off.release_device();
    const auto least =
        ddo::smallest_device_budget(m.table, settings, o, sim, 0, 0, 2 * total + 64 * ddo::mib);
    REQUIRE(least.has_value());
    // A pipeline component outside its phase: the plan and the host side move, the device
    // stays empty until restore_device, which brings up the new plan.
    CHECK(ddo::set_device_budget(off, settings, o, *least));
    CHECK(off.device_released());
    CHECK(sim.device_bytes_in_use() == 0);
    CHECK(move_placements(off.plan()) ==
          budget_move_test::fresh_placements(m, settings, o, 8 * ddo::gib, *least));
    sim.reset_peak_device_bytes();
    off.restore_device();
    CHECK(off.device_bytes() <= *least);
    CHECK(sim.peak_device_bytes() <= *least);
    CHECK(ddo_test::count_mismatches(off, sim, m.expected, 2) == 0);
    // And back up while released again.
    off.release_device();
    CHECK(ddo::set_device_budget(off, settings, o, roomy));
    off.restore_device();
    CHECK(move_placements(off.plan()) ==
          budget_move_test::fresh_placements(m, settings, o, 8 * ddo::gib, roomy));
    CHECK(ddo_test::count_mismatches(off, sim, m.expected, 2) == 0);
  }
}

TEST_SUITE("runtime") {
  TEST_CASE("budget_move_test's settings do not depend on this machine's available RAM") {
    // The flake of the reserve case below: options_for left the auto preset to this machine's
    // MemAvailable, which a loaded machine lowers. Two machines, 1 GiB and 256 GiB available:
    // the same preset, config and plan.
    const budget_move_test::move_model m(11, 8);
    const auto dir = std::filesystem::temp_directory_path();
    std::vector<ddo::placement> plans[2];
    std::string presets[2];
    for (int i = 0; i < 2; ++i) {
      const auto path =
          dir / ("ddo_budget_move_meminfo_" + std::to_string(::getpid()) + "_" + std::to_string(i));
      std::ofstream(path) << "MemTotal: 268435456 kB\nMemAvailable: "
                          << (i == 0 ? 1048576 : 268435456) << " kB\n";
      auto o = budget_move_test::options_for(m);
      o.inputs.paths.meminfo = path.string();
      const auto settings = ddo::resolve_settings(o.inputs);
      presets[i] = settings.effective_preset;
      ddo::host_sim_transport sim({.device_capacity_bytes = 8 * ddo::gib});
      const std::uint64_t total = m.table.total_bytes();
      const auto least =
          ddo::smallest_device_budget(m.table, settings, o, sim, 0, 0, 2 * total + 64 * ddo::mib);
      REQUIRE(least.has_value());
      plans[i] = budget_move_test::move_placements(
          ddo::plan_for_device_budget(m.table, settings, o, sim, *least + total / 2).plan);
      std::filesystem::remove(path);
    }
    CHECK(presets[0] == presets[1]);
    CHECK(plans[0] == plans[1]);
  }

  TEST_CASE("set_device_reserve: the plan follows the engine's reserve per workload size") {
    using budget_move_test::move_placements;
    const budget_move_test::move_model m(11, 8);
    auto o = budget_move_test::options_for(m);
    const auto settings = ddo::resolve_settings(o.inputs);
    std::uint64_t total = 0;
    for (std::size_t w = 0; w < m.table.size(); ++w) total += m.table[w].bytes;
    // A card the model does not fit beside the largest reserve: the reserve decides.
    const std::uint64_t card = total + 1536 * ddo::mib + 64 * ddo::mib;
    const auto fresh = [&](std::uint64_t reserve) {
      ddo::host_sim_transport other({.device_capacity_bytes = card});
      auto r = o;
      r.reserve_device_bytes = reserve;
      return move_placements(
          ddo::setup_offload(m.table, settings, ddo::component_for(settings, r.inputs), r, other)
              .plan);
    };
    ddo::host_sim_transport sim({.device_capacity_bytes = card});
    o.reserve_device_bytes = total / 4;
    budget_move_test::offloader_t off(
        m.table,
        ddo::setup_offload(m.table, settings, ddo::component_for(settings, o.inputs), o, sim), sim);
    std::size_t changed = 0;
    for (std::uint64_t reserve : {total, total / 4, 3 * total / 4, std::uint64_t{0}, total / 2}) {
      const auto before = move_placements(off.plan());
      sim.reset_peak_device_bytes();
      CHECK(ddo::set_device_reserve(off, settings, o, reserve));
      CHECK(move_placements(off.plan()) == fresh(reserve));
      changed += before != move_placements(off.plan()) ? 1 : 0;
      const auto mv = off.metrics().budget_moves.back();
      CHECK(sim.peak_device_bytes() <= std::max(mv.device_before_bytes, mv.device_after_bytes));
      // ddo and the engine's reserve together within the card, at every moment of the move.
      CHECK(mv.device_after_bytes + reserve + ddo::runtime_device_reserve_bytes <= card);
      CHECK(ddo_test::count_mismatches(off, sim, m.expected, 1) == 0);
    }
    CHECK(changed >= 3);
    CHECK_THROWS_AS((void)ddo::set_device_reserve(off, settings, o, card), ddo::out_of_memory);
    CHECK(ddo_test::count_mismatches(off, sim, m.expected, 1) == 0);
  }
}

TEST_SUITE("runtime") {
  TEST_CASE("set_device_reserve at a workload size: the engine's measured reserve decides") {
    using budget_move_test::move_placements;
    const budget_move_test::move_model m(12, 8);
    auto o = budget_move_test::options_for(m);
    const auto settings = ddo::resolve_settings(o.inputs);
    const std::uint64_t total = m.table.total_bytes();
    const std::uint64_t card = total + 1536 * ddo::mib + 64 * ddo::mib;
    ddo::host_sim_transport sim({.device_capacity_bytes = card});
    // The engine's forward at a size holds total/4096 bytes a unit (activations) while it runs:
    // measured on the simulated device before the setup, as an engine measures on its card.
    ddo::ledger_peak_probe probe(sim);
    const auto unit = total / 4096;
    const auto reserve = ddo::measure_workload_reserve(
        "tokens", std::vector<std::int64_t>{1024, 4096}, probe, [&](std::int64_t size) {
          const auto n = static_cast<std::size_t>(unit * static_cast<std::uint64_t>(size));
          sim.free_device(sim.allocate_device(n), n);
        });
    CHECK(reserve.bytes_at(4096) == unit * 4096);
    const auto fresh = [&](std::uint64_t bytes) {
      ddo::host_sim_transport other({.device_capacity_bytes = card});
      auto r = o;
      r.reserve_device_bytes = bytes;
      return move_placements(
          ddo::setup_offload(m.table, settings, ddo::component_for(settings, r.inputs), r, other)
              .plan);
    };
    o.reserve_device_bytes = reserve.bytes_at(1024);
    const auto component = ddo::component_for(settings, o.inputs);
    budget_move_test::offloader_t off(
        m.table, ddo::setup_offload(m.table, settings, component, o, sim), sim);
    for (const std::int64_t size : {4096, 1024, 2560, 4096}) {
      CHECK(ddo::set_device_reserve(off, settings, o, reserve, size));
      CHECK(move_placements(off.plan()) == fresh(reserve.bytes_at(size)));
      CHECK(off.device_bytes() + reserve.bytes_at(size) + ddo::runtime_device_reserve_bytes <=
            card);
      CHECK(ddo_test::count_mismatches(off, sim, m.expected, 1) == 0);
    }
    // Outside the measured sizes: refused before anything moves.
    const auto before = move_placements(off.plan());
    const auto moves = off.metrics().budget_moves.size();
    CHECK_THROWS_AS((void)ddo::set_device_reserve(off, settings, o, reserve, 8192),
                    ddo::config_error);
    CHECK(move_placements(off.plan()) == before);
    CHECK(off.metrics().budget_moves.size() == moves);
  }
}

TEST_SUITE("runtime") {
  TEST_CASE("set_device_budget with cache_pinned_weights: host copies from the weight registry") {
    const budget_move_test::move_model m(13, 8);
    auto o = budget_move_test::options_for(m);
    // cache_pinned_weights without a pinned_cache: a weight registry is the source of the host
    // copies (setup_offload's use_caches: the process's when the engine gives none, as engines
    // get by default; here the test's own, shared with no other test's model).
    o.inputs.overrides.emplace_back(ddo::field_id::cache_pinned_weights, true);
    o.runtime.registry = std::make_shared<ddo::weight_registry>();
    const auto settings = ddo::resolve_settings(o.inputs);
    const std::uint64_t total = m.table.total_bytes();
    ddo::host_sim_transport sim({.device_capacity_bytes = 8 * ddo::gib});
    const auto least =
        ddo::smallest_device_budget(m.table, settings, o, sim, 0, 0, 2 * total + 64 * ddo::mib);
    REQUIRE(least.has_value());
    budget_move_test::offloader_t off(
        m.table, ddo::plan_for_device_budget(m.table, settings, o, sim, 2 * total), sim);
    REQUIRE(off.options().registry != nullptr);
    CHECK(ddo_test::count_mismatches(off, sim, m.expected, 1) == 0);
    std::uint64_t demoted_read = 0;
    for (const std::uint64_t budget :
         {*least, 2 * total, *least + (2 * total - *least) / 2, *least}) {
      const auto loaded = o.runtime.registry->stats().loaded_bytes;
      CHECK(ddo::set_device_budget(off, settings, o, budget));
      CHECK(off.device_bytes() <= budget);
      const auto mv = off.metrics().budget_moves.back();
      const auto read_by_registry = o.runtime.registry->stats().loaded_bytes - loaded;
      // The registry's reads for the demoted groups are the move's (its pinned pieces, nothing
      // else packed with shared host copies): counted in bytes_packed and bytes_read.
      CHECK(mv.bytes_packed == read_by_registry);
      CHECK(mv.bytes_read == mv.bytes_uploaded - mv.bytes_uploaded_from_pinned + mv.bytes_packed -
                                 mv.bytes_copied_to_host - mv.bytes_repacked);
      demoted_read += mv.bytes_demoted != 0 ? read_by_registry : 0;
      // The registry holds what the new plan pins, in use (the offloader copies from it): a
      // budget of 1 byte evicts none of it; and nothing the old plan alone pinned stays held.
      auto& registry = *o.runtime.registry;
      if (off.plan().total_bytes(ddo::placement::pinned_host) != 0) {
        const auto kept = registry.budget();
        CHECK_THROWS_AS(registry.set_budget(1), ddo::registry_full);
        CHECK(registry.budget() == kept);
      } else {
        CHECK(registry.pinned_bytes() == 0);
      }
      CHECK(ddo_test::count_mismatches(off, sim, m.expected, 1) == 0);
    }
    // Everything resident released the registry's pieces: a demotion after it read them again.
    CHECK(demoted_read > 0);
  }
}
