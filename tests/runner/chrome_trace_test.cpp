// SPDX-License-Identifier: Apache-2.0
#include "runner/chrome_trace.hpp"
#include "runner/trace_adapter.hpp"

#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "ddo/core/detail/json.hpp"

TEST_SUITE("runner") {
  TEST_CASE("the Chrome trace is valid JSON holding every event on its track") {
    ddo::runner::chrome_trace trace;
    trace.add("step 0", "step", 0.0, 1500.5, ddo::runner::chrome_trace::host);
    trace.add("copy \"blocks.1\"\n", "copy", 10.0, 700.0, ddo::runner::chrome_trace::copy_stream,
              {{"bytes", "226492416"}, {"route", "pinned"}});
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&trace, t] {
        for (int i = 0; i < 50; ++i)
          trace.add("wait", "wait", trace.now_us(), 1.0, ddo::runner::chrome_trace::runtime,
                    {{"thread", std::to_string(t)}});
      });
    for (auto& th : threads) th.join();
    CHECK(trace.size() == 202);
    const auto doc = ddo::detail::parse_json(trace.json());
    const auto* events = doc.find("traceEvents");
    REQUIRE(events != nullptr);
    REQUIRE(events->is_array());
    CHECK(events->items().size() == 4 + 202);  // four track names, then the events
    const auto& copy = events->items()[5];
    CHECK(copy.find("name")->text() == "copy \"blocks.1\"\n");
    CHECK(copy.find("tid")->text() == "2");
    CHECK(copy.find("args")->find("route")->text() == "pinned");
    CHECK(copy.find("ph")->text() == "X");
  }

  TEST_CASE("the trace adapter puts each runtime span on its track (ddo-run, ddo-flux)") {
    using track = ddo::runner::chrome_trace::track;
    ddo::runner::chrome_trace trace;
    ddo::runner::trace_adapter adapter(trace);
    const std::pair<ddo::span_kind, int> expected[] = {
        {ddo::span_kind::copy, track::copy_stream},
        {ddo::span_kind::stall, track::compute_stream},
        {ddo::span_kind::compute, track::compute_stream},
        {ddo::span_kind::lease, track::runtime},
        {ddo::span_kind::step, track::runtime},
        {ddo::span_kind::setup, track::runtime}};
    for (const auto& [kind, tid] : expected)
      adapter.on_span({kind, "blocks.1", 1, kind == ddo::span_kind::copy ? 4096u : 0u, 10.0, 25.0,
                       kind != ddo::span_kind::lease});
    const auto doc = ddo::detail::parse_json(trace.json());
    const auto& events = doc.find("traceEvents")->items();
    REQUIRE(events.size() == 4 + std::size(expected));
    for (std::size_t i = 0; i < std::size(expected); ++i) {
      const auto& e = events[4 + i];
      CAPTURE(i);
      CHECK(e.find("cat")->text() == ddo::to_string(expected[i].first));
      CHECK(e.find("tid")->text() == std::to_string(expected[i].second));
      CHECK(e.find("dur")->text() == "15.000");
      CHECK((e.find("args")->find("bytes") != nullptr) == (i == 0));
    }
  }

  TEST_CASE("writing a trace to a path that cannot be created throws io_error naming it") {
    ddo::runner::chrome_trace trace;
    CHECK_THROWS_WITH_AS(trace.write("/nonexistent-dir/trace.json"),
                         doctest::Contains("/nonexistent-dir/trace.json"), ddo::io_error);
  }
}
