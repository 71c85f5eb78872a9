// SPDX-License-Identifier: Apache-2.0
#include "runner/chrome_trace.hpp"

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

  TEST_CASE("writing a trace to a path that cannot be created throws io_error naming it") {
    ddo::runner::chrome_trace trace;
    CHECK_THROWS_WITH_AS(trace.write("/nonexistent-dir/trace.json"),
                         doctest::Contains("/nonexistent-dir/trace.json"), ddo::io_error);
  }
}
