// SPDX-License-Identifier: Apache-2.0
#include "ddo/config/validate.hpp"

#include <doctest/doctest.h>

#include <limits>
#include <string>

#include "ddo/config/toml_source.hpp"
#include "support.hpp"

namespace {

std::string error_for(std::map<std::string, std::string> env) {
  try {
    (void)ddo::resolve_settings(ddo_test::hermetic_inputs(std::move(env)));
  } catch (const ddo::config_error& error) {
    const std::string message = error.what();
    CHECK(message.find('\n') == std::string::npos);
    return message;
  }
  FAIL("no error");
  return {};
}

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("each validation rule names the variable, the value and the rule") {
    const std::pair<std::map<std::string, std::string>, std::vector<std::string>> cases[] = {
        {{{"DDO_PIN_CPU_WORKERS", "0"}}, {"DDO_PIN_CPU_WORKERS = 0", "positive"}},
        {{{"DDO_PIN_CPU_WORKERS", "-3"}}, {"DDO_PIN_CPU_WORKERS = -3", "positive"}},
        {{{"DDO_VMM_PAGE_MB", "3"}}, {"DDO_VMM_PAGE_MB = 3", "multiple of 2"}},
        {{{"DDO_VMM_SOURCE_CACHE_GB", "1"}, {"DDO_VMM_SOURCE_REGISTERED_GB", "0.1"}},
         {"DDO_VMM_SOURCE_REGISTERED_GB = 0.1", "64 MiB"}},
        {{{"DDO_VMM_SOURCE_CACHE_GB", "1"}, {"DDO_VMM_SOURCE_REGISTERED_GB", "1.5"}},
         {"DDO_VMM_SOURCE_REGISTERED_GB = 1.5", "within", "DDO_VMM_SOURCE_CACHE_GB"}},
        {{{"DDO_EXECUTION_MODE", "vmm_runtime"}},
         {"DDO_EXECUTION_MODE = \"vmm_runtime\"", "vmm_resident_weight_budget_gb"}},
        {{{"DDO_EXECUTION_MODE", "vmm_runtime"}, {"DDO_VMM_RESIDENT_WEIGHT_BUDGET_GB", "0"}},
         {"DDO_VMM_RESIDENT_WEIGHT_BUDGET_GB = 0.0", "positive"}},
        {{{"DDO_EXECUTION_MODE", "vmm_runtime"},
          {"DDO_VMM_RESIDENT_WEIGHT_BUDGET_GB", "2"},
          {"DDO_VMM_STAGING_BUFFER_GB", "0"}},
         {"DDO_VMM_STAGING_BUFFER_GB = 0.0", "positive"}},
        {{{"DDO_BACKEND", "vmm"}, {"DDO_PRESET", "nvme_baseline"}, {"DDO_EXECUTION_MODE", "plan"}},
         {"DDO_BACKEND", "execution_mode vmm_runtime", "DDO_EXECUTION_MODE"}},
        {{{"DDO_VMM_NATIVE_SOURCE_CACHE_SLOT_MB", "8"}},
         {"DDO_VMM_NATIVE_SOURCE_CACHE_SLOT_MB = 8", "set both or neither"}},
        {{{"DDO_VMM_NATIVE_SOURCE_CACHE_SLOTS", "4"}},
         {"DDO_VMM_NATIVE_SOURCE_CACHE_SLOTS = 4", "set both or neither"}},
        {{{"DDO_RESIDENT_MODULE_PATTERNS", "blocks\\.(\\d+"}},
         {"DDO_RESIDENT_MODULE_PATTERNS", "regular expression"}},
        {{{"DDO_VMM_MODULE_PATTERN", "["}},
         {"DDO_VMM_MODULE_PATTERN = \"[\"", "regular expression"}},
    };
    // Named elements, not a structured binding: doctest's CAPTURE captures in a lambda,
    // which clang before 16 cannot do for a binding.
    for (const auto& row : cases) {
      const auto& env = std::get<0>(row);
      const auto& needles = std::get<1>(row);
      CAPTURE(env.begin()->first);
      const std::string message = error_for(env);
      for (const auto& needle : needles) {
        CAPTURE(needle);
        CHECK(message.find(needle) != std::string::npos);
      }
    }
  }

  TEST_CASE("code-only fields are validated with the explicit config named") {
    auto inputs = ddo_test::hermetic_inputs();
    inputs.overrides = {{ddo::field_id::execution_device, std::string("gpu0")}};
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                         doctest::Contains("explicit config field execution_device = \"gpu0\""),
                         ddo::config_error);
    inputs.overrides = {{ddo::field_id::offload_device, std::string("disk")}};
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs), doctest::Contains("\"cpu\""),
                         ddo::config_error);
    inputs.overrides = {{ddo::field_id::build_profile, true}};
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs), doctest::Contains("profile_name"),
                         ddo::config_error);
    inputs.overrides = {{ddo::field_id::build_profile, true},
                        {ddo::field_id::profile_name, std::string("flux")},
                        {ddo::field_id::execution_device, std::string("cuda:1")}};
    CHECK_NOTHROW((void)ddo::resolve_settings(inputs));
  }

  TEST_CASE("an explicit config is checked for non-finite sizes, byte bounds and ownership") {
    auto inputs = ddo_test::hermetic_inputs();
    inputs.config = ddo::dynamic_offload_config{};
    inputs.config->max_pin_weight_budget_gb = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                         "explicit config field max_pin_weight_budget_gb = nan: must be a finite "
                         "number",
                         ddo::config_error);
    inputs.config = ddo::dynamic_offload_config{};
    inputs.config->small_tensor_threshold_bytes = (std::int64_t{1} << 54) + 1;
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                         doctest::Contains("must be from 0 to 18014398509481984 bytes (16 PiB"),
                         ddo::config_error);
    inputs.config.reset();
    inputs.overrides = {{ddo::field_id::vmm_component_tensor_ownership, true},
                        {ddo::field_id::execution_mode, ddo::exec_mode::plan}};
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                         doctest::Contains("for the native VMM route only (vmm_fast_runtime: "
                                           "execution_mode vmm_runtime with vmm_native_transport "
                                           "or a positive vmm_source_cache_gb); execution_mode is "
                                           "\"plan\" (explicit config field execution_mode)"),
                         ddo::config_error);
  }

  TEST_CASE("pin_weight_budget_ratio is clamped to 0..1 with a warning") {
    std::uint64_t seed = 0;
    auto rng = ddo_test::random_engine(seed);
    INFO("seed " << seed);
    const double inside = static_cast<double>(rng() % 100) / 100.0;
    auto settings = ddo::resolve_settings(ddo_test::hermetic_inputs(
        {{"DDO_PIN_WEIGHT_BUDGET_RATIO", ddo::detail::format_number(inside)}}));
    CHECK(settings.config.pin_weight_budget_ratio == doctest::Approx(inside));
    CHECK(settings.warnings.empty());
    settings = ddo::resolve_settings(ddo_test::hermetic_inputs(
        {{"DDO_PIN_WEIGHT_BUDGET_RATIO", std::to_string(2 + rng() % 9)}}));
    CHECK(settings.config.pin_weight_budget_ratio == 1.0);
    REQUIRE(settings.warnings.size() == 1);
    CHECK(settings.warnings[0].find("DDO_PIN_WEIGHT_BUDGET_RATIO") != std::string::npos);
    settings =
        ddo::resolve_settings(ddo_test::hermetic_inputs({{"DDO_PIN_WEIGHT_BUDGET_RATIO", "-0.5"}}));
    CHECK(settings.config.pin_weight_budget_ratio == 0.0);
  }

  TEST_CASE("whole 64 MiB segments within storage are accepted") {
    const auto settings =
        ddo::resolve_settings(ddo_test::hermetic_inputs({{"DDO_VMM_SOURCE_CACHE_GB", "2"},
                                                         {"DDO_VMM_SOURCE_REGISTERED_GB", "1.0625"},
                                                         {"DDO_VMM_PAGE_MB", "64"}}));
    CHECK(settings.config.vmm_source_registered_gb == 1.0625);
    CHECK(settings.config.vmm_page_mb == 64);
  }

  TEST_CASE("every size in GiB or MiB past 16 PiB is refused naming its source and the range") {
    // issue 30: --ddo-vmm-staging-buffer-gb 1e12 saturated to 2^64 - 1 bytes, which an alignment
    // wrapped to 0 ("must be at least 8192 bytes, got 0" from the transport).
    std::size_t checked = 0;
    for (const auto& info : ddo::config_fields()) {
      const bool gib = info.unit == "GiB", mib = info.unit == "MiB";
      if (!gib && !mib) continue;
      CAPTURE(info.name);
      const std::string name(info.name);
      const std::string big = gib ? "1e12" : "17179869185";  // 2^34 + 1 MiB
      const std::string range =
          gib ? "must be from 0 to 16777216 GiB" : "must be from 0 to 17179869184 MiB";
      if (!info.env.empty()) {
        auto inputs = ddo_test::hermetic_inputs({{std::string(info.env), big}});
        CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                             doctest::Contains((std::string(info.env) + " = ").c_str()),
                             ddo::config_error);
        CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs), doctest::Contains(range.c_str()),
                             ddo::config_error);
      }
      auto toml = ddo_test::hermetic_inputs();
      toml.toml = ddo::parse_toml_config(name + " = " + (gib ? "1e12" : big), "t.toml");
      CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(toml),
                           doctest::Contains(("t.toml:" + name).c_str()), ddo::config_error);
      if (info.has_flag) {
        auto cli = ddo_test::hermetic_inputs();
        cli.cli.emplace();
        cli.cli->source = ddo::origin::cli;
        const ddo::field_value value =
            gib ? ddo::field_value(1e12) : ddo::field_value(std::int64_t{17179869185});
        cli.cli->fields.push_back({*ddo::find_field(name), value, {ddo::origin::cli, info.flag()}});
        CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(cli),
                             doctest::Contains((info.flag() + " = ").c_str()), ddo::config_error);
        CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(cli), doctest::Contains(range.c_str()),
                             ddo::config_error);
      }
      ++checked;
    }
    CHECK(checked >= 20);
    // The bound itself is accepted.
    auto at_bound = ddo_test::hermetic_inputs({{"DDO_MAX_PIN_WEIGHT_BUDGET_GB", "16777216"}});
    CHECK(ddo::resolve_settings(at_bound).config.max_pin_weight_budget_gb == 16777216.0);
  }
}
