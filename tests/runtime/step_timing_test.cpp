// SPDX-License-Identifier: Apache-2.0
// Step timing: step boundaries, timing events harvested without a host sync, trace spans.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "ddo/runtime/detail/step_timing.hpp"
#include "ddo/runtime/trace_recorder.hpp"
#include "ddo/transport/host_sim.hpp"

using sim = ddo::host_sim_transport;

TEST_SUITE_BEGIN("runtime");

TEST_CASE("a step starts when the engine acquires a group not above the last, or on begin_step") {
  sim t;
  std::vector<ddo::detail::group_runtime> groups(5);
  ddo::detail::source_files files;
  ddo::detail::staging_worker<sim> worker;
  worker.prepare(t, 4096, 1, files);
  ddo::detail::step_timing<sim> timing;
  timing.setup(t, false, nullptr, groups, worker);
  for (std::size_t g : {0u, 1u, 2u, 3u, 4u, 0u, 1u, 2u, 3u, 4u, 2u, 3u}) {
    timing.note_acquire(g);
    ++timing.current().acquires;
  }
  REQUIRE(timing.steps().size() == 3);
  CHECK(timing.steps()[0].acquires == 5);
  CHECK(timing.steps()[1].acquires == 5);
  CHECK(timing.steps()[2].acquires == 2);
  timing.begin_step();  // explicit: the next acquire (of a lower group) joins it
  timing.note_acquire(0);
  ++timing.current().acquires;
  REQUIRE(timing.steps().size() == 4);
  CHECK(timing.steps()[3].acquires == 1);
  CHECK(timing.steps()[3].step == 3);
}

TEST_CASE("timed spans are harvested into their step and traced") {
  sim t;
  std::vector<ddo::detail::group_runtime> groups(2);
  groups[1].name = "blocks.1";
  ddo::detail::source_files files;
  ddo::detail::staging_worker<sim> worker;
  worker.prepare(t, 4096, 1, files);
  ddo::trace_recorder trace;
  ddo::detail::step_timing<sim> timing;
  timing.setup(t, true, &trace, groups, worker);
  auto stream = t.make_stream();
  const auto v = sim::view(stream);
  timing.start_epoch(v);
  timing.note_acquire(1);
  const auto a = timing.take(), b = timing.take();
  CHECK(a != b);
  t.record(timing.at(a), v);
  t.enqueue(v, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  t.record(timing.at(b), v);
  timing.add_pending(ddo::span_kind::copy, 1, 12345, a, b, 0);
  timing.harvest(true);
  const auto& step = timing.steps().at(0);
  CHECK(step.timed_bytes == 12345);
  CHECK(step.copy_ms >= 15.0);
  const auto spans = trace.records();
  REQUIRE(spans.size() == 1);
  CHECK(spans[0].name == "blocks.1");
  CHECK(spans[0].device);
  CHECK(spans[0].end_us - spans[0].start_us >= 15000.0);
  // the two events went back to the pool: taking again reuses them, growing nothing
  const auto c = timing.take(), d = timing.take();
  CHECK(((c == a || c == b) && (d == a || d == b)));
  timing.release();
  t.synchronize(v);
}

TEST_SUITE_END();
