// SPDX-License-Identifier: Apache-2.0
#include "ddo/plan/planner.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "ddo/config/operational_defaults.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/plan/plan_format.hpp"
#include "model/model_test_support.hpp"
#include "plan/plan_test_support.hpp"

namespace {

/// The concept's reference model: streams every target weight, keeps nothing resident.
struct stream_everything_planner {
  using planner_category = ddo::residency_planner_tag;
  [[nodiscard]] ddo::residency_result plan_residency(const ddo::plan_context& c) const {
    ddo::residency_result r;
    r.resident.assign(c.table.size(), 0);
    r.managed.assign(c.table.size(), 1);
    r.reason.assign(c.table.size(), "streamed by test planner");
    r.budget_source = ddo::resident_budget_source::none;
    return r;
  }
};
static_assert(ddo::residency_planner<stream_everything_planner>);

/// The pin selector's reference model: pins nothing, streams from pageable memory.
struct pin_nothing {
  using pin_selector_category = ddo::pin_selector_tag;
  [[nodiscard]] ddo::pin_result select_pinned(const ddo::plan_context& c,
                                              const ddo::residency_result& r) const {
    ddo::pin_result p;
    p.reason = r.reason;
    p.budget_source = ddo::pin_budget_source::disabled;
    for (std::size_t i = 0; i < c.table.size(); ++i)
      p.where.push_back(r.resident[i] ? ddo::placement::gpu_resident
                                      : ddo::placement::pageable_host);
    return p;
  }
};
static_assert(ddo::pin_selector<pin_nothing>);

struct pin_selector_without_tag {
  ddo::pin_result select_pinned(const ddo::plan_context&, const ddo::residency_result&) const;
};
static_assert(!ddo::pin_selector<pin_selector_without_tag>);

ddo::machine_capacity machine() {
  ddo::machine_capacity m;
  m.free_vram_bytes = 80 * ddo::gib;
  m.total_vram_bytes = 96 * ddo::gib;
  m.available_ram_bytes = 64 * ddo::gib;
  return m;
}

/// Plan invariants every planner/selector combination keeps.
void check_plan_invariants(const ddo::offload_plan& plan, const ddo::weight_table& t) {
  REQUIRE(plan.decisions.size() == t.size());
  std::vector<int> seen(t.size(), 0);
  std::uint64_t sum = 0;
  for (std::size_t g = 0; g < plan.groups.size(); ++g) {
    std::uint64_t group_sum = 0;
    for (auto b : plan.groups[g].bytes_by_placement) group_sum += b;
    std::uint64_t weights_sum = 0;
    for (auto i : plan.groups[g].weights) {
      ++seen[i];
      CHECK(plan.decisions[i].group == g);
      weights_sum += t[i].bytes;
    }
    CHECK(group_sum == weights_sum);
    sum += group_sum;
  }
  for (int s : seen) CHECK(s == 1);
  CHECK(sum == t.total_bytes());
  CHECK(plan.total_bytes(ddo::placement::pinned_host) <= plan.budgets.pin_budget_bytes);
  std::uint64_t budget_winners = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    CHECK_FALSE(plan.decisions[i].reason.empty());
    if (plan.decisions[i].reason.starts_with("resident_budget")) budget_winners += t[i].bytes;
  }
  CHECK(budget_winners <= plan.budgets.resident_budget_bytes);
}

template <ddo::selection S>
struct selection_is {
  static constexpr ddo::selection value = S;
};

}  // namespace

TEST_SUITE("plan") {
  TEST_CASE_TEMPLATE_DEFINE("plans keep their budgets and are deterministic for every selection", S,
                            plan_invariants) {
    std::mt19937_64 rng(77);
    const auto t = ddo_test::flux_table(12);
    for (int round = 0; round < 25; ++round) {
      auto c = ddo_test::planning_config();
      c.resident_module_selection = S::value;
      c.pin_weight_selection = S::value;
      c.pin_cpu_memory = true;
      c.resident_module_patterns =
          rng() % 2 ? std::vector<std::string>{"auto"} : std::vector<std::string>{};
      c.resident_module_budget_gb = ddo::bytes_to_gib(rng() % (t.total_bytes() + 1));
      c.pin_weight_budget_gb = ddo::bytes_to_gib(rng() % (t.total_bytes() + 1));
      if (rng() % 3 == 0)
        c.always_resident_modules_pattern = ddo::builtin_always_resident_patterns();
      const auto plan = ddo::make_plan(t, c, machine());
      check_plan_invariants(plan, t);
      const auto again = ddo::make_plan(t, c, machine());
      for (std::size_t i = 0; i < t.size(); ++i) {
        CHECK(again.decisions[i].where == plan.decisions[i].where);
        CHECK(again.decisions[i].reason == plan.decisions[i].reason);
      }
    }
  }
  TEST_CASE_TEMPLATE_INVOKE(plan_invariants, selection_is<ddo::selection::first>,
                            selection_is<ddo::selection::spread>,
                            selection_is<ddo::selection::largest>);

  TEST_CASE("a group larger than the transport's slot is refused naming the group and both sizes") {
    const auto t = ddo_test::flux_table(4);
    auto c = ddo_test::planning_config();
    auto m = machine();
    m.max_group_bytes = 300 * ddo::kib;  // a block streams 384 KiB
    try {
      (void)ddo::make_plan(t, c, m);
      FAIL("no error");
    } catch (const ddo::out_of_memory& e) {
      CHECK(e.tier() == ddo::memory_tier::transport_slot);
      CHECK(e.available_bytes() == 300 * ddo::kib);
      const std::string what = e.what();
      CHECK(what.find("'<before>'") !=
            std::string::npos);  // context_embedder: 1 MiB, the first too large
      CHECK(what.find(std::to_string(300 * ddo::kib)) != std::string::npos);
    }
    m.max_group_bytes = 2 * ddo::mib;
    const auto plan = ddo::make_plan(t, c, m);
    CHECK(plan.largest_streamed_group_bytes() <= m.max_group_bytes);
    CHECK(plan.budgets.max_group_bytes == m.max_group_bytes);
  }

  TEST_CASE("a plan whose resident bytes exceed free VRAM is refused with the numbers") {
    const auto t = ddo_test::flux_table(4);
    auto c = ddo_test::planning_config();
    c.resident_module_budget_gb = 1.0;  // everything fits the budget
    auto m = machine();
    m.free_vram_bytes = ddo::mib;
    try {
      (void)ddo::make_plan(t, c, m);
      FAIL("no error");
    } catch (const ddo::out_of_memory& e) {
      CHECK(e.tier() == ddo::memory_tier::device);
      CHECK(e.requested_bytes() == t.total_bytes());
      CHECK(e.available_bytes() == ddo::mib);
      CHECK(std::string(e.what()).find("only 1.00 MiB of the device is free") !=
            std::string::npos);
    }
    m.free_vram_bytes = 0;  // unknown: no device check
    CHECK(ddo::make_plan(t, c, m).total_bytes(ddo::placement::gpu_resident) == t.total_bytes());
  }

  TEST_CASE("invalid planning numbers are config errors naming the field") {
    const auto t = ddo_test::flux_table(1);
    auto c = ddo_test::planning_config();
    c.resident_module_budget_gb = -1.0;
    CHECK_THROWS_WITH_AS((void)ddo::make_plan(t, c, machine()),
                         doctest::Contains("resident_module_budget_gb"), ddo::config_error);
    c = ddo_test::planning_config();
    c.pin_weight_budget_ratio = std::nan("");
    CHECK_THROWS_AS((void)ddo::make_plan(t, c, machine()), ddo::config_error);
  }

  TEST_CASE("custom policies compose, and engine-given groups replace inference") {
    const auto t = ddo_test::flux_table(2);
    auto c = ddo_test::planning_config();
    const auto plan = ddo::make_plan(t, c, machine(), stream_everything_planner{}, pin_nothing{});
    CHECK(plan.total_bytes(ddo::placement::gpu_resident) == 0);
    CHECK(plan.total_bytes(ddo::placement::pageable_host) == t.total_bytes());
    check_plan_invariants(plan, t);

    std::vector<ddo::execution_group> groups(1);
    groups[0].name = "everything";
    for (std::size_t i = 0; i < t.size(); ++i) groups[0].weights.push_back(t.size() - 1 - i);
    const auto one = ddo::make_plan(t, groups, c, machine());
    REQUIRE(one.groups.size() == 1);
    CHECK(one.groups[0].name == "everything");
    CHECK(one.groups[0].weights.front() == 0);
    groups[0].weights.pop_back();
    CHECK_THROWS_AS((void)ddo::make_plan(t, groups, c, machine()), ddo::usage_error);
  }

  TEST_CASE("plans of a generated 24-block model follow each selector and budget") {
    ddo_test::temp_dir dir;
    ddo::synthetic_model_options o;
    o.output = dir.file("m.safetensors.index.json");
    o.blocks = 24;
    o.hidden = 128;
    o.shards = 2;
    (void)ddo::write_synthetic_model(o);
    const auto t = ddo::load_safetensors(o.output);
    auto c = ddo_test::planning_config();
    c.resident_module_patterns = {"auto"};
    c.resident_module_budget_gb = ddo::bytes_to_gib(6 * 384 * ddo::kib);
    c.pin_cpu_memory = true;
    c.always_resident_modules_pattern = ddo::builtin_always_resident_patterns();

    c.resident_module_selection = ddo::selection::spread;
    auto plan = ddo::make_plan(t, c, machine());
    check_plan_invariants(plan, t);
    CHECK(ddo_test::resident_blocks(plan) ==
          std::vector<std::string>{"transformer_blocks.0", "transformer_blocks.5",
                                   "transformer_blocks.9", "transformer_blocks.14",
                                   "transformer_blocks.18", "transformer_blocks.23"});
    c.resident_module_selection = ddo::selection::first;
    plan = ddo::make_plan(t, c, machine());
    CHECK(ddo_test::resident_blocks(plan) ==
          std::vector<std::string>{"transformer_blocks.0", "transformer_blocks.1",
                                   "transformer_blocks.2", "transformer_blocks.3",
                                   "transformer_blocks.4", "transformer_blocks.5"});
    // Pinning with room for everything: every streamed byte pinned.
    CHECK(plan.total_bytes(ddo::placement::pageable_host) == 0);
    // The 18 streamed blocks plus the time embedder's and norm_out's linears (64 + 32 + 64 KiB),
    // which the built-in patterns (leaf names only) do not keep resident.
    CHECK(plan.total_bytes(ddo::placement::pinned_host) == 18 * 384 * ddo::kib + 160 * ddo::kib);
  }
}

TEST_SUITE("plan") {
  TEST_CASE("a resident cap the user did not set follows the card, and the plan says so") {
    // issue 38: the defaults' 6 GiB cap kept 6 GiB resident of a 20 GiB-free card.
    const auto t = ddo_test::flux_table(24, 1024);  // 24 blocks of 24 MiB
    auto c = ddo_test::planning_config();
    c.auto_budget_policy = ddo::budget_policy::balanced;
    c.resident_module_patterns = {"auto"};
    c.auto_vram_headroom_gb = 0.0;
    c.max_resident_module_budget_gb = 0.25;  // 256 MiB: about ten blocks
    auto m = machine();
    m.free_vram_bytes = t.total_bytes() + ddo::gib;
    const auto capped = ddo::make_plan(t, c, m);
    CHECK(capped.budgets.resident_budget_bytes == ddo::gib / 4);
    m.resident_cap_origin = "preset low_ram_safe";
    const auto follows = ddo::make_plan(t, c, m);
    CHECK(follows.budgets.resident_budget_bytes > t.total_bytes());
    CHECK(ddo_test::resident_blocks(follows).size() == 24);
    CHECK(ddo_test::resident_blocks(capped).size() < 24);
    CHECK(follows.budgets.resident_budget_detail.find(
              "from preset low_ram_safe follows the card") != std::string::npos);
  }

  TEST_CASE("a device refusal names what took the card and the smallest card that would do") {
    // issue 37 item 5: "only 1 B of the device is free" said nothing of the ring or reserves.
    const auto t = ddo_test::flux_table(4);
    auto c = ddo_test::planning_config();
    c.resident_module_budget_gb = 1.0;
    auto m = machine();
    m.total_vram_bytes = 4 * ddo::gib;
    m.free_vram_bytes = 1;  // what the setup path passes for a card already full
    m.device_shortfall_bytes = 512 * ddo::mib;
    m.free_vram_detail = "card 4.00 GiB: ring 3 x 1.50 GiB, engine reserve 160.00 MiB";
    try {
      (void)ddo::make_plan(t, c, m);
      FAIL("no error");
    } catch (const ddo::out_of_memory& e) {
      const std::string what = e.what();
      CHECK(what.find("only 1 B") == std::string::npos);
      CHECK(what.find("nothing of the device is free for the plan") != std::string::npos);
      CHECK(what.find("ring 3 x 1.50 GiB, engine reserve") != std::string::npos);
      // The card: 4 GiB all taken, 512 MiB short, plus what the plan keeps resident.
      CHECK(what.find("the smallest card that would do has " +
                      ddo::format_bytes(4 * ddo::gib + 512 * ddo::mib + t.total_bytes())) !=
            std::string::npos);
    }
  }

  TEST_CASE("the plan prints its three tiers and the step bound they aim for") {
    const auto t = ddo_test::flux_table(8, 1024);
    auto c = ddo_test::planning_config();
    c.resident_module_budget_gb = 0.05;
    c.pin_cpu_memory = true;
    c.pin_weight_budget_gb = 0.05;
    auto m = machine();
    const auto plan = ddo::make_plan(t, c, m);
    const auto bound = ddo::tier_bound_of(plan, m);
    CHECK(bound.pinned_bytes == plan.total_bytes(ddo::placement::pinned_host));
    CHECK(bound.pageable_bytes > 0);
    CHECK(bound.bus_seconds() ==
          doctest::Approx(static_cast<double>(bound.pinned_bytes + bound.pageable_bytes) /
                          ddo::assumed_bus_bytes_per_s));
    CHECK(bound.disk_seconds() == 0.0);
    const auto& detail = plan.budgets.tier_bound_detail;
    CHECK(detail.find("pinned " + ddo::format_bytes(bound.pinned_bytes)) != std::string::npos);
    CHECK(detail.find("GB/s assumed") != std::string::npos);
    CHECK(ddo::format_plan_summary(plan, t).find("  tiers: resident ") != std::string::npos);
    m.bus_bytes_per_s = 25e9;  // measured: used and said so
    m.disk_bytes_per_s = 3e9;
    const auto measured = ddo::tier_bound_of(plan, m);
    CHECK(measured.bus_seconds() > bound.bus_seconds());
    CHECK(ddo::describe_tier_bound(measured).find("25.00 GB/s measured") != std::string::npos);
    // A file tier: its reads overlap the bus copies, so the bound is the larger of the two.
    ddo::tier_bound three = measured;
    three.file_bytes = 6'000'000'000;
    CHECK(three.transfer_seconds() == doctest::Approx(2.0));
    CHECK(ddo::describe_tier_bound(three).find("2.00 s from the disk") != std::string::npos);
    // disk_read_gb_per_s states the disk's rate: it wins over a measurement, and says so.
    ddo::tier_bound stated = ddo::tier_bound_of(plan, m, 1.5);
    stated.file_bytes = 6'000'000'000;
    CHECK(stated.disk_seconds() == doctest::Approx(4.0));
    CHECK(ddo::describe_tier_bound(stated).find("4.00 s from the disk at 1.50 GB/s stated "
                                                "(disk_read_gb_per_s)") != std::string::npos);
    // The planner's printed bound takes it from the settings (the same table, from its file).
    ddo::weight_table from_file;
    const std::size_t file = from_file.add_file("/nonexistent/model.safetensors");
    std::uint64_t offset = 0;
    for (auto w : t.weights()) {
      w.source = ddo::file_source{file, offset};
      offset += w.bytes;
      from_file.add(w);
    }
    c.disk_read_gb_per_s = 1.5;
    ddo::default_pin_selector file_route;
    file_route.file_route = true;
    const auto planned =
        ddo::make_plan(from_file, c, m, ddo::default_residency_planner{}, file_route);
    REQUIRE(planned.total_bytes(ddo::placement::file) != 0);
    CHECK(planned.budgets.tier_bound_detail.find("GB/s stated (disk_read_gb_per_s)") !=
          std::string::npos);
  }
}
