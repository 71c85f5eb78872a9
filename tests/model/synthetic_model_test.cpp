// SPDX-License-Identifier: Apache-2.0
#include "ddo/model/synthetic_model.hpp"

#include <doctest/doctest.h>

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
