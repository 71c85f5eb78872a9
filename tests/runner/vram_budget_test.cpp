// SPDX-License-Identifier: Apache-2.0
// The emulated card of --vram-gb (examples/runner/vram_budget.hpp): its arguments, and that a run
// on host_sim keeps the accounted peak (context + engine reserve + ddo's peak) within the card.
#include "runner/vram_budget.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ddo/runtime/offloader.hpp"
#include "ddo/setup/setup.hpp"
#include "runner/run_setup.hpp"

namespace vram_budget_test {

/// A small transformer held in host memory: an embedding, 8 blocks of GEMMs, a head.
struct host_model {
  ddo::weight_table table;
  std::vector<std::vector<std::byte>> bytes;
  host_model() {
    std::mt19937 rng(std::random_device{}());
    bytes.reserve(64);
    auto add = [&](const std::string& name, std::int64_t out, std::int64_t in) {
      auto& b = bytes.emplace_back(static_cast<std::size_t>(out * in * 2));
      for (auto& x : b) x = static_cast<std::byte>(rng() & 0xff);
      ddo::weight_info w;
      w.name = name + ".weight";
      w.module_name = name;
      w.kind = ddo::module_kind::linear;
      w.type = ddo::dtype::bf16;
      w.shape = {out, in};
      w.source = ddo::host_source{b.data()};
      table.add(w);
    };
    add("x_embedder", 256, 64);
    for (int blk = 0; blk < 8; ++blk) {
      const std::string p = "transformer_blocks." + std::to_string(blk);
      add(p + ".attn.to_q", 256, 256);
      add(p + ".ff.net.0.proj", 1024, 256);
      add(p + ".ff.net.2", 256, 1024);
    }
    add("proj_out", 64, 256);
  }
};

std::string refusal(const char* text, const char* option) {
  try {
    (void)ddo::runner::parse_size_list_gib(text, option);
  } catch (const ddo::usage_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace vram_budget_test

TEST_SUITE("runner") {
  TEST_CASE("--vram-gb takes one size or a comma-separated sweep, in GiB") {
    CHECK(ddo::runner::parse_size_list_gib("12", "--vram-gb") == std::vector<double>{12.0});
    CHECK(ddo::runner::parse_size_list_gib("4,8,12,24", "--vram-gb") ==
          std::vector<double>{4.0, 8.0, 12.0, 24.0});
    CHECK(ddo::runner::parse_size_list_gib("0.25", "--vram-gb") == std::vector<double>{0.25});
    CHECK(ddo::runner::parse_size_gib("64", "--ram-gb") == 64.0);
  }

  TEST_CASE("a bad --vram-gb or --ram-gb names the option, the entry and the allowed range") {
    using vram_budget_test::refusal;
    for (const char* bad : {"0", "-1", "4,x", "", "4,", ",4", "nan", "inf", "1e9", "12GB"}) {
      CAPTURE(bad);
      const std::string what = refusal(bad, "--vram-gb");
      CHECK(what.find("--vram-gb = \"" + std::string(bad) + "\"") == 0);
      CHECK(what.find("greater than 0 and at most 65536") != std::string::npos);
    }
    CHECK(refusal("4,x", "--vram-gb").find("\"x\" is not a number") != std::string::npos);
    CHECK(refusal("-1", "--vram-gb").find("-1 is outside the range") != std::string::npos);
    CHECK_THROWS_WITH_AS((void)ddo::runner::parse_size_gib("0", "--ram-gb"),
                         doctest::Contains("--ram-gb = \"0\""), ddo::usage_error);
  }

  TEST_CASE("a card too small for the context and the reserves is refused with the numbers") {
    const ddo::runner::vram_budget card{ddo::gib, ddo::gib / 2, ddo::gib / 2};
    CHECK_THROWS_WITH_AS((void)card.ddo_limit_bytes(ddo::runtime_device_reserve_bytes),
                         doctest::Contains("does not hold the CUDA context (0.50 GiB measured)"),
                         ddo::usage_error);
    const ddo::runner::vram_budget fits{4 * ddo::gib, ddo::gib / 2, ddo::gib / 2};
    CHECK(fits.ddo_limit_bytes(ddo::runtime_device_reserve_bytes) == 4 * ddo::gib - ddo::gib / 2);
  }

  TEST_CASE("the accounted peak is the context, the engine's reserve and ddo's peak") {
    const ddo::runner::vram_budget card{1000, 100, 200};
    CHECK(ddo::runner::check_accounted_peak(card, 700).accounted_peak_bytes == 1000);
    CHECK(ddo::runner::check_accounted_peak(card, 700).within());
    CHECK_FALSE(ddo::runner::check_accounted_peak(card, 701).within());
  }

  TEST_CASE("on host_sim the accounted peak of a run stays within the emulated card") {
    const vram_budget_test::host_model model;
    const std::uint64_t model_bytes = model.table.total_bytes();
    const auto shape = ddo::runner::compute_shape_of(model.table);
    const std::int64_t tokens = 64;
    const std::uint64_t reserve = ddo::runner::engine_reserve_bytes(tokens, shape, false);
    int ran = 0;
    // Nothing resident by budget, or most of what the card leaves the weights.
    for (double keep : {0.0, 0.8})
      for (double fraction : {0.4, 1.0, 1.6}) {
        CAPTURE(keep);
        CAPTURE(fraction);
        const double budget_gb = keep * std::min(fraction, 1.0) * static_cast<double>(model_bytes) /
                                 static_cast<double>(ddo::gib);
        ddo::resolve_inputs inputs;
        inputs.use_environment = false;
        inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{4096}},
                            {ddo::field_id::auto_budget_policy, ddo::budget_policy::off},
                            {ddo::field_id::resident_module_budget_gb, budget_gb},
                            {ddo::field_id::max_resident_module_budget_gb, 0.0}};
        inputs.component = ddo::runner::run_component;
        inputs.model_bytes = model_bytes;
        inputs.detected_ram_gb = 64.0;  // auto's preset: not this machine's MemAvailable
        const auto settings = ddo::resolve_settings(inputs);
        // A card of a fraction of the model besides the reserves and the ring the plan needs.
        const std::uint64_t vram =
            static_cast<std::uint64_t>(static_cast<double>(model_bytes) * fraction) + reserve +
            ddo::runtime_device_reserve_bytes + 4 * 1024 * 1024;
        const ddo::runner::vram_budget card{vram, 0, reserve};
        auto options = ddo::runner::run_setup_options(inputs, reserve, 8 * ddo::gib);
        options.host_sim.device_capacity_bytes =
            card.ddo_limit_bytes(ddo::runtime_device_reserve_bytes);
        auto transport = ddo::make_transport<ddo::host_sim_transport>(settings, options.host_sim);
        auto setup = ddo::setup_offload(model.table, settings,
                                        ddo::component_for(settings, options.inputs), options,
                                        transport);
        const std::uint64_t resident = setup.plan.total_bytes(ddo::placement::gpu_resident);
        ddo::offloader<ddo::host_sim_transport> off(model.table, std::move(setup), transport);
        auto stream = off.transport().make_stream();
        const auto view = ddo::host_sim_transport::view(stream);
        off.begin_step();
        for (std::size_t g = 0; g < off.group_count(); ++g) (void)off.acquire(g, view);
        off.transport().synchronize(view);
        const auto peak =
            ddo::runner::ddo_peak_device_bytes(off.transport(), off.metrics(true).peak_device_bytes);
        CHECK(peak >= off.transport().ledger().peak(ddo::ledger_kind::device));
        const auto check = ddo::runner::check_accounted_peak(card, peak);
        CHECK(check.within());
        CHECK(check.accounted_peak_bytes <= vram);
        if (keep > 0.0 && fraction >= 1.0) {
          // The check is not vacuous: most of the model is on the card, and counted.
          CHECK(resident > model_bytes / 2);
          CHECK(check.accounted_peak_bytes >= resident + reserve);
        }
        ++ran;
      }
    CHECK(ran == 6);
  }
}
