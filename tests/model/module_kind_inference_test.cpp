// SPDX-License-Identifier: Apache-2.0
#include "ddo/model/module_kind_inference.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {
void add(ddo::weight_table& t, const std::string& name, std::vector<std::int64_t> shape) {
  ddo::weight_info w;
  w.name = name;
  w.type = ddo::dtype::f16;
  w.shape = std::move(shape);
  w.source = ddo::host_source{};
  t.add(w);
}
ddo::module_kind kind(const ddo::weight_table& t, const std::string& name) {
  return t[*t.find(name)].kind;
}
}  // namespace

TEST_SUITE("model") {
  TEST_CASE("module kinds are inferred from the leaf name and the weight's rank") {
    using k = ddo::module_kind;
    CHECK(ddo::infer_module_kind("blocks.0.attn.to_q", 2) == k::linear);
    CHECK(ddo::infer_module_kind("x_embedder", 2) == k::linear);
    CHECK(ddo::infer_module_kind("model.embed_tokens", 2) == k::embedding);
    CHECK(ddo::infer_module_kind("bert.embeddings.word_embeddings", 2) == k::embedding);
    CHECK(ddo::infer_module_kind("transformer.wte", 2) == k::embedding);
    CHECK(ddo::infer_module_kind("blocks.0.norm1", 1) == k::norm);
    CHECK(ddo::infer_module_kind("h.0.ln_1", 1) == k::norm);
    CHECK(ddo::infer_module_kind("attn.q_norm", 1) == k::norm);
    CHECK(ddo::infer_module_kind("norm1.linear", 2) == k::linear);
    CHECK(ddo::infer_module_kind("conv_in", 4) == k::conv);
    CHECK(ddo::infer_module_kind("patch.proj", 5) == k::conv);
    CHECK(ddo::infer_module_kind("scale_shift_table", 1) == k::other);
    CHECK(ddo::infer_module_kind("", 0) == k::other);
  }

  TEST_CASE("a module's bias takes the kind of its weight, and overrides win") {
    ddo::weight_table t;
    add(t, "blocks.0.ff.net.2.bias", {8});
    add(t, "blocks.0.ff.net.2.weight", {8, 4});
    add(t, "blocks.0.norm2.weight", {8});
    add(t, "blocks.0.norm2.bias", {8});
    add(t, "pos_embed.proj.weight", {8, 4, 2, 2});
    ddo::infer_module_kinds(t);
    CHECK(kind(t, "blocks.0.ff.net.2.bias") == ddo::module_kind::linear);
    CHECK(kind(t, "blocks.0.norm2.bias") == ddo::module_kind::norm);
    CHECK(kind(t, "pos_embed.proj.weight") == ddo::module_kind::conv);
    // Rank 3 is a kernel only with kernel-sized trailing extents (or a conv's name): Wan's
    // modulation [1, 6, dim] is a parameter, not a conv.
    add(t, "blocks.0.modulation", {1, 6, 5120});
    add(t, "blocks.0.conv1d.weight", {64, 1, 4});
    add(t, "blocks.0.conv_big.weight", {64, 1, 40});
    ddo::infer_module_kinds(t);
    CHECK(kind(t, "blocks.0.modulation") == ddo::module_kind::other);
    CHECK(kind(t, "blocks.0.conv1d.weight") == ddo::module_kind::conv);
    CHECK(kind(t, "blocks.0.conv_big.weight") == ddo::module_kind::conv);
    const std::vector<ddo::module_kind_override> overrides = {
        {R"(ff\.net\.2$)", ddo::module_kind::other}, {R"(ff)", ddo::module_kind::conv}};
    ddo::infer_module_kinds(t, overrides);
    CHECK(kind(t, "blocks.0.ff.net.2.weight") == ddo::module_kind::other);
    CHECK(kind(t, "blocks.0.ff.net.2.bias") == ddo::module_kind::other);
    CHECK(kind(t, "blocks.0.norm2.weight") == ddo::module_kind::norm);
    const std::vector<ddo::module_kind_override> bad = {{"(", ddo::module_kind::other}};
    CHECK_THROWS_AS(ddo::infer_module_kinds(t, bad), ddo::config_error);
  }
}
