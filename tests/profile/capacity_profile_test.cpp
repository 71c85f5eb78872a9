// SPDX-License-Identifier: Apache-2.0
#include "ddo/profile/capacity_profile.hpp"
#include "ddo/profile/profile_store.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace {

struct scratch_dir {
  std::filesystem::path path;
  scratch_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ddo-profile-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

ddo::calibration_measurement random_measurement(std::mt19937_64& rng) {
  ddo::calibration_measurement m;
  m.total_vram_bytes = 24 * ddo::gib + rng() % ddo::gib;
  m.free_vram_before_bytes = m.total_vram_bytes - rng() % (2 * ddo::gib);
  m.min_free_vram_bytes = m.free_vram_before_bytes - rng() % (8 * ddo::gib);
  m.model_bytes = 12 * ddo::gib + rng() % ddo::gib;
  m.device_name = "Test \"GPU\" " + std::to_string(rng() % 100);
  return m;
}

}  // namespace

TEST_SUITE("profile") {
  TEST_CASE("calibration recommends what stayed free at the peak, less the headroom") {
    ddo::calibration_measurement m;
    m.total_vram_bytes = 24 * ddo::gib;
    m.free_vram_before_bytes = 22 * ddo::gib;
    m.min_free_vram_bytes = 15 * ddo::gib;
    const auto p = ddo::make_capacity_profile("flux-1024", m, 1.0);
    CHECK(p.peak_in_use_bytes == 7 * ddo::gib);
    CHECK(p.headroom_bytes == ddo::gib);
    CHECK(p.recommended_resident_budget_bytes == 14 * ddo::gib);
    CHECK(p.full_pin);

    m.min_free_vram_bytes = ddo::gib / 2;  // less free than the headroom: recommend nothing
    CHECK(ddo::make_capacity_profile("flux-1024", m, 1.0).recommended_resident_budget_bytes == 0);
  }

  TEST_CASE("inconsistent measurements and bad names are refused") {
    ddo::calibration_measurement m;
    m.total_vram_bytes = 8 * ddo::gib;
    m.free_vram_before_bytes = 4 * ddo::gib;
    m.min_free_vram_bytes = 5 * ddo::gib;
    CHECK_THROWS_AS((void)ddo::make_capacity_profile("x", m, 1.0), ddo::usage_error);
    m.min_free_vram_bytes = ddo::gib;
    for (const char* bad : {"", "../escape", ".hidden", "a/b", "with space"})
      CHECK_THROWS_AS((void)ddo::make_capacity_profile(bad, m, 1.0), ddo::config_error);
  }

  TEST_CASE("a saved profile reads back identical, and a missing one is nullopt") {
    scratch_dir dir;
    const ddo::profile_store store((dir.path / "nested" / "profiles").string());
    std::mt19937_64 rng(std::random_device{}());
    for (int i = 0; i < 8; ++i) {
      const auto p = ddo::make_capacity_profile("run-" + std::to_string(i), random_measurement(rng),
                                                static_cast<double>(rng() % 3));
      store.save(p);
      const auto back = store.find(p.name);
      REQUIRE(back.has_value());
      CHECK(*back == p);
    }
    CHECK_FALSE(store.find("never-saved").has_value());
    // No temporary files are left behind by the atomic saves.
    for (const auto& entry : std::filesystem::directory_iterator(store.directory()))
      CHECK(entry.path().extension() == ".json");
  }

  TEST_CASE("malformed profile files give format errors naming the file and key") {
    scratch_dir dir;
    const ddo::profile_store store(dir.path.string());
    std::mt19937_64 rng(std::random_device{}());
    const auto good = ddo::profile_store::format(
        ddo::make_capacity_profile("p", random_measurement(rng), 1.0));
    const auto write = [&](const std::string& text) {
      std::ofstream(store.path_of("p")) << text;
    };
    const auto expect_error = [&](const std::string& text, const std::string& key) {
      write(text);
      try {
        (void)store.find("p");
        FAIL("no error for: " << text);
      } catch (const ddo::format_error& e) {
        CHECK(e.file() == store.path_of("p").string());
        CHECK(e.tensor() == key);
      }
    };
    const auto inserted = [&](const std::string& member) {
      return std::string(good).insert(2, member + ",\n");
    };
    expect_error(inserted("\"extra_key\": 1"), "extra_key");
    expect_error(inserted("\"model_bytes\": 5"), "");  // JSON's duplicate key
    std::string negative = good;
    negative.insert(negative.find("\"model_bytes\": ") + 15, "-");
    expect_error(negative, "model_bytes");
    expect_error(good.substr(0, good.find("full_pin")), "");
    std::string renamed = good;
    renamed.replace(renamed.find("\"name\": \"p\""), 11, "\"name\": \"q\"");
    expect_error(renamed, "name");
    expect_error("this is not json\n", "");
  }

  TEST_CASE("a leading ~ in the profile directory is HOME") {
    const char* home = std::getenv("HOME");
    if (home == nullptr) return;
    CHECK(ddo::expand_home("~/.ddo/profiles") == std::filesystem::path(home) / ".ddo/profiles");
    CHECK(ddo::expand_home("/abs/dir") == std::filesystem::path("/abs/dir"));
  }
}

#include "ddo/plan/planner.hpp"
#include "ddo/profile/profile_lookup.hpp"

#include "../plan/plan_test_support.hpp"

TEST_SUITE("profile") {
  TEST_CASE("a stored profile sets the resident budget and full pinning; explicit budget wins") {
    scratch_dir dir;
    const auto table = ddo_test::flux_table(8);
    auto config = ddo_test::planning_config();
    config.pin_cpu_memory = true;
    config.auto_budget_policy = ddo::budget_policy::balanced;
    config.profile_name = "flux-test";
    ddo::machine_capacity machine;
    machine.free_vram_bytes = 90 * ddo::gib;
    machine.total_vram_bytes = 96 * ddo::gib;
    machine.available_ram_bytes = 64 * ddo::gib;

    // Nothing stored yet: a note, and the balanced budget as usual.
    auto m = machine;
    CHECK(ddo::apply_capacity_profile(m, config, dir.path.string()).find("none stored") !=
          std::string::npos);
    CHECK_FALSE(m.profile_resident_budget_bytes.has_value());
    CHECK(ddo::make_plan(table, config, m).budgets.resident_source == ddo::resident_budget_source::balanced);

    ddo::capacity_profile p;
    p.name = "flux-test";
    p.total_vram_bytes = machine.total_vram_bytes;
    p.recommended_resident_budget_bytes = table.total_bytes() / 3;
    ddo::profile_store(dir.path.string()).save(p);
    m = machine;
    (void)ddo::apply_capacity_profile(m, config, dir.path.string());
    REQUIRE(m.profile_resident_budget_bytes == p.recommended_resident_budget_bytes);
    const auto plan = ddo::make_plan(table, config, m);
    CHECK(plan.budgets.resident_source == ddo::resident_budget_source::profile);
    CHECK(plan.budgets.resident_budget_bytes == p.recommended_resident_budget_bytes);
    CHECK(plan.budgets.pin_source == ddo::pin_budget_source::full_pin);
    CHECK(ddo_test::bytes_where(plan, table, ddo::placement::pageable_host) == 0);
    std::uint64_t budget_winners = 0;
    for (std::size_t i = 0; i < table.size(); ++i)
      if (plan.decisions[i].reason.starts_with("resident_budget")) budget_winners += table[i].bytes;
    CHECK(budget_winners > 0);
    CHECK(budget_winners <= p.recommended_resident_budget_bytes);

    auto explicit_config = config;
    explicit_config.resident_module_budget_gb = 0.001;
    CHECK(ddo::make_plan(table, explicit_config, m).budgets.resident_source == ddo::resident_budget_source::explicit_budget);

    // A profile from a device of another size is not applied.
    m = machine;
    m.total_vram_bytes = 24 * ddo::gib;
    CHECK(ddo::apply_capacity_profile(m, config, dir.path.string()).find("not applied") !=
          std::string::npos);
    CHECK_FALSE(m.profile_resident_budget_bytes.has_value());
  }

  TEST_CASE("calibration plans zero resident with full pinning and needs a name") {
    const auto table = ddo_test::flux_table(8);
    auto config = ddo_test::planning_config();
    config.pin_cpu_memory = true;
    config.build_profile = true;
    config.profile_name = "calib";
    config.resident_module_budget_gb = 1.0;  // ignored while calibrating
    ddo::machine_capacity machine;
    machine.free_vram_bytes = 90 * ddo::gib;
    machine.total_vram_bytes = 96 * ddo::gib;
    machine.available_ram_bytes = 64 * ddo::gib;
    machine.profile_resident_budget_bytes = 5 * ddo::gib;  // a stored profile is not used either
    const auto plan = ddo::make_plan(table, config, machine);
    CHECK(plan.budgets.resident_source == ddo::resident_budget_source::build_profile);
    CHECK(plan.budgets.resident_budget_bytes == 0);
    CHECK(plan.budgets.pin_source == ddo::pin_budget_source::full_pin);
    CHECK(ddo_test::bytes_where(plan, table, ddo::placement::pageable_host) == 0);
    config.profile_name.clear();
    CHECK_THROWS_AS((void)ddo::make_plan(table, config, machine), ddo::config_error);
  }
}
