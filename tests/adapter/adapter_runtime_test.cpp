// SPDX-License-Identifier: Apache-2.0
// Adapters on a running offloader (host_sim): streamed weights merged in their slot, residents
// merged at attach, detach and scale changes exact, the host copy and the file never written.
#include <doctest/doctest.h>

#include <unistd.h>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "adapter/adapter_model.hpp"
#include "ddo/adapter/lora_adapter.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/host_sim_vmm.hpp"
#include "ddo/transport/nvme.hpp"

namespace adapter_runtime_test {

using adapter_model::expected;
using adapter_model::pinned_plan;
using adapter_model::make_adapter;
using adapter_model::make_model;
using ddo::host_sim_transport;
using offloader = ddo::basic_offloader<host_sim_transport>;
using vmm_sim = ddo::host_sim_vmm_transport;
using vmm_offloader = ddo::basic_offloader<vmm_sim>;

/// Runs two steps over every group and counts the weights whose lease bytes differ from
/// @p want, checked on the compute stream when the "kernel" runs.
template <class Offloader, class Sim>
std::size_t mismatches(Offloader& off, Sim& sim, typename Sim::stream_view cv,
                       const std::vector<std::vector<std::byte>>& want) {
  std::atomic<std::size_t> bad{0};
  for (int step = 0; step < 2; ++step) {
    off.begin_step();
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, cv);
      std::vector<std::pair<const std::byte*, std::size_t>> items;
      for (std::size_t i = 0; i < lease.size(); ++i)
        items.emplace_back(lease.data(i), lease.weight_index(i));
      ddo::host_sim_device(sim).enqueue(cv, [&bad, &want, items = std::move(items)] {
        for (const auto& [p, w] : items)
          if (std::memcmp(p, want[w].data(), want[w].size()) != 0) ++bad;
      });
    }
  }
  sim.synchronize(cv);
  return bad;
}

inline ddo::runtime_options options() {
  ddo::runtime_options o;
  o.poison_slots = true;
  o.staging_buffer_bytes = 4096;
  return o;
}

/// Captures one step on @p cv (acquire every group in order, check its bytes against @p want
/// when the "kernel" runs, drop) and replays it @p replays times through the offloader.
template <class Offloader, class Sim>
std::size_t graph_mismatches(Offloader& off, Sim& sim, typename Sim::stream_view cv,
                             const std::vector<std::vector<std::byte>>& want, int replays) {
  std::atomic<std::size_t> bad{0}, checked{0};
  auto& dev = ddo::host_sim_device(sim);
  dev.begin_capture(cv);
  for (std::size_t g = 0; g < off.group_count(); ++g) {
    auto lease = off.acquire(g, cv);
    std::vector<std::pair<const std::byte*, std::size_t>> items;
    for (std::size_t i = 0; i < lease.size(); ++i)
      items.emplace_back(lease.data(i), lease.weight_index(i));
    dev.enqueue(cv, [&bad, &checked, &want, items = std::move(items)] {
      for (const auto& [p, w] : items) {
        ++checked;
        if (std::memcmp(p, want[w].data(), want[w].size()) != 0) ++bad;
      }
    });
  }
  const auto graph = dev.end_capture(cv);
  REQUIRE(off.graph_mode());
  for (int r = 0; r < replays; ++r) off.launch_graph(graph, cv);
  sim.synchronize(cv);
  CHECK(checked == static_cast<std::size_t>(replays) * want.size());
  return bad;
}

/// A random plan over @p m's groups: host weights resident, pinned or pageable, file weights
/// resident or in their file (what a budget move may choose between).
template <class Rng>
ddo::offload_plan random_plan(const adapter_model::model& m, Rng& rng) {
  auto p = m.plan;
  for (auto& g : p.groups) g.bytes_by_placement = {};
  for (std::size_t w = 0; w < p.decisions.size(); ++w) {
    auto& d = p.decisions[w];
    const bool file = std::holds_alternative<ddo::file_source>(m.table[w].source);
    const ddo::placement host[] = {ddo::placement::gpu_resident, ddo::placement::pinned_host,
                                   ddo::placement::pageable_host};
    d.where = file ? (rng() % 2 == 0 ? ddo::placement::gpu_resident : ddo::placement::file)
                   : host[rng() % 3];
    p.groups[d.group].bytes_by_placement[static_cast<std::size_t>(d.where)] += m.table[w].bytes;
  }
  return p;
}

/// Adapters on the file route over @p inner (host_sim, or its VMM mode): the file weights
/// read by the route's reader threads into staging, every other placement too; attach, scale
/// and detach sequences bitwise equal to the reference merge, back to the base.
template <class Inner>
void file_route_sequence(Inner& inner, const adapter_model::model& m) {
  using route = ddo::nvme_transport<Inner>;
  ddo::nvme_options no;
  no.staging_slot_bytes = 64 * 1024;
  no.read_threads = 2;
  route t(inner, no);
  auto compute = t.make_stream();
  const auto cv = route::view(compute);
  const auto a = make_adapter(m, 4, 1400, 5, ddo::dtype::bf16);
  const auto b = make_adapter(m, 2, 1500, 0);
  auto o = options();
  o.slot_count = 2;
  ddo::basic_offloader<route> off(t, m.table, m.plan, o);
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    off.attach_adapter("a", a, 1.5f);
    off.attach_adapter("b", b, -0.5f);
    CHECK(mismatches(off, t, cv, expected(m, {{a.get(), 1.5f}, {b.get(), -0.5f}})) == 0);
    off.set_adapter_scale("a", 0.25f);
    off.detach_adapter("b");
    CHECK(mismatches(off, t, cv, expected(m, {{a.get(), 0.25f}})) == 0);
    off.detach_adapter("a");
    CHECK(mismatches(off, t, cv, m.base) == 0);
  }
  CHECK(t.file_stats().bytes_delivered > 0);
}

TEST_SUITE("adapter") {
  TEST_CASE(
      "streamed weights with adapters equal all-resident ones with the same merge, bit for bit") {
    auto m = make_model(8, 11);
    const auto a = make_adapter(*m, 4, 100, 5, ddo::dtype::bf16);
    const auto b = make_adapter(*m, 3, 200, 4);
    const auto want = expected(*m, {{a.get(), 0.75f}, {b.get(), -1.25f}});
    CHECK(want != m->base);
    host_sim_transport sim;
    auto compute = sim.make_stream();
    const auto cv = sim.view(compute);
    for (bool resident : {false, true}) {
      CAPTURE(resident);
      offloader off(sim, m->table, resident ? m->all_resident() : m->plan, options());
      CHECK((off.slot_count() == 0) == resident);
      const auto before = off.device_bytes();
      off.attach_adapter("a", a, 0.75f);
      off.attach_adapter("b", b, -1.25f);
      CHECK(off.adapter_device_bytes() == a->factor_bytes() + b->factor_bytes());
      CHECK(off.device_bytes() == before + off.adapter_device_bytes());
      CHECK(off.adapter_kept_base_bytes() > 0);  // residents keep their base for detaching
      CHECK(mismatches(off, sim, cv, want) == 0);
      CHECK(off.adapter_names() == std::vector<std::string>{"a", "b"});
    }
    CHECK(sim.pageable_direct_copies() == 0);
  }

  TEST_CASE("attach, detach and scale sequences return to the base bytes exactly") {
    auto m = make_model(7, 12);
    const auto host_before = m->host;
    const auto a = make_adapter(*m, 5, 300, 0, ddo::dtype::f16);
    const auto b = make_adapter(*m, 2, 400, 3);
    host_sim_transport sim;
    auto compute = sim.make_stream();
    const auto cv = sim.view(compute);
    offloader off(sim, m->table, m->plan, options());
    CHECK(mismatches(off, sim, cv, m->base) == 0);
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      off.attach_adapter("a", a, 1.0f);
      CHECK(mismatches(off, sim, cv, expected(*m, {{a.get(), 1.0f}})) == 0);
      off.attach_adapter("b", b, 0.5f);
      CHECK(mismatches(off, sim, cv, expected(*m, {{a.get(), 1.0f}, {b.get(), 0.5f}})) == 0);
      off.set_adapter_scale("a", -2.0f);
      CHECK(mismatches(off, sim, cv, expected(*m, {{a.get(), -2.0f}, {b.get(), 0.5f}})) == 0);
      off.detach_adapter("a");
      CHECK(mismatches(off, sim, cv, expected(*m, {{b.get(), 0.5f}})) == 0);
      off.detach_adapter("b");
      CHECK(mismatches(off, sim, cv, m->base) == 0);
      CHECK(off.adapter_kept_base_bytes() == 0);
      CHECK(off.adapter_device_bytes() == 0);
    }
    CHECK(m->host == host_before);  // the host copy is never written
    std::ifstream in(m->file, std::ios::binary);
    std::vector<char> file_bytes((std::istreambuf_iterator<char>(in)), {});
    std::size_t at = 0;
    for (std::size_t w = 0; w < m->table.size(); ++w) {
      if (!std::holds_alternative<ddo::file_source>(m->table[w].source)) continue;
      CHECK(std::memcmp(file_bytes.data() + at, m->base[w].data(), m->base[w].size()) == 0);
      at += m->base[w].size();
    }
  }

  TEST_CASE("an attach or a scale change synchronizes a fixed number of times, not per resident") {
    // The residents' bases are copied to the host and merged in stream order, one sync at the
    // end: upload (1) + merge (1) at attach, 1 at a scale change, whatever the resident count.
    for (std::size_t groups : {2u, 9u}) {
      CAPTURE(groups);
      auto m = make_model(groups, 15);
      const auto a = make_adapter(*m, 3, 700, 0, ddo::dtype::bf16);
      host_sim_transport sim;
      auto compute = sim.make_stream();
      const auto cv = sim.view(compute);
      offloader off(sim, m->table, m->all_resident(), options());
      auto syncs = sim.synchronizations();
      off.attach_adapter("a", a, 0.5f);
      CHECK(sim.synchronizations() - syncs == 2);
      std::uint64_t all_bytes = 0;
      for (const auto& b : m->base) all_bytes += b.size();
      CHECK(off.adapter_kept_base_bytes() == all_bytes);
      CHECK(mismatches(off, sim, cv, expected(*m, {{a.get(), 0.5f}})) == 0);
      syncs = sim.synchronizations();
      off.set_adapter_scale("a", -1.5f);
      CHECK(sim.synchronizations() - syncs == 1);
      CHECK(mismatches(off, sim, cv, expected(*m, {{a.get(), -1.5f}})) == 0);
      off.detach_adapter("a");
      CHECK(mismatches(off, sim, cv, m->base) == 0);
    }
  }

  TEST_CASE("a captured step merges adapters after its slots' copies: replays bit for bit") {
    // Graph streaming (a ring of 3 slots under 8 streamed groups): the first slots' loads merge on
    // ddo's merge stream before each launch, the others inside the graph, on a branch forked
    // after their copies. Timed copies and poisoned slots: a merge before its copy, or a read
    // before its merge, shows as wrong bytes.
    auto m = make_model(8, 16);
    const auto a = make_adapter(*m, 4, 800, 5, ddo::dtype::bf16);
    const auto b = make_adapter(*m, 3, 900, 4);
    ddo::host_sim_options so;
    so.bandwidth_bytes_per_second = 2e8;
    so.wait_value_timeout_ms = 5000;
    host_sim_transport sim(so);
    auto compute = sim.make_stream();
    const auto cv = sim.view(compute);
    auto o = options();
    o.slot_count = 3;
    o.poison_released_slots = true;
    offloader off(sim, m->table, pinned_plan(*m), o);
    REQUIRE(off.slot_count() == 3);
    off.attach_adapter("a", a, 0.75f);
    off.attach_adapter("b", b, -1.25f);
    const auto want = expected(*m, {{a.get(), 0.75f}, {b.get(), -1.25f}});
    CHECK(mismatches(off, sim, cv, want) == 0);  // eager steps first
    CHECK(graph_mismatches(off, sim, cv, want, 12) == 0);
    CHECK_THROWS_WITH_AS(off.set_adapter_scale("a", 1.0f),
                         doctest::Contains("its loads and merges were fixed at capture"),
                         ddo::usage_error);
    // Changing adapters between captures: leave graph mode, change, capture again.
    off.release_device();
    off.restore_device();
    off.set_adapter_scale("a", 2.0f);
    off.detach_adapter("b");
    const auto want2 = expected(*m, {{a.get(), 2.0f}});
    CHECK(graph_mismatches(off, sim, cv, want2, 5) == 0);
    off.release_device();
    off.restore_device();
    off.detach_adapter("a");
    CHECK(graph_mismatches(off, sim, cv, m->base, 3) == 0);
    off.release_device();
    off.restore_device();
    CHECK(mismatches(off, sim, cv, m->base) == 0);
  }

  TEST_CASE("the legacy VMM route merges in its mapped ranges and side images: bit for bit") {
    // host_sim's VMM mode: the BF16/FP16 linear weights stream in stable ranges the binder maps
    // on the slots' handles, the others in the slots' side images; every placement (pinned,
    // pageable, file: staged by the VMM loads) and resident. Eager steps through attach, scale
    // and detach sequences back to the base, then a captured step (merge nodes after the loads'
    // flags) replayed, then eager again. An unmapped read or one before the merge shows.
    auto m = make_model(8, 17, true);
    const auto host_before = m->host;
    const auto a = make_adapter(*m, 4, 1000, 5, ddo::dtype::bf16);
    const auto b = make_adapter(*m, 3, 1100, 0, ddo::dtype::f16);
    std::uint64_t total = 0;
    for (const auto& w : m->base) total += w.size();
    ddo::host_sim_vmm_options vo;
    vo.device.wait_value_timeout_ms = 5000;
    vo.window.budget_bytes = total + 32 * ddo::mib;
    for (bool resident : {false, true}) {
      CAPTURE(resident);
      vmm_sim sim(vo);
      auto compute = sim.make_stream();
      const auto cv = vmm_sim::view(compute);
      auto o = options();
      o.slot_count = 3;
      o.poison_released_slots = true;
      vmm_offloader off(sim, m->table, resident ? m->all_resident() : m->plan, o);
      CHECK((off.slot_count() == 0) == resident);
      for (int round = 0; round < 2; ++round) {
        CAPTURE(round);
        off.attach_adapter("a", a, 0.75f);
        off.attach_adapter("b", b, -1.25f);
        CHECK(mismatches(off, sim, cv, expected(*m, {{a.get(), 0.75f}, {b.get(), -1.25f}})) == 0);
        off.set_adapter_scale("b", 0.5f);
        CHECK(mismatches(off, sim, cv, expected(*m, {{a.get(), 0.75f}, {b.get(), 0.5f}})) == 0);
        off.detach_adapter("a");
        CHECK(mismatches(off, sim, cv, expected(*m, {{b.get(), 0.5f}})) == 0);
        off.detach_adapter("b");
        CHECK(mismatches(off, sim, cv, m->base) == 0);
        CHECK(off.adapter_kept_base_bytes() == 0);
      }
      if (!resident) {
        off.attach_adapter("a", a, -0.5f);
        const auto want = expected(*m, {{a.get(), -0.5f}});
        CHECK(graph_mismatches(off, sim, cv, want, 6) == 0);
        off.release_device();
        off.restore_device();
        CHECK(mismatches(off, sim, cv, want) == 0);
        off.detach_adapter("a");
        CHECK(mismatches(off, sim, cv, m->base) == 0);
      }
      CHECK(sim.live_mappings() <= off.slot_count());
    }
    CHECK(m->host == host_before);
  }

  TEST_CASE("budget moves with adapters attached: bytes and accounting as a fresh offloader's") {
    // Random plans (weights promoted, demoted, moved between pinned, pageable and file) with two
    // adapters attached, a scale change now and then: after every move each lease's bytes equal
    // the reference merge, and the kept bases and device bytes are a fresh offloader's with the
    // same plan and adapters (demoted weights keep no base, promoted ones keep theirs).
    auto m = make_model(8, 18);
    const auto a = make_adapter(*m, 4, 1200, 5, ddo::dtype::bf16);
    const auto b = make_adapter(*m, 3, 1300, 4);
    std::mt19937 rng(43);
    host_sim_transport sim;
    auto compute = sim.make_stream();
    const auto cv = sim.view(compute);
    offloader off(sim, m->table, random_plan(*m, rng), options());
    float scale = 0.75f;
    off.attach_adapter("a", a, scale);
    off.attach_adapter("b", b, -1.25f);
    for (int k = 0; k < 12; ++k) {
      CAPTURE(k);
      const auto plan = random_plan(*m, rng);
      CHECK(off.move_budget(plan, 0));
      if (k % 4 == 3) off.set_adapter_scale("a", scale = -scale * 1.5f);
      const auto want = expected(*m, {{a.get(), scale}, {b.get(), -1.25f}});
      CHECK(mismatches(off, sim, cv, want) == 0);
      offloader fresh(sim, m->table, plan, options());
      fresh.attach_adapter("a", a, scale);
      fresh.attach_adapter("b", b, -1.25f);
      CHECK(off.adapter_kept_base_bytes() == fresh.adapter_kept_base_bytes());
      CHECK(off.device_bytes() == fresh.device_bytes());
      CHECK(mismatches(fresh, sim, cv, want) == 0);
    }
    // The factors count in a move's budget: the plan's bytes alone are refused, with the
    // factors' bytes named; the plan's bytes and the factors fit.
    const auto plan = random_plan(*m, rng);
    CHECK(off.move_budget(plan, 0));
    const std::uint64_t layout_bytes = off.device_bytes() - off.adapter_device_bytes();
    CHECK(off.adapter_device_bytes() == a->factor_bytes() + b->factor_bytes());
    CHECK_THROWS_WITH_AS(off.move_budget(plan, layout_bytes),
                         doctest::Contains("and the attached adapters' factors"),
                         ddo::out_of_memory);
    CHECK(off.move_budget(plan, layout_bytes + off.adapter_device_bytes()));
    CHECK(sim.device_bytes_in_use() == off.device_bytes());
    off.detach_adapter("a");
    off.detach_adapter("b");
    CHECK(mismatches(off, sim, cv, m->base) == 0);
    CHECK(off.adapter_kept_base_bytes() == 0);
  }

  TEST_CASE("the file route merges: over host_sim and over its VMM mode, bit for bit") {
    auto m = make_model(6, 19, true);
    {
      host_sim_transport sim;
      file_route_sequence(sim, *m);
    }
    std::uint64_t total = 0;
    for (const auto& w : m->base) total += w.size();
    ddo::host_sim_vmm_options vo;
    vo.device.wait_value_timeout_ms = 5000;
    vo.window.budget_bytes = total + 32 * ddo::mib;
    vmm_sim vmm(vo);
    file_route_sequence(vmm, *m);
  }

  TEST_CASE("switching adapters between steps: no re-plan, no re-pin, only the changes copied") {
    // A switch (detach one adapter, attach another over the same weights) copies the new
    // factors, writes the adapted residents' kept bases back and reloads the occupied slots;
    // the plan, the pinned blocks and the ring stay, and the next step loads what any step does.
    auto m = make_model(8, 20);
    const auto a = make_adapter(*m, 4, 1600, 0, ddo::dtype::bf16);
    const auto b = make_adapter(*m, 8, 1700, 0, ddo::dtype::bf16);
    host_sim_transport sim;
    auto compute = sim.make_stream();
    const auto cv = sim.view(compute);
    auto o = options();
    o.slot_count = 3;
    offloader off(sim, m->table, m->plan, o);
    off.attach_adapter("a", a, 1.0f);
    CHECK(mismatches(off, sim, cv, expected(*m, {{a.get(), 1.0f}})) == 0);
    const auto plan_before = off.plan().decisions;
    const auto registered = sim.registered_bytes_in_use();
    const auto pinned = sim.pinned_bytes_in_use();
    const auto slots = off.slot_bytes();
    const auto kept = off.adapter_kept_base_bytes();
    const auto loads = off.metrics().totals.group_loads;
    const auto copied = sim.bytes_to_device();
    off.detach_adapter("a");
    off.attach_adapter("b", b, 1.0f);
    const auto switch_bytes = sim.bytes_to_device() - copied;
    // Two write-backs of the kept bases (detach, attach), b's factors, two reloads of at most
    // the ring's slots.
    CHECK(switch_bytes <= 2 * kept + b->factor_bytes() + 2 * 3 * slots);
    CHECK(switch_bytes >= kept + b->factor_bytes());
    CHECK(off.metrics().totals.group_loads - loads <= 2 * 3);
    CHECK(off.plan().decisions.size() == plan_before.size());
    for (std::size_t w = 0; w < plan_before.size(); ++w)
      CHECK(off.plan().decisions[w].where == plan_before[w].where);
    CHECK(sim.registered_bytes_in_use() == registered);
    CHECK(sim.pinned_bytes_in_use() == pinned);  // the same residents keep a base
    CHECK(off.adapter_kept_base_bytes() == kept);
    CHECK(off.slot_bytes() == slots);
    CHECK(mismatches(off, sim, cv, expected(*m, {{b.get(), 1.0f}})) == 0);
  }

  TEST_CASE(
      "adapter changes are refused while leases live, by unknown name, or for another table") {
    auto m = make_model(4, 13);
    auto other = make_model(5, 14);
    const auto a = make_adapter(*m, 2, 500, 0);
    host_sim_transport sim;
    auto compute = sim.make_stream();
    const auto cv = sim.view(compute);
    offloader off(sim, m->table, m->plan, options());
    {
      auto lease = off.acquire(0, cv);
      CHECK_THROWS_WITH_AS(off.attach_adapter("a", a), doctest::Contains("lease(s) are alive"),
                           ddo::usage_error);
    }
    off.attach_adapter("a", a);
    CHECK_THROWS_WITH_AS(off.attach_adapter("a", a), doctest::Contains("attached already"),
                         ddo::usage_error);
    CHECK_THROWS_WITH_AS(off.detach_adapter("z"), doctest::Contains("(attached: 'a')"),
                         ddo::usage_error);
    CHECK_THROWS_WITH_AS(off.set_adapter_scale("z", 1.0f),
                         doctest::Contains("no adapter of that name"), ddo::usage_error);
    CHECK_THROWS_WITH_AS(off.attach_adapter("o", make_adapter(*other, 2, 600, 0)),
                         doctest::Contains("does not match this offloader's table"),
                         ddo::usage_error);
    CHECK(off.adapter_names() == std::vector<std::string>{"a"});
    CHECK(mismatches(off, sim, cv, expected(*m, {{a.get(), 1.0f}})) == 0);
  }
}

}  // namespace adapter_runtime_test
