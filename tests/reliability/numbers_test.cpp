// SPDX-License-Identifier: Apache-2.0
// Class 3 of the reliability issue: numbers that wrap. Negative values given to unsigned options,
// integers past their type, and budget arithmetic that overflowed.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ddo/cli/bounded_integer.hpp"
#include "ddo/core/units.hpp"
#include "ddo/plan/planner.hpp"
#include "plan/plan_test_support.hpp"

namespace po = boost::program_options;

namespace {
using blocks_t = ddo::bounded_integer<std::uint32_t, 1, 4096>;
using seed_t = ddo::bounded_integer<std::uint64_t>;
using signed_t = ddo::bounded_integer<int, -5, 5>;

/// Parses `--blocks VALUE` (and friends) like the programs do; returns the error text or "".
template <class T>
std::string parse_error(const std::string& flag, const std::string& value, T* out = nullptr) {
  po::options_description d;
  T storage;
  d.add_options()(flag.c_str(), po::value<T>(out ? out : &storage));
  const std::string arg = "--" + flag;
  std::vector<const char*> argv = {"prog", arg.c_str(), value.c_str()};
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(static_cast<int>(argv.size()), argv.data(), d), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return e.what();
  }
  return {};
}
}  // namespace

TEST_SUITE("reliability") {
  TEST_CASE("a negative value for an unsigned option is refused naming the option and range") {
    const std::string e = parse_error<blocks_t>("blocks", "-1");
    CHECK(e.find("'-1'") != std::string::npos);
    CHECK(e.find("--blocks") != std::string::npos);
    CHECK(e.find("from 1 to 4096") != std::string::npos);
    for (const char* bad : {"0", "4097", "4294967295", "4294967296", "1e3", "12x", " 3", "", "0x10",
                            "--1", "+-1", "3.0"}) {
      INFO(bad);
      CHECK_FALSE(parse_error<blocks_t>("blocks", bad).empty());
    }
    blocks_t ok;
    CHECK(parse_error<blocks_t>("blocks", "+4096", &ok).empty());
    CHECK(ok.value == 4096u);
    CHECK(parse_error<blocks_t>("blocks", "1", &ok).empty());
    CHECK(ok.value == 1u);
  }

  TEST_CASE("the full unsigned 64-bit range is accepted and nothing past it or below zero") {
    seed_t seed;
    CHECK(parse_error<seed_t>("seed", "18446744073709551615", &seed).empty());
    CHECK(seed.value == std::numeric_limits<std::uint64_t>::max());
    CHECK_FALSE(parse_error<seed_t>("seed", "18446744073709551616").empty());
    CHECK_FALSE(parse_error<seed_t>("seed", "-1").empty());
    signed_t s;
    CHECK(parse_error<signed_t>("delta", "-5", &s).empty());
    CHECK(s.value == -5);
    CHECK_FALSE(parse_error<signed_t>("delta", "-6").empty());
  }

  TEST_CASE("parse_bounded_integer agrees with a reference on random text") {
    std::mt19937_64 rng(77);
    const char alphabet[] = "0123456789+-x ";
    for (int i = 0; i < 20000; ++i) {
      std::string text;
      const int n = static_cast<int>(rng() % 12);
      for (int k = 0; k < n; ++k) text += alphabet[rng() % (sizeof alphabet - 1)];
      const auto got = ddo::parse_bounded_integer<std::uint32_t>(text, 3, 70000);
      // Reference: optional '+', then 1+ digits only, value in range.
      std::string_view body = text;
      if (!body.empty() && body.front() == '+') body.remove_prefix(1);
      bool digits = !body.empty();
      for (char c : body) digits = digits && c >= '0' && c <= '9';
      std::optional<std::uint32_t> want;
      if (digits && body.size() <= 9) {
        const auto v = std::stoull(std::string(body));
        if (v >= 3 && v <= 70000) want = static_cast<std::uint32_t>(v);
      }
      INFO(text);
      CHECK(got == want);
    }
  }

  TEST_CASE("saturating_add and GiB conversion never wrap") {
    constexpr auto max = std::numeric_limits<std::uint64_t>::max();
    CHECK(ddo::saturating_add(max, 1) == max);
    CHECK(ddo::saturating_add(max - 5, 5) == max);
    CHECK(ddo::saturating_add(3, 4) == 7u);
    CHECK(ddo::gib_to_bytes(1e20) == max);
    CHECK(ddo::gib_to_bytes(ddo::max_representable_gib) == max);
  }

  TEST_CASE("a budget or headroom past 2^64 bytes is refused naming the field, not wrapped") {
    const auto table = ddo_test::flux_table(4);
    ddo::machine_capacity m;
    m.free_vram_bytes = 80 * ddo::gib;
    m.total_vram_bytes = 96 * ddo::gib;
    m.available_ram_bytes = 64 * ddo::gib;
    for (const char* field : {"auto_vram_headroom_gb", "system_ram_headroom_gb",
                              "resident_module_budget_gb", "max_pin_weight_budget_gb"}) {
      auto c = ddo_test::planning_config();
      c.auto_budget_policy = ddo::budget_policy::balanced;
      if (std::string(field) == "auto_vram_headroom_gb") c.auto_vram_headroom_gb = 1e20;
      if (std::string(field) == "system_ram_headroom_gb") c.system_ram_headroom_gb = 1e20;
      if (std::string(field) == "resident_module_budget_gb") c.resident_module_budget_gb = 1e20;
      if (std::string(field) == "max_pin_weight_budget_gb") c.max_pin_weight_budget_gb = 1e20;
      INFO(field);
      CHECK_THROWS_WITH_AS((void)ddo::make_plan(table, c, m), doctest::Contains(field),
                           ddo::config_error);
    }
    // At the largest representable headroom the arithmetic saturates: no VRAM is left for a
    // resident budget (before the fix, headroom + rule-resident bytes wrapped to a small number
    // and the whole free VRAM became the budget).
    auto c = ddo_test::planning_config();
    c.auto_budget_policy = ddo::budget_policy::balanced;
    c.auto_vram_headroom_gb = ddo::max_representable_gib;
    const auto plan = ddo::make_plan(table, c, m);
    CHECK(plan.budgets.resident_budget_bytes == 0);
  }
}
