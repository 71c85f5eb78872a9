// SPDX-License-Identifier: Apache-2.0
// Calibration through the library on host_sim: compute spans around the engine's use of each
// lease, load times per group, two token counts, the profile it makes and the planner reading it.
#include "ddo/runtime/calibration.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ddo/plan/overlap_planner.hpp"
#include "ddo/profile/profile_store.hpp"
#include "ddo/profile/profile_timings.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/runtime/setup.hpp"
#include "ddo/transport/host_sim.hpp"

namespace {

/// 6 blocks of one 256 KiB weight each, engine-owned host memory.
struct six_blocks {
  ddo::weight_table table;
  std::vector<std::vector<std::byte>> bytes;
  six_blocks() {
    for (int b = 0; b < 6; ++b) {
      auto& v = bytes.emplace_back(256 * 1024);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>((i * 31 + b) & 0xff);
      ddo::weight_info w;
      w.name = "transformer_blocks." + std::to_string(b) + ".ff.up.weight";
      w.kind = ddo::module_kind::linear;
      w.type = ddo::dtype::bf16;
      w.shape = {static_cast<std::int64_t>(v.size() / 2)};
      w.source = ddo::host_source{v.data()};
      table.add(w);
    }
  }
};

ddo::calibration_options options_for(std::uint64_t low, std::uint64_t high) {
  ddo::calibration_options o;
  o.tokens_low = low;
  o.tokens_high = high;
  o.measured_steps = 3;
  return o;
}

/// A calibration offloader over six_blocks on host_sim: build_profile with @p profile_name,
/// every streamed weight pinned, the recorder's runtime options.
struct calibration_setup {
  const six_blocks m;
  ddo::host_sim_transport sim{{.device_capacity_bytes = 64 * ddo::mib}};
  ddo::calibration_recorder recorder;
  ddo::dynamic_offload_settings settings;
  std::optional<ddo::offloader<ddo::host_sim_transport>> off;
  ddo::host_sim_transport::stream stream;

  explicit calibration_setup(const std::string& profile_name) {
    ddo::setup_options options;
    options.inputs.environment = std::map<std::string, std::string>{};
    options.inputs.overrides = {{"small_tensor_threshold_bytes", std::int64_t{1024}},
                                {"build_profile", true},
                                {"profile_name", profile_name},
                                {"pin_cpu_memory", true}};
    options.ram_bytes = 64 * ddo::gib;  // above system_ram_headroom_gb: room to pin everything
    options.runtime = recorder.runtime_options(options.runtime);
    settings = ddo::resolve_settings(options.inputs);
    auto setup = ddo::setup_offload(m.table, settings, ddo::component_for(settings, options.inputs),
                                    options, sim);
    REQUIRE(setup.plan.budgets.resident_source == ddo::resident_budget_source::build_profile);
    off.emplace(m.table, std::move(setup), sim);
    stream = off->transport().make_stream();
  }
  [[nodiscard]] ddo::host_sim_transport::stream_view view() { return ddo::host_sim_transport::view(stream); }
};

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("calibration times compute per group at two token counts and loads per group") {
    calibration_setup c("calib-test");
    auto& off = *c.off;
    auto& recorder = c.recorder;
    const auto& settings = c.settings;
    const auto& m = c.m;
    const auto view = c.view();
    // The engine: odd blocks compute twice as long; compute grows with tokens (1 ms per 100).
    const auto run_step = [&](std::uint64_t tokens) {
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, view);
        const auto ms = std::chrono::microseconds(tokens * 10 * (g % 2 ? 2 : 1));
        off.transport().enqueue(view, [ms] { std::this_thread::sleep_for(ms); });
      }
      off.transport().synchronize(view);
    };
    const auto profile = ddo::calibrate(off, recorder, settings.config, run_step,
                                        options_for(200, 400));
    CHECK(profile.format == 3);
    CHECK(profile.device_name == "host_sim");
    CHECK(profile.transport == "host_sim");
    CHECK(profile.model_fingerprint == ddo::model_fingerprint(m.table));
    CHECK(profile.tokens_low == 200);
    CHECK(profile.tokens_high == 400);
    CHECK(profile.slot_count == off.slot_count());
    CHECK(profile.min_free_vram_bytes <= profile.total_vram_bytes);
    REQUIRE(profile.groups.size() == 6);
    for (std::size_t g = 0; g < 6; ++g) {
      const auto& gp = profile.groups[g];
      CAPTURE(g);
      CHECK(gp.name == off.group_name(g));
      CHECK(gp.pinned_bytes == 256 * 1024);  // calibration pins every streamed weight
      CHECK(gp.bytes() == 256 * 1024);
      CHECK(gp.transfer_ns > 0);
      // Sleeps are lower bounds: at least the requested time, the high point above the low one.
      const double low_ms = 2.0 * (g % 2 ? 2 : 1), high_ms = 4.0 * (g % 2 ? 2 : 1);
      CHECK(gp.compute_ns_low >= static_cast<std::uint64_t>(low_ms * 1e6 * 0.99));
      CHECK(gp.compute_ns_high >= static_cast<std::uint64_t>(high_ms * 1e6 * 0.99));
      CHECK(gp.compute_ns_high > gp.compute_ns_low);
    }
    // The profile round-trips through the store and feeds the planner.
    const auto back = ddo::profile_store::parse(ddo::profile_store::format(profile), "x.toml", "calib-test");
    CHECK(back == profile);
    const auto timings = ddo::timings_at(profile, 300);
    REQUIRE(timings.size() == 6);
    CHECK(timings[1].compute_ms > timings[0].compute_ms);

    // Misuse: an offloader without a calibration plan is refused.
    auto other = settings.config;
    other.build_profile = false;
    CHECK_THROWS_AS((void)ddo::calibrate(off, recorder, other, run_step, options_for(1, 1)),
                    ddo::usage_error);
    CHECK_THROWS_AS((void)ddo::calibrate(off, recorder, settings.config, run_step,
                                         options_for(5, 2)),
                    ddo::usage_error);
  }

  TEST_CASE("calibration measures the engine's own time between groups as their lead-in") {
    calibration_setup c("lead-in");
    auto& off = *c.off;
    const auto view = c.view();
    // The engine works 3 ms on its stream before acquiring groups 2 and 5 (between blocks, as an
    // engine's attention or norms would), 1 ms inside every group. Not synchronizing between
    // steps: the stream runs ahead of nothing but its own work.
    const auto sleep_on_stream = [&](int ms) {
      off.transport().enqueue(view, [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
    };
    const auto run_step = [&](std::uint64_t) {
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        if (g == 2 || g == 5) sleep_on_stream(3);
        auto lease = off.acquire(g, view);
        sleep_on_stream(1);
      }
    };
    const auto profile = ddo::calibrate(off, c.recorder, c.settings.config, run_step, options_for(100, 100));
    off.transport().synchronize(view);
    REQUIRE(profile.groups.size() == 6);
    for (std::size_t g = 0; g < 6; ++g) {
      CAPTURE(g);
      const auto& gp = profile.groups[g];
      CHECK(gp.compute_ns_low >= 990'000);
      if (g == 2 || g == 5) CHECK(gp.lead_in_ns_low >= 2'970'000);
      CHECK(gp.lead_in_ns_high == gp.lead_in_ns_low);  // one token count
    }
    // The engine's time between groups is in the prediction of the all-resident step.
    const auto timings = ddo::timings_at(profile, 100);
    double lead_in = 0.0;
    for (const auto& t : timings) lead_in += t.lead_in_ms;
    CHECK(lead_in >= 2 * 2.97);
  }

  TEST_CASE("compute spans exclude the wait for the load and count into step metrics") {
    const six_blocks m;
    ddo::host_sim_transport sim({.device_capacity_bytes = 64 * ddo::mib});
    ddo::runtime_options ro;
    ro.metrics = true;
    ro.time_compute = true;
    ddo::setup_options options;
    options.inputs.environment = std::map<std::string, std::string>{};
    options.inputs.overrides = {{"small_tensor_threshold_bytes", std::int64_t{1024}},
                                {"resident_module_budget_gb", 0.0001}};
    options.ram_bytes = 4 * ddo::gib;
    options.runtime = ro;
    const auto settings = ddo::resolve_settings(options.inputs);
    auto setup = ddo::setup_offload(m.table, settings, ddo::component_for(settings, options.inputs),
                                    options, sim);
    ddo::offloader<ddo::host_sim_transport> off(m.table, std::move(setup), sim);
    auto stream = off.transport().make_stream();
    const auto view = ddo::host_sim_transport::view(stream);
    for (int step = 0; step < 2; ++step)
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, view);
        off.transport().enqueue(view, [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
      }
    const auto metrics = off.metrics(true);
    CHECK(metrics.totals.compute_ms >= 2 * 6 * 0.99);
  }
}
