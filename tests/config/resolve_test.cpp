// SPDX-License-Identifier: Apache-2.0
#include "ddo/config/resolve.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <map>
#include <string>
#include <utility>
#include <vector>
#include <thread>

#include "ddo/config/operational_defaults.hpp"
#include "ddo/config/settings_toml.hpp"
#include "ddo/config/toml_limits.hpp"
#include "ddo/config/toml_source.hpp"
#include "support.hpp"

namespace {

ddo::config_layer cli_layer(std::vector<std::pair<std::string, ddo::field_value>> values) {
  ddo::config_layer layer;
  layer.source = ddo::origin::cli;
  for (auto& [name, value] : values)
    layer.fields.push_back({*ddo::find_field(name), value,
                            {ddo::origin::cli, ddo::field(name).flag()}});
  return layer;
}

// The reference model of ddo::config_source: a source that sets one field from a value it holds.
struct fixed_workers_source {
  using source_category = ddo::config_source_tag;
  std::int64_t workers = 1;
  [[nodiscard]] ddo::config_layer collect() const {
    ddo::config_layer layer;
    layer.source = ddo::origin::toml;
    layer.fields.push_back({*ddo::find_field("pin_cpu_workers"), workers,
                            {ddo::origin::toml, "fixed:pin_cpu_workers"}});
    return layer;
  }
};
static_assert(ddo::config_source<fixed_workers_source>);

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("precedence: preset < explicit config < TOML < environment < CLI < component") {
    std::uint64_t seed = 0;
    auto rng = ddo_test::random_engine(seed);
    INFO("seed " << seed);
    // Six distinct random worker counts, one per source.
    std::vector<std::int64_t> w;
    while (w.size() < 5) {
      const auto v = static_cast<std::int64_t>(10 + rng() % 90);
      if (std::find(w.begin(), w.end(), v) == w.end()) w.push_back(v);
    }
    const auto resolve = [&](int sources) {
      auto inputs = ddo_test::hermetic_inputs();
      inputs.preset = "low_ram_safe";  // sets pin_cpu_workers = 2
      inputs.component = "transformer";
      if (sources > 0) inputs.overrides = {{ddo::field_id::pin_cpu_workers, w[0]}};
      if (sources > 1)
        inputs.toml = ddo::parse_toml_config("pin_cpu_workers = " + std::to_string(w[1]), "t.toml");
      if (sources > 2) inputs.environment = std::map<std::string, std::string>{{"DDO_PIN_CPU_WORKERS", std::to_string(w[2])}};
      if (sources > 3) inputs.cli = cli_layer({{"pin_cpu_workers", w[3]}});
      if (sources > 4)
        inputs.component_policies["transformer"].set(ddo::field_id::pin_cpu_workers, w[4]);
      return ddo::resolve_settings(inputs);
    };
    const ddo::origin origins[] = {ddo::origin::preset, ddo::origin::config, ddo::origin::toml,
                                   ddo::origin::env, ddo::origin::cli, ddo::origin::component};
    for (int sources = 0; sources <= 5; ++sources) {
      CAPTURE(sources);
      const auto settings = resolve(sources);
      CHECK(settings.config.pin_cpu_workers == (sources == 0 ? 2 : w[sources - 1]));
      CHECK(settings.provenance.of(ddo::field_id::pin_cpu_workers).source == origins[sources]);
    }
    const auto all = resolve(5);
    CHECK(all.provenance.of(ddo::field_id::pin_cpu_workers).key ==
          "component transformer policy field pin_cpu_workers");
    CHECK(resolve(3).provenance.of(ddo::field_id::pin_cpu_workers).key == "DDO_PIN_CPU_WORKERS");
    CHECK(resolve(4).provenance.of(ddo::field_id::pin_cpu_workers).key == "--ddo-pin-cpu-workers");
  }

  TEST_CASE("from_env's pin worker count follows the machine's threads, 4 to 16") {
    // The reference resolves 4; ddo reads the weights with the machine's threads (setup 3.41 s
    // with 4, 1.52 s with 16 on a 23.8 GB model), within a bound.
    CHECK(ddo::operational_pin_cpu_workers(0) == 4);  // hardware_concurrency() unknown
    CHECK(ddo::operational_pin_cpu_workers(2) == 4);
    CHECK(ddo::operational_pin_cpu_workers(12) == 12);
    CHECK(ddo::operational_pin_cpu_workers(16) == 16);
    CHECK(ddo::operational_pin_cpu_workers(128) == 16);
    // A preset's own count is kept.
    auto inputs = ddo_test::hermetic_inputs();
    inputs.preset = "low_ram_safe";
    CHECK(ddo::resolve_settings(inputs).config.pin_cpu_workers == 2);
  }

  TEST_CASE("from_env operational defaults apply without a preset override") {
    auto inputs = ddo_test::hermetic_inputs();
    inputs.detected_ram_gb = 48.5;
    const auto settings = ddo::resolve_settings(inputs);
    CHECK(settings.config.small_tensor_threshold_bytes == 1024 * 1024);
    CHECK(settings.config.pin_cpu_workers ==
          ddo::operational_pin_cpu_workers(std::thread::hardware_concurrency()));
    CHECK(settings.config.available_system_ram_gb == 48.5);
    CHECK(settings.provenance.of(ddo::field_id::available_system_ram_gb).source ==
          ddo::origin::detected);
    CHECK_FALSE(settings.config.show_profile);
    CHECK(settings.config.always_resident_modules_pattern == ddo::builtin_always_resident_patterns());
    CHECK(settings.provenance.of(ddo::field_id::show_profile).source == ddo::origin::default_value);
  }

  TEST_CASE("a whole explicit config replaces preset and operational defaults") {
    auto inputs = ddo_test::hermetic_inputs({{"DDO_VERBOSE", "1"}});
    ddo::dynamic_offload_config config;
    config.execution_mode = ddo::exec_mode::linear_runtime;
    config.pin_cpu_workers = 3;
    inputs.config = config;
    inputs.preset = "low_ram_safe";
    inputs.components = {"vae"};
    const auto settings = ddo::resolve_settings(inputs);
    CHECK(settings.config.pin_cpu_workers == 3);  // not the preset's 2
    CHECK(settings.config.small_tensor_threshold_bytes == 16 * 1024);  // not from_env()'s
    CHECK(settings.config.verbose);  // the environment still outranks it
    CHECK(settings.provenance.of(ddo::field_id::pin_cpu_workers).source == ddo::origin::config);
    CHECK(settings.explicit_config);
    // The preset's VAE leaf fallback is bypassed by an explicit config.
    CHECK(settings.components.at(0).route == ddo::component_route::dynamic_offload);
  }

  // The reference: "An explicit DynamicOffloadConfig, runtime overrides, or group/dynamic enable
  // arguments bypass the new preset route fallback; they are not silently replaced with leaf."
  TEST_CASE("the preset's VAE route fallback: bypassed by code, not by the environment") {
    auto inputs = ddo_test::hermetic_inputs();
    inputs.component = "vae";
    const auto vae_route = [&] { return ddo::resolve_settings(inputs).components.at(0); };
    REQUIRE(vae_route().route == ddo::component_route::diffusers_group_offload);  // the fallback
    SUBCASE("an explicit config") {
      inputs.config = ddo::dynamic_offload_config{};
      CHECK(vae_route().route == ddo::component_route::dynamic_offload);
    }
    SUBCASE("runtime overrides: one field given in code") {
      inputs.overrides = {{ddo::field_id::pin_cpu_workers, ddo::field_value{std::int64_t{3}}}};
      const auto settings = ddo::resolve_settings(inputs);
      CHECK(settings.route_fallback_bypassed);
      CHECK_FALSE(settings.explicit_config);
      CHECK(settings.components.at(0).route == ddo::component_route::dynamic_offload);
      CHECK(settings.components.at(0).route_origin.source == ddo::origin::preset);
    }
    SUBCASE("group/dynamic enable arguments: an explicit route") {
      inputs.route = ddo::component_route::dynamic_offload;
      CHECK(vae_route().route == ddo::component_route::dynamic_offload);
      inputs.route = ddo::component_route::diffusers_group_offload;
      const auto group = vae_route();
      CHECK(group.route == ddo::component_route::diffusers_group_offload);
      CHECK(group.route_origin.source != ddo::origin::preset);
      // Not replaced with leaf: the route's own offload type (issue 37), and said so.
      CHECK(group.offload_type == ddo::group_offload_type::block_level);
      CHECK(ddo::resolve_settings(inputs).route_fallback_bypassed);
    }
    SUBCASE("environment variables do not bypass it") {
      inputs.environment = std::map<std::string, std::string>{{"DDO_PIN_CPU_WORKERS", "3"}};
      const auto settings = ddo::resolve_settings(inputs);
      CHECK_FALSE(settings.route_fallback_bypassed);
      CHECK(settings.config.pin_cpu_workers == 3);
      CHECK(settings.components.at(0).route == ddo::component_route::diffusers_group_offload);
    }
  }

  TEST_CASE("the VAE's offload type for every preset x route x source (issue 37)") {
    // A route named in code (resolve_inputs::route, a component policy) bypasses the preset's
    // leaf fallback: the route keeps its own offload type. From the environment, TOML or flags
    // it does not (documented): the fallback's leaf_level stays under the presets that have it.
    using ddo::component_route;
    using ddo::group_offload_type;
    // The presets whose VAE default is a fallback: leaf group offload, or resident (none).
    const std::vector<std::string> leaf = {"auto", "one_shot_fast", "low_ram_safe",
                                           "vmm_fast_runtime"};
    const std::vector<std::string> fallback = {"auto", "one_shot_fast", "low_ram_safe",
                                               "vmm_fast_runtime", "warm_process", "wsl_compat",
                                               "nvme_baseline"};
    const std::vector<std::string> presets = {
        "auto", "one_shot_fast", "low_ram_safe", "vmm_fast_runtime", "warm_process",
        "wsl_compat", "nvme_baseline", "off", "diffusers_offload_compat",
        "diffusers_leaf_offload_compat"};
    const std::vector<std::pair<component_route, std::string>> routes = {
        {component_route::diffusers_group_offload, "group"},
        {component_route::dynamic_offload, "ddo"},
        {component_route::none, "none"}};
    const std::vector<std::string> sources = {"code route", "code policy", "env", "toml", "flags"};
    for (const auto& preset : presets)
      for (const auto& item : routes)
        for (const auto& source : sources) {
          const component_route route = item.first;
          const std::string& name = item.second;
          CAPTURE(preset);
          CAPTURE(name);
          CAPTURE(source);
          auto inputs = ddo_test::hermetic_inputs();
          inputs.component = "vae";
          inputs.preset = preset;
          if (source == "code route") inputs.route = route;
          if (source == "code policy") inputs.component_policies["vae"].route = route;
          if (source == "env")
            inputs.environment = std::map<std::string, std::string>{{"DDO_VAE_ROUTE", name}};
          if (source == "toml")
            inputs.toml = ddo::parse_toml_config("[components.vae]\nroute = '" + name + "'",
                                                 "t.toml");
          if (source == "flags") {
            ddo::config_layer cli;
            cli.source = ddo::origin::cli;
            cli.components["vae"].route = route;
            inputs.cli = cli;
          }
          const auto settings = ddo::resolve_settings(inputs);
          const auto& vae = settings.components.at(0);
          CHECK(vae.route == route);
          const bool from_code = source.starts_with("code");
          const bool has_fallback =
              std::find(fallback.begin(), fallback.end(), preset) != fallback.end();
          const bool leaf_fallback = std::find(leaf.begin(), leaf.end(), preset) != leaf.end();
          const bool is_leaf =
              preset == "diffusers_leaf_offload_compat" || (leaf_fallback && !from_code);
          CHECK(vae.offload_type ==
                (is_leaf ? group_offload_type::leaf_level : group_offload_type::block_level));
          CHECK(settings.route_fallback_bypassed == (from_code && has_fallback));
        }
  }

  TEST_CASE("one limit for a string value whatever its source; what ddo-config prints reads back") {
    // Issue 37: a 120 KB flag value was accepted and printed, and ddo-config's own TOML reader
    // refused the output (a string over its 64 KiB text limit).
    const std::string field = "pinned_weight_cache_namespace";
    const auto with = [&](const std::string& source, const std::string& value) {
      auto inputs = ddo_test::hermetic_inputs();
      if (source == "code")
        inputs.overrides = {{ddo::field_id::pinned_weight_cache_namespace, ddo::field_value{value}}};
      if (source == "env")
        inputs.environment =
            std::map<std::string, std::string>{{"DDO_PINNED_WEIGHT_CACHE_NAMESPACE", value}};
      if (source == "toml")
        inputs.toml = ddo::parse_toml_config(field + " = " + ddo::toml_quote(value), "t.toml");
      if (source == "flags") inputs.cli = cli_layer({{field, ddo::field_value{value}}});
      return ddo::resolve_settings(inputs);
    };
    // Control bytes: the printed TOML escapes each as \u00XX, six bytes of text for one.
    const std::string longest(ddo::max_config_value_bytes, '\x01');
    for (const std::string source : {"code", "env", "toml", "flags"}) {
      CAPTURE(source);
      CHECK_THROWS_WITH_AS(with(source, std::string(ddo::max_config_value_bytes + 1, 'a')),
                           doctest::Contains("the limit is 65536 bytes"), ddo::config_error);
      if (source == "env") continue;  // an environment value holds no control bytes
      const auto settings = with(source, longest);
      std::ostringstream printed;
      ddo::write_settings_toml(printed, settings);
      auto again = ddo_test::hermetic_inputs();
      again.toml = ddo::parse_toml_config(printed.str(), "printed.toml");
      CHECK(ddo::resolve_settings(again).config.pinned_weight_cache_namespace == longest);
    }
    auto many = ddo_test::hermetic_inputs();
    many.overrides = {{ddo::field_id::skip_modules_pattern,
                       ddo::field_value{std::vector<std::string>(
                           ddo::max_config_list_elements + 1, "a")}}};
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(many), doctest::Contains("elements"),
                         ddo::config_error);
  }

  TEST_CASE("backend vmm with preset nvme_baseline runs the preset's file route, said so") {
    auto inputs = ddo_test::hermetic_inputs();
    inputs.preset = "nvme_baseline";
    inputs.overrides = {{ddo::field_id::backend, ddo::offload_backend::vmm}};
    const auto settings = ddo::resolve_settings(inputs);
    CHECK(settings.config.backend == ddo::offload_backend::nvme);
    CHECK(settings.config.execution_mode == ddo::exec_mode::vmm_runtime);
    CHECK(settings.provenance.of(ddo::field_id::backend).source == ddo::origin::detected);
    REQUIRE(settings.warnings.size() == 1);
    CHECK(settings.warnings[0].find("with preset nvme_baseline runs the preset's route") !=
          std::string::npos);
    inputs.preset = "vmm_fast_runtime";  // backend vmm's own preset: unchanged
    CHECK(ddo::resolve_settings(inputs).config.backend == ddo::offload_backend::vmm);
  }

  TEST_CASE("use_environment = false ignores environment config and environment routes") {
    auto inputs = ddo_test::hermetic_inputs({{"DDO_PIN_CPU_WORKERS", "9"},
                                             {"DDO_VAE_ROUTE", "none"},
                                             {"DDO_PRESET", "off"},
                                             {"DDO_NOT_A_VARIABLE", "1"}});
    inputs.components = {"vae"};
    inputs.use_environment = false;
    const auto settings = ddo::resolve_settings(inputs);
    CHECK(settings.config.pin_cpu_workers ==
          ddo::operational_pin_cpu_workers(std::thread::hardware_concurrency()));
    CHECK(settings.effective_preset == "one_shot_fast");
    CHECK(settings.components.at(0).route == ddo::component_route::diffusers_group_offload);
    CHECK(settings.warnings.empty());
    inputs.use_environment = true;
    const auto with_env = ddo::resolve_settings(inputs);
    CHECK(with_env.config.pin_cpu_workers == 9);
    CHECK(with_env.effective_preset == "off");
    CHECK(with_env.warnings.size() == 1);
  }

  TEST_CASE("the preset: --ddo-preset > code > DDO_PRESET > TOML > auto") {
    auto inputs = ddo_test::hermetic_inputs();
    CHECK(ddo::resolve_settings(inputs).requested_preset == "auto");
    inputs.toml = ddo::parse_toml_config("preset = 'warm_process'", "t.toml");
    CHECK(ddo::resolve_settings(inputs).requested_preset == "warm_process");
    inputs.environment = std::map<std::string, std::string>{{"DDO_PRESET", "wsl_compat"}};
    CHECK(ddo::resolve_settings(inputs).requested_preset == "wsl_compat");
    inputs.preset = "low_ram_safe";
    CHECK(ddo::resolve_settings(inputs).requested_preset == "low_ram_safe");
    ddo::config_layer cli;
    cli.preset = ddo::sourced<std::string>{"off", {ddo::origin::cli, "--ddo-preset"}};
    inputs.cli = cli;
    CHECK(ddo::resolve_settings(inputs).requested_preset == "off");
  }

  TEST_CASE("the WSL pinning safety rule and DDO_DISABLE_PIN_ON_WSL") {
    auto inputs = ddo_test::hermetic_inputs();
    inputs.preset = "one_shot_fast";
    inputs.running_on_wsl = true;
    inputs.components = {"transformer"};
    inputs.component_policies["transformer"].route = ddo::component_route::diffusers_group_offload;
    inputs.component_policies["transformer"].offload_stream = true;
    inputs.component_policies["transformer"].offload_record_stream = true;
    auto settings = ddo::resolve_settings(inputs);
    CHECK(settings.running_on_wsl);
    CHECK(settings.requested_pin_cpu_memory);
    CHECK_FALSE(settings.effective_pin_cpu_memory);
    CHECK_FALSE(settings.config.pin_cpu_memory);
    CHECK_FALSE(settings.components.at(0).offload_stream);
    CHECK_FALSE(settings.components.at(0).offload_record_stream);
    inputs.environment = std::map<std::string, std::string>{{"DDO_DISABLE_PIN_ON_WSL", "0"}};
    settings = ddo::resolve_settings(inputs);
    CHECK_FALSE(settings.disable_pin_on_wsl);
    CHECK(settings.effective_pin_cpu_memory);
    CHECK(settings.components.at(0).offload_stream);
    inputs.running_on_wsl = false;
    inputs.environment = std::map<std::string, std::string>{};
    CHECK(ddo::resolve_settings(inputs).effective_pin_cpu_memory);
  }

  TEST_CASE("enabled: off disables; plan mode needs DDO_PLAN; runtime modes enable by themselves") {
    auto inputs = ddo_test::hermetic_inputs({{"DDO_EXECUTION_MODE", "plan"}});
    auto settings = ddo::resolve_settings(inputs);
    CHECK_FALSE(settings.plan);
    CHECK_FALSE(settings.enabled);
    inputs.environment->emplace("DDO_PLAN", "yes");
    settings = ddo::resolve_settings(inputs);
    CHECK(settings.plan);
    CHECK(settings.enabled);
    inputs.environment = std::map<std::string, std::string>{{"DDO_EXECUTION_MODE", "linear_runtime"}};
    CHECK(ddo::resolve_settings(inputs).enabled);
    inputs.environment = std::map<std::string, std::string>{{"DDO_PRESET", "off"}, {"DDO_PLAN", "1"}};
    CHECK_FALSE(ddo::resolve_settings(inputs).enabled);
  }

  TEST_CASE("component routes: explicit route > code policy > environment > TOML > preset") {
    auto inputs = ddo_test::hermetic_inputs();
    inputs.component = "vae";
    const auto route = [&] { return ddo::resolve_settings(inputs).components.at(0); };
    CHECK(route().route == ddo::component_route::diffusers_group_offload);
    CHECK(route().route_origin.source == ddo::origin::preset);
    inputs.toml = ddo::parse_toml_config("[components.vae]\nroute = 'none'", "t.toml");
    CHECK(route().route == ddo::component_route::none);
    CHECK(route().route_origin.source == ddo::origin::toml);
    inputs.environment = std::map<std::string, std::string>{{"DDO_VAE_ROUTE", "ddo"}};
    CHECK(route().route == ddo::component_route::dynamic_offload);
    CHECK(route().route_origin.source == ddo::origin::env);
    inputs.component_policies["vae"].route = ddo::component_route::none;
    CHECK(route().route == ddo::component_route::none);
    CHECK(route().route_origin.source == ddo::origin::component);
    inputs.route = ddo::component_route::dynamic_offload;
    CHECK(route().route == ddo::component_route::dynamic_offload);
    CHECK(route().route_origin == ddo::field_origin{ddo::origin::config, "route"});
    inputs.route = ddo::component_route::auto_select;  // auto: back to the preset's choice,
    // which a route named in code (the policy's none) took off its leaf fallback (issue 37)
    CHECK(route().route == ddo::component_route::dynamic_offload);
    inputs.component_policies.clear();
    CHECK(route().route == ddo::component_route::diffusers_group_offload);
  }

  TEST_CASE("group-offload parameters come from the policy layers attribute by attribute") {
    auto inputs = ddo_test::hermetic_inputs({{"DDO_TRANSFORMER_NUM_BLOCKS_PER_GROUP", "4"},
                                             {"DDO_TRANSFORMER_OFFLOAD_STREAM", "1"}});
    inputs.toml = ddo::parse_toml_config(
        "[components.transformer]\nroute = 'group'\nnum_blocks_per_group = 2\n"
        "offload_low_cpu_mem_usage = true",
        "t.toml");
    inputs.component_policies["transformer"].offload_type = ddo::group_offload_type::leaf_level;
    const auto settings = ddo::resolve_settings(inputs);
    const auto transformer = ddo::resolve_component(settings, "transformer");
    CHECK(transformer.route == ddo::component_route::diffusers_group_offload);
    CHECK(transformer.num_blocks_per_group == 4);
    CHECK(transformer.offload_stream);
    CHECK(transformer.offload_low_cpu_mem_usage);
    CHECK(transformer.offload_type == ddo::group_offload_type::leaf_level);
  }

  TEST_CASE("--ddo-vmm-total-staging-gb: native total, or two NVMe slots") {
    std::uint64_t seed = 0;
    auto rng = ddo_test::random_engine(seed);
    INFO("seed " << seed);
    const double total = static_cast<double>(1 + rng() % 32) / 4.0;
    const auto resolve = [&](const char* preset) {
      auto inputs = ddo_test::hermetic_inputs();
      inputs.preset = preset;
      ddo::config_layer cli;
      cli.source = ddo::origin::cli;
      cli.vmm_total_staging_gb =
          ddo::sourced<double>{total, {ddo::origin::cli, "--ddo-vmm-total-staging-gb"}};
      inputs.cli = cli;
      return ddo::resolve_settings(inputs);
    };
    CHECK(resolve("vmm_fast_runtime").config.vmm_staging_buffer_gb == total);
    CHECK(resolve("nvme_baseline").config.vmm_staging_buffer_gb == total / 2);
    CHECK(resolve("nvme_baseline").provenance.of(ddo::field_id::vmm_staging_buffer_gb).key ==
          "--ddo-vmm-total-staging-gb");
    auto inputs = ddo_test::hermetic_inputs();
    inputs.preset = "vmm_fast_runtime";
    auto cli = cli_layer({{"vmm_staging_buffer_gb", 1.0}});
    cli.vmm_total_staging_gb = ddo::sourced<double>{2.0, {ddo::origin::cli, "--ddo-vmm-total-staging-gb"}};
    inputs.cli = cli;
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs), doctest::Contains("give only one"),
                         ddo::config_error);
  }

  TEST_CASE("backend auto follows execution_mode; vmm without device support is refused") {
    auto inputs = ddo_test::hermetic_inputs();
    CHECK(ddo::resolve_settings(inputs).config.backend == ddo::offload_backend::linear);
    inputs.environment = std::map<std::string, std::string>{{"DDO_EXECUTION_MODE", "vmm_runtime"},
                          {"DDO_VMM_RESIDENT_WEIGHT_BUDGET_GB", "2"}};
    CHECK(ddo::resolve_settings(inputs).config.backend == ddo::offload_backend::vmm);
    inputs.vmm_supported = false;
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                         doctest::Contains("no virtual-memory-management support"),
                         ddo::config_error);
  }

  TEST_CASE("the pipeline budgets are settings: code, TOML, DDO_* and --ddo-* set them; bad values are refused by name") {
    for (const std::string name : {"pipeline_device_budget_gb", "pipeline_pinned_budget_gb"}) {
      CAPTURE(name);
      const auto& info = ddo::field(name);
      const auto value_of = [&](const ddo::dynamic_offload_settings& s) {
        return std::get<double>(info.get(s.config));
      };
      auto inputs = ddo_test::hermetic_inputs();
      CHECK(value_of(ddo::resolve_settings(inputs)) == 0.0);  // not shared by default
      inputs.overrides = {{info.id, 1.5}};
      CHECK(value_of(ddo::resolve_settings(inputs)) == 1.5);
      CHECK(ddo::resolve_settings(inputs).provenance.of(info.id).source == ddo::origin::config);
      inputs.toml = ddo::parse_toml_config(name + " = 2.25", "t.toml");
      CHECK(value_of(ddo::resolve_settings(inputs)) == 2.25);
      CHECK(ddo::resolve_settings(inputs).provenance.of(info.id).source == ddo::origin::toml);
      inputs.environment = std::map<std::string, std::string>{{std::string(info.env), "3.5"}};
      CHECK(value_of(ddo::resolve_settings(inputs)) == 3.5);
      CHECK(ddo::resolve_settings(inputs).provenance.of(info.id).key == info.env);
      inputs.cli = cli_layer({{name, 4.75}});
      const auto all = ddo::resolve_settings(inputs);
      CHECK(value_of(all) == 4.75);
      CHECK(all.provenance.of(info.id).key == info.flag());
      // Refused, naming the source, the value and what is allowed: a variable or flag that is
      // not a non-negative number when read, a value from code by the validator.
      for (const char* bad : {"-1", "nan", "inf", "lots"}) {
        CAPTURE(bad);
        auto refused = ddo_test::hermetic_inputs({{std::string(info.env), bad}});
        const std::string expected = std::string(info.env) + " = \"" + bad +
                                     "\": not a valid value for " + name +
                                     "; expected a non-negative number";
        CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(refused),
                             doctest::Contains(expected.c_str()), ddo::config_error);
      }
      // From code: an override is refused when read, a whole config by the validator.
      auto from_code = ddo_test::hermetic_inputs();
      from_code.overrides = {{info.id, -0.5}};
      const std::string override_refused =
          "explicit config field " + name + " = \"-0.500000\": not a valid value; expected a "
          "non-negative number";
      CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(from_code),
                           doctest::Contains(override_refused.c_str()), ddo::config_error);
      auto whole = ddo_test::hermetic_inputs();
      ddo::dynamic_offload_config config;
      info.set(config, -0.5);
      whole.config = config;
      const std::string validated = name + " = -0.5: must be 0 or more";
      CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(whole), doctest::Contains(validated.c_str()),
                           ddo::config_error);
    }
  }

  TEST_CASE("sources compose at compile time through resolve_from_sources") {
    ddo::resolve_context context;
    context.detected_ram_gb = 64.0;
    context.running_on_wsl = false;
    ddo::explicit_source code;
    code.overrides = {{ddo::field_id::verbose, true}};
    const auto settings =
        ddo::resolve_from_sources(context, fixed_workers_source{13}, code,
                                  ddo::env_source{{{"DDO_PIN_CPU_WORKERS", "5"}}});
    CHECK(settings.config.pin_cpu_workers == 5);  // env outranks the toml-origin source
    CHECK(settings.config.verbose);
    CHECK(ddo::resolve_from_sources(context, fixed_workers_source{13}).config.pin_cpu_workers == 13);
  }

  TEST_CASE("explicit overrides and component policies refuse wrong types and another enum's values") {
    auto inputs = ddo_test::hermetic_inputs();
    inputs.overrides = {{ddo::field_id::pin_cpu_workers, std::string("2")}};
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                         doctest::Contains("has type string; expected an integer"),
                         ddo::config_error);
    // An enum value of another field's enum: refused, naming the field and what it allows.
    inputs.overrides = {{ddo::field_id::backend, ddo::selection::first}};
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                         doctest::Contains("explicit config field backend = first: an enum value "
                                           "of another field's type; expected one of \"auto\""),
                         ddo::config_error);
    inputs.overrides = {{ddo::field_id::pin_cpu_workers, ddo::exec_mode::plan}};
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                         doctest::Contains("expected integer for pin_cpu_workers"),
                         ddo::config_error);
    // A field_id outside the enumerators (a cast) names itself and the count.
    inputs.overrides = {{static_cast<ddo::field_id>(ddo::field_count), true}};
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                         doctest::Contains("is not a ddo setting"), ddo::config_error);
    inputs.overrides = {};
    inputs.component = "vae";
    inputs.component_policies["vae"].set(ddo::field_id::verbose, std::int64_t{1});
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                         doctest::Contains("component vae policy field verbose has type integer"),
                         ddo::config_error);
    inputs.component_policies["vae"].config = {{ddo::field_id::pin_weight_selection,
                                                ddo::budget_policy::balanced}};
    CHECK_THROWS_WITH_AS((void)ddo::resolve_settings(inputs),
                         doctest::Contains("pin_weight_selection = balanced: an enum value of "
                                           "another field's type; expected one of \"first\""),
                         ddo::config_error);
  }

  TEST_CASE("overrides keyed by field_id: every enum field takes its enum, from every code source") {
    // Each choice field set to the last value of its enum, as the enum and as its name: the
    // same config, provenance config (overrides, explicit_source) or component (a policy).
    const auto set_all = [](auto&& add) {
      add(ddo::field_id::execution_mode, ddo::exec_mode::vmm_runtime);
      add(ddo::field_id::linear_runtime_strategy, ddo::runtime_strategy::swap);
      add(ddo::field_id::pin_weight_selection, ddo::selection::largest);
      add(ddo::field_id::resident_module_selection, ddo::selection::first);
      add(ddo::field_id::auto_budget_policy, ddo::budget_policy::off);
      add(ddo::field_id::backend, ddo::offload_backend::host_sim);
      add(ddo::field_id::vmm_resident_weight_budget_gb, 0.5);
    };
    const auto check = [](const ddo::dynamic_offload_settings& s, ddo::origin from) {
      CHECK(s.config.execution_mode == ddo::exec_mode::vmm_runtime);
      CHECK(s.config.linear_runtime_strategy == ddo::runtime_strategy::swap);
      CHECK(s.config.pin_weight_selection == ddo::selection::largest);
      CHECK(s.config.resident_module_selection == ddo::selection::first);
      CHECK(s.config.auto_budget_policy == ddo::budget_policy::off);
      CHECK(s.config.backend == ddo::offload_backend::host_sim);
      CHECK(s.provenance.of(ddo::field_id::backend).source == from);
      CHECK(s.provenance.of(ddo::field_id::pin_weight_selection).source == from);
    };
    auto by_enum = ddo_test::hermetic_inputs();
    set_all([&](ddo::field_id id, auto v) { by_enum.overrides.emplace_back(id, v); });
    check(ddo::resolve_settings(by_enum), ddo::origin::config);
    CHECK(by_enum.overrides[0].value == ddo::field_value{std::string("vmm_runtime")});

    auto by_name = ddo_test::hermetic_inputs();  // a name still works: the field_value allows it
    set_all([&](ddo::field_id id, auto v) {
      if constexpr (std::is_enum_v<decltype(v)>)
        by_name.overrides.emplace_back(id, std::string(ddo::enum_name(v)));
      else
        by_name.overrides.emplace_back(id, v);
    });
    CHECK(ddo::resolve_settings(by_name).config == ddo::resolve_settings(by_enum).config);

    ddo::explicit_source code;
    set_all([&](ddo::field_id id, auto v) { code.overrides.emplace_back(id, v); });
    ddo::resolve_context context;
    context.detected_ram_gb = 64.0;
    context.running_on_wsl = false;
    check(ddo::resolve_from_sources(context, code), ddo::origin::config);

    auto policy = ddo_test::hermetic_inputs();
    policy.component = "transformer";
    set_all([&](ddo::field_id id, auto v) {
      policy.component_policies["transformer"].set(id, v);
    });
    check(ddo::resolve_settings(policy), ddo::origin::component);

    // A TOML component table's fields arrive keyed by field_id too.
    const auto toml = ddo::parse_toml_config(
        "[components.transformer]\nbackend = \"host_sim\"\npin_weight_selection = \"largest\"",
        "t.toml");
    const auto& from_toml = toml.components.at("transformer").config;
    REQUIRE(from_toml.size() == 2);
    CHECK(from_toml[0].field == ddo::field_id::backend);
    CHECK(from_toml[1].field == ddo::field_id::pin_weight_selection);
    auto toml_inputs = ddo_test::hermetic_inputs();
    toml_inputs.component = "transformer";
    toml_inputs.toml = toml;
    const auto from_file = ddo::resolve_settings(toml_inputs);
    CHECK(from_file.config.backend == ddo::offload_backend::host_sim);
    CHECK(from_file.config.pin_weight_selection == ddo::selection::largest);
  }
}

TEST_SUITE("config") {
  TEST_CASE("from_env reads the process environment and the requested preset") {
    ::setenv("DDO_PIN_CPU_WORKERS", "6", 1);
    ::setenv("DDO_PRESET", "warm_process", 1);
    const auto from_preset = ddo::settings_from_env("low_ram_safe");
    const auto from_variable = ddo::settings_from_env();
    ::unsetenv("DDO_PIN_CPU_WORKERS");
    ::unsetenv("DDO_PRESET");
    CHECK(from_preset.requested_preset == "low_ram_safe");  // code wins over DDO_PRESET
    CHECK(from_preset.config.pin_cpu_workers == 6);
    CHECK(from_preset.provenance.of(ddo::field_id::pin_cpu_workers).key == "DDO_PIN_CPU_WORKERS");
    CHECK(from_variable.requested_preset == "warm_process");
  }
}
