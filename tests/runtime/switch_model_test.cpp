// SPDX-License-Identifier: Apache-2.0
// ddo::switch_model (issue 42): model A to model B in one call over host_sim, both models'
// host copies in one weight registry. B's plan sees the card A left (equal to a fresh plan on
// an empty card), the device never holds more than the card, every acquired byte is the
// model's; a switch back reads nothing the registry holds; a registry budget for one model
// evicts the other; and every refusal leaves a consistent state: live leases (nothing changed),
// a plan that fails (A restored and streaming), a registry that cannot admit B (no model
// running, A's pieces still held, nothing of B pinned).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ddo/memory/weight_registry.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/setup/switch_model.hpp"
#include "ddo/transport/host_sim.hpp"
#include "lease_check.hpp"
#include "seeded_file_model.hpp"

namespace switch_model_test {

/// Blocks of two linear weights and a norm, every byte in one file of its own (the registry
/// keys pieces by file identity): seeded, so two seeds are two different models.
struct file_model : ddo_test::seeded_file_model {
  file_model(std::uint32_t seed, int blocks)
      : seeded_file_model("ddo_switch_model_", seed, static_cast<std::size_t>(blocks) * 3) {
    for (int b = 0; b < blocks; ++b) {
      const std::string p = "transformer_blocks." + std::to_string(b) + ".";
      ddo::execution_group g;
      g.name = "transformer_blocks." + std::to_string(b);
      g.weights.push_back(add(p + "attn.to_q.weight", 300000 + rng() % 200000));
      g.weights.push_back(add(p + "ff.up.weight", 200000 + rng() % 200000));
      g.weights.push_back(add(p + "norm.weight", 256));
      groups.push_back(std::move(g));
    }
    finish();
  }
};

/// The card: the runtime's 64 MiB reserve and room for part of a model's weights.
constexpr std::uint64_t card = 64 * ddo::mib + 10 * ddo::mib;

ddo::setup_options options_for(const file_model& m, std::shared_ptr<ddo::weight_registry> reg,
                               std::string name) {
  ddo::setup_options o;
  o.inputs.environment = std::map<std::string, std::string>{};
  o.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}},
                        {ddo::field_id::auto_full_pin_min_model_to_vram_ratio, 0.0},
                        {ddo::field_id::pin_weight_budget_gb, 1.0},
                        // Residents up to what the card has beside the ring and the reserve.
                        {ddo::field_id::resident_module_budget_gb, 0.005},
                        {ddo::field_id::show_profile, false},
                        // Every plan made now, on the card as it is (a cached plan that fits
                        // would hide what the planner saw).
                        {ddo::field_id::cache_plan, false}};
  o.ram_bytes = 8 * ddo::gib;
  // The preset named: auto decides on this machine's MemAvailable (low_ram_safe below 16 GiB,
  // which pins nothing here), and a loaded machine fell below it (budget_move_test's flake).
  o.inputs.preset = "one_shot_fast";
  o.groups = m.groups;
  o.runtime.registry = std::move(reg);
  o.runtime.registry_model = std::move(name);
  o.runtime.poison_slots = true;
  return o;
}

using prepared_t = decltype(ddo::prepare_offload<>(std::declval<const ddo::weight_table&>(),
                                                   std::declval<ddo::dynamic_offload_settings>(),
                                                   std::declval<const ddo::setup_options&>(),
                                                   std::declval<ddo::host_sim_transport>()));
using enabled_t = decltype(std::declval<prepared_t&>().start());

/// Starts @p m on @p sim (a copy of it: copies share the simulated device).
enabled_t start(const file_model& m, const ddo::setup_options& o, ddo::host_sim_transport& sim) {
  const auto settings = ddo::resolve_settings(o.inputs);
  return ddo::prepare_offload<>(m.table, settings, o, sim).start();
}

/// Switches @p e to @p m over a copy of @p sim (the same device).
void switch_to(enabled_t& e, const file_model& m, const ddo::setup_options& o,
               ddo::host_sim_transport& sim) {
  e = ddo::switch_model(e, m.table, ddo::resolve_settings(o.inputs), o, sim);
}

std::vector<ddo::placement> placements(const ddo::offload_plan& plan) {
  std::vector<ddo::placement> out;
  for (const auto& d : plan.decisions) out.push_back(d.where);
  return out;
}

/// The placements a fresh setup of @p m plans on an empty card of its own.
std::vector<ddo::placement> fresh_plan(const file_model& m, const ddo::setup_options& o) {
  ddo::host_sim_transport empty({.device_capacity_bytes = card});
  const auto settings = ddo::resolve_settings(o.inputs);
  return placements(ddo::prepare_offload<>(m.table, settings, o, empty).setup.plan);
}

/// Bytes of @p table's pinned weights, page-rounded (what the registry charges: a block each)
/// or as they are (what its loaded and reused counters count).
std::uint64_t pinned_pages(const ddo::offload_plan& plan, const ddo::weight_table& table,
                           bool rounded = true) {
  std::uint64_t bytes = 0;
  for (std::size_t w = 0; w < table.size(); ++w)
    if (plan.decisions[w].where == ddo::placement::pinned_host)
      bytes += rounded ? ddo::round_up(table[w].bytes, ddo::host_page_size()) : table[w].bytes;
  return bytes;
}

}  // namespace switch_model_test

TEST_SUITE("runtime") {
  using switch_model_test::card;
  using switch_model_test::enabled_t;
  using switch_model_test::file_model;
  using switch_model_test::fresh_plan;
  using switch_model_test::options_for;
  using switch_model_test::pinned_pages;
  using switch_model_test::placements;
  using switch_model_test::start;
  using switch_model_test::switch_to;

  TEST_CASE("switch_model: A to B and back; B planned on the card A left; held bytes reused") {
    file_model a(4231, 6), b(4232, 5);
    auto reg = std::make_shared<ddo::weight_registry>();
    const auto oa = options_for(a, reg, "A"), ob = options_for(b, reg, "B");
    ddo::host_sim_transport sim({.device_capacity_bytes = card});
    auto e = start(a, oa, sim);
    CHECK(ddo_test::count_mismatches(*e, sim, a.expected, 2) == 0);
    const auto a_plan = placements(e.plan());
    CHECK(std::count(a_plan.begin(), a_plan.end(), ddo::placement::gpu_resident) > 3);
    CHECK(std::count(a_plan.begin(), a_plan.end(), ddo::placement::pinned_host) > 0);
    sim.reset_peak_device_bytes();
    switch_to(e, b, ob, sim);
    // The whole card was B's to plan (A's residents and ring released first), and the device
    // never held more than the card.
    CHECK(placements(e.plan()) == fresh_plan(b, ob));
    CHECK(sim.peak_device_bytes() <= card);
    CHECK(ddo_test::count_mismatches(*e, sim, b.expected, 2) == 0);
    const auto loaded = reg->stats().loaded_bytes;
    switch_to(e, a, oa, sim);  // back to A: its pieces are still held
    CHECK(reg->stats().loaded_bytes == loaded);
    CHECK(placements(e.plan()) == a_plan);
    CHECK(ddo_test::count_mismatches(*e, sim, a.expected, 1) == 0);
    e.offloader.reset();
    reg->release("A");
    reg->release("B");
    CHECK(reg->pinned_bytes() == 0);
    CHECK(sim.device_bytes_in_use() == 0);
    CHECK(sim.registered_bytes_in_use() == 0);
  }

  TEST_CASE("switch_model: a registry budget for one model evicts the other on each switch") {
    file_model a(4233, 6), b(4234, 6);
    auto reg = std::make_shared<ddo::weight_registry>();
    const auto oa = options_for(a, reg, "A"), ob = options_for(b, reg, "B");
    ddo::host_sim_transport sim({.device_capacity_bytes = card});
    auto e = start(a, oa, sim);
    const auto pa = pinned_pages(e.plan(), a.table);
    REQUIRE(pa > 0);
    const std::uint64_t budget = pa + pa / 2;  // one model, not two
    reg->set_budget(budget);
    switch_to(e, b, ob, sim);
    const auto pb = pinned_pages(e.plan(), b.table);
    REQUIRE(pa + pb > budget);
    CHECK(reg->stats().evicted_bytes > 0);
    CHECK(ddo_test::count_mismatches(*e, sim, b.expected, 1) == 0);
    const auto before = reg->stats();
    switch_to(e, a, oa, sim);
    const auto after = reg->stats();
    // What was evicted of A is read again; never more than A's pieces, never above the budget.
    CHECK(after.loaded_bytes > before.loaded_bytes);
    CHECK(after.loaded_bytes - before.loaded_bytes + (after.reused_bytes - before.reused_bytes) ==
          pinned_pages(e.plan(), a.table, false));
    CHECK(after.peak_pinned_bytes <= budget);
    CHECK(ddo_test::count_mismatches(*e, sim, a.expected, 1) == 0);
  }

  TEST_CASE("switch_model: refusals leave A running, or nothing running and the registry whole") {
    file_model a(4235, 6), b(4236, 6);
    auto reg = std::make_shared<ddo::weight_registry>();
    auto oa = options_for(a, reg, "A"), ob = options_for(b, reg, "B");
    ddo::host_sim_transport sim({.device_capacity_bytes = card});
    auto e = start(a, oa, sim);
    const auto device_a = sim.device_bytes_in_use();
    {
      // A live lease of A: refused, nothing changed.
      auto s = sim.make_stream();
      auto lease = e->acquire(0, sim.view(s));
      CHECK_THROWS_AS(switch_to(e, b, ob, sim), ddo::usage_error);
      sim.synchronize(sim.view(s));
    }
    CHECK(sim.device_bytes_in_use() == device_a);
    // B's plan fails (a group names a weight B does not have): A's device side restored.
    auto bad = ob;
    bad.groups->front().weights.push_back(b.table.size() + 7);
    CHECK_THROWS(switch_to(e, b, bad, sim));
    REQUIRE(e.offloader != nullptr);
    CHECK(sim.device_bytes_in_use() == device_a);
    CHECK(ddo_test::count_mismatches(*e, sim, a.expected, 1) == 0);
    // The registry cannot admit B beside a kept A: registry_full names A; no model runs, A's
    // pieces are still held (starting A again reads nothing), nothing of B is pinned.
    const auto pa = reg->pinned_bytes();
    reg->set_budget(pa + pa / 2);
    reg->keep("A");
    try {
      switch_to(e, b, ob, sim);
      FAIL("B was admitted beside a kept A");
    } catch (const ddo::registry_full& full) {
      CHECK(full.models_to_release() == std::vector<std::string>{"A"});
    }
    CHECK(e.offloader == nullptr);
    CHECK(reg->pinned_bytes() == pa);
    CHECK(sim.registered_bytes_in_use() == pa);
    CHECK(sim.device_bytes_in_use() == 0);
    const auto loaded = reg->stats().loaded_bytes;
    e = start(a, oa, sim);
    CHECK(reg->stats().loaded_bytes == loaded);
    CHECK(ddo_test::count_mismatches(*e, sim, a.expected, 1) == 0);
    CHECK_THROWS_AS(
        [&] {
          enabled_t none;
          switch_to(none, b, ob, sim);
        }(),
        ddo::usage_error);
  }
}

TEST_SUITE("runtime") {
  TEST_CASE("setup sets the process registry's budget from the settings") {
    using switch_model_test::card;
    using switch_model_test::file_model;
    using switch_model_test::options_for;
    using switch_model_test::start;
    // The process's registry is every test's: its budget goes back to unlimited at the end.
    const auto& reg = ddo::process_weight_registry();
    const std::string name = "switch_model_test: process budget";
    // Six blocks: at least 6 MB, above resident_module_budget_gb's 5.12 MB whatever the seed
    // draws, so that the plan pins part of the model (four blocks drew 4-7.2 MB).
    file_model a(4237, 6);
    // Three offloaders of the same model at once: a card each.
    ddo::host_sim_transport sim({.device_capacity_bytes = card}),
        sim2({.device_capacity_bytes = card}), sim3({.device_capacity_bytes = card});
    auto o = options_for(a, reg, name);
    o.ram_bytes = 10 * ddo::gib;
    o.inputs.overrides.emplace_back(ddo::field_id::system_ram_headroom_gb, 2.0);
    auto has_note = [](const auto& e, const std::string& text) {
      return std::any_of(e.notes.begin(), e.notes.end(),
                         [&](const std::string& n) { return n.find(text) != std::string::npos; });
    };
    {
      // Released and the budget reset however the block ends, after its offloaders: a failed
      // REQUIRE once left the budget at 1 GiB for the next test.
      struct restore_registry {
        const std::shared_ptr<ddo::weight_registry>& reg;
        const std::string& name;
        ~restore_registry() {
          if (reg->holds_model(name)) reg->release(name);
          reg->set_budget(std::numeric_limits<std::uint64_t>::max());
        }
      } restore{reg, name};
      // The engine's RAM less system_ram_headroom_gb.
      auto e = start(a, o, sim);
      CHECK(reg->budget() == 8 * ddo::gib);
      CHECK(has_note(e, "weight registry budget 8.00 GiB (available RAM 10.00 GiB less "
                        "system_ram_headroom_gb)"));
      // pinned_weight_cache_budget_gb states it.
      auto stated = o;
      stated.inputs.overrides.emplace_back(ddo::field_id::pinned_weight_cache_budget_gb, 1.0);
      auto e2 = start(a, stated, sim2);
      CHECK(reg->budget() == ddo::gib);
      CHECK(has_note(e2, "(pinned_weight_cache_budget_gb)"));
      // Below what the model in use holds: the budget stays, the note names the model.
      const auto held = reg->pinned_bytes();
      REQUIRE(held > 64 * 1024);
      auto tiny = o;
      tiny.inputs.overrides.emplace_back(ddo::field_id::pinned_weight_cache_budget_gb,
                                         1.0 / 16384);  // 64 KiB
      auto e3 = start(a, tiny, sim3);
      CHECK(reg->budget() == ddo::gib);
      CHECK(has_note(e3, "weight registry budget kept at 1.00 GiB"));
      CHECK(has_note(e3, "release " + name));
      CHECK(ddo_test::count_mismatches(*e3, sim3, a.expected, 1) == 0);
    }
    CHECK(sim.registered_bytes_in_use() + sim2.registered_bytes_in_use() +
              sim3.registered_bytes_in_use() ==
          0);
  }
}
