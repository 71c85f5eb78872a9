// SPDX-License-Identifier: Apache-2.0
// The --compare report (examples/runner/compare.hpp), the peak-RSS helper it uses, the per-weight
// token rows of the synthetic compute, the setup-progress printer and the plain run's step summary.
#include "runner/compare.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "ddo/core/detail/json.hpp"
#include "runner/peak_rss.hpp"
#include "runner/setup_progress_printer.hpp"
#include "runner/step_summary.hpp"
#include "runner/token_rows.hpp"

namespace compare_test {

ddo::runner::compare_row row(std::string variant, std::vector<double> ms, std::uint64_t streamed) {
  ddo::runner::compare_row r;
  r.variant = std::move(variant);
  r.step_ms = std::move(ms);
  r.streamed_bytes = streamed;
  return r;
}

ddo::runner::compare_report report() {
  ddo::runner::compare_report r;
  r.device = "Test \"GPU\"";
  r.transport = "host_sim";
  r.model = "synthetic flux-b2-d4-h1024-r4-BF16-k1-s0";
  r.model_bytes = 5'000'000'000;
  r.tokens = 4096;
  r.steps = 3;
  r.compute_ms = 40.0;
  r.compute_source = "the resident row";
  r.pinned_gbps = 50.0;
  r.rss_reset = true;
  r.rows.push_back(row("resident", {40, 41, 39}, 0));
  auto ddo_row = row("ddo", {101, 100, 99}, 5'000'000'000);  // W / B = 100 ms
  ddo_row.vram_gib = 8;
  ddo_row.within_budget = true;
  ddo_row.verified = true;
  ddo_row.sampled_peak_device_bytes = 7'000'000'000;
  r.rows.push_back(ddo_row);
  auto small = row("ddo", {}, 0);
  small.vram_gib = 0.5;
  small.skipped = "ddo refused the plan: too small";
  r.rows.push_back(small);
  r.rows.push_back(row("naive pinned", {300, 310, 320}, 10'000'000'000));
  for (auto& x : r.rows)
    if (x.skipped.empty()) ddo::runner::finish_row(x, r.compute_ms, r.pinned_gbps);
  return r;
}

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[256];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  return text;
}

}  // namespace compare_test

TEST_SUITE("runner") {
  TEST_CASE("a compare row is judged against max(C, W / B) measured in the same run") {
    auto copy_bound = compare_test::row("ddo", {101, 99, 130}, 5'000'000'000);
    ddo::runner::finish_row(copy_bound, 40.0, 50.0);
    CHECK(copy_bound.ms == 101.0);
    CHECK(copy_bound.bound_ms == doctest::Approx(100.0));
    CHECK(copy_bound.ratio == doctest::Approx(1.01));
    auto compute_bound = compare_test::row("resident", {40, 44}, 0);
    ddo::runner::finish_row(compute_bound, 40.0, 50.0);
    CHECK(compute_bound.ms == 42.0);  // the median of an even count
    CHECK(compute_bound.bound_ms == 40.0);
    CHECK(compute_bound.ratio == doctest::Approx(1.05));
  }

  TEST_CASE("the compare table has one line per variant, skipped ones saying why") {
    const auto r = compare_test::report();
    const std::string table = ddo::runner::format_compare_table(r);
    CHECK(table.find("C = 40.0 ms (the resident row), B = 50.0 GB/s") != std::string::npos);
    CHECK(table.find("| resident | device | 40.0 | 1.00 | 40.0 | 0.00 |") != std::string::npos);
    // Sizes in GiB, like the VRAM column: one unit family in the header (5e9 B = 4.66 GiB).
    CHECK(table.find("| ddo | 8 | 100.0 | 1.00 | 100.0 | 4.66 |") != std::string::npos);
    CHECK(table.find("(within) | 6.52 |") != std::string::npos);
    CHECK(table.find(" GB |") == std::string::npos);
    CHECK(table.find("streamed GiB/step") != std::string::npos);
    CHECK(table.find("| ddo | 0.50 | skipped: ddo refused the plan: too small |") != std::string::npos);
    CHECK(table.find("| naive pinned | device | 310.0 | 1.55 | 200.0 |") != std::string::npos);
    CHECK(table.find("| ok |") != std::string::npos);
    CHECK(std::count(table.begin(), table.end(), '\n') >= 4 + 2 + 4);
  }

  TEST_CASE("the compare JSON parses and carries every row for the plot") {
    const auto r = compare_test::report();
    const auto doc = ddo::detail::parse_json(ddo::runner::compare_json(r));
    CHECK(doc.find("kind")->text() == "ddo-run compare");
    CHECK(doc.find("device")->text() == "Test \"GPU\"");
    const auto& rows = doc.find("rows")->items();
    REQUIRE(rows.size() == 4);
    CHECK(rows[1].find("vram_gib")->text() == "8.000");
    CHECK(rows[1].find("ms")->text() == "100.000");
    CHECK(rows[1].find("within_budget")->boolean());
    CHECK(rows[1].find("verified")->boolean());
    CHECK(rows[1].find("step_ms")->items().size() == 3);
    CHECK(rows[2].find("skipped")->text() == "ddo refused the plan: too small");
    CHECK(rows[2].find("ms") == nullptr);
  }

  TEST_CASE("peak RSS is read from VmHWM, and this process has one") {
    CHECK(ddo::runner::parse_vm_hwm("Name:\tx\nVmPeak:\t  10 kB\nVmHWM:\t    2048 kB\n") == 2048u * 1024);
    CHECK_FALSE(ddo::runner::parse_vm_hwm("VmRSS:\t 1 kB\n").has_value());
    CHECK_FALSE(ddo::runner::parse_vm_hwm("VmHWM:\t 1 MB\n").has_value());
    const auto peak = ddo::runner::peak_rss_bytes();
    REQUIRE(peak.has_value());
    CHECK(*peak > 0);
  }

  TEST_CASE("the text stream and the modulations of a Flux-like model multiply fewer rows") {
    using ddo::runner::token_rows;
    using ddo::runner::token_stream_of;
    CHECK(token_rows(token_stream_of("transformer_blocks.3.attn.to_q.weight"), 4096) == 4096);
    CHECK(token_rows(token_stream_of("transformer_blocks.3.attn.add_q_proj.weight"), 4096) == 512);
    CHECK(token_rows(token_stream_of("transformer_blocks.3.ff_context.net.2.weight"), 4096) == 512);
    CHECK(token_rows(token_stream_of("transformer_blocks.3.attn.to_add_out.weight"), 4096) == 512);
    CHECK(token_rows(token_stream_of("transformer_blocks.3.norm1.linear.weight"), 4096) == 1);
    CHECK(token_rows(token_stream_of("transformer_blocks.3.norm1_context.linear.weight"), 4096) == 1);
    CHECK(token_rows(token_stream_of("single_transformer_blocks.0.norm.linear.weight"), 4096) == 1);
    CHECK(token_rows(token_stream_of("single_transformer_blocks.0.proj_out.weight"), 4096) == 4096);
    CHECK(token_rows(token_stream_of("context_embedder.weight"), 4096) == 512);
    CHECK(token_rows(token_stream_of("time_text_embed.timestep_embedder.linear_1.weight"), 8) == 1);
    CHECK(token_rows(token_stream_of("context_embedder.weight"), 4) == 1);  // at least one row
    CHECK(token_rows(token_stream_of("proj_out.weight"), 4096) == 4096);
  }

  TEST_CASE("setup progress in a log: plain lines per phase at each quarter, with rates") {
    std::FILE* f = std::tmpfile();
    REQUIRE(f != nullptr);
    ddo::runner::setup_progress_printer printer(ddo::runner::progress_style::plain, f);
    const auto t0 = std::chrono::steady_clock::now();
    using ddo::setup_phase;
    for (std::uint64_t done = 0; done <= 1000; done += 50)
      printer.report({setup_phase::pinning, done * 1'000'000, 1'000'000'000},
                     t0 + std::chrono::milliseconds(done));
    printer.report({setup_phase::uploading, 500'000'000, 500'000'000}, t0 + std::chrono::seconds(2));
    printer.finish();
    const std::string text = compare_test::contents(f);
    std::fclose(f);
    CHECK(text.find('\r') == std::string::npos);
    CHECK(std::count(text.begin(), text.end(), '\n') == 5 + 1);
    CHECK(text.find("setup: pinning   0% 0.00/1.00 GB\n") != std::string::npos);
    CHECK(text.find("setup: pinning  50% 0.50/1.00 GB 1.00 GB/s") != std::string::npos);
    CHECK(text.find("setup: pinning 100% 1.00/1.00 GB 1.00 GB/s") != std::string::npos);
    CHECK(text.find("setup: uploading 100% 0.50/0.50 GB\n") != std::string::npos);
  }

  TEST_CASE("setup progress on a terminal: one line redrawn with every phase, ended once") {
    std::FILE* f = std::tmpfile();
    REQUIRE(f != nullptr);
    ddo::runner::setup_progress_printer printer(ddo::runner::progress_style::terminal, f);
    const auto t0 = std::chrono::steady_clock::now();
    printer.report({ddo::setup_phase::reading, 100, 1000}, t0);
    printer.report({ddo::setup_phase::reading, 101, 1000}, t0);  // same percent: no redraw
    printer.report({ddo::setup_phase::packing, 500, 1000}, t0 + std::chrono::seconds(1));
    printer.finish();
    printer.finish();
    const std::string text = compare_test::contents(f);
    std::fclose(f);
    CHECK(std::count(text.begin(), text.end(), '\r') == 2);
    CHECK(std::count(text.begin(), text.end(), '\n') == 1);
    CHECK(text.find("reading  10%") != std::string::npos);
    CHECK(text.find(" | packing  50%") != std::string::npos);
  }
  TEST_CASE("a plain run's summary: warm-up apart, the true median, the ratio to the bound") {
    // Two steady steps: the median is their mean, not the slower one (the old summary's
    // sorted[n / 2] printed 300 here).
    const std::vector<double> ms{900.0, 300.0, 280.0};
    const auto s = ddo::runner::summarize_steps(ms, 1);
    CHECK(s.warmup_ms == std::vector<double>{900.0});
    CHECK(s.steady_ms.size() == 2);
    CHECK(s.median_ms == doctest::Approx(290.0));
    CHECK(s.min_ms == 280.0);
    CHECK(s.max_ms == 300.0);
    // W / B = 2.9 GB at 10 GB/s = 290 ms > C = 145 ms: the bound is the copies, ratio 1.00x.
    ddo::runner::measured_bound bound{145.0, 2'900'000'000, {}};
    bound.rates.add("batches", 10.0);
    const ddo::runner::step_times t{ms, ms};
    const auto text = ddo::runner::format_step_summary(t, 1, &bound);
    CHECK(text.find("2 steady steps, median 290.0 ms/step between step starts (min 280.0, max "
                    "300.0); warm-up: 900.0 ms") != std::string::npos);
    CHECK(text.find("C = 145.0 ms") != std::string::npos);
    CHECK(text.find("= 290.0 ms) = 290.0 ms; B the best of: batches 10.00 (best) GB/s\n  "
                    "median / bound = 1.000x") != std::string::npos);
    // No warm-up: none said; all warm-up: no median claimed.
    CHECK(ddo::runner::format_step_summary(t, 0, nullptr)
              .find("3 steady steps, median 300.0 ms/step between step starts (min 280.0, max "
                    "900.0); warm-up: none") != std::string::npos);
    CHECK(ddo::runner::format_step_summary(t, 5, &bound).find("median /") == std::string::npos);
  }
}
