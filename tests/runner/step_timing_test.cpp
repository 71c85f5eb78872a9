// SPDX-License-Identifier: Apache-2.0
// The step timing every figure is read with (examples/runner/step_timing.hpp, issue 37 item 1):
// intervals between step starts, spans apart, B the best pinned rate, a ratio below the floor a
// measurement fault with its raw figures.
#include "runner/step_timing.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runner/step_summary.hpp"

namespace step_timing_test {
bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
}  // namespace step_timing_test

TEST_SUITE("runner") {
  TEST_CASE("a step's time is the interval to the next step's start, its span apart") {
    // Spans of 80 ms with 20 ms of work between steps (sampling, printing): the old span-timed
    // figure said 80 ms; the copies that ran in the 20 ms belong to a step.
    const std::vector<double> starts{0, 100, 200, 300};
    const std::vector<double> ends{80, 180, 280};
    const auto t = ddo::runner::step_times_from(starts, ends);
    CHECK(t.interval_ms == std::vector<double>{100, 100, 100});
    CHECK(t.span_ms == std::vector<double>{80, 80, 80});
    const auto s = ddo::runner::summarize_steps(t.interval_ms, 1);
    CHECK(s.median_ms == doctest::Approx(100.0));
  }

  TEST_CASE("step marks that do not fit together are refused") {
    CHECK_THROWS_AS((void)ddo::runner::step_times_from(std::vector<double>{0, 1},
                                                       std::vector<double>{1, 2}),
                    std::invalid_argument);
    CHECK_THROWS_AS((void)ddo::runner::step_times_from(std::vector<double>{0, 5, 9},
                                                       std::vector<double>{6, 8}),
                    std::invalid_argument);  // step 0 ends after step 1 starts
  }

  TEST_CASE("the step clock's marks: n steps, n intervals closed by the mark after the last") {
    ddo::runner::step_clock clock;
    for (int i = 0; i < 3; ++i) {
      clock.start();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      clock.end();
      CHECK(clock.last_span_ms() >= 2.0);
      std::this_thread::sleep_for(std::chrono::milliseconds(3));  // between steps
    }
    clock.close();
    const auto t = clock.times();
    REQUIRE(t.interval_ms.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK(t.interval_ms[i] >= t.span_ms[i] + 2.9);  // the between-step work is in the interval
      CHECK(t.span_ms[i] >= 2.0);
    }
    ddo::runner::step_clock unclosed;
    unclosed.start();
    unclosed.end();
    CHECK_THROWS_AS((void)unclosed.times(), std::invalid_argument);
  }

  TEST_CASE("B is the best pinned rate of any pattern measured") {
    ddo::runner::pinned_rates rates;
    CHECK(rates.best_gbps() == 0.0);
    CHECK(rates.describe() == "none measured GB/s");
    rates.add("batches of 5 x 256 MiB", 55.3);
    rates.add("hand-written ring", 56.9);
    rates.add("single 256 MiB copies", 54.0);
    CHECK(rates.best_gbps() == 56.9);
    CHECK(rates.describe() ==
          "batches of 5 x 256 MiB 55.30, hand-written ring 56.90 (best), single 256 MiB copies "
          "54.00 GB/s");
  }

  TEST_CASE("a ratio below the floor is a measurement fault, reported unclamped with its figures") {
    // issue 37's run: 197.0 ms/step against W / B = 12.28 GB at 55.3 GB/s = 222.1 ms.
    ddo::runner::bound_figures f;
    f.interval_ms = {197.0, 196.5, 198.0};
    f.span_ms = {180.0, 181.0, 179.5};
    f.compute_ms = 150.0;
    f.streamed_bytes = 12'280'000'000;
    f.rates.add("batches of 5 x 256 MiB", 55.3);
    CHECK(ddo::runner::bound_ms_of(f) == doctest::Approx(222.06).epsilon(0.001));
    const auto v = ddo::runner::judge_ratio(197.0, ddo::runner::bound_ms_of(f));
    CHECK(v.fault);
    CHECK(v.ratio == doctest::Approx(0.887).epsilon(0.001));  // as measured, not 1.0
    const auto text = ddo::runner::format_ratio("median / bound", 197.0, f);
    CHECK(step_timing_test::has(text, "median / bound = 0.887x"));
    CHECK(step_timing_test::has(text, "MEASUREMENT FAULT: 0.887x is below 0.98x"));
    CHECK(step_timing_test::has(text, "step intervals [197.00 196.50 198.00] ms"));
    CHECK(step_timing_test::has(text, "spans [180.00 181.00 179.50] ms"));
    CHECK(step_timing_test::has(text, "C = 150.000 ms, W = 12280000000 bytes"));
    CHECK(step_timing_test::has(text, "batches of 5 x 256 MiB 55.30 (best) GB/s"));
    // At and above the floor: a result, one line, no fault.
    CHECK_FALSE(ddo::runner::judge_ratio(0.98 * 222.0, 222.0).fault);
    CHECK(ddo::runner::format_ratio("median / bound", 230.0, f) == "median / bound = 1.036x");
    // No bound: no ratio, no fault.
    CHECK_FALSE(ddo::runner::judge_ratio(100.0, 0.0).fault);
  }

  TEST_CASE("a faster pattern raises B and clears a fault the slower one made") {
    ddo::runner::bound_figures f;
    f.interval_ms = {100.0};
    f.span_ms = {95.0};
    f.streamed_bytes = 5'000'000'000;  // at 48 GB/s: 104.2 ms, so 100 ms would be 0.96x
    f.rates.add("batches", 48.0);
    CHECK(ddo::runner::judge_ratio(100.0, ddo::runner::bound_ms_of(f)).fault);
    f.rates.add("hand-written ring", 50.0);  // what the ring reached: 100 ms, 1.00x
    CHECK_FALSE(ddo::runner::judge_ratio(100.0, ddo::runner::bound_ms_of(f)).fault);
  }

  TEST_CASE("ddo-run's summary: the interval median, the spans apart, a fault said") {
    ddo::runner::step_times t;
    t.interval_ms = {900.0, 300.0, 280.0};
    t.span_ms = {880.0, 250.0, 240.0};
    ddo::runner::measured_bound bound;
    bound.compute_ms = 145.0;
    bound.streamed_bytes = 2'900'000'000;
    bound.rates.add("batches", 10.0);  // W / B = 290 ms
    const auto text = ddo::runner::format_step_summary(t, 1, &bound);
    CHECK(step_timing_test::has(text, "2 steady steps, median 290.0 ms/step between step starts "
                                      "(min 280.0, max 300.0); warm-up: 900.0 ms"));
    CHECK(step_timing_test::has(text, "spans (first enqueue to synchronize, not the figure): "
                                      "median 245.0 ms"));
    CHECK(step_timing_test::has(text, "median / bound = 1.000x"));
    CHECK_FALSE(step_timing_test::has(text, "FAULT"));
    CHECK_FALSE(ddo::runner::measurement_fault(t, 1, bound));
    // The same steps against a faster B: below the floor, said with the figures.
    bound.rates.add("single copies", 12.0);  // W / B = 241.7 ms: the spans would pass, not 290
    const auto faster = ddo::runner::format_step_summary(t, 1, &bound);
    CHECK(step_timing_test::has(faster, "median / bound = 1.200x"));
    t.interval_ms = {900.0, 200.0, 210.0};
    CHECK(ddo::runner::measurement_fault(t, 1, bound));
    const auto fault = ddo::runner::format_step_summary(t, 1, &bound);
    CHECK(step_timing_test::has(fault, "median / bound = 0.848x\n  MEASUREMENT FAULT"));
    CHECK(step_timing_test::has(fault, "step intervals [200.00 210.00] ms"));
  }
}
