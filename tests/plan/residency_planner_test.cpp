// SPDX-License-Identifier: Apache-2.0
#include "ddo/plan/residency_planner.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ddo/config/operational_defaults.hpp"
#include "ddo/plan/plan_format.hpp"
#include "ddo/plan/planner.hpp"
#include "plan/plan_test_support.hpp"

namespace {

const ddo::weight_decision& decision(const ddo::offload_plan& p, const ddo::weight_table& t,
                                     const std::string& name) {
  return p.decisions[*t.find(name)];
}

ddo::machine_capacity big_machine() {
  ddo::machine_capacity m;
  m.free_vram_bytes = 80 * ddo::gib;
  m.total_vram_bytes = 96 * ddo::gib;
  m.available_ram_bytes = 64 * ddo::gib;
  return m;
}

}  // namespace

TEST_SUITE("plan") {
  TEST_CASE("skip patterns, non-target kinds and small tensors stay resident and unmanaged") {
    const auto t = ddo_test::flux_table(4);
    auto c = ddo_test::planning_config();
    c.skip_modules_pattern = {"^proj_out$"};
    const auto plan = ddo::make_plan(t, c, big_machine());
    CHECK(decision(plan, t, "proj_out.weight").where == ddo::placement::gpu_resident);
    CHECK(decision(plan, t, "proj_out.weight").reason ==
          "skip_modules_pattern '^proj_out$' (not managed)");
    CHECK(decision(plan, t, "transformer_blocks.1.norm1.weight").reason ==
          "module kind norm not in target_module_classes");
    CHECK(decision(plan, t, "transformer_blocks.1.attn.to_q.bias").reason ==
          "small_tensor <= 4096 B");
    CHECK(decision(plan, t, "transformer_blocks.1.attn.to_q.weight").where ==
          ddo::placement::pageable_host);
    // Budget policy off and no explicit budget: no budget winners.
    CHECK(plan.budgets.resident_source == ddo::resident_budget_source::none);
    CHECK(plan.budgets.resident_budget_bytes == 0);
  }

  TEST_CASE("always-resident patterns keep matching modules resident") {
    const auto t = ddo_test::flux_table(4);
    auto c = ddo_test::planning_config();
    c.always_resident_modules_pattern = ddo::builtin_always_resident_patterns();
    const auto plan = ddo::make_plan(t, c, big_machine());
    for (const char* name : {"x_embedder.weight", "context_embedder.weight", "proj_out.weight"}) {
      CHECK(decision(plan, t, name).where == ddo::placement::gpu_resident);
      CHECK(decision(plan, t, name).reason.starts_with("always_resident_modules_pattern"));
    }
    CHECK(decision(plan, t, "transformer_blocks.0.ff.net.2.weight").where !=
          ddo::placement::gpu_resident);
    auto bad = c;
    bad.always_resident_modules_pattern = {"(unclosed"};
    try {
      (void)ddo::make_plan(t, bad, big_machine());
      FAIL("no error");
    } catch (const ddo::config_error& e) {
      CHECK(e.key() == "always_resident_modules_pattern");
      CHECK(std::string(e.what()).find("(unclosed") != std::string::npos);
    }
  }

  TEST_CASE("an explicit budget over block patterns keeps whole blocks resident per selection") {
    const auto t = ddo_test::flux_table(8);
    auto c = ddo_test::planning_config();
    c.resident_module_patterns = {"auto"};
    // Managed bytes of one block: 4 x 128x128 + 2 x 128x512 bf16 = 384 KiB.
    c.resident_module_budget_gb = ddo::bytes_to_gib(3 * 384 * ddo::kib + 1000);
    c.resident_module_selection = ddo::selection::spread;
    auto plan = ddo::make_plan(t, c, big_machine());
    CHECK(ddo_test::resident_blocks(plan) == std::vector<std::string>{"transformer_blocks.0",
                                                                      "transformer_blocks.4",
                                                                      "transformer_blocks.7"});
    CHECK(plan.budgets.resident_source == ddo::resident_budget_source::explicit_budget);
    CHECK(decision(plan, t, "transformer_blocks.4.ff.net.2.weight").reason ==
          "resident_budget spread (block)");
    c.resident_module_selection = ddo::selection::first;
    plan = ddo::make_plan(t, c, big_machine());
    CHECK(ddo_test::resident_blocks(plan) == std::vector<std::string>{"transformer_blocks.0",
                                                                      "transformer_blocks.1",
                                                                      "transformer_blocks.2"});
    c.resident_module_selection = ddo::selection::largest;
    plan = ddo::make_plan(t, c, big_machine());
    CHECK(ddo_test::resident_blocks(plan) == std::vector<std::string>{"transformer_blocks.0",
                                                                      "transformer_blocks.1",
                                                                      "transformer_blocks.2"});
  }

  TEST_CASE("without block patterns the budget is spent module by module") {
    const auto t = ddo_test::flux_table(2);
    auto c = ddo_test::planning_config();
    c.resident_module_selection = ddo::selection::largest;
    c.resident_module_budget_gb = ddo::bytes_to_gib(128 * ddo::kib + 10);  // one ff weight
    const auto plan = ddo::make_plan(t, c, big_machine());
    // x_embedder and context_embedder are the largest managed modules (1 MiB for context).
    std::size_t winners = 0;
    for (const auto& d : plan.decisions) winners += d.reason == "resident_budget largest (module)";
    CHECK(winners == 1);
    CHECK(decision(plan, t, "transformer_blocks.0.ff.net.0.proj.weight").reason ==
          "resident_budget largest (module)");
  }

  TEST_CASE("balanced budget is free VRAM minus headroom minus rule-resident bytes, capped") {
    const auto t = ddo_test::flux_table(8);
    auto c = ddo_test::planning_config();
    c.auto_budget_policy = ddo::budget_policy::balanced;
    c.auto_full_pin_min_model_to_vram_ratio = 0.0;
    c.resident_module_patterns = {"auto"};
    c.auto_vram_headroom_gb = 1.0;
    c.max_resident_module_budget_gb = 0.0;
    ddo::machine_capacity m = big_machine();
    m.free_vram_bytes = ddo::gib + 2 * 384 * ddo::kib + 100 * ddo::kib;
    const auto plan = ddo::make_plan(t, c, m);
    std::uint64_t rule_resident = 0;
    for (std::size_t i = 0; i < t.size(); ++i)
      if (plan.decisions[i].reason.find("resident_budget") == std::string::npos &&
          plan.decisions[i].where == ddo::placement::gpu_resident)
        rule_resident += t[i].bytes;
    CHECK(plan.budgets.resident_source == ddo::resident_budget_source::balanced);
    CHECK(plan.budgets.resident_budget_bytes == m.free_vram_bytes - ddo::gib - rule_resident);
    CHECK(ddo_test::resident_blocks(plan).size() == 2);
    // The cap wins when it is lower.
    c.max_resident_module_budget_gb = ddo::bytes_to_gib(384 * ddo::kib);
    const auto capped = ddo::make_plan(t, c, m);
    CHECK(capped.budgets.resident_budget_bytes ==
          ddo::gib_to_bytes(c.max_resident_module_budget_gb));
    CHECK(ddo_test::resident_blocks(capped) == std::vector<std::string>{"transformer_blocks.0"});
    // Headroom larger than free VRAM: zero, never negative.
    m.free_vram_bytes = ddo::gib / 2;
    CHECK(ddo::make_plan(t, c, m).budgets.resident_budget_bytes == 0);
  }

  TEST_CASE(
      "full-pin zero-resident fires when RAM fits every eligible weight and model/VRAM >= ratio") {
    const auto t = ddo_test::flux_table(8);
    auto c = ddo_test::planning_config();
    c.auto_budget_policy = ddo::budget_policy::balanced;
    c.pin_cpu_memory = true;
    c.always_resident_modules_pattern = ddo::builtin_always_resident_patterns();
    c.always_resident_modules_pattern.push_back("^proj_out$");  // the user's own: stays resident
    ddo::machine_capacity m;
    m.total_vram_bytes = t.total_bytes() / 4;  // ratio exactly 4 (>= 4.0 default)
    m.free_vram_bytes = m.total_vram_bytes;
    m.available_ram_bytes = 64 * ddo::gib;
    const auto plan = ddo::make_plan(t, c, m);
    CHECK(plan.budgets.full_pin_zero_resident);
    CHECK(plan.budgets.resident_source == ddo::resident_budget_source::full_pin_zero_resident);
    CHECK(plan.budgets.resident_budget_bytes == 0);
    CHECK(plan.budgets.pin_source == ddo::pin_budget_source::full_pin);
    // The default always-resident leaves are offloaded and pinned; the user's pattern is kept.
    CHECK(decision(plan, t, "x_embedder.weight").where == ddo::placement::pinned_host);
    CHECK(decision(plan, t, "context_embedder.weight").where == ddo::placement::pinned_host);
    CHECK(decision(plan, t, "proj_out.weight").where == ddo::placement::gpu_resident);
    CHECK(plan.total_bytes(ddo::placement::pageable_host) == 0);
    CHECK(ddo_test::resident_blocks(plan).empty());
  }

  TEST_CASE("full-pin does not fire below the ratio, without RAM, when disabled or overridden") {
    const auto t = ddo_test::flux_table(8);
    auto c = ddo_test::planning_config();
    c.auto_budget_policy = ddo::budget_policy::balanced;
    c.pin_cpu_memory = true;
    ddo::machine_capacity m;
    m.total_vram_bytes = t.total_bytes() / 4;
    m.free_vram_bytes = m.total_vram_bytes;
    m.available_ram_bytes = 64 * ddo::gib;
    REQUIRE(ddo::make_plan(t, c, m).budgets.full_pin_zero_resident);

    auto below = m;
    below.total_vram_bytes = t.total_bytes() / 3;
    CHECK_FALSE(ddo::make_plan(t, c, below).budgets.full_pin_zero_resident);

    auto no_ram = m;
    no_ram.available_ram_bytes = t.total_bytes() / 2;
    CHECK_FALSE(ddo::make_plan(t, c, no_ram).budgets.full_pin_zero_resident);
    auto headroom = c;
    headroom.system_ram_headroom_gb = 64.0;
    CHECK_FALSE(ddo::make_plan(t, headroom, m).budgets.full_pin_zero_resident);

    auto disabled = c;
    disabled.auto_full_pin_min_model_to_vram_ratio = 0.0;
    CHECK_FALSE(ddo::make_plan(t, disabled, m).budgets.full_pin_zero_resident);

    auto off = c;
    off.auto_budget_policy = ddo::budget_policy::off;
    CHECK_FALSE(ddo::make_plan(t, off, m).budgets.full_pin_zero_resident);

    auto no_pin = c;
    no_pin.pin_cpu_memory = false;
    CHECK_FALSE(ddo::make_plan(t, no_pin, m).budgets.full_pin_zero_resident);

    auto wsl = m;
    wsl.running_on_wsl = true;
    CHECK_FALSE(ddo::make_plan(t, c, wsl).budgets.full_pin_zero_resident);

    // An explicit DDO_RESIDENT_MODULE_BUDGET_GB overrides the automatic choice.
    auto explicit_budget = c;
    explicit_budget.resident_module_budget_gb = 0.0001;
    const auto plan = ddo::make_plan(t, explicit_budget, m);
    CHECK_FALSE(plan.budgets.full_pin_zero_resident);
    CHECK(plan.budgets.resident_source == ddo::resident_budget_source::explicit_budget);
  }

  TEST_CASE("types that are not residency planners are refused by the concept") {
    struct no_tag {
      ddo::residency_result plan_residency(const ddo::plan_context&) const;
    };
    struct wrong_result {
      using planner_category = ddo::residency_planner_tag;
      int plan_residency(const ddo::plan_context&) const;
    };
    static_assert(!ddo::residency_planner<no_tag>);
    static_assert(!ddo::residency_planner<wrong_result>);
    CHECK(ddo::residency_planner<ddo::default_residency_planner>);
  }
}

TEST_SUITE("plan") {
  TEST_CASE("a model whose tensor names are 50,000+ characters long plans (bounded matching)") {
    std::mt19937_64 rng(std::random_device{}());
    auto t = ddo_test::flux_table(4);
    // Long module names inside a block and outside every block, made of random components.
    std::string middle;
    while (middle.size() < 50000) middle += "sub" + std::to_string(rng() % 100000) + ".";
    const std::string in_block = "transformer_blocks.2." + middle + "proj_out";
    const std::string outside = middle + "final_norm";
    for (const std::string& module : {in_block, outside}) {
      ddo::weight_info w;
      w.name = module + ".weight";
      w.shape = {64, 64 + static_cast<std::int64_t>(rng() % 64)};
      w.source = ddo::host_source{};
      t.add(w);
    }
    ddo::infer_module_kinds(t, std::vector<ddo::module_kind_override>{
                                   {R"((^|\.)final_norm$)", ddo::module_kind::linear}});
    CHECK(t[*t.find(outside + ".weight")].kind == ddo::module_kind::linear);
    auto c = ddo_test::planning_config();
    // A pattern of the user's applies inside blocks too (the built-in ones do not).
    c.always_resident_modules_pattern = ddo::builtin_always_resident_patterns();
    c.always_resident_modules_pattern.push_back(R"((^|\.)(proj_out)$)");
    c.skip_modules_pattern = {R"(^(sub\d+\.)+final_norm$)"};
    c.resident_module_patterns = {R"(transformer_blocks\.\d+\.)"};
    const auto plan = ddo::make_plan(t, c, big_machine());
    const auto& in_block_decision = decision(plan, t, in_block + ".weight");
    CHECK(in_block_decision.where == ddo::placement::gpu_resident);
    CHECK(in_block_decision.reason == "always_resident_modules_pattern '(^|\\.)(proj_out)$'");
    CHECK(plan.groups[in_block_decision.group].name == "transformer_blocks.2");
    CHECK(decision(plan, t, outside + ".weight").reason ==
          "skip_modules_pattern '" + c.skip_modules_pattern[0] + "' (not managed)");
    // The same names through auto block inference.
    c.resident_module_patterns = {"auto"};
    const auto auto_plan = ddo::make_plan(t, c, big_machine());
    CHECK(auto_plan.groups[decision(auto_plan, t, in_block + ".weight").group].name ==
          "transformer_blocks.2");
  }

  TEST_CASE("a pattern outside the dialect is a config_error naming the field and the construct") {
    const auto t = ddo_test::flux_table(2);
    auto c = ddo_test::planning_config();
    c.skip_modules_pattern = {R"((proj)_\1)"};
    try {
      (void)ddo::make_plan(t, c, big_machine());
      FAIL("no error");
    } catch (const ddo::config_error& e) {
      CHECK(e.key() == "skip_modules_pattern");
      CHECK(std::string(e.what()).find("backreference") != std::string::npos);
    }
    c.skip_modules_pattern = {};
    c.resident_module_patterns = {R"(blocks(?=\.))"};
    try {
      (void)ddo::make_plan(t, c, big_machine());
      FAIL("no error");
    } catch (const ddo::config_error& e) {
      CHECK(e.key() == "resident_module_patterns");
      CHECK(std::string(e.what()).find("lookahead") != std::string::npos);
    }
  }
}

namespace {

// A table of named 2-D bf16 weights (rows x cols), host sources, kinds inferred.
ddo::weight_table table_of(const std::vector<std::pair<std::string, std::int64_t>>& weights,
                           std::int64_t cols = 1024) {
  ddo::weight_table t;
  for (const auto& [name, rows] : weights) {
    ddo::weight_info w;
    w.name = name;
    w.shape = {rows, cols};
    w.source = ddo::host_source{};
    t.add(w);
  }
  ddo::infer_module_kinds(t);
  return t;
}

ddo::dynamic_offload_config balanced_config() {
  auto c = ddo_test::planning_config();
  c.always_resident_modules_pattern = ddo::builtin_always_resident_patterns();
  c.auto_budget_policy = ddo::budget_policy::balanced;
  c.auto_full_pin_min_model_to_vram_ratio = 0.0;
  c.resident_module_patterns = {"auto"};
  c.max_resident_module_budget_gb = 0.0;
  return c;
}

}  // namespace

TEST_SUITE("plan") {
  TEST_CASE("a built-in always-resident pattern inside a block streams with its block") {
    // FLUX.1 in diffusers naming: single_transformer_blocks.N.proj_out is a block's projection.
    const auto t = table_of({{"x_embedder.weight", 64},
                             {"single_transformer_blocks.0.proj_out.weight", 512},
                             {"single_transformer_blocks.0.proj_mlp.weight", 512},
                             {"single_transformer_blocks.1.proj_out.weight", 512},
                             {"single_transformer_blocks.1.proj_mlp.weight", 512},
                             {"proj_out.weight", 64}});
    auto c = balanced_config();
    ddo::machine_capacity m = big_machine();
    const auto plan = ddo::make_plan(t, c, m);
    CHECK(
        decision(plan, t, "proj_out.weight").reason.starts_with("always_resident_modules_pattern"));
    CHECK(decision(plan, t, "x_embedder.weight").where == ddo::placement::gpu_resident);
    // Inside the block: a budget candidate like its siblings, not a rule's resident.
    CHECK(decision(plan, t, "single_transformer_blocks.1.proj_out.weight").reason ==
          decision(plan, t, "single_transformer_blocks.1.proj_mlp.weight").reason);
    CHECK(plan.budgets.rule_resident_bytes == 2 * 64 * 1024 * 2);
    CHECK(plan.budgets.demoted_bytes == 0);
    c.auto_budget_policy = ddo::budget_policy::off;
    const auto streamed = ddo::make_plan(t, c, m);
    CHECK(decision(streamed, t, "single_transformer_blocks.0.proj_out.weight").where !=
          ddo::placement::gpu_resident);
    CHECK(
        streamed.groups[decision(streamed, t, "single_transformer_blocks.0.proj_out.weight").group]
            .streamed_bytes() == 2 * 512 * 1024 * 2);
  }

  TEST_CASE("what the built-in patterns keep is demoted, largest first, when it does not fit") {
    // 40 MiB of embeddings outside the blocks, a card with 32 MiB free and 8 MiB headroom.
    const auto t = table_of({{"embed_tokens.weight", 16384},  // 32 MiB
                             {"time_embedder.weight", 4096},  // 8 MiB
                             {"layers.0.mlp.weight", 4096},
                             {"layers.1.mlp.weight", 4096},
                             {"lm_head.weight", 1024}});  // 2 MiB
    auto c = balanced_config();
    c.auto_vram_headroom_gb = ddo::bytes_to_gib(8 * ddo::mib);
    ddo::machine_capacity m = big_machine();
    m.free_vram_bytes = 32 * ddo::mib;
    const auto plan = ddo::make_plan(t, c, m);
    CHECK(decision(plan, t, "embed_tokens.weight").where != ddo::placement::gpu_resident);
    CHECK(decision(plan, t, "embed_tokens.weight").reason.find("demoted") != std::string::npos);
    CHECK(decision(plan, t, "time_embedder.weight").where == ddo::placement::gpu_resident);
    CHECK(decision(plan, t, "lm_head.weight").where == ddo::placement::gpu_resident);
    CHECK(plan.budgets.demoted_bytes == 32 * ddo::mib);
    CHECK(plan.budgets.demoted_weights == 1);
    CHECK(plan.budgets.rule_resident_bytes == 10 * ddo::mib);
    CHECK(plan.budgets.rule_resident_detail.find("demoted (streamed) 1") != std::string::npos);
    CHECK(plan.total_bytes(ddo::placement::gpu_resident) <= m.free_vram_bytes);
    CHECK(ddo::format_plan_summary(plan, t).find("demoted") != std::string::npos);
    // With room, nothing is demoted.
    m.free_vram_bytes = 64 * ddo::mib;
    CHECK(ddo::make_plan(t, c, m).budgets.demoted_bytes == 0);
    // A pattern the user gave is honoured, or refused naming the pattern and the bytes.
    c.always_resident_modules_pattern.push_back("^embed_tokens$");
    CHECK(decision(ddo::make_plan(t, c, m), t, "embed_tokens.weight").where ==
          ddo::placement::gpu_resident);
    m.free_vram_bytes = 16 * ddo::mib;
    try {
      (void)ddo::make_plan(t, c, m);
      FAIL("no refusal");
    } catch (const ddo::out_of_memory& e) {
      const std::string what = e.what();
      CHECK(what.find("'^embed_tokens$' (yours) keeps 32.00 MiB") != std::string::npos);
      CHECK(what.find("16.00 MiB") != std::string::npos);
    }
  }

  TEST_CASE("a resident limit and a zero-resident request bound every budget") {
    const auto t = ddo_test::flux_table(8);
    auto c = balanced_config();
    c.auto_vram_headroom_gb = 0.0;
    ddo::machine_capacity m = big_machine();
    m.resident_limit_bytes = 3 * 384 * ddo::kib + ddo::mib;
    m.resident_limit_reason = "the VMM budget";
    auto plan = ddo::make_plan(t, c, m);
    CHECK(plan.total_bytes(ddo::placement::gpu_resident) <= *m.resident_limit_bytes);
    CHECK(plan.budgets.resident_budget_detail.find("by the VMM budget") != std::string::npos);
    m.resident_limit_bytes.reset();
    m.zero_resident_reason = "one pass per phase";
    plan = ddo::make_plan(t, c, m);
    CHECK(plan.budgets.resident_source == ddo::resident_budget_source::zero_resident);
    CHECK(plan.budgets.resident_budget_bytes == 0);
    CHECK(plan.total_bytes(ddo::placement::gpu_resident) == plan.budgets.rule_resident_bytes);
    c.resident_module_budget_gb = 0.001;  // an explicit budget still wins
    CHECK(ddo::make_plan(t, c, m).budgets.resident_source ==
          ddo::resident_budget_source::explicit_budget);
  }

  TEST_CASE("budgets at every boundary: none above free VRAM, none negative or wrapped") {
    // Free VRAM around the headroom, the headroom + rule-resident bytes, and the caps; each
    // source of the budget. A failure prints its case.
    const auto t = table_of({{"embed_tokens.weight", 2048},  // 4 MiB, built-in pattern
                             {"norm_out.weight", 1024},      // 2 MiB, built-in pattern
                             {"layers.0.mlp.weight", 2048},
                             {"layers.1.mlp.weight", 2048},
                             {"layers.2.mlp.weight", 2048}});
    const std::uint64_t rules = 6 * ddo::mib, headroom = 5 * ddo::mib;
    std::vector<std::uint64_t> frees = {1,
                                        headroom - 1,
                                        headroom,
                                        headroom + 1,
                                        headroom + rules - 1,
                                        headroom + rules,
                                        headroom + rules + 1,
                                        rules - 1,
                                        rules,
                                        rules + 1,
                                        4 * ddo::mib,
                                        100 * ddo::mib,
                                        ~std::uint64_t{0} / 2};
    for (const std::uint64_t free : frees)
      for (const double cap_mib : {0.0, 1.0, 4.0, 1000.0})
        for (const int source : {0, 1, 2, 3}) {
          CAPTURE(free);
          CAPTURE(cap_mib);
          CAPTURE(source);
          auto c = balanced_config();
          c.auto_vram_headroom_gb = ddo::bytes_to_gib(headroom);
          c.max_resident_module_budget_gb = ddo::bytes_to_gib(ddo::gib_to_bytes(cap_mib / 1024.0));
          ddo::machine_capacity m = big_machine();
          m.free_vram_bytes = free;
          if (source == 1) m.profile_resident_budget_bytes = 3 * ddo::mib;
          if (source == 2) m.resident_limit_bytes = free / 2;
          if (source == 3) c.auto_budget_policy = ddo::budget_policy::off;
          const auto plan = ddo::make_plan(t, c, m);
          const auto& b = plan.budgets;
          CHECK(b.resident_budget_bytes <= free);
          CHECK(b.resident_budget_bytes + b.rule_resident_bytes <= free);
          if (free < ddo::gib) CHECK(b.resident_budget_bytes < ddo::gib);  // no wrap to ~1.8e19
          CHECK(plan.total_bytes(ddo::placement::gpu_resident) <= free);
          if (source == 0 && cap_mib != 0.0)
            CHECK(b.resident_budget_bytes <= ddo::gib_to_bytes(cap_mib / 1024.0));
          if (source == 0 && free > headroom + rules && cap_mib == 0.0)
            CHECK(b.resident_budget_bytes == free - headroom - rules);
          if (source == 2) CHECK(plan.total_bytes(ddo::placement::gpu_resident) <= free / 2);
        }
  }
}

TEST_SUITE("plan") {
  TEST_CASE(
      "what the whole blocks leave of the balanced budget keeps single weights, largest "
      "first") {
    // Four blocks of 7 MiB (4 + 2 + 1 MiB): a budget of 19 MiB keeps two blocks whole, and the
    // 5 MiB they leave keep the third block's two largest weights that fit (issue 38: whole
    // groups only kept nothing of a block the budget could not hold whole).
    std::vector<std::pair<std::string, std::int64_t>> weights;
    for (int b = 0; b < 4; ++b) {
      const std::string p = "transformer_blocks." + std::to_string(b);
      weights.insert(weights.end(), {{p + ".attn.to_q.weight", 512},
                                     {p + ".ff.net.0.proj.weight", 2048},
                                     {p + ".ff.net.2.weight", 1024}});
    }
    const auto t = table_of(weights);
    auto c = balanced_config();
    c.auto_vram_headroom_gb = 0.0;
    ddo::machine_capacity m = big_machine();
    m.free_vram_bytes = 19 * ddo::mib;
    const auto plan = ddo::make_plan(t, c, m);
    REQUIRE(plan.budgets.resident_source == ddo::resident_budget_source::balanced);
    REQUIRE(plan.budgets.resident_budget_bytes == 19 * ddo::mib);
    CHECK(plan.total_bytes(ddo::placement::gpu_resident) == 19 * ddo::mib);
    CHECK(ddo_test::resident_blocks(plan).size() == 2);
    const std::string filled = "resident_budget: a weight of a streamed group";
    std::size_t partly = 0;
    for (const auto& g : plan.groups) {
      std::uint64_t kept = 0;
      for (std::size_t w : g.weights)
        if (plan.decisions[w].where == ddo::placement::gpu_resident) {
          kept += t[w].bytes;
          if (plan.decisions[w].reason.starts_with(filled)) CHECK(g.streamed_bytes() != 0);
        }
      partly += kept != 0 && g.streamed_bytes() != 0;
    }
    CHECK(partly == 1);
    // Largest first: the 4 MiB weight of the first streamed block (the selection's spread
    // decides which blocks stay whole), then the 1 MiB one.
    std::string first;
    for (const auto& g : plan.groups)
      if (first.empty() && g.name.starts_with("transformer_blocks.") && g.streamed_bytes() != 0)
        first = g.name;
    REQUIRE(!first.empty());
    const auto& ff = decision(plan, t, first + ".ff.net.0.proj.weight");
    CHECK(ff.where == ddo::placement::gpu_resident);
    CHECK(ff.reason.starts_with(filled));
    CHECK(decision(plan, t, first + ".attn.to_q.weight").where == ddo::placement::gpu_resident);
    CHECK(decision(plan, t, first + ".ff.net.2.weight").where != ddo::placement::gpu_resident);
  }

  TEST_CASE("the balanced budget is filled until no streamed weight fits what it leaves") {
    // Random blocks of random weights and random budgets: whatever the selection kept whole,
    // the budget left is smaller than every managed weight still streaming.
    std::mt19937_64 rng(38);
    for (int round = 0; round < 40; ++round) {
      std::vector<std::pair<std::string, std::int64_t>> weights;
      const int blocks = 2 + static_cast<int>(rng() % 6);
      for (int b = 0; b < blocks; ++b)
        for (int w = 0; w < 1 + static_cast<int>(rng() % 4); ++w)
          weights.emplace_back(
              "transformer_blocks." + std::to_string(b) + ".lin" + std::to_string(w) + ".weight",
              64 * static_cast<std::int64_t>(1 + rng() % 32));
      const auto t = table_of(weights);
      auto c = balanced_config();
      c.auto_vram_headroom_gb = 0.0;
      ddo::machine_capacity m = big_machine();
      m.free_vram_bytes = 1 + rng() % t.total_bytes();
      CAPTURE(round);
      const auto plan = ddo::make_plan(t, c, m);
      REQUIRE(plan.budgets.resident_source == ddo::resident_budget_source::balanced);
      const std::uint64_t kept = plan.total_bytes(ddo::placement::gpu_resident);
      REQUIRE(kept <= plan.budgets.resident_budget_bytes);
      for (std::size_t w = 0; w < t.size(); ++w)
        if (plan.decisions[w].where != ddo::placement::gpu_resident)
          CHECK(t[w].bytes > plan.budgets.resident_budget_bytes - kept);
    }
  }
}
