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
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/host_sim.hpp"
#include "flux/flux_calibration.hpp"
#include "flux/flux_card_sweep.hpp"
#include "flux/flux_engine.hpp"
#include "flux/flux_init.hpp"
#include "flux/flux_modes.hpp"
#include "adapter/lora_test_support.hpp"
#include "ddo/adapter/lora_adapter.hpp"
#include "flux_reference_data.hpp"
#include "model/model_test_support.hpp"
#include "runner/smallest_card.hpp"
#include "sanitizers.hpp"

#ifndef DDO_FLUX_REFERENCE
#error "DDO_FLUX_REFERENCE names tests/data/flux_tiny_reference.bin"
#endif

namespace flux_test {

// tools/flux_reference.py's configuration (flux::tiny_config()): 2 double + 2 single blocks, 2
// heads x 64, axes (8, 28, 28), text width 96, pooled 48, guidance; 8 x 8 image tokens, 16 text
// tokens, seed 25, guidance 3.5, 2 Euler steps.
constexpr std::uint64_t seed = 25;

std::vector<std::vector<float>> reference() {
  return ddo_test::read_flux_reference(DDO_FLUX_REFERENCE);
}

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
    options.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}}};
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
  TEST_CASE(
      "flux: a LoRA in kohya and PEFT naming streamed through ddo equals the all-resident merge "
      "bitwise and the double-precision merge within float error") {
    tiny_model m;
    const auto c = flux::config_of(m.table, {8, 28, 28});
    const auto rows_of = [&](const std::string& name) {
      return m.table[*m.table.find(name)].shape[0];
    };
    const std::int64_t h = rows_of("transformer_blocks.0.attn.to_q.weight");
    const std::int64_t mlp = rows_of("single_transformer_blocks.1.proj_mlp.weight");
    const std::int64_t ff = rows_of("transformer_blocks.1.ff.net.0.proj.weight");
    const std::int64_t r = 4;
    // The file's modules: kohya (fused qkv, a single block's linear1 with alpha, the final adaLN
    // whose halves diffusers swaps) and PEFT; the base targets each maps to, written out here as
    // lora_conversion_utils.py maps them.
    struct module {
      std::string down, up, alpha;
      std::int64_t cols, rows;
      std::vector<std::pair<std::string, std::int64_t>> targets;  // base weight, first up row
      bool swap = false;
      std::vector<float> a, b;
    };
    const std::string d0 = "transformer_blocks.0.", s1 = "single_transformer_blocks.1.";
    std::vector<module> mods = {{"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight",
                                 "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight",
                                 "",
                                 h,
                                 3 * h,
                                 {{d0 + "attn.to_q.weight", 0},
                                  {d0 + "attn.to_k.weight", h},
                                  {d0 + "attn.to_v.weight", 2 * h}},
                                 false,
                                 {},
                                 {}},
                                {"lora_unet_single_blocks_1_linear1.lora_down.weight",
                                 "lora_unet_single_blocks_1_linear1.lora_up.weight",
                                 "lora_unet_single_blocks_1_linear1.alpha",
                                 h,
                                 3 * h + mlp,
                                 {{s1 + "attn.to_q.weight", 0},
                                  {s1 + "attn.to_k.weight", h},
                                  {s1 + "attn.to_v.weight", 2 * h},
                                  {s1 + "proj_mlp.weight", 3 * h}},
                                 false,
                                 {},
                                 {}},
                                {"transformer.transformer_blocks.1.ff.net.0.proj.lora_A.weight",
                                 "transformer.transformer_blocks.1.ff.net.0.proj.lora_B.weight",
                                 "",
                                 h,
                                 ff,
                                 {{"transformer_blocks.1.ff.net.0.proj.weight", 0}},
                                 false,
                                 {},
                                 {}},
                                {"lora_unet_final_layer_adaLN_modulation_1.lora_down.weight",
                                 "lora_unet_final_layer_adaLN_modulation_1.lora_up.weight",
                                 "",
                                 h,
                                 2 * h,
                                 {{"norm_out.linear.weight", 0}},
                                 true,
                                 {},
                                 {}}};
    std::vector<lora_test_support::tensor> tensors;
    std::uint32_t seed = 50;
    for (auto& md : mods) {
      md.a = lora_test_support::random_values(static_cast<std::size_t>(r * md.cols), seed++);
      md.b = lora_test_support::random_values(static_cast<std::size_t>(md.rows * r), seed++);
      tensors.push_back({md.down, {r, md.cols}, md.a, ddo::dtype::bf16});
      tensors.push_back({md.up, {md.rows, r}, md.b, ddo::dtype::bf16});
      if (!md.alpha.empty()) tensors.push_back({md.alpha, {}, {2.0f}});
    }
    const std::string lora_path = m.dir.file("lora.safetensors");
    lora_test_support::write_file(lora_path, tensors);
    const float scale = 0.05f;
    const auto adapter =
        std::make_shared<const ddo::lora_adapter>(ddo::load_lora_adapter(lora_path, m.table));
    CHECK(adapter->deltas.size() == 9);

    ddo::offload_plan whole;
    for (const auto& g : ddo::infer_execution_groups(m.table))
      whole.groups.push_back({g.name, g.weights, {}});
    const auto stages = flux::plan_stages(m.table, whole);
    const auto resident_run = [&](const flux::host_weights& host) {
      return flux::denoise(m.in, 2, [&](const flux::inputs& in, float t) {
        flux::forward f(c, in.image_tokens, in.text_tokens);
        return flux::resident_forward(host, stages, f, in, t);
      });
    };
    // The reference: W + scale * alpha / r * B A per element in double, rounded to the f32 weight.
    flux::host_weights in_double(m.table);
    for (const auto& md : mods) {
      const double s = scale * (md.alpha.empty() ? 1.0 : 2.0 / double(r));
      for (const auto& [name, first] : md.targets) {
        auto& bytes = in_double.bytes(name);
        const std::int64_t rows = rows_of(name);
        for (std::int64_t o = 0; o < rows; ++o) {
          // The final adaLN's up rows are (shift, scale) in the kohya file, (scale, shift) here.
          const std::int64_t up_row = md.swap ? (first + o + rows / 2) % rows : first + o;
          for (std::int64_t col = 0; col < md.cols; ++col) {
            double d = 0.0;
            for (std::int64_t k = 0; k < r; ++k)
              d += double(md.b[up_row * r + k]) * md.a[k * md.cols + col];
            float w;
            std::memcpy(&w, bytes.data() + 4 * (o * md.cols + col), 4);
            w = static_cast<float>(double(w) + s * d);
            std::memcpy(bytes.data() + 4 * (o * md.cols + col), &w, 4);
          }
        }
      }
    }
    const auto reference = resident_run(in_double);
    flux::host_weights merged(m.table);
    merged.merge({{adapter.get(), scale}}, m.table);
    const auto resident = resident_run(merged);
    const auto base = resident_run(flux::host_weights(m.table));
    const double err = max_abs_diff(resident, reference), effect = max_abs_diff(base, reference);
    MESSAGE("max |merged in fp32 - merged in double|: " << err << "; the LoRA's effect " << effect);
    CHECK(err < 1e-5);
    CHECK(effect > 1e-3);

    ddo::setup_options options;
    options.inputs.environment = std::map<std::string, std::string>{};
    options.inputs.preset = "diffusers_offload_compat";
    options.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}}};
    options.ram_bytes = 64 * ddo::gib;
    const auto settings = ddo::resolve_settings(options.inputs);
    ddo::host_sim_transport sim({.device_capacity_bytes = 72 * ddo::mib});
    auto setup = ddo::setup_offload(m.table, settings, ddo::component_for(settings, options.inputs),
                                    options, sim);
    ddo::offloader<ddo::host_sim_transport> off(m.table, std::move(setup), sim);
    off.attach_adapter(lora_path, adapter, scale);
    auto compute = off.transport().make_stream();
    const auto view = ddo::host_sim_transport::view(compute);
    const auto streamed_stages = flux::plan_stages(m.table, off.plan());
    const auto streamed_run = [&] {
      return flux::denoise(m.in, 2, [&](const flux::inputs& in, float t) {
        flux::forward f(c, in.image_tokens, in.text_tokens);
        return flux::streamed_forward(off, view, streamed_stages, f, in, t);
      });
    };
    const auto through_ddo = streamed_run();
    REQUIRE(through_ddo.size() == resident.size());
    CHECK(std::memcmp(through_ddo.data(), resident.data(), resident.size() * sizeof(float)) == 0);
    off.detach_adapter(lora_path);  // and back to the base model, bit for bit
    const auto detached = streamed_run();
    CHECK(std::memcmp(detached.data(), base.data(), base.size() * sizeof(float)) == 0);
  }
  TEST_CASE("flux --smallest-card: the bisection finds the smallest card within, in log2 trials") {
    using ddo::gib;
    const std::uint64_t half = gib / 2;
    const auto grid = ddo::runner::make_card_grid(3 * gib + gib / 5, 10 * gib + gib / 10, half);
    CHECK(grid.first == 7 * half);  // 3.2 GiB rounded up to 3.5
    CHECK(grid.last == 21 * half);  // 10.1 GiB rounded up to 10.5
    CHECK(grid.cards() == 15);
    // Within from `threshold` up; every trial on the grid, none measured twice.
    const auto search = [&](std::uint64_t threshold) {
      std::vector<std::uint64_t> seen;
      auto r = ddo::runner::smallest_card_within(grid, [&](std::uint64_t card) {
        CHECK(card % half == 0);
        CHECK(card >= grid.first);
        CHECK(card <= grid.last);
        CHECK(std::find(seen.begin(), seen.end(), card) == seen.end());
        seen.push_back(card);
        const bool within = card >= threshold;
        return ddo::runner::card_trial{card, within ? 101.0 : 130.0, within ? 1.01 : 1.3, within};
      });
      CHECK(r.trials.size() == seen.size());
      return r;
    };
    for (std::uint64_t k = 7; k <= 21; ++k) {
      CAPTURE(k);
      const auto r = search(k * half);
      CHECK(r.smallest_bytes == k * half);
      CHECK(r.at.card_bytes == k * half);
      CHECK(r.at.within);
      CHECK(r.trials.size() <= 5);  // ceil(log2(15)) = 4, plus the largest card when it ends there
    }
    const auto none = search(~std::uint64_t{0});  // not even the largest card
    CHECK(none.smallest_bytes == 0);
    CHECK(none.at.card_bytes == grid.last);
    CHECK_FALSE(none.at.within);
    const auto one = ddo::runner::make_card_grid(gib, gib, half);  // a single card
    CHECK(one.cards() == 1);
    CHECK(ddo::runner::smallest_card_within(one, [](std::uint64_t c) {
            return ddo::runner::card_trial{c, 1.0, 1.0, true};
          }).smallest_bytes == gib);
    CHECK_THROWS_AS((void)ddo::runner::make_card_grid(2 * gib, gib, half), ddo::usage_error);
  }

  TEST_CASE("flux --smallest-card: each rule's sweep, its settings and the predicted card") {
    using ddo::gib;
    const std::uint64_t half = gib / 2;
    flux::card_sweep_inputs in{3 * gib, 20 * gib, half, 200.0, 1.02};
    // The step is within 2% once the budget reaches the rule's need.
    const std::map<std::string, std::uint64_t> need = {
        {"overlap", 5 * gib}, {"spread", 7 * gib + gib / 4}, {"first", 12 * gib}};
    std::vector<std::string> order;
    const auto rows =
        flux::sweep_cards(in, {{"overlap", 4 * gib}, {"spread", 7 * gib}, {"first", 13 * gib + 1}},
                          [&](const std::string& rule, std::uint64_t card, std::uint64_t budget) {
                            CHECK(budget == card - in.fixed_bytes);
                            if (order.empty() || order.back() != rule) order.push_back(rule);
                            return flux::card_step{budget >= need.at(rule) ? 203.0 : 260.0, 201.0};
                          });
    CHECK(order == std::vector<std::string>{"overlap", "spread", "first"});  // one rule at a time
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].search.smallest_bytes == 8 * gib);          // 3 + 5
    CHECK(rows[1].search.smallest_bytes == 10 * gib + half);  // 3 + 7.25, up to 10.5
    CHECK(rows[2].search.smallest_bytes == 15 * gib);         // 3 + 12
    CHECK(rows[0].search.at.ratio == doctest::Approx(1.015));
    CHECK(rows[0].search.at.predicted_ms == 201.0);
    CHECK(rows[0].predicted_card_bytes == 7 * gib);          // 3 + 4
    CHECK(rows[2].predicted_card_bytes == 16 * gib + half);  // 3 + 13 + 1 byte, up
    ddo::json_writer o;
    o.begin_object();
    flux::write_card_sweep_json(o, rows, in);
    o.end_object();
    CHECK(o.str().find("\"rule\":\"spread\",\"smallest_card_bytes\":11274289152") !=
          std::string::npos);

    // The settings a card runs with: the budget explicit (to the byte), the rule's planner.
    const auto resolved = [](const std::string& rule, std::uint64_t budget) {
      ddo::resolve_inputs i;
      i.environment = std::map<std::string, std::string>{};
      i.overrides = flux::card_overrides(rule, budget, "flux-4k");
      return ddo::resolve_settings(i).config;
    };
    const auto spread = resolved("spread", 3 * gib + ddo::mib + 7);
    CHECK(ddo::gib_to_bytes(spread.resident_module_budget_gb) == 3 * gib + ddo::mib + 7);
    CHECK(spread.resident_module_selection == ddo::selection::spread);
    CHECK(spread.profile_name.empty());
    CHECK(resolved("first", gib).resident_module_selection == ddo::selection::first);
    const auto overlap = resolved("overlap", 0);  // no budget at all
    CHECK(overlap.profile_name == "flux-4k");
    CHECK(overlap.auto_budget_policy == ddo::budget_policy::off);
    CHECK(overlap.resident_module_budget_gb == 0.0);
  }

  TEST_CASE("flux: --capacity-profile, --calibrate, --smallest-card and --trace combinations") {
    const auto refused = [](flux::run_modes m, const char* says) {
      CAPTURE(says);
      CHECK_THROWS_WITH_AS(flux::check_run_modes(m), doctest::Contains(says), ddo::usage_error);
    };
    flux::run_modes plain;
    CHECK_NOTHROW(flux::check_run_modes(plain));
    CHECK_FALSE(plain.needs_gpu());
    flux::run_modes planned;
    planned.capacity_profile = "flux-4k";
    planned.json = true;
    CHECK_NOTHROW(flux::check_run_modes(planned));
    CHECK(planned.needs_gpu());
    auto calibrate = planned;
    calibrate.calibrate = true;
    CHECK_NOTHROW(flux::check_run_modes(calibrate));
    auto sweep = planned;
    sweep.smallest_card = true;
    sweep.max_slowdown_given = sweep.card_step_given = true;
    CHECK_NOTHROW(flux::check_run_modes(sweep));

    using modes = flux::run_modes;
    const auto with = [](modes m, auto set) {
      set(m);
      return m;
    };
    refused(with(plain, [](modes& m) { m.calibrate = true; }),
            "--calibrate needs --capacity-profile NAME");
    refused(with(plain, [](modes& m) { m.smallest_card = true; }),
            "--smallest-card needs --capacity-profile NAME");
    refused(with(calibrate, [](modes& m) { m.smallest_card = true; }),
            "--calibrate and --smallest-card run one after the other");
    refused(with(calibrate, [](modes& m) { m.graph = true; }), "--graph runs the plain steps");
    for (auto flag : {&modes::check, &modes::profile, &modes::output})
      refused(with(sweep, [&](modes& m) { m.*flag = true; }),
              "--check, --profile and --output are for a run on one card");
    refused(with(planned, [](modes& m) { m.max_slowdown_given = true; }),
            "--max-slowdown needs --smallest-card");
    refused(with(planned, [](modes& m) { m.card_step_given = true; }),
            "--card-step-gb needs --smallest-card");
    refused(with(sweep, [](modes& m) { m.max_slowdown = 0.99; }),
            "--max-slowdown must be a factor in 1..16");
    refused(with(sweep, [](modes& m) { m.card_step_gib = 0.0; }),
            "--card-step-gb must be greater than 0 and at most 64");
    refused(with(plain, [](modes& m) { m.json = true; }),
            "--json FILE needs --profile, --capacity-profile NAME or --smallest-card");
    refused(with(planned, [](modes& m) { m.capacity_profile = "../x"; }),
            "--capacity-profile '../x' is not a valid profile name");
    // --trace: one offloader's eager steps (calibrating too: the recorder forwards each span).
    for (const auto& traced : {plain, planned, calibrate})
      CHECK_NOTHROW(flux::check_run_modes(with(traced, [](modes& m) { m.trace = true; })));
    refused(with(plain, [](modes& m) { m.trace = m.graph = true; }),
            "--trace and --graph: a captured step cannot hold ddo's timing events");
    refused(with(sweep, [](modes& m) { m.trace = true; }),
            "--trace and --smallest-card: the sweep sets up a fresh offloader per card");
  }
  TEST_CASE("flux --smallest-card: the part of a card measured on one card holds on every card") {
    // host_sim cards (no CUDA context): the fixed part from a plan on a 128 MiB card, then every
    // card of the grid with its whole room as the resident budget starts without running out of
    // memory, keeps no more than the budget and no less than a smaller card, and the largest
    // keeps every block.
    tiny_model m;
    ddo::setup_options options;
    options.inputs.environment = std::map<std::string, std::string>{};
    options.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}}};
    options.ram_bytes = 64 * ddo::gib;
    options.reserve_device_bytes = 3 * ddo::mib;  // the engine's activations
    const auto settings_for = [&](const std::string& rule, std::uint64_t budget) {
      auto i = options.inputs;
      for (auto& o : flux::card_overrides(rule, budget, "unused")) i.overrides.push_back(o);
      return ddo::resolve_settings(i);
    };
    const auto card_of = [](std::uint64_t bytes) {
      return ddo::host_sim_transport({.device_capacity_bytes = bytes});
    };
    const std::uint64_t reference_card = 128 * ddo::mib;
    const auto reference =
        flux::card_reference_of(ddo::prepare_offload<>(m.table, settings_for("spread", 0), options,
                                                       card_of(reference_card)),
                                reference_card);
    CHECK(reference.fixed_bytes > 64 * ddo::mib + options.reserve_device_bytes);  // + ring
    CHECK(reference.fixed_bytes < reference_card);
    CHECK(reference.streamable_bytes > m.table.total_bytes() * 98 / 100);  // but RMSNorm weights
    CHECK(reference.ring.slots >= 1);
    const auto grid = ddo::runner::make_card_grid(
        reference.fixed_bytes, reference.fixed_bytes + reference.streamable_bytes, ddo::mib);
    CHECK(grid.cards() >= 5);
    const std::uint64_t kept = m.table.total_bytes() - reference.streamable_bytes;
    for (const char* rule : {"spread", "first"}) {
      std::uint64_t previous = 0;
      for (std::uint64_t card = grid.first; card <= grid.last; card += grid.step) {
        CAPTURE(rule);
        CAPTURE(card);
        const std::uint64_t budget = card - reference.fixed_bytes;
        auto prepared =
            ddo::prepare_offload<>(m.table, settings_for(rule, budget), options, card_of(card));
        const auto& plan = prepared.setup.plan;
        const std::uint64_t resident = plan.total_bytes(ddo::placement::gpu_resident);
        CHECK(resident <= kept + budget);
        CHECK(resident >= previous);  // a larger card keeps no less
        previous = resident;
        // The largest keeps every block; an explicit budget goes to blocks only (the reference's
        // rule), so the embedders and the head stream on every card.
        if (card == grid.last) {
          std::size_t blocks = 0;
          for (const auto& g : plan.groups)
            if (g.name.find("transformer_blocks.") != std::string::npos) {
              ++blocks;
              CHECK(g.streamed_bytes() == 0);
            }
          CHECK(blocks == 2 + 2);
        }
        auto enabled = prepared.start();  // fits: no out_of_memory
        CHECK(enabled->device_bytes() + options.reserve_device_bytes <= card);
      }
      CHECK(previous > kept);
    }
  }
  TEST_CASE("flux --calibrate: a profile of the forward at two token counts, planned with after") {
    // The glue of ddo-flux --capacity-profile on host_sim's CPU forward (ddo-flux runs it on the
    // GPU forward): calibrate_forward on a zero-resident calibration plan, the profile saved,
    // then a plan by the profile's name is the overlap-aware planner's and predicts its step.
    tiny_model m;
    ddo_test::temp_dir profiles;
    ddo::setup_options options;
    options.inputs.environment =
        std::map<std::string, std::string>{{"DDO_PROFILE_DIR", profiles.file("profiles")}};
    options.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}},
                                {ddo::field_id::profile_name, std::string("tiny-64")}};
    options.ram_bytes = 64 * ddo::gib;
    options.tokens = m.in.image_tokens;
    const auto c = flux::config_of(m.table, {8, 28, 28});
    const auto low_in = flux::seeded_inputs(c, 4, 4, 16, 3.5f, seed);
    const auto card = [] {
      return ddo::host_sim_transport({.device_capacity_bytes = 72 * ddo::mib});
    };
    {
      auto calibrating = options;
      calibrating.inputs.overrides.emplace_back(ddo::field_id::build_profile, true);
      ddo::calibration_recorder recorder;
      calibrating.runtime = recorder.runtime_options(calibrating.runtime);
      const auto settings = ddo::resolve_settings(calibrating.inputs);
      auto enabled = ddo::prepare_offload<>(m.table, settings, calibrating, card()).start();
      auto& off = *enabled.offloader;
      auto compute = off.transport().make_stream();
      const auto view = ddo::host_sim_transport::view(compute);
      const auto stages = flux::plan_stages(m.table, off.plan());
      flux::forward high(c, m.in.image_tokens, m.in.text_tokens), low(c, 16, 16);
      ddo::calibration_options o;
      o.sustained_warmup_ms = 0.0;  // host_sim has no power limit to settle
      // Each timed step repeats the same forward through the same acquires: the sanitizer builds
      // (-O0, the forward's float loops 10-20x slower) time one step per token count and pass, 8
      // forwards instead of 16 (ThreadSanitizer: ~52 s -> ~26 s on a loaded 2-core machine).
      if (DDO_TEST_UNDER_SANITIZER) o.measured_steps = 1;
      const auto profile = flux::calibrate_forward(off, recorder, settings.config, view, stages,
                                                   high, m.in, low, low_in, 1000.f, o);
      CHECK(profile.tokens_low == 16);
      CHECK(profile.tokens_high == 64);
      REQUIRE(profile.groups.size() == off.plan().groups.size());
      for (const auto& g : profile.groups) {
        CAPTURE(g.name);
        CHECK(g.compute_ns_high > 0);
        CHECK(g.sustained_compute_ns_high > 0);
        if (g.pinned_bytes + g.staged_bytes > 0) CHECK(g.transfer_ns > 0);
      }
      ddo::profile_store(settings.profile_dir).save(profile);
    }
    const auto settings = ddo::resolve_settings(options.inputs);
    auto prepared = ddo::prepare_offload<>(m.table, settings, options, card());
    CHECK(prepared.setup.plan.budgets.planner_detail.find("overlap-aware") != std::string::npos);
    const auto& timings =
        flux::require_profile_timings(prepared.profile, "tiny-64", settings.profile_dir);
    CHECK(timings.timings.size() == prepared.setup.plan.groups.size());
    CHECK(ddo::predict_plan(prepared.setup.plan, timings.timings,
                            ddo::runner::ring_of(prepared.setup.runtime))
              .step_ms > 0.0);
    CHECK_THROWS_WITH_AS(
        (void)flux::require_profile_timings(std::nullopt, "absent", settings.profile_dir),
        doctest::Contains("calibrate first: ddo-flux --model ... --capacity-profile absent "
                          "--calibrate"),
        ddo::usage_error);
  }
}

}  // namespace flux_test
