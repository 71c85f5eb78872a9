// SPDX-License-Identifier: Apache-2.0
#include "ddo/config/field_status.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "ddo/config/enum_names.hpp"
#include "ddo/config/field_id.hpp"
#include "ddo/config/field_registry.hpp"
#include "ddo/config/presets.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/config/toml_source.hpp"
#include "support.hpp"

namespace {

std::vector<std::string> warnings_naming(const ddo::dynamic_offload_settings& settings,
                                         std::string_view field) {
  std::vector<std::string> out;
  for (const auto& warning : settings.warnings)
    if (warning.find(" sets " + std::string(field) + ",") != std::string::npos)
      out.push_back(warning);
  return out;
}

std::size_t inactive_warnings(const ddo::dynamic_offload_settings& settings) {
  return static_cast<std::size_t>(
      std::count_if(settings.warnings.begin(), settings.warnings.end(), [](const auto& w) {
        return w.find("the value is kept but changes nothing") != std::string::npos;
      }));
}

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("field_id is generated from the registry rows: same order, same names") {
    const auto fields = ddo::config_fields();
    REQUIRE(fields.size() == ddo::field_count);
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const auto id = static_cast<ddo::field_id>(i);
      CAPTURE(fields[i].name);
      CHECK(ddo::to_string(id) == fields[i].name);
      CHECK(ddo::parse_field_id(fields[i].name) == id);
      CHECK(&ddo::field(id) == &fields[i]);
      CHECK(ddo::find_field(fields[i].name) == ddo::field_index(id));
    }
    CHECK(ddo::to_string(ddo::field_id::pin_cpu_workers) == "pin_cpu_workers");
    CHECK(ddo::field(ddo::field_id::backend).env == "DDO_BACKEND");
    CHECK_FALSE(ddo::parse_field_id("pin_cpu_worker").has_value());
    // The generic name tables of config/enum_names.hpp cover field_id and preset_id too.
    CHECK(ddo::enum_name(ddo::field_id::verbose) == "verbose");
    CHECK(ddo::parse_enum<ddo::field_id>("backend") == ddo::field_id::backend);
    CHECK(ddo::enum_values<ddo::preset_id>().size() == ddo::preset_names.size());
    CHECK(ddo::parse_enum<ddo::preset_id>("off") == ddo::preset_id::off);
  }

  TEST_CASE("the registry marks the VMM fields not yet implemented and DXGI fields Windows-only") {
    for (const auto& info : ddo::config_fields()) {
      CAPTURE(info.name);
      const bool vmm = info.name.substr(0, 4) == "vmm_";
      const bool dxgi = info.name.find("dxgi") != std::string_view::npos;
      // The legacy VMM route reads these (issue 10, transport/vmm.hpp): active.
      const bool legacy_vmm = info.name == "vmm_resident_weight_budget_gb" ||
                              info.name == "vmm_staging_buffer_gb" || info.name == "vmm_page_mb";
      // The native route reads these (issue 10 section 2, runtime/native_vmm_options.hpp).
      const bool native_vmm = info.name == "vmm_native_transport" || info.name == "vmm_source_cache_gb" ||
                              info.name == "vmm_source_registered_gb" ||
                              info.name == "vmm_component_tensor_ownership" ||
                              info.name == "vmm_component_buffer_limit_mb" ||
                              info.name == "vmm_native_source_cache_slot_mb" ||
                              info.name == "vmm_native_source_cache_slots" ||
                              info.name == "vmm_module_pattern";  // both routes: setup/setup.hpp
      if (dxgi)
        CHECK(info.status == ddo::field_status::no_effect_on_this_platform);
      else if (info.name == "offload_device")  // validate's "cpu" check is its only reader
        CHECK(info.status == ddo::field_status::single_value);
      else if (vmm && !legacy_vmm && !native_vmm)
        CHECK(info.status == ddo::field_status::not_yet_implemented);
      else
        CHECK(info.status == ddo::field_status::active);
      // A field that is not active says why; an active one has nothing to explain.
      CHECK(info.status_reason.empty() == (info.status == ddo::field_status::active));
    }
    // The setup path makes these real (issue 8): they stay active.
    for (auto id : {ddo::field_id::execution_device, ddo::field_id::cache_plan,
                    ddo::field_id::verbose, ddo::field_id::backend})
      CHECK(ddo::field(id).status == ddo::field_status::active);
    CHECK(ddo::to_string(ddo::field_status::not_yet_implemented) == "not_yet_implemented");
  }

  TEST_CASE("setting an inactive field from any source warns with the field, source and reason") {
    std::uint64_t seed = 0;
    auto rng = ddo_test::random_engine(seed);
    INFO("seed " << seed);
    const auto page_mb = std::to_string(2 * (1 + rng() % 64));
    const double headroom = static_cast<double>(1 + rng() % 40) / 8.0;

    // Environment.
    auto env = ddo::resolve_settings(
        ddo_test::hermetic_inputs({{"DDO_VMM_HOST_CACHE_GB", page_mb}}));
    auto found = warnings_naming(env, "vmm_host_cache_gb");
    REQUIRE(found.size() == 1);
    CHECK(found[0].find("environment variable DDO_VMM_HOST_CACHE_GB") != std::string::npos);
    CHECK(found[0].find("not_yet_implemented") != std::string::npos);
    CHECK(found[0].find("VMM route") != std::string::npos);
    CHECK(inactive_warnings(env) == 1);

    // Flag.
    auto inputs = ddo_test::hermetic_inputs();
    ddo::config_layer cli;
    cli.source = ddo::origin::cli;
    cli.fields.push_back({ddo::field_index(ddo::field_id::vmm_dxgi_local_headroom_gb),
                          headroom,
                          {ddo::origin::cli, "--ddo-vmm-dxgi-local-headroom-gb"}});
    inputs.cli = cli;
    auto flag = ddo::resolve_settings(inputs);
    found = warnings_naming(flag, "vmm_dxgi_local_headroom_gb");
    REQUIRE(found.size() == 1);
    CHECK(found[0].find("flag --ddo-vmm-dxgi-local-headroom-gb") != std::string::npos);
    CHECK(found[0].find("no effect on this platform") != std::string::npos);
    CHECK(found[0].find("Windows") != std::string::npos);

    // TOML.
    inputs = ddo_test::hermetic_inputs();
    inputs.toml = ddo::parse_toml_config("vmm_host_cache_gb = " + std::to_string(headroom) + "\n",
                                         "machine.toml");
    found = warnings_naming(ddo::resolve_settings(inputs), "vmm_host_cache_gb");
    REQUIRE(found.size() == 1);
    CHECK(found[0].find("TOML key") != std::string::npos);

    // Code: a field override, and a whole config that changes one inactive field.
    inputs = ddo_test::hermetic_inputs();
    inputs.overrides = {{ddo::field_id::vmm_pin_source_weights, true}};
    CHECK(warnings_naming(ddo::resolve_settings(inputs), "vmm_pin_source_weights").size() == 1);
    ddo::dynamic_offload_config config;
    config.vmm_dxgi_system_headroom_gb = headroom;
    inputs = ddo_test::hermetic_inputs();
    inputs.config = config;
    const auto whole = ddo::resolve_settings(inputs);
    CHECK(warnings_naming(whole, "vmm_dxgi_system_headroom_gb").size() == 1);
    CHECK(inactive_warnings(whole) == 1);  // the fields left at their defaults stay quiet
  }

  TEST_CASE("defaults, presets and active fields do not warn") {
    CHECK(inactive_warnings(ddo::resolve_settings(ddo_test::hermetic_inputs())) == 0);
    auto inputs = ddo_test::hermetic_inputs({{"DDO_PIN_CPU_WORKERS", "3"}, {"DDO_VERBOSE", "1"}});
    inputs.config = ddo::dynamic_offload_config{};
    CHECK(inactive_warnings(ddo::resolve_settings(inputs)) == 0);
    // A preset that fills VMM fields is the application's choice of preset, not of the fields.
    inputs = ddo_test::hermetic_inputs();
    inputs.preset = "vmm_fast_runtime";
    const auto vmm = ddo::resolve_settings(inputs);
    CHECK(vmm.provenance.of(ddo::field_id::vmm_native_transport).source == ddo::origin::preset);
    CHECK(inactive_warnings(vmm) == 0);
  }

  TEST_CASE("the Windows standby purge warns that it has no effect here") {
    const auto settings = ddo::resolve_settings(
        ddo_test::hermetic_inputs({{"DDO_PURGE_WINDOWS_STANDBY_BEFORE_TRANSFORMER", "1"}}));
#if defined(_WIN32)
    CHECK(settings.warnings.empty());
#else
    const bool warned =
        std::any_of(settings.warnings.begin(), settings.warnings.end(), [](const auto& w) {
          return w.find("before_transformer") != std::string::npos &&
                 w.find("no_effect_on_this_platform") != std::string::npos;
        });
    CHECK(warned);
#endif
  }

  TEST_CASE("provenance tells a detected available RAM from an explicit one") {
    std::uint64_t seed = 0;
    auto rng = ddo_test::random_engine(seed);
    INFO("seed " << seed);
    const double detected = static_cast<double>(8 + rng() % 500) / 4.0;
    auto inputs = ddo_test::hermetic_inputs();
    inputs.detected_ram_gb = detected;
    const auto measured = ddo::resolve_settings(inputs);
    CHECK(measured.config.available_system_ram_gb == detected);
    CHECK(measured.provenance.of(ddo::field_id::available_system_ram_gb).source ==
          ddo::origin::detected);
    CHECK_FALSE(measured.provenance.given(ddo::field_id::available_system_ram_gb));

    const double stated = detected / 2;
    inputs = ddo_test::hermetic_inputs({{"DDO_AVAILABLE_SYSTEM_RAM_GB", std::to_string(stated)}});
    const auto explicit_ram = ddo::resolve_settings(inputs);
    CHECK(explicit_ram.config.available_system_ram_gb == doctest::Approx(stated));
    CHECK(explicit_ram.provenance.of(ddo::field_id::available_system_ram_gb).source ==
          ddo::origin::env);
    CHECK(explicit_ram.provenance.given(ddo::field_id::available_system_ram_gb));
  }
}
