// SPDX-License-Identifier: Apache-2.0
// Graph streaming on host_sim (issue 29; docs/transports.md, "CUDA graphs"): a step captured once
// and replayed through offloader::launch_graph over a ring smaller than the model. host_sim keeps
// a graph's node values as of capture, as CUDA does, so a flag protocol right only on the first
// replay, or a slot map that drifts between steps, shows up here as wrong bytes or as a memory
// wait that times out (host_sim_options::wait_value_timeout_ms).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/host_sim_vmm.hpp"
#include "ddo/transport/nvme.hpp"
#include "nvme_file_model.hpp"
#include "runtime_fixtures.hpp"

namespace graph_streaming_test {

using ddo::host_sim_transport;
using offloader = ddo::basic_offloader<host_sim_transport>;

/// Streamed groups pinned (graph streaming loads from pinned memory), every third one resident.
std::unique_ptr<ddo_test::synthetic_model> pinned_model(std::size_t groups, std::uint32_t seed) {
  ddo_test::model_spec spec;
  spec.groups = groups;
  spec.seed = seed;
  spec.max_bytes = 60000;
  spec.where = [](std::size_t g, std::size_t) {
    return g % 3 == 1 ? ddo::placement::gpu_resident : ddo::placement::pinned_host;
  };
  return ddo_test::make_model(spec);
}

host_sim_transport::stream_view view(host_sim_transport::stream& s) {
  return host_sim_transport::view(s);
}

/// Whether a simulated kernel may read [p, p + n): host_sim_vmm knows which ranges are mapped.
template <class Sim>
bool may_read(const Sim& sim, const std::byte* p, std::size_t n) {
  if constexpr (requires { sim.readable(p, n); })
    return sim.readable(p, n);
  else
    return true;
}

/// The engine's "kernels": a task per lease that compares every weight with its source bytes
/// (on host_sim's VMM mode, first whether its range is mapped: a read of an unmapped range
/// would fault the process, so it counts as a mismatch instead).
struct checker {
  std::atomic<std::uint64_t> checked{0};
  std::atomic<std::uint64_t> mismatches{0};
  std::atomic<std::uint64_t> unmapped{0};
  template <class Sim, class Model, class Lease>
  void enqueue(Sim& sim, typename Sim::stream_view s, const Model& m, const Lease& lease) {
    std::vector<std::pair<const std::byte*, std::size_t>> items;
    for (std::size_t i = 0; i < lease.size(); ++i)
      items.emplace_back(lease.data(i), lease.weight_index(i));
    ddo::host_sim_device(sim).enqueue(s, [this, &sim, &m, items = std::move(items)] {
      for (const auto& [p, w] : items) {
        const auto& e = m.expected[w];
        if (!may_read(sim, p, e.size())) {
          ++unmapped;
          ++mismatches;
          continue;
        }
        if (std::memcmp(p, e.data(), e.size()) != 0) ++mismatches;
        checked += e.size();
      }
    });
  }
};

/// A model's bytes (ddo_test::synthetic_model or the file route's ddo_test::file_model).
template <class Model>
std::uint64_t model_bytes(const Model& m) {
  std::uint64_t total = 0;
  for (const auto& e : m.expected) total += e.size();
  return total;
}

/// Captures one step (acquire, check, drop, in plan order) on @p s.
template <class Sim, class Offloader, class Model>
host_sim_transport::graph capture_step(Sim& sim, Offloader& off, typename Sim::stream_view s,
                                       const Model& m, checker& check) {
  ddo::host_sim_device(sim).begin_capture(s);
  for (std::size_t g = 0; g < off.group_count(); ++g) {
    auto lease = off.acquire(g, s);
    check.enqueue(sim, s, m, lease);
  }
  return ddo::host_sim_device(sim).end_capture(s);
}

/// host_sim for the linear route's cases: copies at @p bandwidth bytes/s (0: instant; slower
/// copies make a read before its load see poison), a stuck wait failing after 5 s.
ddo::host_sim_options linear_sim_options(double bandwidth = 0) {
  ddo::host_sim_options so;
  so.bandwidth_bytes_per_second = bandwidth;
  so.wait_value_timeout_ms = 5000;
  return so;
}

ddo::runtime_options poisoned(std::size_t slots) {
  ddo::runtime_options o;
  o.slot_count = slots;
  o.poison_slots = true;           // every load fills its slot first: an early read sees poison
  o.poison_released_slots = true;  // every release fills it after: a late read sees poison
  return o;
}

// --- the VMM legacy route (host_sim's VMM mode) -------------------------------------------------
using vmm_sim = ddo::host_sim_vmm_transport;
using vmm_offloader = ddo::basic_offloader<vmm_sim>;

/// pinned_model with weight 3 of every group norm-like (the route does not map it: a side
/// image) and group 5 nothing the route covers (side image alone, no mapped range).
std::unique_ptr<ddo_test::synthetic_model> vmm_model(std::size_t groups, std::uint32_t seed) {
  ddo_test::model_spec spec;
  spec.groups = groups;
  spec.seed = seed;
  spec.max_bytes = 60000;
  spec.where = [](std::size_t g, std::size_t) {
    return g % 3 == 1 ? ddo::placement::gpu_resident : ddo::placement::pinned_host;
  };
  spec.vmm_covered = [](std::size_t g, std::size_t i) { return g != 5 && i != 3; };
  return ddo_test::make_model(spec);
}

vmm_sim make_vmm_sim(const ddo_test::synthetic_model& m, std::uint64_t timeout_ms) {
  ddo::host_sim_vmm_options o;
  o.device.wait_value_timeout_ms = timeout_ms;
  o.window.budget_bytes = model_bytes(m) + 32 * ddo::mib;  // the slot count is runtime_options'
  return vmm_sim(o);
}

}  // namespace graph_streaming_test

TEST_SUITE_BEGIN("runtime");

TEST_CASE(
    "graph streaming: 100 replays through a ring smaller than the model, every weight right") {
  using namespace graph_streaming_test;
  // 10 and 11 groups (7 streamed) over 3 slots: 7 mod 3 = 1 (the next step's first load waits for
  // the last position), and 8 streamed over 3 (a slot map that drifts would show in 3 steps).
  for (const std::size_t groups : {10u, 12u}) {
    CAPTURE(groups);
    auto m = pinned_model(groups, static_cast<std::uint32_t>(groups));
    host_sim_transport sim(linear_sim_options(4e9));  // timed copies: an early read sees poison
    auto compute = sim.make_stream();
    const auto s = view(compute);
    checker check;
    {
      offloader off(sim, m->table, m->plan, poisoned(3));
      REQUIRE(off.slot_count() == 3);
      // A few eager steps first: the first launch must wait for their work on the slots.
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, s);
        check.enqueue(sim, s, *m, lease);
      }
      const auto graph = capture_step(sim, off, s, *m, check);
      CHECK(off.graph_mode());
      for (int replay = 0; replay < 100; ++replay) off.launch_graph(graph, s);
      sim.synchronize(s);
      const auto metrics = off.metrics();
      CHECK(metrics.totals.group_loads >= 100 * (groups - groups / 3));
    }
    sim.synchronize(s);
    CHECK(check.mismatches == 0);
    CHECK(check.checked == 101 * model_bytes(*m));
    CHECK(sim.device_bytes_in_use() == 0);
    CHECK(sim.pinned_bytes_in_use() == 0);
  }
}

TEST_CASE("graph streaming: kernels forked onto a second stream, ddo's calls on the capture's") {
  using namespace graph_streaming_test;
  // The engine forks each group's kernel onto another stream and joins it back before the lease
  // drops; ddo's acquires and drops stay on the stream that began the capture: replays are right.
  auto m = pinned_model(10, 29);
  host_sim_transport sim(linear_sim_options(4e9));
  auto compute = sim.make_stream();
  auto side = sim.make_stream();
  const auto s = view(compute);
  const auto f = view(side);
  auto fork = sim.make_event(false);
  auto join = sim.make_event(false);
  checker check;
  {
    offloader off(sim, m->table, m->plan, poisoned(3));
    sim.begin_capture(s);
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, s);
      sim.record(fork, s);
      sim.wait(f, fork);
      check.enqueue(sim, f, *m, lease);
      sim.record(join, f);
      sim.wait(s, join);
    }
    CHECK(host_sim_transport::capture_id(f) == host_sim_transport::capture_id(s));
    const auto graph = sim.end_capture(s);
    CHECK_FALSE(host_sim_transport::capturing(f));
    REQUIRE(off.graph_mode());
    for (int replay = 0; replay < 20; ++replay) off.launch_graph(graph, s);
    sim.synchronize(s);
  }
  sim.synchronize(s);
  CHECK(check.mismatches == 0);
  CHECK(check.checked == 20 * model_bytes(*m));
}

TEST_CASE("graph streaming: teardown right after a launch") {
  using namespace graph_streaming_test;
  auto m = pinned_model(8, 7);
  host_sim_transport sim(linear_sim_options(2e9));
  auto compute = sim.make_stream();
  const auto s = view(compute);
  checker check;
  {
    offloader off(sim, m->table, m->plan, poisoned(2));
    const auto graph = capture_step(sim, off, s, *m, check);
    off.launch_graph(graph, s);
  }  // ddo's loads were enqueued: the replay completes with every weight right
  sim.synchronize(s);
  CHECK(check.mismatches == 0);
  CHECK(check.checked == model_bytes(*m));
  CHECK(sim.device_bytes_in_use() == 0);
}

TEST_CASE(
    "graph streaming: release_device leaves graph mode; eager steps and a new capture follow") {
  using namespace graph_streaming_test;
  auto m = pinned_model(10, 11);
  host_sim_transport sim(linear_sim_options());
  auto compute = sim.make_stream();
  const auto s = view(compute);
  checker check;
  {
    offloader off(sim, m->table, m->plan, poisoned(3));
    for (int round = 0; round < 2; ++round) {
      CAPTURE(round);
      const auto graph = capture_step(sim, off, s, *m, check);
      for (int replay = 0; replay < 5; ++replay) off.launch_graph(graph, s);
      off.release_device();  // a pipeline's phase switch: ends graph mode
      CHECK_FALSE(off.graph_mode());
      off.restore_device();
      for (std::size_t g = 0; g < off.group_count(); ++g) {  // eager again
        auto lease = off.acquire(g, s);
        check.enqueue(sim, s, *m, lease);
      }
    }
  }
  sim.synchronize(s);
  CHECK(check.mismatches == 0);
  CHECK(check.checked == 12 * model_bytes(*m));
  CHECK(sim.pinned_bytes_in_use() == 0);
}

TEST_CASE("graph streaming: what a replay cannot do is refused") {
  using namespace graph_streaming_test;
  auto m = pinned_model(8, 9);  // streamed: 0 2 3 5 6 (1, 4, 7 resident)
  ddo::host_sim_options so;
  so.wait_value_timeout_ms = 2000;
  host_sim_transport sim(so);
  auto compute = sim.make_stream();
  const auto s = view(compute);
  auto refused = [](auto&& f, const std::string& says) {
    try {
      f();
    } catch (const ddo::usage_error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(says) != std::string::npos, e.what());
      return;
    }
    FAIL("not refused: expected '" << says << "'");
  };
  SUBCASE("out of plan order, and launching an incomplete step") {
    offloader off(sim, m->table, m->plan, poisoned(2));
    sim.begin_capture(s);
    { auto a = off.acquire(std::size_t{0}, s); }
    refused([&] { auto b = off.acquire(std::size_t{3}, s); }, "the next one is 'blocks.2'");
    const auto graph = sim.end_capture(s);
    refused([&] { off.launch_graph(graph, s); }, "acquired 1 of the 5 streamed groups");
    refused([&] { auto c = off.acquire(std::size_t{2}, s); },
            "streams through a captured CUDA graph");
  }
  SUBCASE("more leases than slots, and a lease kept past the step") {
    offloader off(sim, m->table, m->plan, poisoned(2));
    sim.begin_capture(s);
    auto a = off.acquire(std::size_t{0}, s);
    auto b = off.acquire(std::size_t{2}, s);
    refused([&] { auto c = off.acquire(std::size_t{3}, s); }, "which uses the same slot, is alive");
    a.reset();
    b.reset();
    for (std::size_t g : {3u, 5u}) {
      auto l = off.acquire(g, s);
    }
    auto kept = off.acquire(std::size_t{6}, s);
    const auto graph = sim.end_capture(s);
    refused([&] { off.launch_graph(graph, s); }, "a lease kept past the step");
    // A new capture while the kept lease holds slot 0: position 0 (slot 0) names it, the slot's
    // occupant of the previous step (position 4), not position 0 - 2.
    sim.begin_capture(s);
    refused([&] { auto c = off.acquire(std::size_t{0}, s); },
            "the lease of 'blocks.6', which uses the same slot, is alive");
    (void)sim.end_capture(s);
    kept.reset();
    refused([&] { off.launch_graph(graph, s); }, "dropped after the capture ended");
  }
  SUBCASE("an acquire on a stream forked into the capture") {
    offloader off(sim, m->table, m->plan, poisoned(2));
    auto side = sim.make_stream();
    const auto f = view(side);
    auto fork = sim.make_event(false);
    sim.begin_capture(s);
    auto a = off.acquire(std::size_t{0}, s);
    sim.record(fork, s);
    sim.wait(f, fork);  // f joins the capture
    REQUIRE(host_sim_transport::capturing(f));
    CHECK(host_sim_transport::capture_id(f) == host_sim_transport::capture_id(s));
    refused([&] { auto b = off.acquire(std::size_t{2}, f); }, "forked into the capture");
    refused([&] { auto b = off.acquire(std::size_t{2}, f); },
            "Acquire and drop every streamed lease on the stream that began the capture");
    a.reset();
    (void)sim.end_capture(s);
    CHECK_FALSE(host_sim_transport::capturing(f));  // the fork's capture ended with its origin's
    // A capture of its own on f is no fork, but a step is captured whole in one capture: going
    // on part-way is refused, starting the step again is not (as on s).
    sim.begin_capture(f);
    CHECK(host_sim_transport::capture_id(f) != 0);
    refused([&] { auto b = off.acquire(std::size_t{2}, f); }, "were captured in another capture");
    CHECK_NOTHROW([&] { auto b = off.acquire(std::size_t{0}, f); }());
    CHECK_NOTHROW([&] { auto b = off.acquire(std::size_t{2}, f); }());
    (void)sim.end_capture(f);
  }
  SUBCASE("switching compute-only mode after a capture") {
    offloader off(sim, m->table, m->plan, poisoned(2));
    sim.begin_capture(s);
    { auto a = off.acquire(std::size_t{0}, s); }
    refused([&] { off.set_compute_only(true); }, "loads were fixed at capture");
    (void)sim.end_capture(s);
  }
  SUBCASE("metrics timing") {
    auto o = poisoned(2);
    o.metrics = true;
    offloader off(sim, m->table, m->plan, o);
    sim.begin_capture(s);
    refused([&] { auto a = off.acquire(std::size_t{0}, s); }, "metrics timing");
    (void)sim.end_capture(s);
  }
  SUBCASE("pageable bytes") {
    ddo_test::model_spec spec;
    spec.groups = 4;
    spec.where = [](std::size_t, std::size_t i) {
      return i == 0 ? ddo::placement::pageable_host : ddo::placement::pinned_host;
    };
    auto pm = ddo_test::make_model(spec);
    offloader off(sim, pm->table, pm->plan, poisoned(2));
    sim.begin_capture(s);
    refused([&] { auto a = off.acquire(std::size_t{0}, s); }, "from pinned memory only");
    (void)sim.end_capture(s);
  }
}

TEST_CASE(
    "graph streaming, VMM legacy route: 100 replays through a window smaller than the model, "
    "every weight right") {
  using namespace graph_streaming_test;
  // As the linear case: 7 streamed groups over 3 slots (7 mod 3 = 1) and 8 over 3, eager steps
  // first, poisoned loads and releases. The captured kernels read each group at its stable
  // address; every launch's binder maps it on slot p mod 3 once the graph released the slot's
  // previous occupant (released flags), so a read before its map, or after the next unmap, is
  // caught here (unmapped), and one before its copy sees poison.
  for (const std::size_t groups : {10u, 12u}) {
    CAPTURE(groups);
    auto m = vmm_model(groups, static_cast<std::uint32_t>(40 + groups));
    auto sim = make_vmm_sim(*m, 5000);
    auto compute = sim.make_stream();
    const auto s = vmm_sim::view(compute);
    checker check;
    {
      vmm_offloader off(sim, m->table, m->plan, poisoned(3));
      REQUIRE(off.slot_count() == 3);
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, s);
        check.enqueue(sim, s, *m, lease);
      }
      const auto graph = capture_step(sim, off, s, *m, check);
      CHECK(off.graph_mode());
      for (int replay = 0; replay < 100; ++replay) off.launch_graph(graph, s);
      sim.synchronize(s);
      const auto metrics = off.metrics();
      CHECK(metrics.totals.group_loads >= 100 * (groups - groups / 3));
      CHECK(metrics.vmm.binds >= 100 * (groups - groups / 3 - 1));  // group 5 has no range
      // A phase switch leaves graph mode; eager steps and a new capture follow.
      off.release_device();
      CHECK_FALSE(off.graph_mode());
      off.restore_device();
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, s);
        check.enqueue(sim, s, *m, lease);
      }
      const auto again = capture_step(sim, off, s, *m, check);
      for (int replay = 0; replay < 3; ++replay) off.launch_graph(again, s);
    }
    sim.synchronize(s);
    CHECK(check.unmapped == 0);
    CHECK(check.mismatches == 0);
    CHECK(check.checked == 105 * model_bytes(*m));
    CHECK(sim.device_bytes_in_use() == 0);
    CHECK(sim.pinned_bytes_in_use() == 0);
    CHECK(sim.live_mappings() == 0);
  }
}

TEST_CASE("graph streaming, VMM legacy route: teardown right after a launch") {
  using namespace graph_streaming_test;
  auto m = vmm_model(8, 47);
  auto sim = make_vmm_sim(*m, 5000);
  auto compute = sim.make_stream();
  const auto s = vmm_sim::view(compute);
  checker check;
  {
    vmm_offloader off(sim, m->table, m->plan, poisoned(2));
    const auto graph = capture_step(sim, off, s, *m, check);
    off.launch_graph(graph, s);
    off.launch_graph(graph, s);
  }  // the binder served the last launch's loads before the window went: every weight right
  sim.synchronize(s);
  CHECK(check.unmapped == 0);
  CHECK(check.mismatches == 0);
  CHECK(check.checked == 2 * model_bytes(*m));
  CHECK(sim.device_bytes_in_use() == 0);
  CHECK(sim.live_mappings() == 0);
}

TEST_CASE(
    "graph streaming, VMM legacy route: pageable and file bytes stage in the replay's loads") {
  using namespace graph_streaming_test;
  // Every placement (pinned, pageable, file, resident) and a norm-like weight per group: the
  // binder's jobs stage what is not pinned through the staging buffers, as the eager route does.
  ddo_test::model_spec spec;
  spec.groups = 8;
  spec.seed = 49;
  spec.max_bytes = 60000;
  spec.vmm_covered = [](std::size_t, std::size_t i) { return i != 3; };
  auto m = ddo_test::make_model(spec);
  auto sim = make_vmm_sim(*m, 5000);
  auto compute = sim.make_stream();
  const auto s = vmm_sim::view(compute);
  checker check;
  {
    auto o = poisoned(3);
    o.staging_buffer_bytes = 256 * 1024;
    vmm_offloader off(sim, m->table, m->plan, o);
    REQUIRE(off.slot_count() == 3);
    const auto graph = capture_step(sim, off, s, *m, check);
    REQUIRE(off.graph_mode());
    for (int replay = 0; replay < 20; ++replay) off.launch_graph(graph, s);
    sim.synchronize(s);
    const auto metrics = off.metrics();
    CHECK(metrics.totals.bytes_by_source[static_cast<std::size_t>(ddo::transfer_source::file)] > 0);
    CHECK(metrics.totals
              .bytes_by_source[static_cast<std::size_t>(ddo::transfer_source::pageable_staged)] >
          0);
  }
  sim.synchronize(s);
  CHECK(check.unmapped == 0);
  CHECK(check.mismatches == 0);
  CHECK(check.checked == 20 * model_bytes(*m));
  CHECK(sim.live_mappings() == 0);
}

TEST_CASE("graph streaming, VMM legacy route: a failed map is reported, teardown does not hang") {
  using namespace graph_streaming_test;
  // The 12th map answers CUDA_ERROR_NOT_READY with no retry (setup's page-table warm-up made 4,
  // the first launch 4): a load of the second launch fails, its ready flag never comes. A later
  // launch_graph reports the failure; teardown abandons the loads still waiting for the graph and
  // writes the ready flags, so the graph runs out (its reads of the unmapped range are counted).
  auto m = vmm_model(8, 50);
  ddo::host_sim_vmm_options o;
  o.device.wait_value_timeout_ms = 200;
  o.window.budget_bytes = model_bytes(*m) + 32 * ddo::mib;
  o.window.not_ready_every = 12;
  o.window.max_attempts = 1;
  vmm_sim sim(o);
  auto compute = sim.make_stream();
  const auto s = vmm_sim::view(compute);
  checker check;
  bool reported = false;
  {
    vmm_offloader off(sim, m->table, m->plan, poisoned(2));
    const auto graph = capture_step(sim, off, s, *m, check);
    try {
      for (int replay = 0; replay < 20; ++replay) off.launch_graph(graph, s);
    } catch (const std::exception& e) {
      reported = std::string(e.what()).find("CUDA_ERROR_NOT_READY") != std::string::npos;
      CHECK_MESSAGE(reported, std::string(e.what()));
    }
  }
  CHECK(reported);
  CHECK_THROWS(sim.synchronize(s));  // the graph's wait for the failed load timed out
  CHECK(sim.live_mappings() == 0);
  CHECK(sim.device_bytes_in_use() == 0);
}

TEST_CASE("graph streaming, VMM: the native route is refused, naming the routes that stream") {
  using namespace graph_streaming_test;
  auto m = vmm_model(8, 48);
  auto sim = make_vmm_sim(*m, 2000);
  auto compute = sim.make_stream();
  const auto s = vmm_sim::view(compute);
  auto o = poisoned(2);
  o.native_vmm.enabled = true;
  o.native_vmm.window_bytes = ddo::mib;
  o.native_vmm.segment_bytes = ddo::mib;
  o.native_vmm.staging_total_bytes = 2 * ddo::mib;
  vmm_offloader off(sim, m->table, m->plan, o);
  ddo::host_sim_device(sim).begin_capture(s);
  CHECK_THROWS_WITH_AS((void)off.acquire(std::size_t{0}, s),
                       doctest::Contains("the native VMM route (vmm_fast_runtime"),
                       ddo::usage_error);
  (void)ddo::host_sim_device(sim).end_capture(s);
  CHECK_FALSE(off.graph_mode());
}

// --- issue 37: no synchronizing call while a stream captures ------------------------------------
// host_sim refuses every synchronizing call made while a capture is open, on the capturing thread
// and (global mode) on every other: the check runs under every case of this file. These capture
// the first step on a cold ring whose slots hold every streamed group (the engine launches the
// graph itself): each acquire misses inside the capture, and ddo's threads (the staging worker's
// buffer waits, the VMM binder's waits for a slot's previous readers) run during it.

namespace graph_streaming_test {

/// Captures the cold first step on @p s, then launches the graph @p replays times (directly: the
/// ring holds every streamed group, so no graph streaming) and checks every weight each time.
template <class Sim, class Offloader, class Model>
void cold_capture_and_replay(Sim& sim, Offloader& off, typename Sim::stream_view s,
                             const Model& m, int replays) {
  checker check;
  const auto graph = capture_step(sim, off, s, m, check);
  REQUIRE_FALSE(off.graph_mode());
  for (int replay = 0; replay < replays; ++replay) sim.launch_graph(graph, s);
  sim.synchronize(s);
  CHECK(check.unmapped == 0);
  CHECK(check.mismatches == 0);
  CHECK(check.checked == static_cast<std::uint64_t>(replays) * model_bytes(m));
}

}  // namespace graph_streaming_test

TEST_CASE("capture check: the legacy VMM route captures a cold step whose ring holds all") {
  using namespace graph_streaming_test;
  // The failing ddo-run --graph command of issue 37 (vmm_runtime, a ring of 2, only two groups
  // streamed): the binder's host waits for the slots' previous readers ran while the engine's
  // thread captured, and CUDA refused them (cudaEventSynchronize at linear.hpp:263).
  auto m = vmm_model(3, 61);  // groups 0 and 2 streamed, 1 resident
  auto sim = make_vmm_sim(*m, 5000);
  auto compute = sim.make_stream();
  const auto s = vmm_sim::view(compute);
  ddo::runtime_options o;
  o.slot_count = 2;
  o.poison_slots = true;
  {
    vmm_offloader off(sim, m->table, m->plan, o);
    REQUIRE(off.slot_count() == 2);
    cold_capture_and_replay(sim, off, s, *m, 5);
  }
  CHECK(sim.live_mappings() == 0);
  CHECK(sim.device_bytes_in_use() == 0);
}

TEST_CASE("capture check: the linear route captures a cold step with staged pageable and file "
          "bytes") {
  using namespace graph_streaming_test;
  ddo_test::model_spec spec;  // every placement: pinned, pageable, file, resident
  spec.groups = 6;
  spec.seed = 62;
  spec.max_bytes = 60000;
  auto m = ddo_test::make_model(spec);
  host_sim_transport sim(linear_sim_options(4e9));
  auto compute = sim.make_stream();
  const auto s = view(compute);
  ddo::runtime_options o;
  o.slot_count = 6;
  o.poison_slots = true;
  o.staging_buffer_bytes = 16 * 1024;  // the staging worker waits for its buffers' copies
  {
    offloader off(sim, m->table, m->plan, o);
    cold_capture_and_replay(sim, off, s, *m, 5);
  }
  CHECK(sim.device_bytes_in_use() == 0);
  CHECK(sim.pinned_bytes_in_use() == 0);
}

namespace graph_streaming_test {

using file_route_sim = ddo::nvme_transport<host_sim_transport>;
using file_route_vmm_sim = ddo::nvme_transport<vmm_sim>;

/// Staging slots smaller than some weights (pieces span several fills), several reader threads:
/// the reader threads wait for their slots' copies while the engine's thread captures.
ddo::nvme_options small_file_staging() {
  ddo::nvme_options o;
  o.staging_slot_bytes = 96 * 1024;
  o.read_threads = 4;
  o.request_bytes = 64 * 1024;
  return o;
}

/// The file route over @p inner: a cold step captured with a ring that holds every group (the
/// engine launches the graph itself), then, on a fresh offloader, a ring of 2: on the legacy VMM
/// route every launch's loads stream from the files through the graph (graph streaming); the
/// linear ring streams from pinned memory only and refuses the capture, naming the way out.
/// Every byte compared; the pinned and device bytes back at their start after each offloader.
template <class Route, class Inner>
void file_route_capture(Inner& inner, const ddo_test::file_model& m, bool streams_through_graph) {
  const auto pinned0 = inner.ledger().in_use(ddo::ledger_kind::pinned);
  const auto device0 = inner.ledger().in_use(ddo::ledger_kind::device);
  Route t(inner, small_file_staging());
  auto compute = t.make_stream();
  const auto s = Route::view(compute);
  ddo::runtime_options o;
  o.poison_slots = true;
  o.staging_buffer_bytes = 64 * 1024;
  {
    o.slot_count = m.plan.groups.size();
    ddo::basic_offloader<Route> off(t, m.table, m.plan, o);
    cold_capture_and_replay(t, off, s, m, 3);
  }
  checker check;
  {
    o.slot_count = 2;
    ddo::basic_offloader<Route> off(t, m.table, m.plan, o);
    REQUIRE(off.slot_count() == 2);
    if (streams_through_graph) {
      const auto graph = capture_step(t, off, s, m, check);
      CHECK(off.graph_mode());
      for (int replay = 0; replay < 5; ++replay) off.launch_graph(graph, s);
      t.synchronize(s);
      CHECK(t.file_stats().bytes_delivered >= 5 * model_bytes(m));
    } else {
      ddo::host_sim_device(t).begin_capture(s);
      CHECK_THROWS_WITH_AS((void)off.acquire(std::size_t{0}, s),
                           doctest::Contains("from pinned memory only"), ddo::usage_error);
      (void)ddo::host_sim_device(t).end_capture(s);
      CHECK_FALSE(off.graph_mode());
    }
  }
  t.synchronize(s);
  CHECK(check.unmapped == 0);
  CHECK(check.mismatches == 0);
  CHECK(check.checked == (streams_through_graph ? 5 * model_bytes(m) : 0));
  CHECK(inner.ledger().in_use(ddo::ledger_kind::pinned) == pinned0);
  CHECK(inner.ledger().in_use(ddo::ledger_kind::device) == device0);
}

}  // namespace graph_streaming_test

TEST_CASE("capture check: the file route captures a cold step; the VMM route streams it by graph") {
  using namespace graph_streaming_test;
  // Issue 37's capture check on the file route: its reader threads' waits for their staging
  // slots' copies, and ddo's staging worker, run while the engine's thread captures in global
  // mode; host_sim refuses any synchronizing call made then.
  const ddo_test::file_model m(71, 5, 3, 70000);
  SUBCASE("linear ring") {
    host_sim_transport sim(linear_sim_options(4e9));
    file_route_capture<file_route_sim>(sim, m, false);
  }
  SUBCASE("legacy VMM route") {
    ddo::host_sim_vmm_options vo;
    vo.device.wait_value_timeout_ms = 5000;
    vo.window.budget_bytes = 64 * ddo::mib;
    vo.window.handle_bytes = 2 * ddo::mib;
    vmm_sim vmm(vo);
    file_route_capture<file_route_vmm_sim>(vmm, m, true);
    CHECK(vmm.live_mappings() == 0);
  }
}

TEST_CASE("capture check: poisoned releases stay out of a step replayed without streaming") {
  using namespace graph_streaming_test;
  // poison_released_slots fills a slot at its release. A step captured with a ring that holds
  // every group replays without loading anything: a fill captured with it would run at every
  // release of every replay, and the next replay's kernels would read the poison.
  auto m = pinned_model(6, 63);
  host_sim_transport sim(linear_sim_options(4e9));
  auto compute = sim.make_stream();
  const auto s = view(compute);
  {
    offloader off(sim, m->table, m->plan, poisoned(6));
    cold_capture_and_replay(sim, off, s, *m, 4);
    // Eager steps after the replays still poison their releases (the debug mode stays on).
    checker check;
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, s);
      check.enqueue(sim, s, *m, lease);
    }
    sim.synchronize(s);
    CHECK(check.mismatches == 0);
  }
  CHECK(sim.device_bytes_in_use() == 0);
}

TEST_CASE("capture check: host_sim refuses a synchronizing call on the capturing thread") {
  // What the two cases above rely on: the check fires (the engine's own synchronize included).
  using ddo::host_sim_transport;
  host_sim_transport sim;
  auto compute = sim.make_stream();
  auto other = sim.make_stream();
  const auto s = host_sim_transport::view(compute);
  auto e = sim.make_event(false);
  sim.begin_capture(s);
  CHECK_THROWS_WITH_AS(sim.synchronize(e), doctest::Contains("cudaEventSynchronize"),
                       ddo::usage_error);
  CHECK_THROWS_AS(sim.synchronize(host_sim_transport::view(other)), ddo::usage_error);
  (void)sim.end_capture(s);
  sim.synchronize(e);
}

TEST_CASE("graph streaming: a replay's metrics count the loads made inside the graph") {
  using namespace graph_streaming_test;
  // Issue 37 item 8: positions >= S load inside the graph; their copies were not counted, so a
  // replay's step.copies fell short of the same step run eagerly.
  auto m = pinned_model(10, 71);
  host_sim_transport sim(linear_sim_options());
  auto compute = sim.make_stream();
  const auto s = view(compute);
  checker check;
  auto o = poisoned(3);
  o.max_copy_bytes = 16 * 1024;
  offloader off(sim, m->table, m->plan, o);
  for (int step = 0; step < 2; ++step) {
    off.begin_step();
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, s);
      check.enqueue(sim, s, *m, lease);
    }
  }
  sim.synchronize(s);
  const auto eager = off.metrics().steps.back();
  const auto graph = capture_step(sim, off, s, *m, check);
  for (int replay = 0; replay < 3; ++replay) off.launch_graph(graph, s);
  sim.synchronize(s);
  const auto replayed = off.metrics().steps.back();
  REQUIRE(eager.group_loads == 7);
  CHECK(replayed.group_loads == eager.group_loads);
  CHECK(replayed.bytes() == eager.bytes());
  CHECK(replayed.copies == eager.copies);
  CHECK(check.mismatches == 0);
}

namespace graph_streaming_test {

/// host_sim whose record() throws on a capturing stream once armed (a captured lease release
/// that fails part-way).
struct failing_record_sim : host_sim_transport {
  using host_sim_transport::host_sim_transport;
  std::shared_ptr<std::atomic<bool>> armed = std::make_shared<std::atomic<bool>>(false);
  void record(event& e, stream_view s) {
    if (*armed && capturing(s)) throw ddo::usage_error("injected: record refused");
    host_sim_transport::record(e, s);
  }
};

}  // namespace graph_streaming_test

TEST_CASE("graph streaming: a captured release that throws breaks the graph, not the process") {
  using namespace graph_streaming_test;
  // Issue 37 item 8: leases drop in noexcept destructors; the failure is printed there and the
  // graph, which lacks that release, is refused at launch instead of replaying without it.
  auto m = pinned_model(10, 72);
  failing_record_sim sim(linear_sim_options());
  auto compute = sim.make_stream();
  const auto s = failing_record_sim::view(compute);
  checker check;
  ddo::basic_offloader<failing_record_sim> off(sim, m->table, m->plan, poisoned(3));
  sim.begin_capture(s);
  for (std::size_t g = 0; g < off.group_count(); ++g) {
    auto lease = off.acquire(g, s);
    check.enqueue(sim, s, *m, lease);
    *sim.armed = g + 1 == off.group_count();  // the last position's release is waited on
  }
  *sim.armed = false;
  const auto graph = sim.end_capture(s);
  REQUIRE(off.graph_mode());
  CHECK_THROWS_WITH_AS(off.launch_graph(graph, s), doctest::Contains("failed inside the capture"),
                       ddo::usage_error);
}

TEST_CASE("host_sim graphs keep capture-time values: a per-step counter fails on the 2nd replay") {
  // The protocol ddo must not use: wait for the step number. Captured once, the node waits for 1
  // on every replay; the second step's flag says 2 and the wait times out (a stream error).
  using ddo::host_sim_transport;
  ddo::host_sim_options so;
  so.wait_value_timeout_ms = 100;
  host_sim_transport sim(so);
  auto a = sim.make_stream();
  const auto s = host_sim_transport::view(a);
  auto* flag = sim.allocate_flags(1);
  std::atomic<int> ran{0};
  sim.begin_capture(s);
  CHECK(host_sim_transport::capturing(s));
  sim.wait_value(s, flag, 1);
  sim.enqueue(s, [&] { ++ran; });
  const auto graph = sim.end_capture(s);
  CHECK(graph.node_count() == 2);
  CHECK(ran == 0);  // captured, not run
  std::atomic_ref<std::uint32_t>(*flag).store(1);
  sim.launch_graph(graph, s);
  sim.synchronize(s);
  CHECK(ran == 1);
  std::atomic_ref<std::uint32_t>(*flag).store(2);  // "step 2"
  sim.launch_graph(graph, s);
  CHECK_THROWS_WITH_AS(sim.synchronize(s), doctest::Contains("was not satisfied in 100 ms"),
                       ddo::usage_error);
  // Consumer resets (wait 1, write 0) are right on every replay.
  sim.begin_capture(s);
  sim.wait_value(s, flag, 1);
  sim.write_value(s, flag, 0);
  const auto resetting = sim.end_capture(s);
  for (int step = 0; step < 3; ++step) {
    std::atomic_ref<std::uint32_t>(*flag).store(1);
    sim.launch_graph(resetting, s);
    sim.synchronize(s);
    CHECK(std::atomic_ref<std::uint32_t>(*flag).load() == 0);
  }
  sim.free_flags(flag, 1);
}

TEST_SUITE_END();
