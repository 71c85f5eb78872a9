// SPDX-License-Identifier: Apache-2.0
#include "ddo/config/field_registry.hpp"

#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>

#include "ddo/config/settings_toml.hpp"
#include "support.hpp"

TEST_SUITE("config") {
  TEST_CASE("the registry lists every field once, with unique DDO_ variables") {
    std::set<std::string_view> names;
    std::set<std::string_view> variables;
    for (const auto& info : ddo::config_fields()) {
      CHECK(names.insert(info.name).second);
      if (!info.env.empty()) {
        CHECK(info.env.substr(0, 4) == "DDO_");
        CHECK(variables.insert(info.env).second);
      }
      // Flags exist for every field with a variable, and for the two VMM component flags the
      // reference names without one.
      const bool component_flag = info.name == "vmm_component_tensor_ownership" ||
                                  info.name == "vmm_component_buffer_limit_mb";
      CHECK(info.has_flag == (!info.env.empty() || component_flag));
      CHECK(!info.meaning.empty());
    }
    // The reference's 49 fields, backend, the two pipeline budgets, the stated disk rate, the
    // debug poisoning and the weight registry's budget.
    CHECK(names.size() == 55);
  }

  TEST_CASE("every field default is the reference's dataclass default") {
    const std::map<std::string_view, std::string> expected = {
        {"execution_device", "\"cuda:0\""},
        {"offload_device", "\"cpu\""},
        {"target_module_classes", "[\"linear\", \"embedding\"]"},
        {"skip_modules_pattern", "[]"},
        {"always_resident_modules_pattern", "[]"},
        {"small_tensor_threshold_bytes", "16384"},
        {"execution_mode", "\"plan\""},
        {"linear_runtime_strategy", "\"functional\""},
        {"vmm_resident_weight_budget_gb", "0.0"},
        {"vmm_staging_buffer_gb", "0.625"},
        {"pin_cpu_memory", "false"},
        {"allow_pin_memory_fallback", "true"},
        {"pin_cpu_workers", "1"},
        {"cache_plan", "true"},
        {"cache_pinned_weights", "false"},
        {"pinned_weight_cache_namespace", "\"\""},
        {"pinned_weight_cache_budget_gb", "0.0"},
        {"auto_budget_policy", "\"off\""},
        {"max_resident_module_budget_gb", "6.0"},
        {"auto_vram_headroom_gb", "0.0"},
        {"profile_vram_headroom_gb", "1.0"},
        {"profile_name", "\"\""},
        {"build_profile", "false"},
        {"auto_full_pin_min_model_to_vram_ratio", "4.0"},
        {"max_pin_weight_budget_gb", "0.0"},
        {"available_system_ram_gb", "0.0"},
        {"system_ram_headroom_gb", "6.0"},
        {"pin_weight_budget_gb", "0.0"},
        {"pin_weight_budget_ratio", "0.0"},
        {"pin_weight_selection", "\"spread\""},
        {"resident_module_budget_gb", "0.0"},
        {"resident_module_patterns", "[]"},
        {"resident_module_selection", "\"spread\""},
        {"load_safetensors_backend", "\"\""},
        {"verbose", "false"},
        {"show_profile", "true"},
        {"vmm_native_transport", "false"},
        {"vmm_source_cache_gb", "0.0"},
        {"vmm_source_registered_gb", "0.0"},
        {"vmm_module_pattern", "\".*\""},
        {"vmm_page_mb", "0"},
        {"vmm_dxgi_local_headroom_gb", "0.0"},
        {"vmm_dxgi_shared_headroom_gb", "0.0"},
        {"vmm_dxgi_system_headroom_gb", "0.0"},
        {"vmm_component_tensor_ownership", "false"},
        {"vmm_component_buffer_limit_mb", "1"},
        {"vmm_native_source_cache_slot_mb", "0"},
        {"vmm_native_source_cache_slots", "0"},
        {"vmm_host_cache_gb", "0.0"},
        {"vmm_pin_source_weights", "false"},
        {"backend", "\"auto\""},
        {"pipeline_device_budget_gb", "0.0"},
        {"pipeline_pinned_budget_gb", "0.0"},
        {"disk_read_gb_per_s", "0.0"},
        {"debug_poison_released_slots", "false"},
    };
    const ddo::dynamic_offload_config defaults;
    std::size_t checked = 0;
    for (const auto& info : ddo::config_fields()) {
      CAPTURE(info.name);
      const auto it = expected.find(info.name);
      if (it == expected.end()) continue;
      CHECK(ddo::toml_value(info.get(defaults)) == it->second);
      ++checked;
    }
    CHECK(checked == ddo::config_fields().size());
  }

  TEST_CASE("the variables and flags are the reference's names") {
    CHECK(ddo::field("always_resident_modules_pattern").env == "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS");
    CHECK(ddo::field("small_tensor_threshold_bytes").env == "DDO_SMALL_TENSOR_THRESHOLD_KB");
    CHECK(ddo::field("small_tensor_threshold_bytes").env_scale == 1024.0);
    CHECK(ddo::field("vmm_resident_weight_budget_gb").flag() == "--ddo-vmm-resident-weight-budget-gb");
    CHECK(ddo::field("vmm_component_buffer_limit_mb").flag() == "--ddo-vmm-component-buffer-limit-mb");
    CHECK(ddo::field("vmm_component_tensor_ownership").env.empty());
    CHECK(ddo::field("execution_device").flag().empty());
    CHECK(ddo::field("backend").flag() == "--ddo-backend");
    CHECK(ddo::field("pipeline_device_budget_gb").env == "DDO_PIPELINE_DEVICE_BUDGET_GB");
    CHECK(ddo::field("pipeline_device_budget_gb").flag() == "--ddo-pipeline-device-budget-gb");
    CHECK(ddo::field("pipeline_pinned_budget_gb").env == "DDO_PIPELINE_PINNED_BUDGET_GB");
    CHECK(ddo::field("pipeline_pinned_budget_gb").flag() == "--ddo-pipeline-pinned-budget-gb");
    CHECK(ddo::field("pinned_weight_cache_budget_gb").env == "DDO_PINNED_WEIGHT_CACHE_BUDGET_GB");
    CHECK(ddo::field("pinned_weight_cache_budget_gb").flag() ==
          "--ddo-pinned-weight-cache-budget-gb");
    CHECK(ddo::field("disk_read_gb_per_s").env == "DDO_DISK_READ_GB_PER_S");
    CHECK(ddo::field("disk_read_gb_per_s").flag() == "--ddo-disk-read-gb-per-s");
    CHECK_THROWS_AS((void)ddo::field("no_such_field"), std::out_of_range);
    CHECK(ddo::find_field_by_env("DDO_PIN_CPU_WORKERS") == ddo::find_field("pin_cpu_workers"));
    CHECK_FALSE(ddo::find_field_by_env("DDO_NOPE"));
  }

  TEST_CASE("set and get round-trip random values of every field") {
    std::uint64_t seed = 0;
    auto rng = ddo_test::random_engine(seed);
    INFO("seed " << seed);
    ddo::dynamic_offload_config config;
    std::map<std::string_view, ddo::field_value> written;
    for (const auto& info : ddo::config_fields()) {
      ddo::field_value value;
      switch (info.type) {
        case ddo::field_type::boolean: value = (rng() % 2) == 0; break;
        case ddo::field_type::integer: value = static_cast<std::int64_t>(1 + rng() % 1000); break;
        case ddo::field_type::count: value = static_cast<std::int64_t>(rng() % 100000); break;
        case ddo::field_type::real: value = static_cast<double>(rng() % 4096) / 64.0; break;
        case ddo::field_type::ratio: value = static_cast<double>(rng() % 100) / 100.0; break;
        case ddo::field_type::text: value = "text-" + std::to_string(rng()); break;
        case ddo::field_type::choice:
          value = std::string(info.allowed[rng() % info.allowed.size()]);
          break;
        case ddo::field_type::pattern_list:
          value = std::vector<std::string>{"p" + std::to_string(rng() % 97), "q.*"};
          break;
        case ddo::field_type::kind_list:
          value = std::vector<std::string>{std::string(info.allowed[rng() % info.allowed.size()])};
          break;
      }
      info.set(config, value);
      written[info.name] = value;
    }
    for (const auto& info : ddo::config_fields()) {
      CAPTURE(info.name);
      CHECK(info.get(config) == written[info.name]);
    }
  }
}
