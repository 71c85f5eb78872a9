// SPDX-License-Identifier: Apache-2.0
// The one setup path (setup/setup.hpp): the machine the plan sees, DDO_PRESET precedence,
// the application's plan cache, verbose setup details, execution_device, stated RAM; the one
// call (setup/prepare_offload.hpp) behind every entry point.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/plan/plan_format.hpp"
#include "ddo/profile/model_fingerprint.hpp"
#include "ddo/profile/profile_store.hpp"
#include "ddo/setup/enable_offload.hpp"
#include "ddo/setup/pipeline_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/host_sim.hpp"

namespace {

struct blocks_model {
  ddo::weight_table table;
  std::vector<std::vector<std::byte>> bytes;
  explicit blocks_model(std::uint32_t seed, int blocks = 8) {
    std::mt19937 rng(seed);
    bytes.reserve(static_cast<std::size_t>(blocks) * 2);
    for (int b = 0; b < blocks; ++b)
      for (const char* m : {"attn.to_q", "ff.up"}) {
        const std::int64_t elems = 32768 + static_cast<std::int64_t>(rng() % 32768);
        auto& v = bytes.emplace_back(static_cast<std::size_t>(elems * 2));
        for (auto& x : v) x = static_cast<std::byte>(rng() & 0xff);
        ddo::weight_info w;
        w.name = "transformer_blocks." + std::to_string(b) + "." + m + ".weight";
        w.kind = ddo::module_kind::linear;
        w.type = ddo::dtype::bf16;
        w.shape = {elems};
        w.source = ddo::host_source{v.data()};
        w.bytes = 0;
        table.add(w);
      }
  }
};

ddo::setup_options quiet() {
  ddo::setup_options o;
  o.inputs.environment = std::map<std::string, std::string>{};
  o.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}}};
  o.ram_bytes = 4 * ddo::gib;
  return o;
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("DDO_PRESET chooses the preset when the engine passes none; a preset from code wins") {
    const blocks_model m(std::random_device{}());
    ddo::host_sim_transport sim;
    auto options = quiet();
    options.inputs.environment = std::map<std::string, std::string>{{"DDO_PRESET", "low_ram_safe"}};
    auto from_env = ddo::enable_offload(m.table, std::nullopt, options, sim);
    CHECK(from_env.settings.requested_preset == "low_ram_safe");
    auto from_code = ddo::enable_offload(m.table, "one_shot_fast", options, sim);
    CHECK(from_code.settings.requested_preset == "one_shot_fast");
    auto pipe = ddo::enable_pipeline_offload({{"transformer", &m.table, std::nullopt}}, std::nullopt,
                                             options, sim);
    CHECK(pipe["transformer"].settings.requested_preset == "low_ram_safe");
  }

  TEST_CASE("the plan sees device memory minus the ring, the engine's reserve and 64 MiB") {
    const blocks_model m(std::random_device{}());
    const std::uint64_t device = 96 * ddo::mib;
    ddo::host_sim_transport sim({.device_capacity_bytes = device});
    auto options = quiet();
    options.reserve_device_bytes = 3 * ddo::mib + 12345;
    const auto settings = ddo::resolve_settings(options.inputs);
    const auto groups = ddo::infer_execution_groups(m.table, settings.config.resident_module_patterns);
    const auto runtime = ddo::runtime_options_from(settings.config);
    const auto machine = ddo::machine_for(
        sim, m.table, groups, settings.config,
        ddo::machine_inputs_for(settings, options, options.inputs.paths, m.table, runtime),
        runtime);
    std::uint64_t slot = 0;
    for (const auto& g : groups) slot = std::max(slot, ddo::slot_bytes_for(m.table, g.weights, runtime.alignment));
    CHECK(machine.slot_bytes == slot);
    CHECK(machine.capacity.free_vram_bytes ==
          device - 3 * slot - options.reserve_device_bytes - ddo::runtime_device_reserve_bytes);
    CHECK(machine.capacity.available_ram_bytes == 4 * ddo::gib);

    // available_system_ram_gb set explicitly wins over the engine's statement.
    options.inputs.overrides.push_back({ddo::field_id::available_system_ram_gb, 3.0});
    const auto explicit_ram = ddo::resolve_settings(options.inputs);
    const auto m2 = ddo::machine_for(
        sim, m.table, groups, explicit_ram.config,
        ddo::machine_inputs_for(explicit_ram, options, options.inputs.paths, m.table, runtime),
        runtime);
    CHECK(m2.capacity.available_ram_bytes == 3 * ddo::gib);
    CHECK(m2.ram.source == ddo::ram_source::setting);
    CHECK(ddo::describe(m2.ram).find("available_system_ram_gb") != std::string::npos);
  }

  TEST_CASE("an explicit config struct leaves auto fields to detection: RAM, backend") {
    // An engine that fills a dynamic_offload_config carries every field, the "auto" ones too
    // (available_system_ram_gb 0, backend auto): those must keep meaning auto. Found on the H200:
    // the streaming bench's config made the plan see 0 B of RAM and pin nothing.
    const blocks_model m(std::random_device{}());
    ddo::host_sim_transport sim({.device_capacity_bytes = 256 * ddo::mib});
    auto options = quiet();
    options.ram_bytes = 64 * ddo::gib;  // above system_ram_headroom_gb, so there is RAM to pin
    ddo::dynamic_offload_config config;
    config.small_tensor_threshold_bytes = 1024;
    config.execution_mode = ddo::exec_mode::linear_runtime;
    config.resident_module_budget_gb = 0.0;
    config.pin_cpu_memory = true;
    REQUIRE(config.available_system_ram_gb == 0.0);
    REQUIRE(config.backend == ddo::offload_backend::auto_select);
    options.inputs.config = config;
    const auto settings = ddo::resolve_settings(options.inputs);
    CHECK(settings.provenance.of(ddo::field_id::backend).source == ddo::origin::detected);
    // The fixed host_sim transport is not refused for the backend auto resolved to.
    const auto setup = ddo::setup_offload(m.table, settings, ddo::component_for(settings, options.inputs),
                                          options, sim);
    CHECK(setup.machine.ram.source == ddo::ram_source::engine);
    CHECK(ddo::describe(setup.machine.ram) == "stated by the engine");
    CHECK(setup.machine.capacity.available_ram_bytes == 64 * ddo::gib);
    std::uint64_t streamed = 0;
    for (const auto& g : setup.plan.groups) streamed += g.streamed_bytes();
    CHECK(streamed > 0);
    CHECK(setup.plan.total_bytes(ddo::placement::pinned_host) == streamed);

    // A backend the code names is still refused when the engine fixed another transport.
    config.backend = ddo::offload_backend::linear;
    options.inputs.config = config;
    const auto named = ddo::resolve_settings(options.inputs);
    CHECK_THROWS_AS((void)ddo::setup_offload(m.table, named,
                                             ddo::component_for(named, options.inputs), options, sim),
                    ddo::config_error);
  }

  TEST_CASE("cache_plan reuses plans from the application's cache, keyed by table, config, budgets") {
    const blocks_model m(std::random_device{}());
    ddo::plan_cache cache;
    auto options = quiet();
    options.plans = &cache;
    ddo::host_sim_transport sim({.device_capacity_bytes = 64 * ddo::mib});
    const auto settings = ddo::resolve_settings(options.inputs);
    const ddo::resolved_component route;  // dynamic_offload
    const auto first = ddo::setup_offload(m.table, settings, route, options, sim);
    CHECK_FALSE(first.plan_from_cache);
    CHECK(cache.size() == 1);
    // Momentary free memory changes; the cached plan still fits and is reused.
    auto held = sim.allocate_device(2 * ddo::mib);
    const auto second = ddo::setup_offload(m.table, settings, route, options, sim);
    CHECK(second.plan_from_cache);
    CHECK(cache.hits() == 1);
    // The plan read back from the cache keeps its selections (enums) and prints the same.
    CHECK(second.plan.budgets.resident_selection == ddo::plan_selection::spread);
    CHECK(second.plan.budgets.pin_selection == first.plan.budgets.pin_selection);
    CHECK(ddo::format_plan_json(second.plan, m.table) == ddo::format_plan_json(first.plan, m.table));
    sim.free_device(held, 2 * ddo::mib);
    // Another config, another reserve, another table: planned anew.
    auto other = options;
    other.inputs.overrides.push_back({ddo::field_id::pin_weight_selection, ddo::selection::first});
    other.inputs.overrides.push_back(
        {ddo::field_id::resident_module_selection, ddo::selection::largest});
    const auto other_settings = ddo::resolve_settings(other.inputs);
    const auto planned = ddo::setup_offload(m.table, other_settings, route, other, sim);
    CHECK_FALSE(planned.plan_from_cache);
    const auto again = ddo::setup_offload(m.table, other_settings, route, other, sim);
    CHECK(again.plan_from_cache);
    CHECK(again.plan.budgets.resident_selection == ddo::plan_selection::largest);
    CHECK(again.plan.budgets.pin_selection == ddo::plan_selection::first);
    other = options;
    other.reserve_device_bytes = ddo::mib;
    CHECK_FALSE(ddo::setup_offload(m.table, settings, route, other, sim).plan_from_cache);
    const blocks_model n(std::random_device{}() + 1, 9);
    CHECK_FALSE(ddo::setup_offload(n.table, settings, route, options, sim).plan_from_cache);
    CHECK(cache.size() == 4);
    // cache_plan off: the cache is not consulted.
    auto off = options;
    off.inputs.overrides.push_back({ddo::field_id::cache_plan, false});
    CHECK_FALSE(ddo::setup_offload(m.table, ddo::resolve_settings(off.inputs), route, off, sim).plan_from_cache);
    CHECK(cache.size() == 4);
  }

  TEST_CASE("the RAM is resolved once, with its source: a set RAM keys the plan cache, a detected "
            "one not") {
    const blocks_model m(std::random_device{}());
    ddo::plan_cache cache;
    auto options = quiet();
    options.plans = &cache;
    options.ram_bytes.reset();
    ddo::host_sim_transport sim({.device_capacity_bytes = 64 * ddo::mib});
    const ddo::resolved_component route;  // dynamic_offload
    auto with_ram = [&](double gb) {
      auto o = options;
      o.inputs.overrides.push_back({ddo::field_id::available_system_ram_gb, gb});
      return ddo::setup_offload(m.table, ddo::resolve_settings(o.inputs), route, o, sim);
    };
    const auto eight = with_ram(8.0);
    CHECK(eight.machine.ram.source == ddo::ram_source::setting);
    CHECK(eight.machine.ram.bytes == 8 * ddo::gib);
    CHECK(eight.machine.capacity.available_ram_bytes == 8 * ddo::gib);
    // Another RAM set explicitly is another budget: planned anew (the key kept none of it).
    const auto sixteen = with_ram(16.0);
    CHECK_FALSE(sixteen.plan_from_cache);
    CHECK(sixteen.machine.capacity.available_ram_bytes == 16 * ddo::gib);
    CHECK(with_ram(16.0).plan_from_cache);
    // Detected RAM (resolution's figure, origin detected) stays out of the key: the machine
    // probes at setup, and the plan counts on that one figure.
    auto detected = options;
    detected.inputs.detected_ram_gb = 32.0;
    const auto s32 = ddo::resolve_settings(detected.inputs);
    REQUIRE(s32.provenance.of(ddo::field_id::available_system_ram_gb).source ==
            ddo::origin::detected);
    const auto first = ddo::setup_offload(m.table, s32, route, detected, sim);
    CHECK(first.machine.ram.source == ddo::ram_source::probed);
    detected.inputs.detected_ram_gb = 48.0;
    CHECK(ddo::setup_offload(m.table, ddo::resolve_settings(detected.inputs), route, detected, sim)
              .plan_from_cache);
    // The engine's statement, in words and as the enum.
    options.ram_bytes = 5 * ddo::gib;
    const auto stated = ddo::setup_offload(m.table, ddo::resolve_settings(options.inputs), route,
                                           options, sim);
    CHECK(stated.machine.ram.source == ddo::ram_source::engine);
    CHECK(ddo::describe(stated.machine.ram) == "stated by the engine");
    CHECK(ddo::enum_name(ddo::ram_source::probed) == "probed");
  }

  TEST_CASE("verbose prints the setup details") {
    const blocks_model m(std::random_device{}());
    auto options = quiet();
    options.inputs.overrides.push_back({ddo::field_id::verbose, true});
    std::FILE* log = std::tmpfile();
    REQUIRE(log != nullptr);
    options.log = log;
    ddo::host_sim_transport sim({.device_capacity_bytes = 64 * ddo::mib});
    (void)ddo::enable_offload(m.table, std::nullopt, options, sim);
    std::rewind(log);
    std::string text(4096, '\0');
    text.resize(std::fread(text.data(), 1, text.size(), log));
    std::fclose(log);
    CHECK(text.find("ddo: setup: route dynamic_offload on the host_sim transport") != std::string::npos);
    CHECK(text.find("runtime reserve 64.00 MiB") != std::string::npos);
    CHECK(text.find("RAM 4.00 GiB (stated by the engine)") != std::string::npos);
  }

  TEST_CASE("show_profile: the summary through the engine's log sink; missing caches noted once") {
    const blocks_model m(std::random_device{}());
    auto options = quiet();
    std::vector<std::pair<ddo::log_severity, std::string>> lines;
    options.log = [&](ddo::log_severity severity, std::string_view line) {
      lines.emplace_back(severity, std::string(line));
    };
    options.inputs.overrides.push_back({ddo::field_id::show_profile, true});
    options.inputs.overrides.push_back({ddo::field_id::cache_pinned_weights, true});
    options.inputs.overrides.push_back({ddo::field_id::pinned_weight_cache_namespace, std::string("warm")});
    options.plans = nullptr;
    ddo::host_sim_transport sim({.device_capacity_bytes = 64 * ddo::mib});
    {
      auto enabled = ddo::enable_offload(m.table, std::nullopt, options, sim);
      std::size_t cache_notes = 0;
      for (const auto& n : enabled.notes)
        if (n.find("no effect, the engine passed no cache object") != std::string::npos) {
          ++cache_notes;
          CHECK(n.find("cache_pinned_weights (setup_options::pinned_cache)") != std::string::npos);
          CHECK(n.find("pinned_weight_cache_namespace 'warm'") != std::string::npos);
        }
      CHECK(cache_notes == 1);
      auto compute = sim.make_stream();
      for (std::size_t g = 0; g < enabled->group_count(); ++g)
        (void)enabled->acquire(g, sim.view(compute));
      sim.synchronize(sim.view(compute));
      CHECK(lines.empty());  // verbose is off: nothing printed at setup
    }
    REQUIRE(lines.size() == 3);  // the offloader wrote its summary when it went
    CHECK(lines[0].first == ddo::log_severity::info);
    CHECK(lines[0].second.find("ddo: profile: route dynamic_offload on the host_sim transport") ==
          0);
    CHECK(lines[1].second.find("ddo: profile: moved ") == 0);
    CHECK(lines[1].second.find(" acquires prefetched; copy ") != std::string::npos);
    CHECK(lines[2].second.find("ddo: profile: resident ") == 0);
    lines.clear();
    options.inputs.overrides.push_back({ddo::field_id::show_profile, false});
    (void)ddo::enable_offload(m.table, std::nullopt, options, sim);
    CHECK(lines.empty());
  }

  TEST_CASE("execution_device is parsed into the device ddo makes its transport on") {
    auto options = quiet();
    options.inputs.overrides.push_back({ddo::field_id::execution_device, std::string("cuda:3")});
    auto s = ddo::resolve_settings(options.inputs);
    const auto d = ddo::parse_execution_device(s);
    CHECK(d.cuda);
    CHECK(d.index == 3);
    // The transport ddo makes for these settings is on that device (host_sim: simulated).
    CHECK(ddo::make_transport<ddo::host_sim_transport>(s, options.host_sim).name() == "host_sim");
    options.inputs.overrides.back().value = std::string("gpu0");
    CHECK_THROWS_AS((void)ddo::resolve_settings(options.inputs), ddo::config_error);
  }

  TEST_CASE("a simulated device is named host_sim whatever wraps it; a device by its name") {
    // A trait (transport_with_simulated_device), not the transport's name: the file route over
    // host_sim is called "nvme" and was taken for a device of that name (a stored profile's
    // device name was then checked against "nvme").
    static_assert(ddo::transport_with_simulated_device<ddo::host_sim_transport>);
    static_assert(ddo::transport_with_simulated_device<ddo::host_sim_vmm_transport>);
    static_assert(
        ddo::transport_with_simulated_device<ddo::nvme_transport<ddo::host_sim_transport>>);
    static_assert(!ddo::transport_with_simulated_device<ddo::linear_transport>);
    static_assert(!ddo::transport_with_simulated_device<ddo::nvme_transport<ddo::vmm_transport>>);
    auto options = quiet();
    options.inputs.overrides.emplace_back(ddo::field_id::vmm_staging_buffer_gb, 0.0625);
    const auto s = ddo::resolve_settings(options.inputs);
    CHECK(ddo::transport_device_name(ddo::host_sim_transport{}) == "host_sim");
    CHECK(ddo::transport_device_name(
              ddo::make_transport<ddo::host_sim_vmm_transport>(s, options.host_sim)) == "host_sim");
    CHECK(ddo::transport_device_name(ddo::make_transport<ddo::nvme_transport<ddo::host_sim_transport>>(
              s, options.host_sim)) == "host_sim");
    CHECK(ddo::transport_device_name(ddo::make_transport<
                                     ddo::nvme_transport<ddo::host_sim_vmm_transport>>(
              s, options.host_sim)) == "host_sim");
  }

  TEST_CASE("vmm_runtime on an engine's transport without stable addresses streams, with a note") {
    const blocks_model m(std::random_device{}());
    ddo::host_sim_transport sim({.device_capacity_bytes = 256 * ddo::mib});
    auto options = quiet();
    options.inputs.overrides.emplace_back(ddo::field_id::execution_mode, ddo::exec_mode::vmm_runtime);
    options.inputs.overrides.emplace_back(ddo::field_id::vmm_resident_weight_budget_gb, 0.5);
    options.inputs.overrides.emplace_back(ddo::field_id::vmm_staging_buffer_gb, 0.0625);
    const auto settings = ddo::resolve_settings(options.inputs);
    const auto setup = ddo::setup_offload(
        m.table, settings, ddo::component_for(settings, options.inputs), options, sim);
    const auto noted = [&](const std::string& text) {
      for (const auto& note : setup.notes)
        if (note.find(text) != std::string::npos) return true;
      return false;
    };
    CHECK(noted("no such transport here; the engine's host_sim transport streams instead"));
    CHECK(noted("): this engine fixed the host_sim transport (no stable addresses), which "
                "streams instead (executed: the linear route)"));
    CHECK(setup.runtime.route == ddo::executed_route::dynamic_offload);
  }

  TEST_CASE("route none is refused at planning time when the device cannot hold the model") {
    const blocks_model m(std::random_device{}());
    ddo::host_sim_transport sim({.device_capacity_bytes = 64 * ddo::mib + m.table.total_bytes() / 2});
    auto options = quiet();
    const auto s = ddo::resolve_settings(options.inputs);
    ddo::resolved_component none;
    none.route = ddo::component_route::none;
    CHECK_THROWS_AS((void)ddo::setup_offload(m.table, s, none, options, sim), ddo::out_of_memory);
  }
}

TEST_SUITE("runtime") {
  TEST_CASE("the ring is reserved from what streams, not from bytes the rules keep resident") {
    const blocks_model m(std::random_device{}());
    ddo::host_sim_transport sim({.device_capacity_bytes = 512 * ddo::mib});
    auto options = quiet();
    options.log = nullptr;
    // The rules keep every ff.up resident: a block's slot holds only its attn.to_q.
    options.inputs.overrides.push_back(
        {ddo::field_id::skip_modules_pattern, std::vector<std::string>{R"(ff\.up$)"}});
    const auto settings = ddo::resolve_settings(options.inputs);
    const auto setup = ddo::setup_offload(
        m.table, settings, ddo::component_for(settings, options.inputs), options, sim);
    const auto runtime = ddo::runtime_options_from(settings.config);
    std::uint64_t streamed_slot = 0, whole_slot = 0;
    for (const auto& g : setup.plan.groups) {
      std::vector<std::size_t> streamed;
      for (std::size_t w : g.weights)
        if (setup.plan.decisions[w].where != ddo::placement::gpu_resident) streamed.push_back(w);
      streamed_slot =
          std::max(streamed_slot, ddo::slot_bytes_for(m.table, streamed, runtime.alignment));
      whole_slot = std::max(whole_slot, ddo::slot_bytes_for(m.table, g.weights, runtime.alignment));
    }
    CHECK(setup.machine.slot_bytes ==
          ddo::streamed_slot_bytes(setup.plan, m.table, runtime.alignment));
    CHECK(setup.machine.slot_bytes <= streamed_slot);
    CHECK(setup.machine.slot_bytes < whole_slot);
    CHECK(setup.machine.ring_bytes ==
          ddo::ring_bytes_for(setup.machine.slot_bytes, setup.machine.slots));
    // The plan reports what the rules keep, without a second plan.
    std::uint64_t kept = 0;
    for (std::size_t w = 0; w < m.table.size(); ++w)
      if (m.table[w].name.ends_with("ff.up.weight")) kept += m.table[w].bytes;
    CHECK(setup.plan.budgets.rule_resident_bytes == kept);
  }

  TEST_CASE(
      "a pipeline phase that runs once plans zero-resident as a policy, not a 1-byte budget") {
    const blocks_model m(std::random_device{}());
    ddo::host_sim_transport sim({.device_capacity_bytes = 512 * ddo::mib});
    auto options = quiet();
    options.log = nullptr;
    options.zero_resident_reason = "one pass";
    options.inputs.overrides.push_back({ddo::field_id::auto_budget_policy, ddo::budget_policy::balanced});
    const auto settings = ddo::resolve_settings(options.inputs);
    const auto setup = ddo::setup_offload(
        m.table, settings, ddo::component_for(settings, options.inputs), options, sim);
    CHECK(setup.plan.budgets.resident_source == ddo::resident_budget_source::zero_resident);
    CHECK(setup.plan.budgets.resident_budget_detail == "one pass");
    CHECK(setup.plan.total_bytes(ddo::placement::gpu_resident) ==
          setup.plan.budgets.rule_resident_bytes);
  }
}

TEST_SUITE("runtime") {
  TEST_CASE(
      "the one call: enable_offload, with_offload_backend and with_prepared_offload plan alike; "
      "a stored profile's group timings choose the overlap-aware planner") {
    const blocks_model m(std::random_device{}());
    const auto dir = std::filesystem::temp_directory_path() /
                     ("ddo_one_call_" + std::to_string(std::random_device{}()));
    auto options = quiet();
    options.host_sim.device_capacity_bytes = ddo::gib;
    options.inputs.environment =
        std::map<std::string, std::string>{{"DDO_PROFILE_DIR", dir.string()}};
    options.inputs.overrides.emplace_back(ddo::field_id::backend, ddo::offload_backend::host_sim);
    options.inputs.overrides.emplace_back(
        ddo::field_id::resident_module_budget_gb,
        static_cast<double>(m.table.total_bytes() / 2) / static_cast<double>(ddo::gib));
    const auto json = [&](const ddo::offload_plan& plan) {
      return ddo::format_plan(plan, m.table, ddo::plan_format::json);
    };
    // Each entry point's plan and transport, for the same inputs.
    const auto plans = [&](const ddo::setup_options& o) {
      auto enabled =
          ddo::enable_offload(m.table, std::nullopt, o, ddo::host_sim_transport(o.host_sim));
      const auto chosen = ddo::with_offload_backend(m.table, std::nullopt, o, [&](auto& e) {
        return json(e.plan()) + std::string(e->transport().name());
      });
      const auto prepared =
          ddo::with_prepared_offload<>(m.table, enabled.settings, o, [&](auto& p) {
            return std::make_pair(json(p.plan()) + std::string(p.transport.name()), p.profile);
          });
      CHECK(chosen == json(enabled.plan()) + "host_sim");
      CHECK(prepared.first == chosen);
      return std::make_pair(enabled.plan().budgets, prepared.second);
    };
    // Named results, not structured bindings: doctest's CHECK may capture in a lambda, which
    // clang before 16 cannot do for a binding.
    const auto plain = plans(options);
    CHECK_FALSE(plain.second.has_value());
    CHECK(plain.first.resident_selection != ddo::plan_selection::overlap);
    CHECK(plain.first.planner_detail == "selection: no profile_name");

    options.inputs.overrides.emplace_back(ddo::field_id::profile_name, std::string("onecall"));
    const auto absent = plans(options);
    CHECK_FALSE(absent.second.has_value());
    CHECK(absent.first.planner_detail.find("not stored yet") != std::string::npos);

    // A profile with group timings for this model: copies slower than compute, so residents pay.
    ddo::capacity_profile p;
    p.name = "onecall";
    p.model_fingerprint = ddo::model_fingerprint(m.table);
    p.recommended_resident_budget_bytes = m.table.total_bytes() / 2;
    p.tokens_low = p.tokens_high = 8;
    p.slot_count = 3;
    p.prefetch_depth = 2;
    auto enabled = ddo::enable_offload(m.table, std::nullopt, options,
                                       ddo::host_sim_transport(options.host_sim));
    for (const auto& g : enabled.plan().groups) {
      ddo::group_profile gp;
      gp.name = g.name;
      for (std::size_t w : g.weights) gp.pinned_bytes += m.table[w].bytes;
      gp.transfer_ns = 2'000'000;
      gp.compute_ns_low = gp.compute_ns_high = 500'000;
      p.groups.push_back(gp);
    }
    ddo::profile_store(dir.string()).save(p);
    const auto overlap = plans(options);
    REQUIRE(overlap.second.has_value());
    CHECK_FALSE(overlap.second->timings.empty());
    CHECK(overlap.first.resident_selection == ddo::plan_selection::overlap);
    CHECK(overlap.first.planner_detail.find("capacity profile 'onecall'") != std::string::npos);
    std::filesystem::remove_all(dir);
  }
}
