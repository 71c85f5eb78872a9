// SPDX-License-Identifier: Apache-2.0
#include "ddo/cli/dynamic_offload_arguments.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ddo/cli/lifecycle_arguments.hpp"
#include "ddo/config/settings_toml.hpp"

namespace po = boost::program_options;

namespace {

po::variables_map parse(const po::options_description& options, std::vector<std::string> args) {
  std::vector<const char*> argv = {"test"};
  for (const auto& arg : args) argv.push_back(arg.c_str());
  po::variables_map vm;
  po::store(po::parse_command_line(static_cast<int>(argv.size()), argv.data(), options), vm);
  po::notify(vm);
  return vm;
}

po::options_description ddo_options() {
  po::options_description options;
  ddo::add_dynamic_offload_arguments(options);
  return options;
}

ddo::resolve_context hermetic_context() {
  ddo::resolve_context context;
  context.detected_ram_gb = 64.0;
  context.running_on_wsl = false;
  return context;
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("every registry flag, --ddo-preset and --ddo-vmm-total-staging-gb are registered") {
    const auto options = ddo_options();
    std::size_t flags = 0;
    for (const auto& info : ddo::config_fields()) {
      if (!info.has_flag) continue;
      CAPTURE(info.name);
      CHECK(options.find_nothrow(info.flag().substr(2), false) != nullptr);
      ++flags;
    }
    CHECK(options.find_nothrow("ddo-preset", false) != nullptr);
    CHECK(options.find_nothrow("ddo-vmm-total-staging-gb", false) != nullptr);
    CHECK(options.options().size() == flags + 2);
    // The reference's VMM flags by name.
    for (const char* flag :
         {"ddo-vmm-native-transport", "ddo-vmm-resident-weight-budget-gb",
          "ddo-vmm-staging-buffer-gb", "ddo-vmm-source-cache-gb", "ddo-vmm-source-registered-gb",
          "ddo-vmm-component-tensor-ownership", "ddo-vmm-component-buffer-limit-mb",
          "ddo-vmm-native-source-cache-slot-mb", "ddo-vmm-native-source-cache-slots",
          "ddo-backend"}) {
      CAPTURE(flag);
      CHECK(options.find_nothrow(flag, false) != nullptr);
    }
  }

  TEST_CASE("every flag is read into its field with cli provenance") {
    const std::uint64_t seed = std::random_device{}();
    std::mt19937_64 rng(seed);
    INFO("seed " << seed);
    const auto options = ddo_options();
    for (const auto& info : ddo::config_fields()) {
      if (!info.has_flag) continue;
      CAPTURE(info.name);
      std::string text;
      ddo::field_value expected;
      switch (info.type) {
        case ddo::field_type::boolean: {
          const bool value = rng() % 2 == 0;
          text = value ? "on" : "false";
          expected = value;
          break;
        }
        case ddo::field_type::integer:
        case ddo::field_type::count: {
          const auto value = static_cast<std::int64_t>(2 * (1 + rng() % 200));
          text = std::to_string(value);
          expected = value;
          break;
        }
        case ddo::field_type::real:
        case ddo::field_type::ratio: {
          const double value = static_cast<double>(1 + rng() % 16) / 16.0;
          text = ddo::toml_float(value);
          expected = value;
          break;
        }
        case ddo::field_type::text:
          text = "name" + std::to_string(rng() % 100);
          expected = text;
          break;
        case ddo::field_type::choice:
          text = std::string(info.allowed[rng() % info.allowed.size()]);
          expected = text;
          break;
        case ddo::field_type::pattern_list:
        case ddo::field_type::kind_list:
          text = "a" + std::to_string(rng() % 10) + ";b";
          expected = std::vector<std::string>{"a" + text.substr(1, 1), "b"};
          break;
      }
      // Booleans take an attached value; the others a separate token (which may be empty, as
      // load_safetensors_backend's "" spelling is).
      const auto layer = ddo::cli_config_layer(
          parse(options, info.type == ddo::field_type::boolean
                             ? std::vector<std::string>{info.flag() + "=" + text}
                             : std::vector<std::string>{info.flag(), text}));
      REQUIRE(layer.fields.size() == 1);
      CHECK(layer.fields[0].value == expected);
      CHECK(layer.fields[0].where == ddo::field_origin{ddo::origin::cli, info.flag()});
    }
  }

  TEST_CASE("boolean flags may be bare; other spellings are errors naming the flag") {
    const auto options = ddo_options();
    auto layer = ddo::cli_config_layer(parse(options, {"--ddo-verbose", "--ddo-pin-cpu-memory=no"}));
    REQUIRE(layer.fields.size() == 2);
    CHECK(layer.fields[0].value == ddo::field_value{false});  // registry order: pin first
    CHECK(layer.fields[1].value == ddo::field_value{true});
    CHECK_THROWS_WITH_AS((void)ddo::cli_config_layer(parse(options, {"--ddo-verbose=maybe"})),
                         doctest::Contains("flag --ddo-verbose = \"maybe\""), ddo::config_error);
    CHECK_THROWS_WITH_AS(
        (void)ddo::cli_config_layer(parse(options, {"--ddo-execution-mode", "fast"})),
        doctest::Contains("\"plan\", \"linear_runtime\" or \"vmm_runtime\""), ddo::config_error);
    CHECK_THROWS_WITH_AS(
        (void)ddo::cli_config_layer(parse(options, {"--ddo-vmm-total-staging-gb", "0"})),
        doctest::Contains("--ddo-vmm-total-staging-gb = \"0\""), ddo::config_error);
  }

  TEST_CASE("build_config_from_args: preset plus flags, no environment") {
    ::setenv("DDO_PIN_CPU_WORKERS", "11", 1);
    const auto options = ddo_options();
    auto config = ddo::build_config_from_args(
        parse(options, {"--ddo-preset", "low_ram_safe", "--ddo-verbose"}), hermetic_context());
    ::unsetenv("DDO_PIN_CPU_WORKERS");
    CHECK(config.pin_cpu_workers == 2);  // the preset's, not DDO_PIN_CPU_WORKERS
    CHECK(config.verbose);
    CHECK(config.load_safetensors_backend == ddo::safetensors_backend::mmap);
    config = ddo::build_config_from_args(
        parse(options, {"--ddo-backend", "vmm", "--ddo-preset", "auto",
                        "--ddo-vmm-total-staging-gb", "3"}),
        hermetic_context());
    CHECK(config.execution_mode == ddo::exec_mode::vmm_runtime);
    CHECK(config.vmm_native_transport);
    CHECK(config.vmm_staging_buffer_gb == 3.0);  // native: the total
    config = ddo::build_config_from_args(
        parse(options, {"--ddo-preset", "nvme_baseline", "--ddo-vmm-total-staging-gb", "3"}),
        hermetic_context());
    CHECK(config.vmm_staging_buffer_gb == 1.5);  // NVMe: two slots
    config = ddo::build_config_from_args(parse(options, {"--ddo-preset", "nvme_baseline"}),
                                         hermetic_context());
    CHECK(config.vmm_staging_buffer_gb == 0.625);  // omitted: the route's default stays
    // The helper's 4 GiB VMM budget default makes a bare VMM execution mode usable ...
    config = ddo::build_config_from_args(parse(options, {"--ddo-execution-mode", "vmm_runtime"}),
                                         hermetic_context());
    CHECK(config.vmm_resident_weight_budget_gb == 4.0);
    CHECK(config.backend == ddo::offload_backend::vmm);
    // ... and the flag still wins over it.
    config = ddo::build_config_from_args(
        parse(options, {"--ddo-execution-mode", "vmm_runtime", "--ddo-vmm-resident-weight-budget-gb", "2.5"}),
        hermetic_context());
    CHECK(config.vmm_resident_weight_budget_gb == 2.5);
  }

  TEST_CASE("an unknown flag suggests the closest --ddo- flag") {
    const auto options = ddo_options();
    try {
      (void)parse(options, {"--ddo-pin-cpu-memry"});
      FAIL("no error");
    } catch (const po::error& error) {
      CHECK(ddo::describe_cli_error(error, options) ==
            "flag --ddo-pin-cpu-memry is not an option; did you mean --ddo-pin-cpu-memory?");
    }
  }

  TEST_CASE("lifecycle flags: one per supported phase, absent inherits, explicit wins") {
    po::options_description options;
    ddo::add_dynamic_offload_lifecycle_arguments(options, {"before_transformer", "after_vae"});
    CHECK(options.options().size() == 2);
    CHECK(ddo::lifecycle_flag("before_transformer") == "--ddo-purge-windows-standby-before-transformer");
    auto vm = parse(options, {"--ddo-purge-windows-standby-before-transformer"});
    CHECK(ddo::lifecycle_flag_value(vm, "before_transformer") == true);
    CHECK_FALSE(ddo::lifecycle_flag_value(vm, "after_vae").has_value());
    vm = parse(options, {"--ddo-purge-windows-standby-after-vae=0"});
    CHECK(ddo::lifecycle_flag_value(vm, "after_vae") == false);
    vm = parse(options, {"--ddo-purge-windows-standby-after-vae=sometimes"});
    CHECK_THROWS_WITH_AS((void)ddo::lifecycle_flag_value(vm, "after_vae"),
                         doctest::Contains("--ddo-purge-windows-standby-after-vae = \"sometimes\""),
                         ddo::config_error);
    CHECK_THROWS_AS((void)parse(options, {"--ddo-purge-windows-standby-before-text"}), po::error);
  }
}
