// SPDX-License-Identifier: Apache-2.0
#include "ddo/model/execution_groups.hpp"

#include <doctest/doctest.h>

#include <algorithm>
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
    // The middle stage runs between the down and the up stages, not after them.
    CHECK(names_of(groups) == std::vector<std::string>{"down.9", "down.10", "mid", "up.0"});
    CHECK(groups[0].weights == std::vector<std::size_t>{1, 2});
    CHECK(groups[2].weights == std::vector<std::size_t>{3});
    // The patterns' order is the execution order: a config states it.
    const std::vector<std::string> reversed = {R"(up\.\d+\.)", R"(down\.\d+)"};
    const auto stated = ddo::infer_execution_groups(t, reversed);
    CHECK(names_of(stated).front() == "up.0");
    CHECK(names_of(stated)[1] == "down.9");
    // In a stated order the middle stage runs right after the last input stage (here the last
    // family); with no input stage stated, before the first output stage.
    CHECK(names_of(stated) == std::vector<std::string>{"up.0", "down.9", "down.10", "mid"});
    const auto outputs_only =
        ddo::infer_execution_groups(t, std::vector<std::string>{R"(up\.\d+\.)"});
    CHECK(names_of(outputs_only) == std::vector<std::string>{"<before>", "mid", "up.0", "<after>"});
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

namespace {

// Names with their number of 4x4 bf16 elements times @p scale rows (bytes decide the family).
ddo::weight_table sized_table(const std::vector<std::pair<std::string, std::int64_t>>& names) {
  ddo::weight_table t;
  for (const auto& [n, rows] : names) {
    ddo::weight_info w;
    w.name = n;
    w.shape = {rows, 4};
    w.source = ddo::host_source{};
    t.add(w);
  }
  return t;
}

}  // namespace

TEST_SUITE("model") {
  TEST_CASE(
      "a bundled single file: the diffusion model's blocks, the VAE after as its own groups") {
    // Stability's SD3.5 file in name order: the VAE's block.N sort before joint_blocks.
    const auto t =
        sized_table({{"first_stage_model.decoder.up.0.block.0.conv1.weight", 64},
                     {"first_stage_model.decoder.up.0.block.1.conv1.weight", 64},
                     {"first_stage_model.decoder.up.1.block.0.conv1.weight", 64},
                     {"first_stage_model.encoder.down.0.block.0.conv1.weight", 64},
                     {"first_stage_model.encoder.down.1.block.0.conv1.weight", 64},
                     {"model.diffusion_model.context_embedder.weight", 16},
                     {"model.diffusion_model.final_layer.linear.weight", 16},
                     {"model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight", 1024},
                     {"model.diffusion_model.joint_blocks.1.x_block.attn.qkv.weight", 1024},
                     {"model.diffusion_model.joint_blocks.10.x_block.attn.qkv.weight", 1024},
                     {"model.diffusion_model.t_embedder.mlp.0.weight", 16}});
    const auto groups = ddo::infer_execution_groups(t);
    std::vector<std::string> blocks;
    for (const auto& g : groups)
      if (g.is_block) blocks.push_back(g.name);
    CHECK(blocks == std::vector<std::string>{"model.diffusion_model.joint_blocks.0",
                                             "model.diffusion_model.joint_blocks.1",
                                             "model.diffusion_model.joint_blocks.10"});
    const auto names = names_of(groups);
    CHECK(names.front() == "model.diffusion_model.<before>");
    // The VAE runs after the model, grouped by its own stages, never as the model's blocks.
    const auto vae = std::find(names.begin(), names.end(), "first_stage_model.encoder.down.0");
    REQUIRE(vae != names.end());
    CHECK(vae > std::find(names.begin(), names.end(), "model.diffusion_model.<after>"));
    CHECK(groups[static_cast<std::size_t>(vae - names.begin())].is_block == false);
  }

  TEST_CASE("the block family is the repeated family that carries the weights, by structure") {
    // A small numbered family sorts first ("a_refiner.blocks"); the weights are in "layers".
    const auto t = sized_table({{"a_refiner.blocks.0.w.weight", 4},
                                {"a_refiner.blocks.1.w.weight", 4},
                                {"layers.0.w.weight", 512},
                                {"layers.1.w.weight", 512},
                                {"layers.2.w.weight", 512},
                                {"time_projection.1.weight", 64},
                                {"head.head.weight", 8}});
    const auto groups = ddo::infer_execution_groups(t);
    CHECK(names_of(groups) ==
          std::vector<std::string>{"<before>", "layers.0", "layers.1", "layers.2", "<after>"});
    // Embedders and time projections run before the blocks whatever the file order.
    CHECK(groups[0].weights == std::vector<std::size_t>{0, 1, 5});
    CHECK(groups[4].weights == std::vector<std::size_t>{6});
  }

  TEST_CASE("stages: down blocks, the middle block between, then up blocks (a UNet)") {
    const auto t = sized_table({{"conv_in.weight", 4},
                                {"conv_out.weight", 4},
                                {"down_blocks.0.resnets.0.conv1.weight", 64},
                                {"down_blocks.1.attentions.0.transformer_blocks.0.ff.weight", 256},
                                {"down_blocks.1.attentions.0.transformer_blocks.1.ff.weight", 256},
                                {"mid_block.attentions.0.transformer_blocks.0.ff.weight", 256},
                                {"mid_block.attentions.0.transformer_blocks.1.ff.weight", 256},
                                {"mid_block.resnets.0.conv1.weight", 64},
                                {"up_blocks.0.attentions.0.transformer_blocks.0.ff.weight", 256},
                                {"up_blocks.0.attentions.0.transformer_blocks.1.ff.weight", 256},
                                {"up_blocks.1.resnets.0.conv1.weight", 64}});
    // Each stage descends to its finest repeated unit (issue 38): the transformer blocks inside
    // an attention, the resnet before the attention of its index; a stage whose one child does
    // not split keeps its name.
    CHECK(names_of(ddo::infer_execution_groups(t)) ==
          std::vector<std::string>{"<before>",
                                   "down_blocks.0",
                                   "down_blocks.1.attentions.0.transformer_blocks.0",
                                   "down_blocks.1.attentions.0.transformer_blocks.1",
                                   "mid_block.resnets.0",
                                   "mid_block.attentions.0.transformer_blocks.0",
                                   "mid_block.attentions.0.transformer_blocks.1",
                                   "up_blocks.0.attentions.0.transformer_blocks.0",
                                   "up_blocks.0.attentions.0.transformer_blocks.1",
                                   "up_blocks.1",
                                   "<after>"});
  }

  TEST_CASE("a stage streams as its finest repeated units, in execution order (issue 38)") {
    // One diffusers UNet stage, names sorted as a file lists them: attentions sort before
    // resnets and the upsampler, but a stage runs resnets.r, attentions.r for each r, then the
    // upsampler; inside an attention, proj_in, the transformer blocks by index, proj_out.
    std::vector<std::pair<std::string, std::int64_t>> names;
    for (int r = 0; r < 2; ++r) {
      const std::string a = "up_blocks.0.attentions." + std::to_string(r);
      names.push_back({a + ".norm.weight", 1});
      names.push_back({a + ".proj_in.weight", 64});
      names.push_back({a + ".proj_out.weight", 64});
      for (int j : {0, 1, 10})
        names.push_back({a + ".transformer_blocks." + std::to_string(j) + ".ff.net.2.weight", 256});
    }
    for (int r = 0; r < 2; ++r)
      names.push_back({"up_blocks.0.resnets." + std::to_string(r) + ".conv1.weight", 128});
    names.push_back({"up_blocks.0.upsamplers.0.conv.weight", 64});
    names.push_back({"up_blocks.1.resnets.0.conv1.weight", 128});
    names.push_back({"up_blocks.1.resnets.1.conv1.weight", 128});
    std::sort(names.begin(), names.end());
    const auto t = sized_table(names);
    const auto groups = ddo::infer_execution_groups(t);
    std::vector<std::string> expected;
    for (int r = 0; r < 2; ++r) {
      expected.push_back("up_blocks.0.resnets." + std::to_string(r));
      for (int j : {0, 1, 10})
        expected.push_back("up_blocks.0.attentions." + std::to_string(r) +
                           ".transformer_blocks." + std::to_string(j));
    }
    expected.push_back("up_blocks.0.upsamplers.0");
    expected.push_back("up_blocks.1.resnets.0");
    expected.push_back("up_blocks.1.resnets.1");
    CHECK(names_of(groups) == expected);
    for (const auto& g : groups) CHECK(g.is_block);
    // The attention's own layers join its first unit (proj_in) and its last (norm, proj_out).
    auto weights_of = [&](const std::string& name) {
      std::vector<std::string> out;
      for (const auto& g : groups)
        if (g.name == name)
          for (std::size_t w : g.weights) out.push_back(t[w].name);
      return out;
    };
    const auto first = weights_of("up_blocks.0.attentions.1.transformer_blocks.0");
    CHECK(std::count(first.begin(), first.end(), "up_blocks.0.attentions.1.proj_in.weight") == 1);
    const auto last = weights_of("up_blocks.0.attentions.1.transformer_blocks.10");
    CHECK(std::count(last.begin(), last.end(), "up_blocks.0.attentions.1.proj_out.weight") == 1);
    CHECK(std::count(last.begin(), last.end(), "up_blocks.0.attentions.1.norm.weight") == 1);
    (void)ddo::validate_execution_groups(t, groups);
  }

  TEST_CASE("ldm's numbered layers split; blocks of single layers stay whole (issue 38)") {
    // The original SDXL file: input_blocks.N.0 a resblock, .1 a spatial transformer; a
    // resblock's in_layers.0 / in_layers.2 are single layers, not units.
    const std::string p = "model.diffusion_model.";
    std::vector<std::pair<std::string, std::int64_t>> names;
    for (int b = 4; b < 6; ++b) {
      const std::string s = p + "input_blocks." + std::to_string(b);
      names.push_back({s + ".0.in_layers.0.weight", 1});
      names.push_back({s + ".0.in_layers.2.weight", 128});
      names.push_back({s + ".0.out_layers.3.weight", 128});
      for (int j = 0; j < 2; ++j)
        names.push_back({s + ".1.transformer_blocks." + std::to_string(j) + ".attn1.to_q.weight",
                         256});
      names.push_back({s + ".1.proj_in.weight", 16});
    }
    names.push_back({p + "time_embed.0.weight", 16});
    std::sort(names.begin(), names.end());
    const auto groups = ddo::infer_execution_groups(sized_table(names));
    std::vector<std::string> blocks;
    for (const auto& g : groups)
      if (g.is_block) blocks.push_back(g.name);
    const std::string ib = p + "input_blocks.";
    CHECK(blocks == std::vector<std::string>{ib + "4.0", ib + "4.1.transformer_blocks.0",
                                             ib + "4.1.transformer_blocks.1", ib + "5.0",
                                             ib + "5.1.transformer_blocks.0",
                                             ib + "5.1.transformer_blocks.1"});
    // Wan's block: ffn.0 and ffn.2 are layers; the block streams whole.
    const auto wan = sized_table({{"blocks.0.ffn.0.weight", 256},
                                  {"blocks.0.ffn.2.weight", 256},
                                  {"blocks.0.self_attn.q.weight", 64},
                                  {"blocks.1.ffn.0.weight", 256},
                                  {"blocks.1.ffn.2.weight", 256},
                                  {"blocks.1.self_attn.q.weight", 64}});
    CHECK(names_of(ddo::infer_execution_groups(wan)) ==
          std::vector<std::string>{"blocks.0", "blocks.1"});
  }

  TEST_CASE("a stated order keeps its own units: explicit patterns do not descend") {
    const auto t = sized_table({{"down_blocks.0.attentions.0.transformer_blocks.0.ff.weight", 256},
                                {"down_blocks.0.attentions.0.transformer_blocks.1.ff.weight", 256},
                                {"down_blocks.0.resnets.0.conv1.weight", 64},
                                {"up_blocks.0.resnets.0.conv1.weight", 64},
                                {"up_blocks.0.resnets.1.conv1.weight", 64}});
    const std::vector<std::string> patterns = {"^up_blocks\\.\\d+", "^down_blocks\\.\\d+"};
    CHECK(names_of(ddo::infer_execution_groups(t, patterns)) ==
          std::vector<std::string>{"up_blocks.0", "down_blocks.0"});
  }
}
