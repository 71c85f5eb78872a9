// SPDX-License-Identifier: Apache-2.0
#include "ddo/model/execution_groups.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

ddo::weight_table table_of(const std::vector<std::string>& names) {
  ddo::weight_table t;
  for (const auto& n : names) {
    ddo::weight_info w;
    w.name = n;
    w.type = ddo::dtype::bf16;
    w.shape = {4, 4};
    w.source = ddo::host_source{};
    t.add(w);
  }
  return t;
}

std::vector<std::string> names_of(const std::vector<ddo::execution_group>& groups) {
  std::vector<std::string> out;
  for (const auto& g : groups) out.push_back(g.name);
  return out;
}

}  // namespace

TEST_SUITE("model") {
  TEST_CASE("auto groups follow execution order for a Flux file in alphabetical order") {
    // The order the safetensors library writes: sorted by name.
    const auto t = table_of({
        "context_embedder.weight",
        "norm_out.linear.weight",
        "proj_out.weight",
        "single_transformer_blocks.0.proj_mlp.weight",
        "single_transformer_blocks.1.proj_mlp.weight",
        "single_transformer_blocks.10.proj_mlp.weight",
        "single_transformer_blocks.2.proj_mlp.weight",
        "time_text_embed.timestep_embedder.linear_1.weight",
        "transformer_blocks.0.attn.to_q.weight",
        "transformer_blocks.1.attn.to_q.weight",
        "transformer_blocks.0.ff.net.2.weight",
        "x_embedder.weight",
    });
    const auto groups = ddo::infer_execution_groups(t);
    CHECK(names_of(groups) ==
          std::vector<std::string>{"<before>", "transformer_blocks.0", "transformer_blocks.1",
                                   "single_transformer_blocks.0", "single_transformer_blocks.1",
                                   "single_transformer_blocks.2", "single_transformer_blocks.10",
                                   "<after>"});
    // Input modules run before, output modules after, whatever their table position.
    CHECK(groups.front().weights == std::vector<std::size_t>{0, 7, 11});
    CHECK(groups.back().weights == std::vector<std::size_t>{1, 2});
    CHECK(groups[1].weights == std::vector<std::size_t>{8, 10});
    CHECK(groups[1].is_block);
    CHECK_FALSE(groups.front().is_block);
    // "auto" is the same as no patterns.
    const std::vector<std::string> auto_pattern = {"auto"};
    CHECK(names_of(ddo::infer_execution_groups(t, auto_pattern)) == names_of(groups));
  }

  TEST_CASE("unknown modules outside blocks go before or after by table position") {
    const auto t =
        table_of({"stem.weight", "layers.1.w.weight", "layers.0.w.weight", "tail.weight"});
    const auto groups = ddo::infer_execution_groups(t);
    CHECK(names_of(groups) ==
          std::vector<std::string>{"<before>", "layers.0", "layers.1", "<after>"});
    CHECK(groups[0].weights == std::vector<std::size_t>{0});
    CHECK(groups[3].weights == std::vector<std::size_t>{3});
  }

  TEST_CASE("nested prefixes name the block: model.layers.N and transformer.h.N") {
    const auto t = table_of({"model.embed_tokens.weight", "model.layers.2.mlp.up.weight",
                             "model.layers.2.mlp.down.weight", "model.layers.11.mlp.up.weight",
                             "model.norm.weight", "lm_head.weight"});
    const auto groups = ddo::infer_execution_groups(t);
    CHECK(names_of(groups) ==
          std::vector<std::string>{"<before>", "model.layers.2", "model.layers.11", "<after>"});
    CHECK(groups[3].weights == std::vector<std::size_t>{4, 5});
    const auto gpt =
        table_of({"transformer.h.0.attn.c_attn.weight", "transformer.h.1.attn.c_attn.weight"});
    CHECK(names_of(ddo::infer_execution_groups(gpt)) ==
          std::vector<std::string>{"transformer.h.0", "transformer.h.1"});
  }

  TEST_CASE("explicit patterns name blocks by the matched prefix and order them numerically") {
    const auto t = table_of({"down.10.conv.weight", "down.9.conv.weight", "down.9.norm.weight",
                             "mid.attn.weight", "up.0.conv.weight"});
    const std::vector<std::string> patterns = {R"(down\.\d+)", R"(up\.\d+\.)"};
    const auto groups = ddo::infer_execution_groups(t, patterns);
    CHECK(names_of(groups) == std::vector<std::string>{"down.9", "down.10", "up.0", "<after>"});
    CHECK(groups[0].weights == std::vector<std::size_t>{1, 2});
    CHECK(groups[3].weights == std::vector<std::size_t>{3});
  }

  TEST_CASE("an invalid pattern, or auto mixed with patterns, is a config_error") {
    const auto t = table_of({"a.weight"});
    const std::vector<std::string> bad = {"blocks\\.(\\d+"};
    CHECK_THROWS_AS((void)ddo::infer_execution_groups(t, bad), ddo::config_error);
    const std::vector<std::string> mixed = {"auto", "x"};
    try {
      (void)ddo::infer_execution_groups(t, mixed);
      FAIL("no error");
    } catch (const ddo::config_error& e) {
      CHECK(e.key() == "resident_module_patterns");
    }
  }

  TEST_CASE("a table without blocks gets one group per top-level module") {
    const auto t =
        table_of({"encoder.conv.weight", "encoder.norm.weight", "decoder.conv.weight", "scale"});
    const auto groups = ddo::infer_execution_groups(t);
    CHECK(names_of(groups) == std::vector<std::string>{"encoder", "decoder", "scale"});
    CHECK(groups[0].weights == std::vector<std::size_t>{0, 1});
  }

  TEST_CASE("engine-given groups are validated: every weight once, names unique") {
    const auto t = table_of({"a.weight", "b.weight", "c.weight"});
    auto ok = ddo::validate_execution_groups(t, {{"g1", {2, 0}, true}, {"g2", {1}, true}});
    CHECK(ok[0].weights == std::vector<std::size_t>{0, 2});
    CHECK_THROWS_WITH_AS((void)ddo::validate_execution_groups(t, {{"g1", {0, 1}, true}}),
                         doctest::Contains("'c.weight' is in no group"), ddo::usage_error);
    CHECK_THROWS_WITH_AS(
        (void)ddo::validate_execution_groups(t, {{"g1", {0, 1}, true}, {"g2", {1, 2}, true}}),
        doctest::Contains("'b.weight' is in group 'g2' and in group 'g1'"), ddo::usage_error);
    CHECK_THROWS_AS(
        (void)ddo::validate_execution_groups(t, {{"g", {0}, true}, {"g", {1, 2}, true}}),
        ddo::usage_error);
    CHECK_THROWS_AS((void)ddo::validate_execution_groups(t, {{"g", {0, 1, 2, 3}, true}}),
                    ddo::usage_error);
  }
}
