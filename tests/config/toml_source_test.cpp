// SPDX-License-Identifier: Apache-2.0
#include "ddo/config/toml_source.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "ddo/config/settings_toml.hpp"
#include "support.hpp"

namespace {

const ddo::field_assignment& assignment(const ddo::config_layer& layer, std::string_view name) {
  for (const auto& entry : layer.fields)
    if (ddo::config_fields()[entry.field].name == name) return entry;
  FAIL("no assignment of " << name);
  throw std::logic_error("unreachable");
}

std::string error_of(const std::string& text) {
  try {
    (void)ddo::parse_toml_config(text, "test.toml");
  } catch (const ddo::config_error& error) {
    CHECK(error.source() == ddo::origin::toml);
    const std::string message = error.what();
    CHECK(message.find('\n') == std::string::npos);
    return message;
  }
  FAIL("no error for: " << text);
  return {};
}

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("TOML keys are field names, at top level or under [config]") {
    std::uint64_t seed = 0;
    auto rng = ddo_test::random_engine(seed);
    INFO("seed " << seed);
    const auto workers = static_cast<std::int64_t>(1 + rng() % 32);
    const double budget = static_cast<double>(1 + rng() % 64) / 8.0;
    const std::string text = "pin_cpu_workers = " + std::to_string(workers) +
                             "\nresident_module_patterns = ['blocks\\.\\d+', 'ff']\n"
                             "preset = 'Low_Ram_Safe'\nplan = true\n"
                             "[config]\nresident_module_budget_gb = " +
                             ddo::toml_float(budget) +
                             "\nmax_pin_weight_budget_gb = 3\npin_weight_selection = 'largest'\n";
    const auto layer = ddo::parse_toml_config(text, "test.toml");
    REQUIRE(layer.fields.size() == 5);
    CHECK(assignment(layer, "pin_cpu_workers").value == ddo::field_value{workers});
    CHECK(assignment(layer, "pin_cpu_workers").where ==
          ddo::field_origin{ddo::origin::toml, "test.toml:pin_cpu_workers"});
    CHECK(assignment(layer, "resident_module_patterns").value ==
          ddo::field_value{std::vector<std::string>{"blocks\\.\\d+", "ff"}});
    CHECK(assignment(layer, "resident_module_budget_gb").value == ddo::field_value{budget});
    CHECK(assignment(layer, "resident_module_budget_gb").where.key ==
          "test.toml:config.resident_module_budget_gb");
    // An integer is accepted for a size in GiB.
    CHECK(assignment(layer, "max_pin_weight_budget_gb").value == ddo::field_value{3.0});
    CHECK(assignment(layer, "pin_weight_selection").value == ddo::field_value{std::string("largest")});
    CHECK(layer.preset->value == "low_ram_safe");
    CHECK(layer.plan->value);
  }

  TEST_CASE("TOML component tables give routes, group-offload parameters and config overrides") {
    const auto layer = ddo::parse_toml_config(
        "[components.vae]\nroute = 'standard'\n[components.transformer]\nroute = 'group'\n"
        "offload_type = 'leaf_level'\noffload_stream = true\nnum_blocks_per_group = 2\n"
        "offload_record_stream = false\noffload_low_cpu_mem_usage = true\npin_cpu_memory = false\n",
        "test.toml");
    CHECK(layer.components.at("vae").route == ddo::component_route::none);
    const auto& transformer = layer.components.at("transformer");
    CHECK(transformer.route == ddo::component_route::diffusers_group_offload);
    CHECK(transformer.offload_type == ddo::group_offload_type::leaf_level);
    CHECK(transformer.offload_stream == true);
    CHECK(transformer.offload_record_stream == false);
    CHECK(transformer.offload_low_cpu_mem_usage == true);
    CHECK(transformer.num_blocks_per_group == 2);
    REQUIRE(transformer.config.size() == 1);
    CHECK(transformer.config[0].field == ddo::field_id::pin_cpu_memory);
  }

  TEST_CASE("an unknown TOML key is an error suggesting the closest known key") {
    CHECK(error_of("pin_cpu_workrs = 2").find("did you mean 'pin_cpu_workers'?") != std::string::npos);
    CHECK(error_of("[config]\nvmm_page_size = 2").find("test.toml:config.vmm_page_size") !=
          std::string::npos);
    CHECK(error_of("[components.vae]\nroutes = 'none'").find("did you mean 'route'?") !=
          std::string::npos);
    CHECK(error_of("[settings]\nrequested_prest = 'off'").find("requested_preset") !=
          std::string::npos);
    CHECK(error_of("presets = 'off'").find("did you mean 'preset'?") != std::string::npos);
    // A [ddo] table: where the keys go instead.
    for (const char* table : {"[ddo]\npin_cpu_workers = 2", "[dynamic_offload]\nverbose = true"}) {
      const std::string what = error_of(table);
      INFO(what);
      CHECK(what.find("is not a ddo setting; ddo's keys go at the top level of the file or under "
                      "[config]") != std::string::npos);
    }
  }

  TEST_CASE("a TOML value of the wrong type names the key, the type seen and the type expected") {
    const std::pair<const char*, std::vector<std::string>> cases[] = {
        {"pin_cpu_workers = '4'", {"pin_cpu_workers", "string", "integer"}},
        {"pin_cpu_memory = 1", {"pin_cpu_memory", "integer", "boolean"}},
        {"vmm_staging_buffer_gb = 'big'", {"vmm_staging_buffer_gb", "string", "number"}},
        {"resident_module_patterns = 'blocks'", {"resident_module_patterns", "string", "array"}},
        {"skip_modules_pattern = [1, 2]", {"skip_modules_pattern", "integer", "array of strings"}},
        {"execution_mode = 2021-01-01", {"execution_mode", "date", "string"}},
        {"[components.vae]\nnum_blocks_per_group = 'two'", {"num_blocks_per_group", "string"}},
        {"[components.vae]\noffload_stream = 'yes'", {"offload_stream", "string", "boolean"}},
        {"config = 3", {"config", "integer", "table"}},
    };
    // Named elements, not a structured binding: doctest's CAPTURE captures in a lambda,
    // which clang before 16 cannot do for a binding.
    for (const auto& row : cases) {
      const auto& text = std::get<0>(row);
      const auto& needles = std::get<1>(row);
      CAPTURE(text);
      const std::string message = error_of(text);
      for (const auto& needle : needles) {
        CAPTURE(needle);
        CHECK(message.find(needle) != std::string::npos);
      }
    }
  }

  TEST_CASE("invalid TOML values and syntax are errors naming the key or line") {
    CHECK(error_of("execution_mode = 'fast'").find("\"fast\"") != std::string::npos);
    CHECK(error_of("vmm_page_mb = -2").find("non-negative") != std::string::npos);
    CHECK(error_of("target_module_classes = ['linear', 'mlp']").find("\"mlp\"") != std::string::npos);
    CHECK(error_of("[components.vae]\nroute = 'gpu'").find("\"gpu\"") != std::string::npos);
    CHECK(error_of("[components.vae]\noffload_type = 'block'").find("leaf_level") !=
          std::string::npos);
    CHECK(error_of("[components.vae]\nnum_blocks_per_group = 0").find("positive") !=
          std::string::npos);
    CHECK(error_of("a = 1\nverbose = = true").find("test.toml:2:") != std::string::npos);
  }

  TEST_CASE("ddo-config output reads back to the same config") {
    auto inputs = ddo_test::hermetic_inputs({{"DDO_PIN_CPU_WORKERS", "7"}});
    inputs.preset = "low_ram_safe";
    inputs.components = {"vae", "text encoder"};
    const auto first = ddo::resolve_settings(inputs);
    std::ostringstream printed;
    ddo::write_settings_toml(printed, first);
    auto again = ddo_test::hermetic_inputs();
    again.toml = ddo::parse_toml_config(printed.str(), "printed.toml");
    const auto second = ddo::resolve_settings(again);
    CHECK(second.config == first.config);
    CHECK(second.requested_preset == "low_ram_safe");
    CHECK(second.provenance.of(ddo::field_id::pin_cpu_workers).source == ddo::origin::toml);
  }

  TEST_CASE("toml_source reads a file; a missing file is an io_error naming it") {
    const std::string path = "/tmp/ddo_toml_source_test_" + std::to_string(::getpid()) + ".toml";
    {
      std::ofstream out(path);
      out << "verbose = true\n";
    }
    const auto layer = ddo::toml_source{path}.collect();
    std::remove(path.c_str());
    REQUIRE(layer.fields.size() == 1);
    CHECK(layer.fields[0].value == ddo::field_value{true});
    try {
      (void)ddo::toml_source{path}.collect();
      FAIL("no error");
    } catch (const ddo::io_error& error) {
      CHECK(error.path() == path);
      CHECK(std::string(error.what()).find(path) != std::string::npos);
    }
  }

  TEST_CASE("the same setting at the top level and in [config] is refused naming both places") {
    const std::string message =
        error_of("pin_cpu_workers = 2\n[config]\npin_cpu_workers = 3\n");
    CHECK(message.find("test.toml:pin_cpu_workers") != std::string::npos);
    CHECK(message.find("test.toml:config.pin_cpu_workers") != std::string::npos);
    CHECK(message.find("twice") != std::string::npos);
    // Order does not matter ([config] first through an inline table).
    const std::string reversed =
        error_of("config = { verbose = true }\nverbose = false\n");
    CHECK(reversed.find("config.verbose") != std::string::npos);
    // The settings given at the top level or under [settings] too.
    CHECK(error_of("plan = true\n[settings]\nplan = false\n").find("settings.plan") !=
          std::string::npos);
    CHECK(error_of("preset = 'balanced'\n[settings]\nrequested_preset = 'balanced'\n")
              .find("settings.requested_preset") != std::string::npos);
  }

  TEST_CASE("a config that is a FIFO, a device or too large is refused without blocking") {
    const std::string dir = "/tmp/ddo_toml_special_" + std::to_string(::getpid());
    ::mkdir(dir.c_str(), 0700);
    const std::string fifo = dir + "/fifo.toml";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS((void)ddo::read_toml_config(fifo), doctest::Contains("FIFO"),
                         ddo::io_error);
    CHECK_THROWS_WITH_AS((void)ddo::read_toml_config("/dev/zero"),
                         doctest::Contains("character device"), ddo::io_error);
    CHECK_THROWS_WITH_AS((void)ddo::read_toml_config(dir), doctest::Contains("directory"),
                         ddo::io_error);
    const std::string big = dir + "/big.toml";
    {
      std::ofstream out(big);
      const std::string line = "# " + std::string(1000, 'x') + "\n";
      for (std::uint64_t n = 0; n <= ddo::max_toml_config_bytes / line.size(); ++n) out << line;
    }
    CHECK_THROWS_WITH_AS((void)ddo::read_toml_config(big), doctest::Contains("more than the limit"),
                         ddo::io_error);
    std::remove(big.c_str());
    std::remove(fifo.c_str());
    ::rmdir(dir.c_str());
  }

  TEST_CASE("a table header toml++ asserts on is an invalid-TOML error, not an abort") {
    // Found by fuzz/toml_config_fuzzer.cpp: toml++'s parse_key asserted on "[=" and aborted.
    for (const char* text : {"[=settings]\nplan = true\n", "[=]\n", "[[=x]]\n", "[ =x]\n"}) {
      INFO(text);
      CHECK(error_of(text).find("invalid TOML") != std::string::npos);
    }
  }

  TEST_CASE("characters toml++ 3.3 would read with undefined behaviour are refused by position") {
    // Found by fuzz/toml_config_fuzzer.cpp under UBSan (toml++'s whitespace lookup reaches
    // TOML_UNREACHABLE for these code points).
    const std::string message = error_of("verbose = true\nplan = true \xc3\xa9\n");
    CHECK(message.find("test.toml:2:13") != std::string::npos);
    CHECK(message.find("U+00E9") != std::string::npos);
    CHECK(ddo::detail::tomlpp_whitespace_lookup_undefined(U'\uFB30'));
    CHECK_FALSE(ddo::detail::tomlpp_whitespace_lookup_undefined(U'\u3000'));
    CHECK_FALSE(ddo::detail::tomlpp_whitespace_lookup_undefined(U'\u2003'));
    CHECK_FALSE(ddo::detail::tomlpp_whitespace_lookup_undefined(U'a'));
    // Escaped inside a string, the same character is fine.
    CHECK(ddo::parse_toml_config("profile_name = \"caf\\u00e9\"\n", "t.toml").fields.size() == 1);
  }
}

TEST_SUITE("toml_limits") {
  // toml++ recursed once per dotted part and overflowed the stack on a 400 KB header of 200,000
  // parts (issue 30); ddo's scan refuses such text first, naming the limit and the line.
  std::string repeated(std::string_view part, std::size_t n, std::string_view separator) {
    std::string text;
    for (std::size_t i = 0; i < n; ++i) {
      if (i) text += separator;
      text += part;
    }
    return text;
  }

  TEST_CASE("dotted keys, nesting, entries and strings beyond ddo's limits are refused by line") {
    const std::string head = "preset = \"balanced\"\n# two lines first\n";
    // Six times the longest value: what ddo writes with every byte escaped reads back (issue 37).
    const std::string string_limit = "the limit is " + std::to_string(ddo::max_toml_string_bytes);
    const std::string too_long(ddo::max_toml_string_bytes + 1, 'y');
    const struct {
      std::string text;
      std::string_view limit;
    } cases[] = {
        {head + "[" + repeated("a", 200'000, ".") + "]\n", "16 dotted parts"},
        {head + "[[" + repeated("a", 200'000, ".") + "]]\n", "16 dotted parts"},
        {head + repeated("a", 200'000, ".") + " = 1\n", "16 dotted parts"},
        {head + repeated("\"a\"", 17, " . ") + " = 1\n", "16 dotted parts"},
        {head + "x = { " + repeated("b", 17, ".") + " = 1 }\n", "16 dotted parts"},
        {head + "x = " + std::string(100'000, '[') + std::string(100'000, ']') + "\n",
         "64 levels deep"},
        {head + "x = " + repeated("{ a = ", 100, "") + "1" + std::string(100, '}') + "\n",
         "64 levels deep"},
        {head + "x = " + repeated("{ " + repeated("a", 16, ".") + " = ", 5, "") + "1" +
             std::string(5, '}') + "\n",
         "64 levels deep"},
        {head + "x = [" + repeated("1", 20'001, ", ") + "]\n", "20000 keys and array elements"},
        {head + "x = { " + repeated("k = 1", 20'001, ", ") + " }\n",
         "20000 keys and array elements"},
        {head + "x = \"" + too_long + "\"\n", string_limit},
        {head + "x = '''\n" + too_long + "'''\n", string_limit},
        {head + "\"" + too_long + "\" = 1\n", string_limit},
    };
    for (const auto& c : cases) {
      INFO(c.text.substr(0, 80));
      const std::string message = error_of(c.text);
      CHECK(message.find("test.toml:3:") != std::string::npos);
      CHECK(message.find(c.limit) != std::string::npos);
      CHECK(message.find("before the TOML parser") != std::string::npos);
    }
    // The line counts every line break, those inside multi-line strings and arrays too; a
    // string is named by the line it starts on, the entries by the line of the one too many.
    CHECK(error_of(head + "a = [\n" + repeated("1", 20'001, ",\n") + "]\n")
              .find("test.toml:20002:") != std::string::npos);
    // A table header counts two levels a part (a part may name an array of tables), so the keys
    // under a 16-part header start at level 32.
    CHECK(error_of(head + "[" + repeated("t", 16, ".") + "]\n" + repeated("k", 16, ".") + " = " +
                   std::string(17, '[') + std::string(17, ']') + "\n")
              .find("test.toml:4: tables, arrays and inline tables nested more than 64") !=
          std::string::npos);
    const std::string later =
        "a = \"\"\"\n1\n2\n\"\"\"\nb = [\n1,\n2]\n[" + repeated("a", 17, ".") + "]\n";
    CHECK(error_of(later).find("test.toml:8:") != std::string::npos);
  }

  TEST_CASE("TOML within ddo's limits reaches the parser, whatever its layout") {
    // Valid TOML of every form the scanner follows: each is accepted by the scan and read by
    // toml++ (the unknown keys are then ddo's usual errors, not limit errors).
    const std::string texts[] = {
        "[" + repeated("a", 16, ".") + "]\n" + repeated("b", 16, ".") + " = 1\n",
        "a = [ # comment\n  \"x\", 'y',\n  \"\"\"multi\n]line\"\"\", '''z''',\n]\n",
        "d = 1979-05-27 07:32:00Z\nt = [1979-05-27T07:32:00Z, 07:32:00]\n",
        "s = \"quote \\\" and # hash [\"\n'lit key' = 'a\\'\n",
        "x = { a = [ { b = 1 }, { c.d = 2 } ], e = {} }\n[[aot]]\nk = 1\n[[aot]]\nk = 2\n",
        "m = \"\"\"\\\n  continued \\\"\"\" \"\"\"\"\nn = \"\"\"a\"\"\"\"\"\n",
        "x = " + std::string(40, '[') + std::string(40, ']') + "\n",
        "x = [" + repeated("1", 19'999, ",") + "]\n",
        "x = \"" + std::string(60'000, 'y') + "\"\n",
        "a = 1\r\nb = [\r\n 2,\r\n]\r\n",
    };
    for (const auto& text : texts) {
      INFO(text.substr(0, 80));
      CHECK_NOTHROW(ddo::check_toml_limits(text, "test.toml"));
      CHECK_NOTHROW((void)toml::parse(text));
    }
    // Invalid TOML is left to toml++, which names its line; the scan still checks later lines.
    CHECK(error_of("a = [1 2]\nplan = true\n").find("invalid TOML") != std::string::npos);
    CHECK(error_of("a = [1 2]\n[" + repeated("a", 17, ".") + "]\n").find("test.toml:2:") !=
          std::string::npos);
  }
}
