// SPDX-License-Identifier: Apache-2.0
#include "ddo/model/synthetic_model.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "ddo/model/execution_groups.hpp"
#include "model/model_test_support.hpp"

TEST_SUITE("model") {
  TEST_CASE("the default synthetic model is the Flux-like 5.4 GB model of the measurements") {
    const auto specs = ddo::synthetic_model_specs({});
    std::uint64_t block_bytes = 0;
    std::size_t block0 = 0;
    for (const auto& s : specs)
      if (s.name.starts_with("transformer_blocks.")) {
        block_bytes += s.bytes();
        if (s.name.starts_with("transformer_blocks.0.")) ++block0;
      }
    CHECK(block0 == 16);
    CHECK(block_bytes > 5'430'000'000ull);
    CHECK(block_bytes < 5'450'000'000ull);
  }

  TEST_CASE("the flux shape is FLUX.1-sized: 19 double-stream blocks 2.4x the 38 single ones") {
    const auto specs = ddo::synthetic_model_specs(ddo::flux_model_options());
    std::uint64_t total = 0, double0 = 0, single0 = 0;
    std::set<std::string> doubles, singles;
    for (const auto& s : specs) {
      total += s.bytes();
      const auto dot = [&](std::size_t from) { return s.name.substr(0, s.name.find('.', from)); };
      if (s.name.starts_with("transformer_blocks.")) doubles.insert(dot(19));
      if (s.name.starts_with("single_transformer_blocks.")) singles.insert(dot(26));
      if (s.name.starts_with("transformer_blocks.0.")) double0 += s.bytes();
      if (s.name.starts_with("single_transformer_blocks.0.")) single0 += s.bytes();
    }
    CHECK(doubles.size() == 19);
    CHECK(singles.size() == 38);
    // 36 h^2 against 15 h^2 elements (plus biases and norms)
    CHECK(static_cast<double>(double0) / static_cast<double>(single0) == doctest::Approx(2.4).epsilon(0.01));
    CHECK(total > 23'500'000'000ull);
    CHECK(total < 24'000'000'000ull);
  }

  TEST_CASE("a written flux-shaped model groups into its embedders, both kinds of block and the head") {
    ddo_test::temp_dir dir;
    auto o = ddo::flux_model_options(2, 3, 64);
    o.output = dir.file("flux.safetensors");
    o.mlp_ratio = 2;
    const auto result = ddo::write_synthetic_model(o);
    const auto table = ddo::load_safetensors(o.output);
    CHECK(table.size() == result.tensors);
    const auto groups = ddo::infer_execution_groups(table);
    REQUIRE(groups.size() == 7);
    CHECK(groups.front().name == "<before>");
    CHECK(groups[1].name == "transformer_blocks.0");
    CHECK(groups[3].name == "single_transformer_blocks.0");
    CHECK(groups[5].name == "single_transformer_blocks.2");
    CHECK(groups.back().name == "<after>");
    CHECK(groups[1].weights.size() == 32);  // 14 linears with biases, 4 norms
    CHECK(groups[3].weights.size() == 14);  // 6 linears with biases, 2 norms
  }

  TEST_CASE("the diffusers layout at FLUX.1's sizes is the published 3-shard split") {
    // FLUX.1-dev's transformer/ holds 9.98, 9.95 and 3.87 GB shards: the state-dict order split
    // at diffusers' 10 GB as huggingface_hub splits it.
    auto o = ddo::flux_model_options();
    o.layout = ddo::synthetic_layout::diffusers;
    const auto shards = ddo::diffusers_shards(o);
    REQUIRE(shards.size() == 3);
    std::vector<std::uint64_t> bytes;
    std::set<std::string> names;
    for (const auto& shard : shards) {
      std::uint64_t b = 0;
      for (const auto& s : shard) b += s.bytes(), names.insert(s.name);
      bytes.push_back(b);
      // Within a file the names are in byte order, as the safetensors serializer writes them.
      CHECK(std::is_sorted(shard.begin(), shard.end(),
                           [](const auto& a, const auto& b2) { return a.name < b2.name; }));
    }
    CHECK(bytes == std::vector<std::uint64_t>{9'982'983'168ull, 9'949'272'064ull, 3'870'561'408ull});
    CHECK(names.size() == ddo::synthetic_model_specs(o).size());
    const auto holds = [&](std::size_t shard, const std::string& name) {
      return std::any_of(shards[shard].begin(), shards[shard].end(),
                         [&](const auto& s) { return s.name == name; });
    };
    // The breaks: after block 14's last attention norm, after single block 24's proj_mlp.
    CHECK(holds(0, "time_text_embed.timestep_embedder.linear_1.weight"));
    CHECK(holds(0, "x_embedder.bias"));
    CHECK(holds(0, "transformer_blocks.14.attn.norm_added_k.weight"));
    CHECK(holds(1, "transformer_blocks.14.ff.net.0.proj.weight"));
    CHECK(holds(1, "single_transformer_blocks.24.proj_mlp.bias"));
    CHECK(holds(2, "single_transformer_blocks.24.proj_out.weight"));
    CHECK(holds(2, "proj_out.bias"));
  }

  TEST_CASE("a written diffusers-layout model loads from its index and groups as the execution one") {
    ddo_test::temp_dir dir;
    auto o = ddo::flux_model_options(11, 3, 64);
    o.mlp_ratio = 2;
    o.layout = ddo::synthetic_layout::diffusers;
    o.shard_max_bytes = 200'000;
    o.output = dir.file("transformer");
    const auto result = ddo::write_synthetic_model(o);
    REQUIRE(result.files.size() > 2);
    char first[64];
    std::snprintf(first, sizeof first, "transformer/diffusion_pytorch_model-00001-of-%05zu.safetensors",
                  result.files.size());
    CHECK(result.files.front().ends_with(first));
    CHECK(result.index.ends_with("transformer/diffusion_pytorch_model.safetensors.index.json"));
    for (const auto& f : result.files) {
      const auto one = ddo::load_safetensors(f);
      for (std::size_t i = 1; i < one.size(); ++i) CHECK(one[i - 1].name < one[i].name);
    }
    const auto table = ddo::load_safetensors(result.index);
    CHECK(table.size() == result.tensors);
    auto e = o;
    e.layout = ddo::synthetic_layout::execution;
    e.output = dir.file("execution.safetensors");
    (void)ddo::write_synthetic_model(e);
    std::vector<std::string> published, executed;
    for (const auto& g : ddo::infer_execution_groups(table)) published.push_back(g.name);
    for (const auto& g : ddo::infer_execution_groups(ddo::load_safetensors(e.output)))
      executed.push_back(g.name);
    CHECK(published == executed);
    // One shard: the one file diffusers names, no index.
    o.shard_max_bytes = ddo::diffusers_max_shard_bytes;
    o.output = dir.file("one");
    const auto single = ddo::write_synthetic_model(o);
    REQUIRE(single.files.size() == 1);
    CHECK(single.files.front().ends_with("one/diffusion_pytorch_model.safetensors"));
    CHECK(single.index.empty());
    o.shape = ddo::synthetic_shape::dit;
    o.single_blocks = 0;
    CHECK_THROWS_WITH_AS((void)ddo::diffusers_shards(o), doctest::Contains("needs the flux shape"),
                         ddo::usage_error);
  }

  TEST_CASE("single-stream blocks on the dit shape are refused, naming the shape") {
    ddo::synthetic_model_options o;
    o.single_blocks = 4;
    CHECK_THROWS_WITH_AS((void)ddo::synthetic_model_specs(o),
                         doctest::Contains("need the flux shape"), ddo::usage_error);
  }

  TEST_CASE("a written synthetic model loads, groups into its blocks and holds no zero element") {
    ddo_test::temp_dir dir;
    ddo::synthetic_model_options o;
    o.output = dir.file("tiny.safetensors");
    o.blocks = 5;
    o.hidden = 32;
    o.mlp_ratio = 2;
    o.seed = 42;
    const auto result = ddo::write_synthetic_model(o);
    const auto table = ddo::load_safetensors(o.output);
    CHECK(table.size() == result.tensors);
    CHECK(table.total_bytes() == result.tensor_bytes);
    const auto groups = ddo::infer_execution_groups(table);
    REQUIRE(groups.size() == 7);
    CHECK(groups.front().name == "<before>");
    CHECK(groups[3].name == "transformer_blocks.2");
    CHECK(groups.back().name == "<after>");

    const ddo::file_reader reader(o.output);
    std::set<std::uint16_t> distinct;
    std::size_t zeros = 0;
    for (const auto& w : table.weights()) {
      std::vector<std::byte> data(w.bytes);
      reader.read(std::get<ddo::file_source>(w.source).offset, data);
      for (std::size_t i = 0; i < data.size(); i += 2) {
        std::uint16_t bits;
        std::memcpy(&bits, data.data() + i, 2);
        zeros += (bits & 0x7fff) == 0 ? 1 : 0;
        distinct.insert(bits);
      }
    }
    CHECK(zeros == 0);
    CHECK(distinct.size() > 1000);
  }

  TEST_CASE("the same seed writes the same bytes, another seed different ones") {
    ddo_test::temp_dir dir;
    auto write = [&](const std::string& name, std::uint64_t seed) {
      ddo::synthetic_model_options o;
      o.output = dir.file(name);
      o.blocks = 2;
      o.hidden = 16;
      o.type = ddo::dtype::f32;
      o.seed = seed;
      (void)ddo::write_synthetic_model(o);
      const ddo::file_reader r(o.output);
      std::vector<std::byte> all(r.size());
      r.read(0, all);
      return all;
    };
    CHECK(write("a", 1) == write("b", 1));
    CHECK(write("c", 1) != write("d", 2));
  }

  TEST_CASE("a sharded synthetic model splits into K shards and loads from its index") {
    ddo_test::temp_dir dir;
    ddo::synthetic_model_options o;
    o.output = dir.file("m.safetensors.index.json");
    o.blocks = 4;
    o.hidden = 32;
    o.type = ddo::dtype::f16;
    o.shards = 3;
    const auto result = ddo::write_synthetic_model(o);
    REQUIRE(result.files.size() == 3);
    CHECK(result.files[0] == dir.file("m-00001-of-00003.safetensors"));
    const auto table = ddo::load_safetensors(o.output);
    CHECK(table.files().size() == 3);
    CHECK(table.total_bytes() == result.tensor_bytes);
    CHECK(ddo::infer_execution_groups(table).size() == 6);
  }

  TEST_CASE("invalid synthetic model options are refused") {
    ddo::synthetic_model_options o;
    o.output = "/nonexistent-dir/x.safetensors";
    o.blocks = 0;
    CHECK_THROWS_AS((void)ddo::write_synthetic_model(o), ddo::usage_error);
    o.blocks = 1;
    o.type = ddo::dtype::i8;
    CHECK_THROWS_AS((void)ddo::write_synthetic_model(o), ddo::usage_error);
    o.type = ddo::dtype::bf16;
    o.hidden = 8;
    CHECK_THROWS_AS((void)ddo::write_synthetic_model(o), ddo::io_error);
  }
}
