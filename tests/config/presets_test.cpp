// SPDX-License-Identifier: Apache-2.0
#include "ddo/config/presets.hpp"

#include <doctest/doctest.h>

#include <string>

#include "support.hpp"

namespace {

ddo::dynamic_offload_settings with_preset(const std::string& preset,
                                          std::map<std::string, std::string> env = {}) {
  auto inputs = ddo_test::hermetic_inputs(std::move(env));
  inputs.preset = preset;
  inputs.components = {"transformer", "vae"};
  return ddo::resolve_settings(inputs);
}

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("every preset resolves, and every value it sets has preset provenance") {
    for (std::string_view name : ddo::preset_names) {
      if (name == "auto") continue;
      CAPTURE(name);
      const auto settings = with_preset(std::string(name));
      CHECK(settings.requested_preset == name);
      CHECK(settings.effective_preset == name);
      // Named elements, not a structured binding: doctest's CAPTURE captures in a lambda,
      // which clang before 16 cannot do for a binding.
      for (const auto& row : ddo::preset_values(name)) {
        const auto& field = std::get<0>(row);
        const auto& value = std::get<1>(row);
        CAPTURE(field);
        CHECK(ddo::field(field).get(settings.config) == value);
        CHECK(settings.provenance.of(field) == ddo::field_origin{ddo::origin::preset, std::string(name)});
      }
      CHECK(settings.enabled == (name != "off"));
      CHECK(settings.config.backend != ddo::offload_backend::auto_select);
    }
  }

  TEST_CASE("preset_id names every preset once, in the order of preset_names") {
    REQUIRE(ddo::preset_names.size() == ddo::preset_id_names.size());
    for (std::size_t i = 0; i < ddo::preset_names.size(); ++i) {
      const auto id = static_cast<ddo::preset_id>(i);
      CAPTURE(ddo::preset_names[i]);
      CHECK(ddo::to_string(id) == ddo::preset_names[i]);
      CHECK(ddo::parse_preset(ddo::preset_names[i]) == id);
      CHECK(ddo::preset_values(id).size() == ddo::preset_values(ddo::preset_names[i]).size());
    }
    CHECK(ddo::to_string(ddo::preset_id::auto_select) == "auto");
    CHECK_FALSE(ddo::parse_preset("Auto").has_value());
    CHECK(ddo::preset_values(ddo::preset_id::auto_select).empty());
    ddo::preset_context ram;
    ram.available_ram_gb = 8.0;
    const auto choice = ddo::resolve_preset("auto", ram);
    CHECK(choice.id == ddo::preset_id::low_ram_safe);
    CHECK(choice.name == "low_ram_safe");
    CHECK(ddo::preset_component_default(ddo::preset_id::off, "transformer", false).route ==
          ddo::component_route::none);
    CHECK_THROWS_AS((void)ddo::preset_component_default("fast", "vae", false),
                    std::invalid_argument);
  }

  TEST_CASE("preset values are what docs/presets.md documents") {
    auto s = with_preset("one_shot_fast");
    CHECK(s.config.execution_mode == ddo::exec_mode::linear_runtime);
    CHECK(s.effective_pin_cpu_memory);
    CHECK(s.config.auto_budget_policy == ddo::budget_policy::balanced);
    CHECK(s.config.auto_vram_headroom_gb == 1.5);
    s = with_preset("low_ram_safe");
    CHECK_FALSE(s.effective_pin_cpu_memory);
    CHECK(s.config.max_resident_module_budget_gb == 3.0);
    CHECK(s.config.load_safetensors_backend == ddo::safetensors_backend::mmap);
    s = with_preset("wsl_compat");
    CHECK_FALSE(s.requested_pin_cpu_memory);
    s = with_preset("warm_process");
    CHECK(s.config.cache_pinned_weights);
    CHECK(s.config.pinned_weight_cache_namespace == "warm_process");
    s = with_preset("nvme_baseline");
    CHECK(s.config.backend == ddo::offload_backend::nvme);
    CHECK(s.config.execution_mode == ddo::exec_mode::vmm_runtime);
    CHECK_FALSE(s.config.vmm_native_transport);
    s = with_preset("vmm_fast_runtime");
    CHECK(s.config.backend == ddo::offload_backend::vmm);
    CHECK(s.config.vmm_native_transport);
    CHECK(s.config.vmm_resident_weight_budget_gb == 4.0);
    s = with_preset("off");
    CHECK_FALSE(s.enabled);
    CHECK(s.components.at(0).route == ddo::component_route::none);
  }

  TEST_CASE("auto is platform-aware") {
    ddo::preset_context context;
    context.available_ram_gb = 64.0;
    CHECK(ddo::resolve_preset("auto", context).name == "one_shot_fast");
    context.available_ram_gb = 12.0;
    CHECK(ddo::resolve_preset("auto", context).name == "low_ram_safe");
    context.available_ram_gb = 64.0;
    context.model_bytes = 24 * ddo::gib;
    CHECK(ddo::resolve_preset("auto", context).name == "one_shot_fast");
    context.available_ram_gb = 28.0;  // fits, but not with 6 GiB of headroom
    CHECK(ddo::resolve_preset("auto", context).name == "low_ram_safe");
    context.available_ram_gb = 16.0;  // does not fit: three tiers, the rest from the file
    CHECK(ddo::resolve_preset("auto", context).name == "nvme_baseline");
    // The three tiers run on the linear route: the device's VMM support does not matter.
    context.vmm_supported = false;
    CHECK(ddo::resolve_preset("auto", context).name == "nvme_baseline");
    CHECK(!ddo::resolve_preset("auto", context).adjustments.empty());
    context.running_on_wsl = true;
    CHECK(ddo::resolve_preset("auto", context).name == "wsl_compat");
    context.disable_pin_on_wsl = false;  // DDO_DISABLE_PIN_ON_WSL=0: WSL is not special
    CHECK(ddo::resolve_preset("auto", context).name == "nvme_baseline");
    context.backend = ddo::offload_backend::nvme;
    CHECK(ddo::resolve_preset("auto", context).name == "nvme_baseline");
    context.backend = ddo::offload_backend::vmm;
    CHECK(ddo::resolve_preset("auto", context).name == "vmm_fast_runtime");
    CHECK(ddo::resolve_preset("nvme_baseline", context).name == "nvme_baseline");
    CHECK(ddo::resolve_preset("one_shot_fast", {}).reason == "requested explicitly");
  }

  TEST_CASE("auto for a model larger than RAM: three tiers on the linear route (issue 38)") {
    // nvme_baseline's own values pin nothing and map residents inside a 4 GiB VMM budget: RAM
    // sat empty while the disk carried every streamed byte. auto sets pinning on and the
    // linear route over them, and says where each value came from; the preset by name keeps
    // the reference's route.
    auto inputs = ddo_test::hermetic_inputs();
    inputs.model_bytes = 22 * ddo::gib;
    inputs.stated_ram_bytes = 16 * ddo::gib;
    const auto settings = ddo::resolve_settings(inputs);
    CHECK(settings.effective_preset == "nvme_baseline");
    CHECK(settings.config.backend == ddo::offload_backend::nvme);
    CHECK(settings.config.execution_mode == ddo::exec_mode::linear_runtime);
    CHECK(settings.config.pin_cpu_memory);
    CHECK(settings.provenance.of(ddo::field_id::pin_cpu_memory).key == "auto (three tiers)");
    CHECK(settings.preset_reason.find("three tiers") != std::string::npos);
    inputs.preset = "nvme_baseline";
    const auto named = ddo::resolve_settings(inputs);
    CHECK(named.config.execution_mode == ddo::exec_mode::vmm_runtime);
    CHECK_FALSE(named.config.pin_cpu_memory);
  }

  TEST_CASE("--ddo-backend vmm --ddo-preset auto resolves to vmm_fast_runtime") {
    auto inputs = ddo_test::hermetic_inputs();
    ddo::config_layer cli;
    cli.source = ddo::origin::cli;
    cli.preset = ddo::sourced<std::string>{"auto", {ddo::origin::cli, "--ddo-preset"}};
    cli.fields.push_back({*ddo::find_field("backend"), std::string("vmm"),
                          {ddo::origin::cli, "--ddo-backend"}});
    inputs.cli = cli;
    const auto settings = ddo::resolve_settings(inputs);
    CHECK(settings.requested_preset == "auto");
    CHECK(settings.effective_preset == "vmm_fast_runtime");
    CHECK(settings.config.execution_mode == ddo::exec_mode::vmm_runtime);
    CHECK(settings.provenance.of(ddo::field_id::backend).source == ddo::origin::cli);
  }

  TEST_CASE("unknown presets and presets the vmm backend lacks are errors") {
    try {
      (void)ddo::resolve_preset("one_shot", {}, {ddo::origin::env, "DDO_PRESET"});
      FAIL("no error");
    } catch (const ddo::config_error& error) {
      const std::string message = error.what();
      CHECK(error.key() == "DDO_PRESET");
      CHECK(message.find("environment variable DDO_PRESET = \"one_shot\"") != std::string::npos);
      CHECK(message.find("did you mean 'one_shot_fast'?") != std::string::npos);
    }
    ddo::preset_context vmm;
    vmm.backend = ddo::offload_backend::vmm;
    CHECK_THROWS_WITH_AS((void)ddo::resolve_preset("low_ram_safe", vmm, {ddo::origin::cli, "--ddo-preset"}),
                         doctest::Contains("not available with backend vmm"), ddo::config_error);
  }

  TEST_CASE("the VAE component policy of each preset") {
    const std::pair<const char*, ddo::component_route> cases[] = {
        {"auto", ddo::component_route::diffusers_group_offload},
        {"one_shot_fast", ddo::component_route::diffusers_group_offload},
        {"low_ram_safe", ddo::component_route::diffusers_group_offload},
        {"vmm_fast_runtime", ddo::component_route::diffusers_group_offload},
        {"warm_process", ddo::component_route::none},
        {"wsl_compat", ddo::component_route::none},
        {"nvme_baseline", ddo::component_route::none},
        {"off", ddo::component_route::none},
        {"diffusers_offload_compat", ddo::component_route::diffusers_group_offload},
        {"diffusers_leaf_offload_compat", ddo::component_route::diffusers_group_offload},
    };
    for (const auto& row : cases) {
      const auto& preset = std::get<0>(row);
      const auto& route = std::get<1>(row);
      CAPTURE(preset);
      const auto settings = with_preset(preset);
      const auto& vae = settings.components.at(1);
      CHECK(vae.name == "vae");
      CHECK(vae.route == route);
      if (route == ddo::component_route::diffusers_group_offload &&
          std::string_view(preset).find("diffusers") == std::string_view::npos) {
        CHECK(vae.offload_type == ddo::group_offload_type::leaf_level);
        CHECK_FALSE(vae.offload_stream);  // leaf offload without a stream
      }
    }
    // Other components follow the preset's main route.
    CHECK(with_preset("one_shot_fast").components.at(0).route == ddo::component_route::dynamic_offload);
    const auto block = with_preset("diffusers_offload_compat").components.at(0);
    CHECK(block.route == ddo::component_route::diffusers_group_offload);
    CHECK(block.offload_type == ddo::group_offload_type::block_level);
    CHECK(block.offload_stream);
    CHECK(block.offload_record_stream);
    CHECK(with_preset("diffusers_leaf_offload_compat").components.at(0).offload_type ==
          ddo::group_offload_type::leaf_level);
  }
}
