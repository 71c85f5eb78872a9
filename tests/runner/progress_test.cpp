// SPDX-License-Identifier: Apache-2.0
#include "runner/progress.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace {
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[256];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  return text;
}
}  // namespace

TEST_SUITE("runner") {
  TEST_CASE("plain progress prints each quarter milestone once, for logs without a terminal") {
    std::FILE* f = std::tmpfile();
    REQUIRE(f != nullptr);
    {
      ddo::runner::progress_bar bar("steps", 37, "steps", ddo::runner::progress_style::plain, f);
      for (std::uint64_t i = 0; i <= 37; ++i) bar.update(i);
      bar.update(37);
    }
    const std::string text = contents(f);
    std::fclose(f);
    CHECK(std::count(text.begin(), text.end(), '\n') == 5);
    CHECK(text.find('\r') == std::string::npos);
    CHECK(text.find("steps: 0%") != std::string::npos);
    CHECK(text.find("steps: 100% 37/37 steps") != std::string::npos);
  }

  TEST_CASE("terminal progress redraws one line in place and ends it when finished") {
    std::FILE* f = std::tmpfile();
    REQUIRE(f != nullptr);
    ddo::runner::progress_bar bar("writing model", 2'000'000'000, "bytes",
                                  ddo::runner::progress_style::terminal, f);
    bar.update(500'000'000);
    bar.update(500'000'001);  // same percentage: no redraw
    bar.finish();
    bar.finish();  // idempotent
    const std::string text = contents(f);
    std::fclose(f);
    CHECK(std::count(text.begin(), text.end(), '\r') == 2);
    CHECK(std::count(text.begin(), text.end(), '\n') == 1);
    CHECK(text.find(" 25% 0.50/2.00 GB") != std::string::npos);
    CHECK(text.back() == '\n');
  }

  TEST_CASE("quiet progress prints nothing") {
    std::FILE* f = std::tmpfile();
    REQUIRE(f != nullptr);
    {
      ddo::runner::progress_bar bar("x", 10, "items", ddo::runner::progress_style::quiet, f);
      bar.update(5);
    }
    CHECK(contents(f).empty());
    std::fclose(f);
  }
}
