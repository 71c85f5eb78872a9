// SPDX-License-Identifier: Apache-2.0
// Every documented way into the setup path (docs/getting-started.md, "The ways in") and the
// pipeline plan the same for the same inputs, and the transport ddo makes honours every device
// option of setup_options (the simulation's, the device cap): the offloader's settings
// constructor and the pipeline dropped setup_options::device_limit_bytes (issue 39).
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ddo/plan/plan_format.hpp"
#include "ddo/setup/enable_offload.hpp"
#include "ddo/setup/pipeline_offload.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"
#include "blocks_model.hpp"

namespace entry_points_test {

constexpr std::uint64_t card_bytes = 4 * ddo::gib;

/// A card ddo makes through make_transport's device branch (a transport constructed from
/// linear_options, as linear_transport is): a simulated device of card_bytes, capped where the
/// options cap it, that keeps the options it was made with.
class recorded_card : public ddo::host_sim_transport {
 public:
  explicit recorded_card(const ddo::linear_options& o)
      : ddo::host_sim_transport(ddo::host_sim_options{
            .device_capacity_bytes =
                o.device_limit_bytes != 0 ? o.device_limit_bytes : card_bytes}),
        options_(o) {}
  recorded_card() : recorded_card(ddo::linear_options{}) {}  // prepared_offload's member
  [[nodiscard]] const ddo::linear_options& options() const noexcept { return options_; }

 private:
  ddo::linear_options options_;
};

/// The same inputs for every entry point: the settings resolve alike whether the entry point
/// resolves them (model bytes, stated RAM and VMM support given) or the test does.
ddo::setup_options inputs_for(const ddo::weight_table& table, std::uint64_t limit) {
  ddo::setup_options o;
  o.inputs.environment = std::map<std::string, std::string>{};
  o.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}},
                        {ddo::field_id::backend, ddo::offload_backend::host_sim}};
  o.inputs.component = "transformer";
  o.inputs.components = {"transformer"};
  o.inputs.model_bytes = table.total_bytes();
  o.inputs.stated_ram_bytes = 4 * ddo::gib;
  o.inputs.vmm_supported = false;
  o.ram_bytes = 4 * ddo::gib;
  o.host_sim.device_capacity_bytes = card_bytes;
  o.device_limit_bytes = limit;
  return o;
}

std::string text_of(const ddo::offload_plan& plan, const ddo::weight_table& table) {
  return ddo::format_plan(plan, table, ddo::plan_format::text);
}

}  // namespace entry_points_test

TEST_SUITE("runtime") {
  TEST_CASE("every entry point plans alike, and the transport ddo makes honours the device cap") {
    namespace ep = entry_points_test;
    const ddo_test::blocks_model m(std::random_device{}(), 262144);
    // A card the model half fits once ddo's 64 MiB reserve and the ring are taken off.
    const std::uint64_t limit = ddo::runtime_device_reserve_bytes + m.table.total_bytes() * 3 / 4;
    const auto options = ep::inputs_for(m.table, limit);
    const auto settings = ddo::resolve_settings(options.inputs);
    // The reference: the one call over a card of exactly the cap.
    const std::string planned =
        ep::text_of(ddo::prepare_offload(m.table, settings, options,
                                         ddo::host_sim_transport({.device_capacity_bytes = limit}))
                        .plan(),
                    m.table);
    const std::string uncapped = ep::text_of(
        ddo::prepare_offload(m.table, settings, options, ddo::host_sim_transport{}).plan(),
        m.table);
    REQUIRE(planned != uncapped);  // the cap changes the plan: a dropped cap shows

    SUBCASE("enable_offload, ddo making the transport") {
      auto sim = ddo::enable_offload<ddo::host_sim_transport>(m.table, std::nullopt, options);
      CHECK(ep::text_of(sim.plan(), m.table) == planned);
      CHECK(sim->transport().device_memory().total_bytes == limit);
      auto card = ddo::enable_offload<ep::recorded_card>(m.table, std::nullopt, options);
      CHECK(ep::text_of(card.plan(), m.table) == planned);
      CHECK(card->transport().options().device_limit_bytes == limit);
    }
    SUBCASE("enable_offload over the engine's transport") {
      auto e = ddo::enable_offload(m.table, std::nullopt, options,
                                   ddo::host_sim_transport({.device_capacity_bytes = limit}));
      CHECK(ep::text_of(e.plan(), m.table) == planned);
    }
    SUBCASE("prepare_offload over the engine's transport, then start") {
      auto prepared = ddo::prepare_offload(
          m.table, settings, options, ddo::host_sim_transport({.device_capacity_bytes = limit}));
      auto enabled = prepared.start();
      CHECK(ep::text_of(enabled.plan(), m.table) == planned);
      CHECK(enabled->transport().device_memory().total_bytes == limit);
    }
    SUBCASE("an offloader running what setup_offload decided, or its plan") {
      auto card = ddo::setup_transport<ep::recorded_card>(settings, options);
      CHECK(card.options().device_limit_bytes == limit);
      auto setup = ddo::setup_offload(m.table, settings,
                                      ddo::component_for(settings, options.inputs), options, card);
      CHECK(ep::text_of(setup.plan, m.table) == planned);
      ddo::offloader<ep::recorded_card> from_setup(m.table, setup, card);
      CHECK(ep::text_of(from_setup.plan(), m.table) == planned);
      CHECK(from_setup.transport().device_memory().total_bytes == limit);
      ddo::offloader<ddo::host_sim_transport> from_plan(
          m.table, setup.plan, setup.runtime,
          ddo::setup_transport<ddo::host_sim_transport>(settings, options));
      CHECK(ep::text_of(from_plan.plan(), m.table) == planned);
      CHECK(from_plan.transport().device_memory().total_bytes == limit);
    }
    SUBCASE("with_prepared_offload and with_offload_backend: backend chooses the transport") {
      ddo::with_prepared_offload(m.table, settings, options, [&](auto& prepared) {
        CHECK(ep::text_of(prepared.plan(), m.table) == planned);
        CHECK(prepared.transport.device_memory().total_bytes == limit);
      });
      ddo::with_offload_backend(m.table, std::nullopt, options, [&](auto& enabled) {
        CHECK(ep::text_of(enabled.plan(), m.table) == planned);
        CHECK(enabled->transport().device_memory().total_bytes == limit);
      });
    }
    SUBCASE("enable_pipeline_offload, ddo making the transport") {
      auto sim = ddo::enable_pipeline_offload<ddo::host_sim_transport>(
          {{"transformer", &m.table, std::nullopt}}, std::nullopt, options);
      CHECK(ep::text_of(sim["transformer"].plan(), m.table) == planned);
      CHECK(sim["transformer"]->transport().device_memory().total_bytes == limit);
      auto card = ddo::enable_pipeline_offload<ep::recorded_card>(
          {{"transformer", &m.table, std::nullopt}}, std::nullopt, options);
      CHECK(ep::text_of(card["transformer"].plan(), m.table) == planned);
      CHECK(card["transformer"]->transport().options().device_limit_bytes == limit);
    }
    SUBCASE("enable_pipeline_offload over the engine's transport") {
      auto pipe = ddo::enable_pipeline_offload(
          {{"transformer", &m.table, std::nullopt}}, std::nullopt, options,
          ddo::host_sim_transport({.device_capacity_bytes = limit}));
      CHECK(ep::text_of(pipe["transformer"].plan(), m.table) == planned);
      CHECK(pipe["transformer"]->transport().device_memory().total_bytes == limit);
    }
  }
}
