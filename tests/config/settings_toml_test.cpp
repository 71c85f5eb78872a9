// SPDX-License-Identifier: Apache-2.0
#include "ddo/config/settings_toml.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include "support.hpp"

TEST_SUITE("config") {
  TEST_CASE("TOML floats always carry a decimal point and read back exactly") {
    CHECK(ddo::toml_float(6.0) == "6.0");
    CHECK(ddo::toml_float(0.625) == "0.625");
    CHECK(ddo::toml_float(0.1) == "0.1");
    CHECK(ddo::toml_float(1e20) == "1e+20");
    std::uint64_t seed = 0;
    auto rng = ddo_test::random_engine(seed);
    INFO("seed " << seed);
    for (int i = 0; i < 100; ++i) {
      const double value = static_cast<double>(rng() % 1000000) / 997.0;
      CHECK(std::stod(ddo::toml_float(value)) == value);
    }
  }

  TEST_CASE("TOML strings and keys are quoted where needed") {
    CHECK(ddo::toml_quote("a\"b\\c\n") == "\"a\\\"b\\\\c\\n\"");
    CHECK(ddo::toml_key("text_encoder") == "text_encoder");
    CHECK(ddo::toml_key("text encoder") == "\"text encoder\"");
  }

  TEST_CASE("printed settings hold the four sections and every field under its name") {
    auto inputs = ddo_test::hermetic_inputs({{"DDO_VERBOSE", "1"}});
    inputs.components = {"vae", "transformer"};
    const auto settings = ddo::resolve_settings(inputs);
    std::ostringstream out;
    ddo::write_settings_toml(out, settings);
    const std::string text = out.str();
    for (const char* needle :
         {"[settings]\n", "requested_preset = \"auto\"\n", "effective_preset = \"one_shot_fast\"\n",
          "enabled = true\n", "plan = false\n", "requested_pin_cpu_memory = true\n",
          "effective_pin_cpu_memory = true\n", "disable_pin_on_wsl = true\n",
          "running_on_wsl = false\n", "\n[config]\n", "small_tensor_threshold_bytes = 1048576\n",
          "vmm_staging_buffer_gb = 0.625\n", "load_safetensors_backend = \"\"\n",
          "target_module_classes = [\"linear\", \"embedding\"]\n", "\n[components.vae]\n",
          "route = \"diffusers_group_offload\"\n", "offload_type = \"leaf_level\"\n",
          "\n[components.transformer]\n", "route = \"dynamic_offload\"\n",
          "num_blocks_per_group = 1\n", "\n[provenance]\n", "verbose = \"env\"\n",
          "execution_mode = \"preset\"\n", "cache_plan = \"default\"\n"}) {
      CAPTURE(needle);
      CHECK(text.find(needle) != std::string::npos);
    }
    for (const auto& info : ddo::config_fields()) {
      CAPTURE(info.name);
      // Once under [config], once under [provenance].
      const std::string line_start = "\n" + std::string(info.name) + " = ";
      const auto first = text.find(line_start);
      REQUIRE(first != std::string::npos);
      CHECK(text.find(line_start, text.find("[provenance]")) != std::string::npos);
    }
  }
}
