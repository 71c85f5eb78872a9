// SPDX-License-Identifier: Apache-2.0
#include "ddo/config/env_source.hpp"

#include <doctest/doctest.h>

#include <string>

#include "ddo/config/settings_toml.hpp"
#include "support.hpp"

namespace {

// A random valid text for a field, and the value it must parse to.
std::pair<std::string, ddo::field_value> random_text(const ddo::field_info& info,
                                                     std::mt19937_64& rng) {
  switch (info.type) {
    case ddo::field_type::boolean: {
      const bool value = rng() % 2 == 0;
      return {value ? "yes" : "0", value};
    }
    case ddo::field_type::integer: {
      const auto value = static_cast<std::int64_t>(1 + rng() % 64);
      return {std::to_string(value), value};
    }
    case ddo::field_type::count: {
      const auto value = static_cast<std::int64_t>(2 * (1 + rng() % 512));
      return {std::to_string(value),
              static_cast<std::int64_t>(static_cast<double>(value) * info.env_scale)};
    }
    case ddo::field_type::real:
    case ddo::field_type::ratio: {
      const double value = static_cast<double>(1 + rng() % 16) / 16.0;  // exact in binary
      return {ddo::toml_float(value), value};
    }
    case ddo::field_type::text: {
      const std::string value = "ns" + std::to_string(rng() % 1000);
      return {value, value};
    }
    case ddo::field_type::choice: {
      const std::string value(info.allowed[rng() % info.allowed.size()]);
      return {value, value};
    }
    case ddo::field_type::pattern_list:
    case ddo::field_type::kind_list: break;
  }
  const std::string a = "blocks\\." + std::to_string(rng() % 100);
  return {a + ", ff.*;attn", std::vector<std::string>{a, "ff.*", "attn"}};
}

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("every config variable is read into its field with env provenance") {
    std::uint64_t seed = 0;
    auto rng = ddo_test::random_engine(seed);
    INFO("seed " << seed);
    for (const auto& info : ddo::config_fields()) {
      if (info.env.empty()) continue;
      CAPTURE(info.env);
      const auto [text, expected] = random_text(info, rng);
      ddo::env_source source{{{std::string(info.env), text}}};
      const auto layer = source.collect();
      REQUIRE(layer.fields.size() == 1);
      CHECK(ddo::config_fields()[layer.fields[0].field].name == info.name);
      CHECK(layer.fields[0].value == expected);
      CHECK(layer.fields[0].where == ddo::field_origin{ddo::origin::env, std::string(info.env)});
      CHECK(layer.warnings.empty());
    }
  }

  TEST_CASE("the boolean rule: 1, true, yes, on are true; everything else is false") {
    for (const char* text : {"1", "true", "TRUE", "Yes", "on", " on "}) {
      CAPTURE(text);
      CHECK(ddo::env_truthy(text));
      const auto layer = ddo::env_source{{{"DDO_VERBOSE", text}}}.collect();
      CHECK(layer.fields.at(0).value == ddo::field_value{true});
    }
    for (const char* text : {"0", "false", "no", "off", "", "2", "enabled", "ture"}) {
      CAPTURE(text);
      CHECK_FALSE(ddo::env_truthy(text));
      const auto layer = ddo::env_source{{{"DDO_PIN_CPU_MEMORY", text}}}.collect();
      CHECK(layer.fields.at(0).value == ddo::field_value{false});
    }
    // A spelling outside the rule still reads false, but says so.
    const auto layer = ddo::env_source{{{"DDO_CACHE_PLAN", "ture"}}}.collect();
    REQUIRE(layer.warnings.size() == 1);
    CHECK(layer.warnings[0].find("DDO_CACHE_PLAN") != std::string::npos);
  }

  TEST_CASE("DDO_SMALL_TENSOR_THRESHOLD_KB is in KiB and the field in bytes") {
    const auto layer = ddo::env_source{{{"DDO_SMALL_TENSOR_THRESHOLD_KB", "256"}}}.collect();
    CHECK(layer.fields.at(0).value == ddo::field_value{std::int64_t{256 * 1024}});
  }

  TEST_CASE("DDO_SAFETENSORS_BACKEND is an alias the main variable overrides") {
    auto layer = ddo::env_source{{{"DDO_SAFETENSORS_BACKEND", "pread"}}}.collect();
    REQUIRE(layer.fields.size() == 1);
    CHECK(layer.fields[0].value == ddo::field_value{std::string("pread")});
    CHECK(layer.fields[0].where.key == "DDO_SAFETENSORS_BACKEND");
    layer = ddo::env_source{{{"DDO_SAFETENSORS_BACKEND", "pread"},
                             {"DDO_LOAD_SAFETENSORS_BACKEND", "mmap"}}}
                .collect();
    REQUIRE(layer.fields.size() == 1);
    CHECK(layer.fields[0].value == ddo::field_value{std::string("mmap")});
  }

  TEST_CASE("settings variables: preset, plan, WSL pinning rule, profile dir, purge phases") {
    const auto layer = ddo::env_source{{{"DDO_PRESET", " Low_RAM_Safe "},
                                        {"DDO_PLAN", "on"},
                                        {"DDO_DISABLE_PIN_ON_WSL", "0"},
                                        {"DDO_PROFILE_DIR", "/tmp/profiles"},
                                        {"DDO_PURGE_WINDOWS_STANDBY_BEFORE_VAE", "1"},
                                        {"DDO_PURGE_WINDOWS_STANDBY_AFTER_TEXT", "no"},
                                        {"DDO_VMM_LIBRARY_PATH", "/x.so"}}}
                           .collect();
    CHECK(layer.preset->value == "low_ram_safe");
    CHECK(layer.preset->where.key == "DDO_PRESET");
    CHECK(layer.plan->value);
    CHECK_FALSE(layer.disable_pin_on_wsl->value);
    CHECK(*layer.profile_dir == "/tmp/profiles");
    CHECK(layer.purge_windows_standby.at("before_vae"));
    CHECK_FALSE(layer.purge_windows_standby.at("after_text"));
    // The reference's bootstrap variable: recognised (not "unknown") and said to be ignored.
    REQUIRE(layer.warnings.size() == 1);
    CHECK(layer.warnings[0].find("DDO_VMM_LIBRARY_PATH is recognised and ignored") !=
          std::string::npos);
  }

  TEST_CASE("the three bootstrap variables give a note when set, nothing when empty or unset") {
    for (const char* name :
         {"DDO_VMM_LIBRARY_PATH", "DDO_VMM_TORCH_CACHE_MIB", "DDO_VMM_ALLOCATOR_ROOT"}) {
      INFO(name);
      const auto set = ddo::env_source{{{name, "512"}}}.collect();
      REQUIRE(set.warnings.size() == 1);
      CHECK(set.warnings[0].find(std::string(name) + " is recognised and ignored: ") !=
            std::string::npos);
      CHECK(set.warnings[0].find("unknown") == std::string::npos);
      CHECK(ddo::env_source{{{name, ""}}}.collect().warnings.empty());
    }
  }

  TEST_CASE("component variables, their aliases and the DDO_RUNNER_ compatibility names") {
    const auto layer = ddo::env_source{{{"DDO_TRANSFORMER_ROUTE", "group"},
                                        {"DDO_TRANSFORMER_OFFLOAD_STREAM", "1"},
                                        {"DDO_TRANSFORMER_OFFLOAD_RECORD_STREAM", "off"},
                                        {"DDO_TRANSFORMER_OFFLOAD_TYPE", "leaf_level"},
                                        {"DDO_TRANSFORMER_OFFLOAD_LOW_CPU_MEM_USAGE", "yes"},
                                        {"DDO_TRANSFORMER_NUM_BLOCKS_PER_GROUP", "3"},
                                        {"DDO_RUNNER_TRANSFORMER_ROUTE", "none"},
                                        {"DDO_RUNNER_TEXT_ENCODER_ROUTE", "cuda"},
                                        {"DDO_VAE_GROUP_OFFLOAD", "true"},
                                        {"DDO_CONNECTORS_DYNAMIC_OFFLOAD", "1"}}}
                           .collect();
    CHECK(layer.warnings.empty());
    const auto& transformer = layer.components.at("transformer");
    CHECK(transformer.route == ddo::component_route::diffusers_group_offload);  // main name wins
    CHECK(transformer.offload_stream == true);
    CHECK(transformer.offload_record_stream == false);
    CHECK(transformer.offload_type == ddo::group_offload_type::leaf_level);
    CHECK(transformer.offload_low_cpu_mem_usage == true);
    CHECK(transformer.num_blocks_per_group == 3);
    CHECK(layer.components.at("text_encoder").route == ddo::component_route::none);
    CHECK(layer.components.at("vae").route == ddo::component_route::diffusers_group_offload);
    CHECK(layer.components.at("connectors").route == ddo::component_route::dynamic_offload);
  }

  TEST_CASE("every route alias maps to its canonical route") {
    const std::pair<const char*, ddo::component_route> cases[] = {
        {"auto", ddo::component_route::auto_select},
        {"dynamic_offload", ddo::component_route::dynamic_offload},
        {"dynamic", ddo::component_route::dynamic_offload},
        {"ddo", ddo::component_route::dynamic_offload},
        {"diffusers_group_offload", ddo::component_route::diffusers_group_offload},
        {"diffusers", ddo::component_route::diffusers_group_offload},
        {"group", ddo::component_route::diffusers_group_offload},
        {"group_offload", ddo::component_route::diffusers_group_offload},
        {"none", ddo::component_route::none},
        {"cuda", ddo::component_route::none},
        {"standard", ddo::component_route::none},
        {"OFF", ddo::component_route::none},
    };
    // Named elements, not a structured binding: doctest's CAPTURE captures in a lambda,
    // which clang before 16 cannot do for a binding.
    for (const auto& row : cases) {
      const auto& text = std::get<0>(row);
      const auto& route = std::get<1>(row);
      CAPTURE(text);
      const auto layer = ddo::env_source{{{"DDO_VAE_ROUTE", text}}}.collect();
      CHECK(layer.components.at("vae").route == route);
    }
  }

  TEST_CASE("invalid variables are errors naming the variable, the value and what is allowed") {
    const std::pair<std::map<std::string, std::string>, std::vector<std::string>> cases[] = {
        {{{"DDO_PIN_CPU_WORKERS", "four"}}, {"DDO_PIN_CPU_WORKERS", "\"four\"", "integer"}},
        {{{"DDO_PIN_CPU_WORKERS", "4294967296"}}, {"DDO_PIN_CPU_WORKERS", "at most 2147483647"}},
        {{{"DDO_EXECUTION_MODE", "fast"}}, {"DDO_EXECUTION_MODE", "\"fast\"", "linear_runtime"}},
        {{{"DDO_PIN_WEIGHT_SELECTION", "random"}}, {"DDO_PIN_WEIGHT_SELECTION", "largest"}},
        {{{"DDO_AUTO_BUDGET_POLICY", "on"}}, {"DDO_AUTO_BUDGET_POLICY", "balanced"}},
        {{{"DDO_LOAD_SAFETENSORS_BACKEND", "io_uring"}}, {"\"io_uring\"", "pread"}},
        {{{"DDO_VMM_STAGING_BUFFER_GB", "-1"}}, {"DDO_VMM_STAGING_BUFFER_GB", "non-negative"}},
        {{{"DDO_VMM_PAGE_MB", "2.5"}}, {"DDO_VMM_PAGE_MB", "non-negative integer"}},
        {{{"DDO_SYSTEM_RAM_HEADROOM_GB", "lots"}}, {"DDO_SYSTEM_RAM_HEADROOM_GB", "\"lots\""}},
        {{{"DDO_VAE_ROUTE", "gpu"}}, {"DDO_VAE_ROUTE", "\"gpu\"", "dynamic_offload"}},
        {{{"DDO_VAE_OFFLOAD_TYPE", "block"}}, {"DDO_VAE_OFFLOAD_TYPE", "leaf_level"}},
        {{{"DDO_VAE_NUM_BLOCKS_PER_GROUP", "0"}}, {"DDO_VAE_NUM_BLOCKS_PER_GROUP", "positive"}},
        {{{"DDO_VAE_GROUP_OFFLOAD", "1"}, {"DDO_VAE_DYNAMIC_OFFLOAD", "1"}},
         {"DDO_VAE_GROUP_OFFLOAD", "DDO_VAE_DYNAMIC_OFFLOAD"}},
    };
    for (const auto& row : cases) {
      const auto& env = std::get<0>(row);
      const auto& needles = std::get<1>(row);
      CAPTURE(env.begin()->first);
      try {
        (void)ddo::env_source{env}.collect();
        FAIL("no error");
      } catch (const ddo::config_error& error) {
        CHECK(error.source() == ddo::origin::env);
        const std::string message = error.what();
        CHECK(message.find('\n') == std::string::npos);
        for (const auto& needle : needles) {
          CAPTURE(needle);
          CHECK(message.find(needle) != std::string::npos);
        }
      }
    }
  }

  TEST_CASE("an empty numeric variable counts as unset") {
    const auto layer = ddo::env_source{{{"DDO_PIN_CPU_WORKERS", ""},
                                        {"DDO_EXECUTION_MODE", " "},
                                        {"DDO_ALWAYS_RESIDENT_MODULE_PATTERNS", ""}}}
                           .collect();
    REQUIRE(layer.fields.size() == 1);  // the pattern list: "" means no patterns
    CHECK(layer.fields[0].value == ddo::field_value{std::vector<std::string>{}});
  }

  TEST_CASE("an unknown DDO_ variable warns with the closest known name") {
    const std::pair<const char*, const char*> cases[] = {
        {"DDO_PIN_CPU_MEMRY", "DDO_PIN_CPU_MEMORY"},
        {"DDO_VMM_STAGING_BUFER_GB", "DDO_VMM_STAGING_BUFFER_GB"},
        {"DDO_PRESETS", "DDO_PRESET"},
        {"DDO_VAE_ROUT", "DDO_VAE_ROUTE"},
    };
    for (const auto& row : cases) {
      const auto& name = std::get<0>(row);
      const auto& suggestion = std::get<1>(row);
      CAPTURE(name);
      const auto layer = ddo::env_source{{{name, "1"}, {"PATH", "/bin"}}}.collect();
      CHECK(layer.fields.empty());
      REQUIRE(layer.warnings.size() == 1);
      CHECK(layer.warnings[0].find(name) != std::string::npos);
      CHECK(layer.warnings[0].find(std::string("did you mean ") + suggestion + "?") !=
            std::string::npos);
    }
  }

  TEST_CASE("process_environment snapshots only DDO_ variables") {
    ::setenv("DDO_TEST_SNAPSHOT_VARIABLE", "x=y", 1);
    const auto variables = ddo::process_environment();
    ::unsetenv("DDO_TEST_SNAPSHOT_VARIABLE");
    CHECK(variables.at("DDO_TEST_SNAPSHOT_VARIABLE") == "x=y");
    for (const auto& [name, value] : variables) CHECK(name.rfind("DDO_", 0) == 0);
  }
}
