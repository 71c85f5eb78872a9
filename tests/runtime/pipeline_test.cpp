// SPDX-License-Identifier: Apache-2.0
// One device budget and one pinned-host budget for a pipeline (setup/pipeline_budget.hpp,
// setup/pipeline_offload.hpp), on host_sim: ddo's ledger stays inside the shared budget in
// every phase over several images, pinned blocks are made once, the errors say what is wrong
// and a failed setup leaves nothing allocated.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ddo/setup/pipeline_offload.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/host_sim_vmm.hpp"
#include "lease_check.hpp"
#include "random_bytes.hpp"

using ddo::host_sim_transport;
using ddo::ledger_kind;

namespace {

/// A component of blocks of four linear modules ([rows, 256] bf16), in engine-owned host memory.
struct component_model {
  ddo::weight_table table;
  std::vector<std::vector<std::byte>> bytes;
  component_model(std::size_t blocks, std::uint32_t seed, const std::string& family) {
    std::mt19937 rng(seed);
    bytes.reserve(blocks * 4);
    for (std::size_t b = 0; b < blocks; ++b)
      for (const char* m : {"attn.to_q", "attn.to_k", "ff.up", "ff.down"}) {
        const std::int64_t rows = 400 + static_cast<std::int64_t>(rng() % 200), cols = 256;
        std::vector<std::byte> data(static_cast<std::size_t>(rows * cols) * 2);
        ddo_test::fill_random_bytes(data, rng);
        bytes.push_back(std::move(data));
        ddo::weight_info w;
        w.name = family + "." + std::to_string(b) + "." + m + ".weight";
        w.kind = ddo::module_kind::linear;
        w.type = ddo::dtype::bf16;
        w.shape = {rows, cols};
        w.source = ddo::host_source{bytes.back().data()};
        table.add(w);
      }
  }
};

/// The three components of a text-to-image pipeline, of different sizes.
struct three_components {
  component_model text_encoder{3, 11, "encoder_layers"};
  component_model transformer{8, 12, "transformer_blocks"};
  component_model vae{2, 13, "decoder_layers"};
  [[nodiscard]] std::vector<ddo::pipeline_component> pipeline() const {
    return {{"text_encoder", &text_encoder.table, std::nullopt},
            {"transformer", &transformer.table, std::nullopt},
            {"vae", &vae.table, std::nullopt}};
  }
  [[nodiscard]] const component_model& model(const std::string& name) const {
    return name == "text_encoder" ? text_encoder : name == "transformer" ? transformer : vae;
  }
};

ddo::setup_options quiet_options() {
  ddo::setup_options o;
  o.inputs.use_environment = false;
  o.inputs.running_on_wsl = false;
  o.inputs.detected_ram_gb = 64.0;
  // The weights here are small: keep the small-tensor rule from making them all resident.
  o.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}}};
  o.ram_bytes = 64 * ddo::gib;
  return o;
}

std::uint64_t pinned_allocations(const ddo::allocation_ledger& l) {
  return l.counts(ledger_kind::pinned).allocations + l.counts(ledger_kind::registered).allocations;
}

void check_nothing_live(const ddo::allocation_ledger& l) {
  for (auto k : {ledger_kind::device, ledger_kind::pinned, ledger_kind::registered}) {
    CHECK(l.counts(k).live() == 0);
    CHECK(l.in_use(k) == 0);
  }
}

}  // namespace

TEST_SUITE_BEGIN("runtime");

TEST_CASE("proportional_split follows the weights, caps shares and gives the rest to the others") {
  const std::vector<std::uint64_t> weights{100, 300, 600};
  CHECK(ddo::proportional_split(1000, weights) == std::vector<std::uint64_t>{100, 300, 600});
  const std::vector<std::uint64_t> caps{1000, 100, 1000};
  const auto capped = ddo::proportional_split(1000, weights, caps);
  CHECK(capped[1] == 100);
  CHECK(capped[0] + capped[1] + capped[2] <= 1000);
  CHECK(capped[0] + capped[1] + capped[2] >= 998);
  CHECK(capped[2] == doctest::Approx(6.0 * capped[0]).epsilon(0.02));
  const std::vector<std::uint64_t> small{10, 20, 30};
  CHECK(ddo::proportional_split(1000, weights, small) == small);  // more than every cap
  CHECK_THROWS_AS((void)ddo::proportional_split(10, weights, std::vector<std::uint64_t>{1}), ddo::usage_error);
}

TEST_CASE("plan_pipeline_budgets gives each phase the whole device budget less the route-none components") {
  std::vector<ddo::pipeline_component_need> needs{
      {"text_encoder", 300, false, 50}, {"transformer", 2000, false, 200}, {"vae", 100, true, 100}};
  const auto shares = ddo::plan_pipeline_budgets(needs, {1000, 1150});
  REQUIRE(shares.size() == 3);
  CHECK(shares[0].device_bytes == 900);
  CHECK(shares[1].device_bytes == 900);
  CHECK(shares[2].device_bytes == 100);
  CHECK(shares[0].resident_elsewhere_bytes == 100);
  CHECK(shares[2].resident_elsewhere_bytes == 0);
  CHECK(shares[2].pinned_host_bytes == 0);  // route none pins nothing
  CHECK(shares[0].pinned_host_bytes == 150);
  CHECK(shares[1].pinned_host_bytes == 1000);
  try {
    (void)ddo::plan_pipeline_budgets(needs, {250, 0});
    FAIL("a budget below the transformer's phase must be refused");
  } catch (const ddo::out_of_memory& e) {
    const std::string what = e.what();
    CHECK(what.find("'transformer'") != std::string::npos);
    CHECK(what.find("300 bytes") != std::string::npos);  // its ring 200 + the route-none vae 100
    CHECK(what.find("250 bytes") != std::string::npos);
    CHECK(what.find("vae") != std::string::npos);
  }
}

TEST_CASE("a shared device budget holds every phase of several images; pinned blocks are made once") {
  const three_components m;
  host_sim_transport sim;
  const auto& ledger = sim.ledger();
  auto options = quiet_options();
  const std::uint64_t budget = ddo::runtime_device_reserve_bytes + 6 * ddo::mib;
  options.pipeline_device_budget_bytes = budget;
  {
    auto pipe = ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim);
    // Every phase set up alone and left released: nothing on the device until enter_phase.
    CHECK(ledger.in_use(ledger_kind::device) == 0);
    CHECK(ledger.peak(ledger_kind::device) <= budget);
    CHECK(pipe.phase().empty());
    for (const auto& share : pipe.shares()) CHECK(share.device_bytes == budget);
    auto stream = sim.make_stream();
    CHECK_THROWS_WITH_AS((void)pipe["vae"]->acquire(0, sim.view(stream)),
                         doctest::Contains("enter its phase first"), ddo::usage_error);
    const auto pinned_after_setup = pinned_allocations(ledger);
    std::uint64_t phase_bytes_sum = 0;
    for (int image = 0; image < 3; ++image) {
      for (const char* phase : {"text_encoder", "transformer", "vae"}) {
        pipe.enter_phase(phase);
        CHECK(pipe.phase() == phase);
        CHECK(ledger.in_use(ledger_kind::device) == pipe.device_bytes());
        CHECK(pipe.device_bytes() == pipe[phase]->device_bytes());
        if (image == 0) phase_bytes_sum += pipe.device_bytes();
        const int steps = std::string(phase) == "transformer" ? 3 : 1;
        CHECK(ddo_test::count_mismatches(*pipe[phase], sim, m.model(phase).bytes, steps) == 0);
      }
      CHECK(pinned_allocations(ledger) == pinned_after_setup);  // never re-pinned per image
    }
    // Each phase planned against the whole budget: the transformer keeps blocks resident, and
    // the phases together would not fit what one phase may use.
    CHECK(pipe["transformer"]->plan().total_bytes(ddo::placement::gpu_resident) > 0);
    CHECK(phase_bytes_sum > budget - ddo::runtime_device_reserve_bytes);
    CHECK(ledger.peak(ledger_kind::device) <= budget);
    CHECK(pipe.phase_counts().switches == 9);
    CHECK(pipe.phase_counts().peak_device_bytes <= budget);
    pipe.enter_phase("vae");  // the current phase again: nothing happens
    CHECK(pipe.phase_counts().switches == 9);
  }
  check_nothing_live(ledger);
}

TEST_CASE("co-scheduled components share the device budget; budgets move between phases without setup") {
  const three_components m;
  host_sim_transport sim;
  const auto& ledger = sim.ledger();
  auto options = quiet_options();
  const std::uint64_t budget = 2 * ddo::runtime_device_reserve_bytes + 12 * ddo::mib;
  options.pipeline_device_budget_bytes = budget;
  {
    auto pipe = ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim);
    const auto least = [&](const std::string& name) {
      auto& c = pipe[name];
      const auto b = ddo::smallest_device_budget(c->table(), c.settings,
                                                 pipe.component_options(name), sim, 0, 0, budget);
      REQUIRE(b.has_value());
      return *b;
    };
    const std::uint64_t least_t = least("transformer"), least_v = least("vae");
    REQUIRE(least_t + least_v <= budget);
    pipe.enter_phase("text_encoder");
    // The transformer and the VAE together (a ControlNet beside a transformer is the same):
    // the text encoder leaves, the two share the budget, each moved — no setup.
    std::mt19937 rng(41);
    std::uint64_t t_budget = budget - least_v, v_budget = least_v;
    for (int k = 0; k < 8; ++k) {
      sim.reset_peak_device_bytes();
      if (k == 0)
        pipe.move_budgets({{"text_encoder", 0}, {"transformer", t_budget}, {"vae", v_budget}});
      else
        pipe.move_budgets({{"transformer", t_budget}, {"vae", v_budget}});
      // The ledger's peak: every moment of the moves, frees and allocations of both.
      CHECK(ledger.peak(ledger_kind::device) <= budget);
      CHECK(ledger.in_use(ledger_kind::device) == pipe.device_bytes());
      CHECK(pipe["text_encoder"]->device_released());
      CHECK(pipe["transformer"]->device_bytes() <= t_budget);
      CHECK(pipe["vae"]->device_bytes() <= v_budget);
      for (const auto& [name, bytes] :
           {std::pair<std::string, std::uint64_t>{"transformer", t_budget}, {"vae", v_budget}}) {
        // The placement a fresh plan for that budget makes; the bytes right.
        host_sim_transport other;
        const auto fresh = ddo::plan_for_device_budget(m.model(name).table, pipe[name].settings,
                                                       pipe.component_options(name), other, bytes);
        for (std::size_t w = 0; w < fresh.plan.decisions.size(); ++w)
          CHECK(pipe[name]->plan().decisions[w].where == fresh.plan.decisions[w].where);
        CHECK(ddo_test::count_mismatches(*pipe[name], sim, m.model(name).bytes, 2) == 0);
      }
      t_budget = least_t + rng() % (budget - least_t - least_v + 1);
      v_budget = budget - t_budget;
    }
    CHECK(pipe["transformer"]->metrics().budget_moves.size() == 8);
    // Over the budget with the components not named: refused, nothing moved.
    const auto moves = pipe["vae"]->metrics().budget_moves.size();
    CHECK_THROWS_AS(pipe.move_budgets({{"vae", budget}}), ddo::out_of_memory);
    CHECK(pipe["vae"]->metrics().budget_moves.size() == moves);
    CHECK_THROWS_AS(pipe.move_budgets({{"vae", least_v}, {"vae", least_v}}), ddo::usage_error);
    // The VAE's phase alone afterwards, the whole budget again.
    pipe.move_budgets({{"transformer", 0}, {"vae", budget}});
    CHECK(pipe["transformer"]->device_released());
    CHECK(ddo_test::count_mismatches(*pipe["vae"], sim, m.vae.bytes, 1) == 0);
    pipe.enter_phase("text_encoder");
    CHECK(ddo_test::count_mismatches(*pipe["text_encoder"], sim, m.text_encoder.bytes, 1) == 0);
    CHECK(ledger.peak(ledger_kind::device) <= budget);
  }
  check_nothing_live(ledger);
}

TEST_CASE("the pinned-host budget is split once between the streaming components by weight bytes") {
  const three_components m;
  host_sim_transport sim;
  auto options = quiet_options();
  options.inputs.overrides.emplace_back(ddo::field_id::resident_module_budget_gb, 1e-9);  // ~1 byte: stream all
  const std::uint64_t pinned = 4 * ddo::mib;
  options.pipeline_pinned_budget_bytes = pinned;
  auto pipe = ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim);
  std::uint64_t shares = 0, pinned_weights = 0;
  for (const auto& share : pipe.shares()) {
    shares += share.pinned_host_bytes;
    const auto& c = pipe[share.name];
    CHECK(c->metrics().pinned_bytes <= share.pinned_host_bytes);
    pinned_weights += c->metrics().pinned_bytes;
  }
  CHECK(shares <= pinned);
  CHECK(pinned_weights <= pinned);
  CHECK(pinned_weights > pinned / 2);  // the budget is used, not left idle
  const auto& s = pipe.shares();
  CHECK(static_cast<double>(s[1].pinned_host_bytes) / static_cast<double>(s[0].pinned_host_bytes) ==
        doctest::Approx(static_cast<double>(m.transformer.table.total_bytes()) /
                        static_cast<double>(m.text_encoder.table.total_bytes()))
            .epsilon(0.01));
  for (const char* phase : {"text_encoder", "transformer", "vae"}) {
    pipe.enter_phase(phase);
    CHECK(ddo_test::count_mismatches(*pipe[phase], sim, m.model(phase).bytes, 1) == 0);
  }
}

TEST_CASE("a pipeline takes its budgets from the settings; they outrank setup_options, which outrank code overrides") {
  const three_components m;
  host_sim_transport sim;
  const auto& ledger = sim.ledger();
  // 70 MiB and 4 MiB are exact in GiB: the settings' budgets are these bytes exactly.
  const std::uint64_t budget = ddo::runtime_device_reserve_bytes + 6 * ddo::mib;
  const std::uint64_t pinned = 4 * ddo::mib;
  auto options = quiet_options();
  options.inputs.use_environment = true;
  options.inputs.environment = std::map<std::string, std::string>{
      {"DDO_PIPELINE_DEVICE_BUDGET_GB", "0.068359375"},   // 70 / 1024
      {"DDO_PIPELINE_PINNED_BUDGET_GB", "0.00390625"}};    // 4 / 1024
  // Code's bytes rank below the environment: these larger budgets must not be used.
  options.pipeline_device_budget_bytes = 2 * budget;
  options.pipeline_pinned_budget_bytes = 2 * pinned;
  {
    auto pipe = ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim);
    CHECK(pipe.budgets() == ddo::pipeline_budgets{budget, pinned});
    for (const auto& share : pipe.shares()) CHECK(share.device_bytes == budget);
    std::uint64_t pinned_weights = 0;
    for (const char* phase : {"text_encoder", "transformer", "vae"}) {
      pipe.enter_phase(phase);
      pinned_weights += pipe[phase]->metrics().pinned_bytes;
      CHECK(ddo_test::count_mismatches(*pipe[phase], sim, m.model(phase).bytes, 2) == 0);
    }
    CHECK(pipe["transformer"]->plan().total_bytes(ddo::placement::gpu_resident) > 0);
    CHECK(ledger.peak(ledger_kind::device) <= budget);
    CHECK(pinned_weights <= pinned);
    CHECK(pinned_weights > 0);
  }
  check_nothing_live(ledger);

  // Without the environment, setup_options' bytes win over an explicit override from code.
  auto code = quiet_options();
  code.inputs.overrides.emplace_back(ddo::field_id::pipeline_device_budget_gb, 100.0);
  code.pipeline_device_budget_bytes = budget;
  CHECK(ddo::pipeline_budgets_from(ddo::resolve_settings(code.inputs), code) ==
        ddo::pipeline_budgets{budget, 0});
  code.pipeline_device_budget_bytes = 0;  // then the override decides
  CHECK(ddo::pipeline_budgets_from(ddo::resolve_settings(code.inputs), code) ==
        ddo::pipeline_budgets{100 * ddo::gib, 0});

  // A component policy does not change the pipeline's budgets (they are read without a component).
  auto policy = quiet_options();
  policy.inputs.component_policies["transformer"].set(ddo::field_id::pipeline_device_budget_gb, 100.0);
  policy.pipeline_device_budget_bytes = budget;
  {
    auto pipe = ddo::enable_pipeline_offload(m.pipeline(), "auto", policy, sim);
    CHECK(pipe.budgets().device_bytes == budget);
  }

  // A bad value is refused before anything is allocated, naming the variable and the rule.
  auto bad = quiet_options();
  bad.inputs.use_environment = true;
  bad.inputs.environment = std::map<std::string, std::string>{{"DDO_PIPELINE_DEVICE_BUDGET_GB", "-2"}};
  CHECK_THROWS_WITH_AS((void)ddo::enable_pipeline_offload(m.pipeline(), "auto", bad, sim),
                       doctest::Contains("DDO_PIPELINE_DEVICE_BUDGET_GB = \"-2\": not a valid value "
                                         "for pipeline_device_budget_gb; expected a non-negative number"),
                       ddo::config_error);
  check_nothing_live(ledger);
}

#if defined(__linux__)
TEST_CASE("components on the VMM route (host_sim's VMM mode) release and restore their window across phases and images") {
  const three_components m;
  auto options = quiet_options();
  // Every component on the VMM route: a window of 2 MiB handles on the one transport, which
  // only the current phase holds. Its 32 MiB budget is above the pipeline's: the phase's share
  // (the plan's slots) bounds what it maps.
  options.inputs.overrides.emplace_back(ddo::field_id::execution_mode, ddo::exec_mode::vmm_runtime);
  options.inputs.overrides.emplace_back(ddo::field_id::vmm_resident_weight_budget_gb, 0.03125);
  options.inputs.overrides.emplace_back(ddo::field_id::vmm_staging_buffer_gb, 0.0078125);
  auto resolved = options.inputs;
  resolved.component.clear();
  auto sim = ddo::make_transport<ddo::host_sim_vmm_transport>(ddo::resolve_settings(resolved));
  const auto& ledger = sim.ledger();
  const std::uint64_t budget = ddo::runtime_device_reserve_bytes + 6 * ddo::mib;
  options.pipeline_device_budget_bytes = budget;
  {
    auto pipe = ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim);
    // Set up one at a time and left released: no handle, mapping or reservation is held.
    CHECK(ledger.in_use(ledger_kind::device) == 0);
    CHECK(sim.live_handles() == 0);
    CHECK(sim.live_mappings() + sim.live_reservations() == 0);
    const auto pinned_after_setup = pinned_allocations(ledger);
    int windowed_phases = 0;
    for (int image = 0; image < 3; ++image) {
      for (const char* phase : {"text_encoder", "transformer", "vae"}) {
        CAPTURE(image);
        CAPTURE(std::string(phase));
        pipe.enter_phase(phase);
        CHECK(pipe[phase].component.route != ddo::component_route::none);
        CHECK(ledger.in_use(ledger_kind::device) == pipe.device_bytes());
        CHECK(pipe.device_bytes() == pipe[phase]->device_bytes());
        CHECK(pipe.device_bytes() <= budget);
        // A phase whose plan streams holds the transport's window (its reservation); one that
        // its share holds all resident needs none (the component models' sizes are random).
        if (pipe[phase]->slot_count() > 0) {
          ++windowed_phases;
          CHECK(sim.live_reservations() >= 1);
        } else {
          CHECK(sim.live_reservations() == 0);
        }
        // Every weight read back at its device address after the restore, over two passes
        // (the second remaps what the first left mapped).
        CHECK(ddo_test::count_mismatches(*pipe[phase], sim, m.model(phase).bytes, 2) == 0);
      }
      CHECK(pinned_allocations(ledger) == pinned_after_setup);  // never re-pinned per image
    }
    CHECK(pipe.phase_counts().switches == 9);
    CHECK(windowed_phases >= 3);  // at least one component streams through the window each image
    // Within the share a phase may use (the budget less ddo's 64 MiB reserve, not allocated).
    CHECK(ledger.peak(ledger_kind::device) <= budget - ddo::runtime_device_reserve_bytes);

    // A lease alive in the VMM component refuses the switch; the lease stays valid and the
    // phase unchanged; dropped, the switch goes through and releases the window.
    auto stream = sim.make_stream();
    {
      auto lease = pipe["vae"]->acquire(0, sim.view(stream));
      CHECK_THROWS_WITH_AS(pipe.enter_phase("transformer"), doctest::Contains("lease(s) alive"),
                           ddo::usage_error);
      CHECK(pipe.phase() == "vae");
      CHECK_FALSE(pipe["vae"]->device_released());
      std::atomic<std::size_t> bad{0};
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::byte* p = lease.data(i);
        const auto& e = m.vae.bytes[lease.weight_index(i)];
        ddo::host_sim_device(sim).enqueue(sim.view(stream), [p, &e, &bad] {
          if (std::memcmp(p, e.data(), e.size()) != 0) ++bad;
        });
      }
      sim.synchronize(sim.view(stream));
      CHECK(bad == 0);
    }
    const auto vae_bytes = pipe["vae"]->device_bytes();
    CHECK(vae_bytes > 0);
    pipe.enter_phase("transformer");
    CHECK(pipe["vae"]->device_released());
    CHECK(pipe["vae"]->device_bytes() == 0);
    CHECK(ledger.in_use(ledger_kind::device) == pipe["transformer"]->device_bytes());
    CHECK(ddo_test::count_mismatches(*pipe["transformer"], sim, m.transformer.bytes, 1) == 0);
  }
  // The ledger is back to its start: no device, pinned or registered bytes, no handle,
  // mapping or reservation.
  check_nothing_live(ledger);
  CHECK(sim.live_handles() == 0);
  CHECK(sim.live_mappings() + sim.live_reservations() == 0);
}

TEST_CASE("without a shared budget, a second VMM component on the same transport is refused clearly, leaving nothing") {
  const three_components m;
  auto options = quiet_options();
  options.inputs.overrides.emplace_back(ddo::field_id::execution_mode, ddo::exec_mode::vmm_runtime);
  options.inputs.overrides.emplace_back(ddo::field_id::vmm_resident_weight_budget_gb, 0.0078125);
  options.inputs.overrides.emplace_back(ddo::field_id::resident_module_budget_gb, 1e-9);  // every group streams
  auto sim = ddo::make_transport<ddo::host_sim_vmm_transport>(ddo::resolve_settings(options.inputs));
  CHECK_THROWS_WITH_AS((void)ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim),
                       doctest::Contains("window is held by another offloader on the same transport"),
                       ddo::usage_error);
  check_nothing_live(sim.ledger());
  CHECK(sim.live_handles() == 0);
  CHECK(sim.live_mappings() + sim.live_reservations() == 0);
}

TEST_CASE("release_device and restore_device of one offloader on the VMM route give the window back and every weight again") {
  const component_model model(6, 21, "transformer_blocks");
  auto options = quiet_options();
  options.inputs.overrides.emplace_back(ddo::field_id::execution_mode, ddo::exec_mode::vmm_runtime);
  options.inputs.overrides.emplace_back(ddo::field_id::vmm_resident_weight_budget_gb, 0.0078125);  // 8 MiB
  options.inputs.overrides.emplace_back(ddo::field_id::vmm_staging_buffer_gb, 0.0078125);
  options.inputs.overrides.emplace_back(ddo::field_id::resident_module_budget_gb, 0.001);  // ~1 MiB resident
  auto sim = ddo::make_transport<ddo::host_sim_vmm_transport>(ddo::resolve_settings(options.inputs));
  const auto& ledger = sim.ledger();
  {
    auto off = ddo::enable_offload(model.table, "auto", options, sim);
    REQUIRE(off->plan().total_bytes(ddo::placement::gpu_resident) > 0);  // residents to restore
    const auto up_bytes = off->device_bytes();
    const auto handles = sim.live_handles();
    CHECK(up_bytes > 0);
    CHECK(ddo_test::count_mismatches(*off, sim, model.bytes, 2) == 0);
    const auto device_allocations = ledger.counts(ledger_kind::device).allocations;
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      off->release_device();
      CHECK(off->device_released());
      CHECK(off->device_bytes() == 0);
      CHECK(ledger.in_use(ledger_kind::device) == 0);
      CHECK(sim.live_handles() == 0);
      CHECK(sim.live_mappings() + sim.live_reservations() == 0);
      off->release_device();  // again: nothing to do
      auto stream = sim.make_stream();
      CHECK_THROWS_WITH_AS((void)off->acquire(0, sim.view(stream)),
                           doctest::Contains("enter its phase first"), ddo::usage_error);
      off->restore_device();
      CHECK_FALSE(off->device_released());
      CHECK(off->device_bytes() == up_bytes);
      CHECK(sim.live_handles() == handles);
      CHECK(ddo_test::count_mismatches(*off, sim, model.bytes, 2) == 0);
    }
    // Each restore allocated the same device side again, nothing more.
    CHECK(ledger.counts(ledger_kind::device).allocations > device_allocations);
    CHECK(ledger.in_use(ledger_kind::device) == up_bytes);
    // A lease alive refuses the release and leaves the device side as it was.
    auto stream = sim.make_stream();
    {
      auto lease = off->acquire(1, sim.view(stream));
      CHECK_THROWS_WITH_AS(off->release_device(), doctest::Contains("lease(s) of this component are alive"),
                           ddo::usage_error);
      CHECK_FALSE(off->device_released());
      CHECK(ledger.in_use(ledger_kind::device) == up_bytes);
    }
    off->release_device();
  }
  check_nothing_live(ledger);
  CHECK(sim.live_handles() == 0);
  CHECK(sim.live_mappings() + sim.live_reservations() == 0);
}
#endif

TEST_CASE("a device budget that cannot hold the largest phase is refused, naming it, with nothing allocated") {
  const three_components m;
  host_sim_transport sim;
  auto options = quiet_options();
  options.pipeline_device_budget_bytes = ddo::runtime_device_reserve_bytes + 256 * ddo::kib;
  try {
    (void)ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim);
    FAIL("the budget holds no ring of the transformer");
  } catch (const ddo::out_of_memory& e) {
    const std::string what = e.what();
    CHECK(what.find("pipeline device budget") != std::string::npos);
    CHECK(what.find("'text_encoder'") != std::string::npos);  // the first phase that does not fit
    CHECK(what.find(ddo::format_bytes_exact(options.pipeline_device_budget_bytes)) != std::string::npos);
  }
  check_nothing_live(sim.ledger());
  CHECK(sim.ledger().counts(ledger_kind::device).allocations == 0);
}

TEST_CASE("a pipeline whose last component fails setup leaves nothing allocated") {
  const three_components m;
  const component_model big_vae(40, 14, "decoder_layers");
  // No shared budget: components stay up as they are set up, and the route-none VAE does not
  // fit what the first two left on an 80 MiB device.
  host_sim_transport sim({.device_capacity_bytes = 80 * ddo::mib});
  auto options = quiet_options();
  ddo::component_policy none;
  none.route = ddo::component_route::none;
  options.inputs.component_policies["vae"] = none;
  const std::vector<ddo::pipeline_component> pipeline{{"text_encoder", &m.text_encoder.table, std::nullopt},
                                                      {"transformer", &m.transformer.table, std::nullopt},
                                                      {"vae", &big_vae.table, std::nullopt}};
  CHECK_THROWS_AS((void)ddo::enable_pipeline_offload(pipeline, "auto", options, sim), ddo::out_of_memory);
  CHECK(sim.ledger().counts(ledger_kind::device).allocations > 0);  // the first two were set up
  check_nothing_live(sim.ledger());
}

TEST_CASE("a phase switch with a lease alive is refused and changes nothing") {
  const three_components m;
  host_sim_transport sim;
  auto options = quiet_options();
  options.pipeline_device_budget_bytes = ddo::runtime_device_reserve_bytes + 6 * ddo::mib;
  auto pipe = ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim);
  pipe.enter_phase("text_encoder");
  auto stream = sim.make_stream();
  {
    auto lease = pipe["text_encoder"]->acquire(0, sim.view(stream));
    CHECK_THROWS_WITH_AS(pipe.enter_phase("transformer"),
                         doctest::Contains("component 'text_encoder' has 1 lease(s) alive"),
                         ddo::usage_error);
    CHECK(pipe.phase() == "text_encoder");
    CHECK_FALSE(pipe["text_encoder"]->device_released());
    CHECK(pipe["transformer"]->device_released());
    CHECK_THROWS_AS(pipe["text_encoder"]->release_device(), ddo::usage_error);
  }
  pipe.enter_phase("transformer");
  CHECK(pipe["text_encoder"]->device_released());
  CHECK(ddo_test::count_mismatches(*pipe["transformer"], sim, m.transformer.bytes, 2) == 0);
  CHECK_THROWS_WITH_AS(pipe.enter_phase("unet"), doctest::Contains("'text_encoder', 'transformer', 'vae'"),
                       ddo::usage_error);
}

TEST_CASE("budgets only ratchet up, and only a changed budget re-plans") {
  const three_components m;
  host_sim_transport sim;
  const auto& ledger = sim.ledger();
  auto options = quiet_options();
  const std::uint64_t budget = ddo::runtime_device_reserve_bytes + 4 * ddo::mib;
  options.pipeline_device_budget_bytes = budget;
  options.pipeline_pinned_budget_bytes = 2 * ddo::mib;
  auto pipe = ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim);
  const auto* before = &*pipe["transformer"];
  const auto pinned_before = pinned_allocations(ledger);
  pipe.raise_budgets(pipe.budgets());  // the same budgets: nothing re-planned or re-pinned
  CHECK(&*pipe["transformer"] == before);
  CHECK(pinned_allocations(ledger) == pinned_before);
  CHECK_THROWS_WITH_AS(pipe.raise_budgets({budget - 1, 2 * ddo::mib}), doctest::Contains("only ratchet up"),
                       ddo::usage_error);
  CHECK_THROWS_WITH_AS(pipe.raise_budgets({budget, ddo::mib}), doctest::Contains("pinned-host budget"),
                       ddo::usage_error);
  pipe.enter_phase("transformer");
  const auto resident_before = pipe["transformer"]->plan().total_bytes(ddo::placement::gpu_resident);
  auto stream = sim.make_stream();
  {
    auto lease = pipe["transformer"]->acquire(0, sim.view(stream));
    CHECK_THROWS_AS(pipe.raise_budgets({budget + 2 * ddo::mib, 2 * ddo::mib}), ddo::usage_error);
  }
  pipe.raise_budgets({budget + 2 * ddo::mib, 2 * ddo::mib});
  CHECK(pipe.budgets().device_bytes == budget + 2 * ddo::mib);
  CHECK(pipe.phase().empty());
  pipe.enter_phase("transformer");
  CHECK(pipe["transformer"]->plan().total_bytes(ddo::placement::gpu_resident) > resident_before);
  CHECK(ledger.in_use(ledger_kind::device) <= budget + 2 * ddo::mib);
  CHECK(ddo_test::count_mismatches(*pipe["transformer"], sim, m.transformer.bytes, 1) == 0);
}

TEST_CASE("a route-none component counts in every phase and is never released") {
  const three_components m;
  host_sim_transport sim;
  const auto& ledger = sim.ledger();
  auto options = quiet_options();
  ddo::component_policy none;
  none.route = ddo::component_route::none;
  options.inputs.component_policies["vae"] = none;
  const std::uint64_t budget = ddo::runtime_device_reserve_bytes + 6 * ddo::mib;
  options.pipeline_device_budget_bytes = budget;
  auto pipe = ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim);
  const std::uint64_t vae = m.vae.table.total_bytes();
  CHECK(pipe.shares()[1].device_bytes == budget - vae);
  CHECK(pipe.shares()[1].resident_elsewhere_bytes == vae);
  CHECK(ledger.in_use(ledger_kind::device) == vae);
  for (int image = 0; image < 2; ++image)
    for (const char* phase : {"text_encoder", "transformer", "vae"}) {
      pipe.enter_phase(phase);
      CHECK_FALSE(pipe["vae"]->device_released());
      CHECK(ddo_test::count_mismatches(*pipe[phase], sim, m.model(phase).bytes, 1) == 0);
    }
  CHECK(ledger.peak(ledger_kind::device) <= budget);
  // A budget below the transformer's ring plus the resident VAE names both.
  options.pipeline_device_budget_bytes = ddo::runtime_device_reserve_bytes + vae + 64 * ddo::kib;
  CHECK_THROWS_WITH_AS((void)ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim),
                       doctest::Contains("route-none components vae"), ddo::out_of_memory);
}

TEST_CASE("under a shared budget a component run once per phase keeps nothing resident") {
  const three_components m;
  host_sim_transport sim;
  auto options = quiet_options();
  options.pipeline_device_budget_bytes = ddo::runtime_device_reserve_bytes + 8 * ddo::mib;
  auto pipeline = m.pipeline();
  pipeline[0].passes_per_phase = 1;  // the text encoder
  pipeline[1].passes_per_phase = 4;  // the transformer's steps
  auto pipe = ddo::enable_pipeline_offload(pipeline, "auto", options, sim);
  CHECK(pipe["text_encoder"]->plan().total_bytes(ddo::placement::gpu_resident) == 0);
  CHECK(pipe["transformer"]->plan().total_bytes(ddo::placement::gpu_resident) > 0);
  pipe.enter_phase("text_encoder");
  CHECK(pipe.phase_counts().restored_bytes == 0);
  CHECK(ddo_test::count_mismatches(*pipe["text_encoder"], sim, m.text_encoder.bytes, 1) == 0);
}

TEST_CASE("a phase whose device side no longer fits fails cleanly and can be entered later") {
  const three_components m;
  const std::uint64_t device = ddo::runtime_device_reserve_bytes + 16 * ddo::mib;
  host_sim_transport sim({.device_capacity_bytes = device});
  const auto& ledger = sim.ledger();
  auto options = quiet_options();
  options.pipeline_device_budget_bytes = ddo::runtime_device_reserve_bytes + 6 * ddo::mib;
  auto pipe = ddo::enable_pipeline_offload(m.pipeline(), "auto", options, sim);
  // The engine takes device memory between phases: the transformer's arena no longer fits.
  std::byte* engine_bytes = sim.allocate_device(device - 2 * ddo::mib);
  CHECK_THROWS_AS(pipe.enter_phase("transformer"), ddo::out_of_memory);
  CHECK(pipe.phase().empty());
  CHECK(pipe["transformer"]->device_released());
  CHECK(ledger.in_use(ledger_kind::device) == device - 2 * ddo::mib);  // the engine's only
  sim.free_device(engine_bytes, device - 2 * ddo::mib);
  pipe.enter_phase("transformer");
  CHECK(ddo_test::count_mismatches(*pipe["transformer"], sim, m.transformer.bytes, 1) == 0);
}

TEST_SUITE_END();
