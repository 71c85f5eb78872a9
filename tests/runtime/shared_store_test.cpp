// SPDX-License-Identifier: Apache-2.0
// Several simulated devices sharing one ddo::shared_weight_store (issue 28): each device has its
// own host_sim transport (one simulated host between them), device budget, plan, offloader and
// host thread, so the store's lookups and additions race for real (ThreadSanitizer runs this
// suite).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "ddo/memory/shared_weight_store.hpp"
#include "ddo/model/weight_shard.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/fault_injection.hpp"
#include "ddo/transport/host_sim.hpp"
#include "runtime_fixtures.hpp"

namespace shared_store_test {

using ddo::host_sim_transport;
using ddo::placement;

/// Moves weight @p w of @p plan to @p where (the group's byte counts follow).
void place(ddo::offload_plan& plan, std::size_t w, placement where, std::uint64_t bytes) {
  auto& d = plan.decisions[w];
  auto& by = plan.groups[d.group].bytes_by_placement;
  by[static_cast<std::size_t>(d.where)] -= bytes;
  by[static_cast<std::size_t>(where)] += bytes;
  d.where = where;
}

/// Three different plans of one model: the model's; group 1 resident and group 2's pageable
/// weights pinned; group 0's file weights pinned and group 3 resident. Their pinned weights
/// overlap but differ, so the store must hold the union.
std::vector<ddo::offload_plan> device_plans(const ddo_test::synthetic_model& m) {
  std::vector<ddo::offload_plan> plans(3, m.plan);
  for (std::size_t w = 0; w < m.table.size(); ++w) {
    const auto g = m.plan.decisions[w].group;
    const auto where = m.plan.decisions[w].where;
    const auto bytes = m.table[w].bytes;
    if (g == 1) place(plans[1], w, placement::gpu_resident, bytes);
    if (g == 2 && where == placement::pageable_host)
      place(plans[1], w, placement::pinned_host, bytes);
    if (g == 0 && where == placement::file) place(plans[2], w, placement::pinned_host, bytes);
    if (g == 3) place(plans[2], w, placement::gpu_resident, bytes);
  }
  return plans;
}

/// Bytes of the weights some plan of @p plans streams from pinned memory, each once.
std::uint64_t union_pinned_bytes(const ddo_test::synthetic_model& m,
                                 const std::vector<const ddo::offload_plan*>& plans) {
  std::uint64_t bytes = 0;
  for (std::size_t w = 0; w < m.table.size(); ++w)
    for (const auto* p : plans)
      if (p->decisions[w].where == placement::pinned_host) {
        bytes += m.table[w].bytes;
        break;
      }
  return bytes;
}

/// Streams every group of @p off twice on a compute stream of @p sim, comparing each weight a
/// lease gives with the model's bytes; returns the mismatching weights (checked: the bytes seen).
template <class Offloader, class Sim>
std::uint64_t stream_and_check(Offloader& off, Sim& sim, const ddo_test::synthetic_model& m,
                               std::uint64_t* checked) {
  auto s = sim.make_stream();
  const auto v = sim.view(s);
  std::atomic<std::uint64_t> bad{0}, seen{0};
  for (int step = 0; step < 2; ++step)
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, v);
      std::vector<std::pair<const std::byte*, std::size_t>> items;
      for (std::size_t i = 0; i < lease.size(); ++i)
        items.emplace_back(lease.data(i), lease.weight_index(i));
      sim.enqueue(v, [&, items = std::move(items)] {
        for (const auto& [p, w] : items) {
          const auto& e = m.expected[w];
          if (std::memcmp(p, e.data(), e.size()) != 0) ++bad;
          seen += e.size();
        }
      });
    }
  sim.synchronize(v);
  if (checked != nullptr) *checked = seen;
  return bad;
}

ddo_test::model_spec spec_of(std::uint32_t seed) {
  ddo_test::model_spec spec;
  spec.groups = 6;
  spec.min_bytes = 64 * 1024;  // large enough that page rounding stays under the 5% bound
  spec.max_bytes = 192 * 1024;
  spec.seed = seed;
  return spec;
}

ddo::runtime_options store_options(std::shared_ptr<ddo::shared_weight_store> store) {
  ddo::runtime_options o;
  o.poison_slots = true;
  o.staging_buffer_bytes = 64 * 1024;
  o.weight_store = std::move(store);
  return o;
}

/// The groups of @p m's plan, as execution groups of its table.
std::vector<ddo::execution_group> groups_of(const ddo_test::synthetic_model& m) {
  std::vector<ddo::execution_group> groups;
  for (const auto& g : m.plan.groups) groups.push_back({g.name, g.weights, true});
  return groups;
}

/// @p m's plan restricted to shard @p s (its decisions, the shard's groups).
ddo::offload_plan plan_of(const ddo_test::synthetic_model& m, const ddo::sharded_table& s) {
  ddo::offload_plan plan;
  for (std::size_t g = 0; g < s.groups.size(); ++g) {
    ddo::plan_group pg;
    pg.name = s.groups[g].name;
    pg.weights = s.groups[g].weights;
    for (std::size_t w : pg.weights) {
      auto d = m.plan.decisions[s.whole_index[w]];
      d.group = g;
      pg.bytes_by_placement[static_cast<std::size_t>(d.where)] += s.table[w].bytes;
      plan.decisions.push_back(d);
    }
    plan.groups.push_back(std::move(pg));
  }
  return plan;
}

}  // namespace shared_store_test

TEST_SUITE_BEGIN("runtime");

TEST_CASE(
    "devices on threads share one host copy: every byte right, the union once, budgets each") {
  using namespace shared_store_test;
  auto m = ddo_test::make_model(spec_of(281));
  const auto plans = device_plans(*m);
  auto host = std::make_shared<ddo::host_sim_host>();
  std::uint64_t store_bytes_at[2] = {};
  const std::size_t device_counts[2] = {2, 5};
  for (int run = 0; run < 2; ++run) {
    const std::size_t n = device_counts[run];
    auto store = std::make_shared<ddo::shared_weight_store>();
    std::vector<host_sim_transport> sims;
    std::vector<const ddo::offload_plan*> used;
    for (std::size_t d = 0; d < n; ++d) {
      ddo::host_sim_options ho;
      ho.device_capacity_bytes = (8 + 2 * d) * ddo::mib;  // a budget of its own per device
      ho.host = host;
      sims.emplace_back(ho);
      used.push_back(&plans[d % plans.size()]);
    }
    std::vector<std::uint64_t> mismatches(n, 1), checked(n, 0), pinned(n, 0);
    std::vector<std::thread> devices;
    for (std::size_t d = 0; d < n; ++d)
      devices.emplace_back([&, d] {
        ddo::basic_offloader<host_sim_transport> off(sims[d], m->table, *used[d],
                                                     store_options(store));
        pinned[d] = off.metrics().pinned_bytes;
        mismatches[d] = stream_and_check(off, sims[d], *m, &checked[d]);
      });
    for (auto& t : devices) t.join();
    std::uint64_t model_bytes = 0;
    for (const auto& e : m->expected) model_bytes += e.size();
    for (std::size_t d = 0; d < n; ++d) {
      CAPTURE(d);
      CHECK(mismatches[d] == 0);
      CHECK(checked[d] == 2 * model_bytes);          // every weight, both steps
      CHECK(sims[d].pageable_direct_copies() == 0);  // the store's pages count as pinned
      CHECK(sims[d].peak_device_bytes() <= sims[d].options().device_capacity_bytes);
      CHECK(sims[d].device_bytes_in_use() == 0);
      CHECK(pinned[d] <= store->registered_bytes());
    }
    const std::uint64_t union_bytes = union_pinned_bytes(*m, used);
    CHECK(store->bytes() >= union_bytes);
    CHECK(static_cast<double>(store->bytes()) <= 1.05 * static_cast<double>(union_bytes));
    CHECK(store->registered_bytes() == store->bytes());
    std::uint64_t registered = 0;
    for (const auto& s : sims) registered += s.registered_bytes_in_use();
    CHECK(registered == store->bytes());  // the store keeps them after the offloaders went
    store_bytes_at[run] = store->bytes();
    const auto placed = store->placement();
    CHECK(placed.nodes_online >= 1);
    store.reset();  // the last holder: every block unregistered and unmapped
    for (const auto& s : sims) CHECK(s.registered_bytes_in_use() == 0);
  }
  // 2 devices (two plans) and 5 devices (all three): the union grew, not the count of copies.
  CHECK(store_bytes_at[1] >= store_bytes_at[0]);
  CHECK(store_bytes_at[1] < 2 * store_bytes_at[0]);
}

TEST_CASE("a device that fails or goes leaves the other devices and the store intact") {
  using namespace shared_store_test;
  auto m = ddo_test::make_model(spec_of(282));
  auto host = std::make_shared<ddo::host_sim_host>();
  auto store = std::make_shared<ddo::shared_weight_store>();
  ddo::host_sim_options ho;
  ho.host = host;
  host_sim_transport a(ho), b(ho), c(ho);
  using faulty = ddo::fault_injection_transport<host_sim_transport>;
  faulty cf(c);
  std::uint64_t store_bytes = 0;
  {
    auto off_a = std::make_unique<ddo::basic_offloader<host_sim_transport>>(a, m->table, m->plan,
                                                                            store_options(store));
    store_bytes = store->bytes();
    REQUIRE(store_bytes > 0);
    {
      // Device c: a copy on its stream fails (its third, in setup or a step); its offloader
      // throws and is destroyed.
      cf.faults().fail_nth(ddo::fault_point::copy_to_device, 3);
      CHECK_THROWS_AS(([&] {
                        ddo::basic_offloader<faulty> off_c(cf, m->table, m->plan,
                                                           store_options(store));
                        (void)stream_and_check(off_c, c, *m, nullptr);
                      })(),
                      ddo::cuda_error);
      CHECK(cf.faults().calls(ddo::fault_point::copy_to_device) >= 3);
    }
    CHECK(store->bytes() == store_bytes);
    {
      // Device b: set up from the store, its leases dropped, destroyed while a runs on.
      ddo::basic_offloader<host_sim_transport> off_b(b, m->table, m->plan, store_options(store));
      CHECK(stream_and_check(off_b, b, *m, nullptr) == 0);
      CHECK(b.registered_bytes_in_use() == 0);  // b pinned nothing: a had
    }
    CHECK(stream_and_check(*off_a, a, *m, nullptr) == 0);
    // The application lets go of the store: the offloader that still runs keeps it.
    std::weak_ptr<ddo::shared_weight_store> weak = store;
    store.reset();
    REQUIRE_FALSE(weak.expired());
    CHECK(stream_and_check(*off_a, a, *m, nullptr) == 0);
    CHECK(a.registered_bytes_in_use() == store_bytes);
    off_a.reset();  // the last user frees the store
    CHECK(weak.expired());
  }
  for (const auto* s : {&a, &b, &c}) {
    CHECK(s->registered_bytes_in_use() == 0);  // no pinned byte leaks
    CHECK(s->device_bytes_in_use() == 0);
  }
}

TEST_CASE("a refused registration in the store stages its weights on every device") {
  using namespace shared_store_test;
  auto m = ddo_test::make_model(spec_of(283));
  auto store = std::make_shared<ddo::shared_weight_store>();
  ddo::host_sim_options refused;
  refused.fail_host_registration = true;
  host_sim_transport a(refused), b;
  ddo::basic_offloader<host_sim_transport> off_a(a, m->table, m->plan, store_options(store));
  CHECK(store->registered_bytes() == 0);
  CHECK(off_a.metrics().pin_fallback_bytes > 0);
  CHECK(stream_and_check(off_a, a, *m, nullptr) == 0);
  ddo::basic_offloader<host_sim_transport> off_b(b, m->table, m->plan, store_options(store));
  CHECK(off_b.metrics().pin_fallback_bytes == off_a.metrics().pin_fallback_bytes);
  CHECK(stream_and_check(off_b, b, *m, nullptr) == 0);
  CHECK(b.pageable_direct_copies() == 0);
  auto strict = store_options(store);
  strict.allow_pin_fallback = false;
  host_sim_transport c;
  CHECK_THROWS_AS(ddo::basic_offloader<host_sim_transport>(c, m->table, m->plan, strict),
                  ddo::out_of_memory);
}

TEST_CASE("a whole group from the store is one copy, as from a block of the device's own") {
  using namespace shared_store_test;
  // Every weight pinned: a group is its pinned part alone (a group with staged weights copies
  // its own block in staging-buffer chunks, more copies than the store's one).
  auto spec = spec_of(286);
  spec.where = [](std::size_t, std::size_t) { return placement::pinned_host; };
  auto m = ddo_test::make_model(spec);
  host_sim_transport own_sim, shared_sim;
  auto own_options = store_options(nullptr);
  ddo::basic_offloader<host_sim_transport> own(own_sim, m->table, m->plan, own_options);
  ddo::basic_offloader<host_sim_transport> shared(
      shared_sim, m->table, m->plan, store_options(std::make_shared<ddo::shared_weight_store>()));
  CHECK(stream_and_check(own, own_sim, *m, nullptr) == 0);
  CHECK(stream_and_check(shared, shared_sim, *m, nullptr) == 0);
  // The store lays each group out as its slot: its 4 weights merge into one copy per load
  // (unmerged, two steps would issue at least one copy per weight each).
  CHECK(shared_sim.copies_issued() == own_sim.copies_issued());
  CHECK(shared_sim.copies_issued() < 2 * m->table.size());
}

TEST_CASE("setup counts the store once: its bytes of this table go back to the probed RAM") {
  using namespace shared_store_test;
  auto m = ddo_test::make_model(spec_of(285));
  auto store = std::make_shared<ddo::shared_weight_store>();
  host_sim_transport sim;
  ddo::setup_options options;  // RAM probed, not stated: only probed RAM holds the store
  options.inputs.environment = std::map<std::string, std::string>{};
  options.inputs.preset = "one_shot_fast";  // the plan probes RAM; the preset does not follow it
  const auto settings = ddo::resolve_settings(options.inputs);
  const auto groups = groups_of(*m);
  auto runtime = ddo::runtime_options_from(settings.config);
  runtime.weight_store = store;
  const auto before = ddo::machine_for(
      sim, m->table, groups, settings.config,
      ddo::machine_inputs_for(settings, options, options.inputs.paths, m->table, runtime), runtime);
  CHECK(ddo::describe(before.ram).find("plus " + ddo::format_bytes(0) + " of its weights") !=
        std::string::npos);
  { ddo::basic_offloader<host_sim_transport> first(sim, m->table, m->plan, store_options(store)); }
  const auto after = ddo::machine_for(
      sim, m->table, groups, settings.config,
      ddo::machine_inputs_for(settings, options, options.inputs.paths, m->table, runtime), runtime);
  const std::uint64_t held = m->plan.total_bytes(placement::pinned_host);
  CAPTURE(ddo::describe(after.ram));
  CHECK(ddo::describe(after.ram).find("plus " + ddo::format_bytes(held) + " of its weights") !=
        std::string::npos);
  // A shard's plan is credited its own weights only.
  const auto shard = ddo::shard_weight_table(m->table, groups, {0, 1, ""});
  const auto one = ddo::machine_for(
      sim, shard.table, shard.groups, settings.config,
      ddo::machine_inputs_for(settings, options, options.inputs.paths, shard.table, runtime), runtime);
  std::uint64_t shard_held = 0;
  for (std::size_t w : shard.whole_index)
    if (m->plan.decisions[w].where == placement::pinned_host) shard_held += m->table[w].bytes;
  CHECK(ddo::describe(one.ram).find("plus " + ddo::format_bytes(shard_held) + " of its weights") !=
        std::string::npos);
}

TEST_CASE("a store kept across a model reload never hands out the old bytes") {
  using namespace shared_store_test;
  auto m = ddo_test::make_model(spec_of(287));
  auto store = std::make_shared<ddo::shared_weight_store>();
  host_sim_transport sim;
  {
    ddo::basic_offloader<host_sim_transport> first(sim, m->table, m->plan, store_options(store));
    REQUIRE(stream_and_check(first, sim, *m, nullptr) == 0);
  }
  const std::uint64_t first_bytes = store->bytes();
  // The engine reloads: new bytes at the same addresses and in the same file, a table built anew.
  const ddo::weight_table reloaded = ddo_test::reload_in_place(*m, 7);
  {
    ddo::basic_offloader<host_sim_transport> second(sim, reloaded, m->plan, store_options(store));
    CHECK(stream_and_check(second, sim, *m, nullptr) == 0);
  }
  CHECK(store->bytes() == 2 * first_bytes);  // the old copy stays until the store goes
  // A copy of the table (or a table that states it is over the same buffers) shares the copy.
  ddo::weight_table copy = reloaded;
  ddo::weight_table again;
  for (const auto& path : m->table.files()) again.add_file(path);
  for (const auto& info : m->table.weights()) again.add(info);
  again.share_host_generation(reloaded);
  for (const auto* t : {&copy, &again}) {
    ddo::basic_offloader<host_sim_transport> off(sim, *t, m->plan, store_options(store));
    CHECK(stream_and_check(off, sim, *m, nullptr) == 0);
  }
  CHECK(store->bytes() == 2 * first_bytes);
  // An engine that keeps the table and writes new bytes into its buffers says so.
  for (std::size_t w = 0; w < m->table.size(); ++w)
    if (std::holds_alternative<ddo::host_source>(m->table[w].source)) {
      std::reverse(m->expected[w].begin(), m->expected[w].end());
      std::memcpy(m->host[w].data(), m->expected[w].data(), m->expected[w].size());
    }
  again.renew_host_generation();
  ddo::basic_offloader<host_sim_transport> off(sim, again, m->plan, store_options(store));
  CHECK(stream_and_check(off, sim, *m, nullptr) == 0);
}

TEST_CASE("setup credits the store's bytes only for the weights its plan takes from it") {
  using namespace shared_store_test;
  auto spec = spec_of(288);
  spec.where = [](std::size_t, std::size_t) { return placement::pinned_host; };
  auto m = ddo_test::make_model(spec);
  // The store holds the last three groups (a first device pinned only those).
  auto store = std::make_shared<ddo::shared_weight_store>();
  auto late = m->plan;
  for (std::size_t w = 0; w < m->table.size(); ++w)
    if (late.decisions[w].group < 3) place(late, w, placement::pageable_host, m->table[w].bytes);
  host_sim_transport sim;
  { ddo::basic_offloader<host_sim_transport> first(sim, m->table, late, store_options(store)); }
  const std::uint64_t held = late.total_bytes(placement::pinned_host);
  REQUIRE(held > 256 * 1024);
  // A second device with little RAM free (MemAvailable: a 1 GiB headroom and 256 KiB) that
  // pins from the first group on: credited the store's bytes, it would pin groups it does not
  // take from the store on RAM the store already uses.
  const std::uint64_t usable = 256 * 1024;
  const auto dir =
      std::filesystem::temp_directory_path() / ("ddo_store_credit_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream meminfo(dir / "meminfo");
    meminfo << "MemTotal: 16777216 kB\nMemAvailable: " << (ddo::gib + usable) / 1024 << " kB\n";
  }
  ddo::setup_options options;
  options.inputs.environment =
      std::map<std::string, std::string>{{"DDO_PIN_WEIGHT_SELECTION", "first"},
                                         {"DDO_PIN_CPU_MEMORY", "1"},
                                         {"DDO_SMALL_TENSOR_THRESHOLD_KB", "0"},
                                         {"DDO_SYSTEM_RAM_HEADROOM_GB", "1"}};
  options.inputs.paths.meminfo = (dir / "meminfo").string();
  options.inputs.paths.self_cgroup = (dir / "no-cgroup").string();
  options.groups = groups_of(*m);
  options.zero_resident_reason = "the test streams every group";
  options.runtime.weight_store = store;
  const auto settings = ddo::resolve_settings(options.inputs);
  ddo::host_sim_options small;
  small.device_capacity_bytes = 4 * ddo::mib;  // a ring, and nothing resident
  host_sim_transport second(small);
  const auto r = ddo::setup_offload(m->table, settings,
                                    ddo::component_for(settings, options.inputs), options, second);
  std::filesystem::remove_all(dir);
  const std::uint64_t taken =
      ddo::detail::pinning_detail::store_bytes_held(*store, m->table, r.runtime, &r.plan);
  const std::uint64_t pinned = r.plan.total_bytes(placement::pinned_host);
  CAPTURE(ddo::describe(r.machine.ram));
  CAPTURE(pinned);
  CAPTURE(taken);
  CHECK(pinned > 0);
  CHECK(pinned - taken <= usable);  // new page-locked bytes fit the RAM that is free
  CHECK(r.machine.ram.store_credit_bytes == taken);
  CHECK(r.machine.ram.store_credit_bytes < held);
}

TEST_CASE("layer shards stream only their groups, from the one store") {
  using namespace shared_store_test;
  auto m = ddo_test::make_model(spec_of(284));
  const auto groups = groups_of(*m);
  auto host = std::make_shared<ddo::host_sim_host>();
  auto store = std::make_shared<ddo::shared_weight_store>();
  const std::size_t n = 2;
  std::vector<ddo::sharded_table> shards;
  std::vector<ddo::offload_plan> plans;
  for (std::size_t d = 0; d < n; ++d) {
    shards.push_back(
        ddo::shard_weight_table(m->table, groups, ddo::even_shard(groups.size(), d, n)));
    plans.push_back(plan_of(*m, shards.back()));
  }
  CHECK(shards[0].groups.size() + shards[1].groups.size() == groups.size());
  CHECK(shards[0].table.size() + shards[1].table.size() == m->table.size());
  std::vector<host_sim_transport> sims;
  for (std::size_t d = 0; d < n; ++d) {
    ddo::host_sim_options ho;
    ho.host = host;
    sims.emplace_back(ho);
  }
  std::vector<std::uint64_t> bad(n, 1), checked(n, 0);
  std::vector<std::thread> devices;
  for (std::size_t d = 0; d < n; ++d)
    devices.emplace_back([&, d] {
      ddo::basic_offloader<host_sim_transport> off(sims[d], shards[d].table, plans[d],
                                                   store_options(store));
      // The shard's expected bytes are the whole model's at the whole table's indices.
      ddo_test::synthetic_model view;
      for (std::size_t w : shards[d].whole_index) view.expected.push_back(m->expected[w]);
      bad[d] = stream_and_check(off, sims[d], view, &checked[d]);
    });
  for (auto& t : devices) t.join();
  std::uint64_t model_bytes = 0;
  for (const auto& e : m->expected) model_bytes += e.size();
  CHECK(bad[0] == 0);
  CHECK(bad[1] == 0);
  CHECK(checked[0] + checked[1] == 2 * model_bytes);  // each weight on exactly one device
  const std::uint64_t sharded_store = store->bytes();
  // A whole-table device beside them adds nothing: the shards' bytes are the same bytes.
  {
    ddo::host_sim_options ho;
    ho.host = host;
    host_sim_transport whole(ho);
    ddo::basic_offloader<host_sim_transport> off(whole, m->table, m->plan, store_options(store));
    CHECK(stream_and_check(off, whole, *m, nullptr) == 0);
  }
  CHECK(store->bytes() == sharded_store);
  const std::vector<const ddo::offload_plan*> used{&m->plan};
  CHECK(static_cast<double>(sharded_store) <=
        1.05 * static_cast<double>(union_pinned_bytes(*m, used)));

  // Bad shards are refused with the field named.
  CHECK_THROWS_WITH_AS((void)ddo::shard_weight_table(m->table, groups, {4, 2, ""}),
                       doctest::Contains("first_group 4"), ddo::usage_error);
  CHECK_THROWS_WITH_AS((void)ddo::shard_weight_table(m->table, groups, {0, 99, "no-such-name"}),
                       doctest::Contains("no-such-name"), ddo::usage_error);
  CHECK_THROWS_AS((void)ddo::even_shard(3, 0, 4), ddo::usage_error);
  const auto named = ddo::shard_weight_table(m->table, groups, {0, 99, "blocks\\.1\\."});
  CHECK(named.groups.size() == 1);
  CHECK(named.groups[0].name == groups[1].name);
}

TEST_SUITE_END();
