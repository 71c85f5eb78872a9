// SPDX-License-Identifier: Apache-2.0
// The FLUX.1 engine's CPU float path (examples/flux/) against diffusers' own
// FluxTransformer2DModel at a tiny configuration (tests/data/flux_tiny_reference.bin, made by
// tools/flux_reference.py from the seeded weights and inputs flux_init.hpp reproduces), and the
// same forward streamed through ddo on host_sim: bitwise equal to the all-resident forward.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/runtime/setup.hpp"
#include "ddo/transport/host_sim.hpp"
#include "flux/flux_engine.hpp"
#include "flux/flux_init.hpp"
#include "flux_reference_data.hpp"
#include "model/model_test_support.hpp"

#ifndef DDO_FLUX_REFERENCE
#error "DDO_FLUX_REFERENCE names tests/data/flux_tiny_reference.bin"
#endif

namespace flux_test {

// tools/flux_reference.py's configuration (flux::tiny_config()): 2 double + 2 single blocks, 2
// heads x 64, axes (8, 28, 28), text width 96, pooled 48, guidance; 8 x 8 image tokens, 16 text
// tokens, seed 25, guidance 3.5, 2 Euler steps.
constexpr std::uint64_t seed = 25;

std::vector<std::vector<float>> reference() { return ddo_test::read_flux_reference(DDO_FLUX_REFERENCE); }

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

struct tiny_model {
  ddo_test::temp_dir dir;
  std::string path = dir.file("flux-tiny.safetensors");
  ddo::weight_table table;
  flux::inputs in;
  tiny_model() {
    flux::write_seeded_model(flux::tiny_config(), path, ddo::dtype::f32, seed);
    table = ddo::load_safetensors(path);
    in = flux::seeded_inputs(flux::tiny_config(), 8, 8, 16, 3.5f, seed);
  }
};

TEST_SUITE("runner") {
  TEST_CASE("flux: FLUX.1-dev's sigma schedule, mu linear in the image tokens") {
    // tools/flux_reference.py printed these for 2 steps at 64 image tokens.
    const auto s = flux::sigmas(2, 64);
    REQUIRE(s.size() == 3);
    CHECK(s[0] == 1.0f);
    CHECK(s[1] == 0.6147918701171875f);
    CHECK(s[2] == 0.0f);
    CHECK(flux::shift_mu(256) == doctest::Approx(0.5));
    CHECK(flux::shift_mu(4096) == doctest::Approx(1.15));
    CHECK_THROWS_AS((void)flux::sigmas(0, 64), ddo::usage_error);
  }

  TEST_CASE("flux: the configuration is read back from the published names, bad ones refused") {
    tiny_model m;
    const auto c = flux::config_of(m.table, {8, 28, 28});
    CHECK(c.double_blocks == 2);
    CHECK(c.single_blocks == 2);
    CHECK(c.heads == 2);
    CHECK(c.head_dim == 64);
    CHECK(c.text_dim == 96);
    CHECK(c.pooled_dim == 48);
    CHECK(c.guidance);
    CHECK_THROWS_WITH_AS((void)flux::config_of(m.table, {16, 56, 56}),
                         doctest::Contains("must sum to head_dim 64"), ddo::usage_error);
    // before: 8 linears with biases; per double block 14 and 4 norms; per single 6 and 2; head 2
    CHECK(flux::weight_specs(flux::config{}).size() == 16 + 19 * 32 + 38 * 14 + 4);
  }

  TEST_CASE(
      "flux: the CPU float forward matches diffusers' FluxTransformer2DModel, streamed "
      "through ddo bitwise equal to all-resident") {
    tiny_model m;
    const auto ref = reference();
    REQUIRE(ref.size() == 2);
    const auto c = flux::config_of(m.table, {8, 28, 28});
    const auto groups = ddo::infer_execution_groups(m.table);
    ddo::offload_plan whole;  // the stages of the grouping every plan of this table has
    for (const auto& g : groups) whole.groups.push_back({g.name, g.weights, {}});
    const auto stages = flux::plan_stages(m.table, whole);
    REQUIRE(stages.size() == 1 + 2 + 2 + 1);

    // All resident, no ddo: the CI reference of the GPU path.
    const flux::host_weights host(m.table);
    std::vector<float> v0;
    const auto resident = flux::denoise(
        m.in, 2,
        [&](const flux::inputs& in, float t) {
          flux::forward f(c, in.image_tokens, in.text_tokens);
          return flux::resident_forward(host, stages, f, in, t);
        },
        &v0);
    // fp32 against fp32 (diffusers on the CPU): summation order and libm differ, nothing else;
    // measured 2.8e-6 and 2.5e-6 (values up to 3).
    const double out_err = max_abs_diff(v0, ref[0]);
    const double latents_err = max_abs_diff(resident, ref[1]);
    MESSAGE("max |engine - diffusers|: velocity " << out_err << ", latents after 2 steps "
                                                  << latents_err);
    CHECK(out_err < 2e-5);
    CHECK(latents_err < 2e-5);

    // Streamed: nothing resident (diffusers_offload_compat), every group through the ring each
    // step, the prefetch wrapping into the next step.
    ddo::setup_options options;
    options.inputs.environment = std::map<std::string, std::string>{};
    options.inputs.preset = "diffusers_offload_compat";
    // Every tensor of the tiny model is under the default small-tensor threshold (kept resident).
    options.inputs.overrides = {{"small_tensor_threshold_bytes", std::int64_t{1024}}};
    options.ram_bytes = 64 * ddo::gib;
    const auto settings = ddo::resolve_settings(options.inputs);
    ddo::host_sim_transport sim({.device_capacity_bytes = 72 * ddo::mib});
    auto setup = ddo::setup_offload(m.table, settings, ddo::component_for(settings, options.inputs),
                                    options, sim);
    const std::uint64_t streamed =
        m.table.total_bytes() - setup.plan.total_bytes(ddo::placement::gpu_resident);
    CHECK(streamed > m.table.total_bytes() * 99 / 100);  // all but the RMSNorm weights
    ddo::offloader<ddo::host_sim_transport> off(m.table, std::move(setup), sim);
    auto compute = off.transport().make_stream();
    const auto view = ddo::host_sim_transport::view(compute);
    const auto streamed_stages = flux::plan_stages(m.table, off.plan());
    const auto through_ddo = flux::denoise(m.in, 2, [&](const flux::inputs& in, float t) {
      flux::forward f(c, in.image_tokens, in.text_tokens);
      return flux::streamed_forward(off, view, streamed_stages, f, in, t);
    });
    REQUIRE(through_ddo.size() == resident.size());
    CHECK(std::memcmp(through_ddo.data(), resident.data(), resident.size() * sizeof(float)) == 0);
    const auto metrics = off.metrics(true);
    CHECK(metrics.totals.bytes() >= 2 * streamed);
  }
}

}  // namespace flux_test
