// SPDX-License-Identifier: Apache-2.0
#include "ddo/adapter/lora_adapter.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "adapter/lora_test_support.hpp"
#include "model/model_test_support.hpp"

namespace lora_load_test {

using lora_test_support::add_weight;
using lora_test_support::random_values;
using lora_test_support::tensor;
using lora_test_support::write_file;

/// A FLUX.1-shaped base in diffusers' naming, tiny: hidden 8, MLP 16.
inline ddo::weight_table flux_base() {
  ddo::weight_table t;
  for (const char* m : {"attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj", "attn.add_k_proj",
                        "attn.add_v_proj", "attn.to_out.0", "attn.to_add_out"})
    add_weight(t, std::string("transformer_blocks.0.") + m + ".weight", {8, 8});
  add_weight(t, "transformer_blocks.0.ff.net.0.proj.weight", {16, 8});
  for (const char* m : {"attn.to_q", "attn.to_k", "attn.to_v"})
    add_weight(t, std::string("single_transformer_blocks.0.") + m + ".weight", {8, 8});
  add_weight(t, "single_transformer_blocks.0.proj_mlp.weight", {16, 8});
  add_weight(t, "single_transformer_blocks.0.proj_out.weight", {8, 24});
  add_weight(t, "norm_out.linear.weight", {16, 8});
  add_weight(t, "x_embedder.weight", {8, 4}, ddo::dtype::f8_e4m3);
  return t;
}

/// Expects load_lora_adapter to refuse @p path with a format_error naming @p key and saying
/// @p fragment.
inline void expect_refused(const std::string& path, const ddo::weight_table& base,
                           const std::string& key, const std::string& fragment) {
  try {
    (void)ddo::load_lora_adapter(path, base);
    FAIL("no error for ", path);
  } catch (const ddo::format_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.file() == path);
    CHECK(e.tensor() == key);
    CHECK(what.find("'" + key + "'") != std::string::npos);
    CHECK(what.find(fragment) != std::string::npos);
  }
}

TEST_SUITE("adapter") {
  TEST_CASE("a PEFT file maps onto the base names with its alpha over its rank") {
    ddo_test::temp_dir dir;
    const auto base = flux_base();
    const auto a = random_values(2 * 8, 1), b = random_values(8 * 2, 2);
    const std::string path = dir.file("peft.safetensors");
    write_file(
        path,
        {{"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", {2, 8}, a, ddo::dtype::bf16},
         {"transformer.transformer_blocks.0.attn.to_q.lora_B.weight", {8, 2}, b},
         {"transformer.transformer_blocks.0.attn.to_q.alpha", {}, {8.0f}},
         {"base_model.model.transformer_blocks.0.attn.to_k.lora_A.weight",
          {2, 8},
          a,
          ddo::dtype::bf16},
         {"base_model.model.transformer_blocks.0.attn.to_k.lora_B.weight",
          {8, 2},
          b,
          ddo::dtype::bf16}});
    const auto ad = ddo::load_lora_adapter(path, base);
    REQUIRE(ad.deltas.size() == 2);
    const auto* q = ad.find(*base.find("transformer_blocks.0.attn.to_q.weight"));
    const auto* k = ad.find(*base.find("transformer_blocks.0.attn.to_k.weight"));
    REQUIRE(q != nullptr);
    REQUIRE(k != nullptr);
    CHECK(q->rank == 2);
    CHECK(q->rows == 8);
    CHECK(q->cols == 8);
    CHECK(q->alpha_scale == 4.0f);
    CHECK(k->alpha_scale == 1.0f);  // no alpha: PEFT's scale is alpha / r with alpha = r
    CHECK(q->down == a);
    CHECK(q->up == b);
    CHECK(q->factor_type == ddo::dtype::f32);   // A in bf16, B in f32: kept in f32
    CHECK(k->factor_type == ddo::dtype::bf16);  // both bf16: kept so on the device
    CHECK(ad.factor_bytes() == 4 * (16 + 16) + 2 * (16 + 16));
  }

  TEST_CASE("kohya FLUX.1 fused projections split by rows onto diffusers' names") {
    ddo_test::temp_dir dir;
    const auto base = flux_base();
    const auto a = random_values(4 * 8, 3), qkv = random_values(24 * 4, 4);
    const auto a1 = random_values(4 * 8, 5), lin1 = random_values(40 * 4, 6);
    const std::string path = dir.file("kohya.safetensors");
    write_file(path, {{"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", {4, 8}, a},
                      {"lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", {24, 4}, qkv},
                      {"lora_unet_double_blocks_0_img_attn_qkv.alpha", {}, {2.0f}, ddo::dtype::f16},
                      {"lora_unet_single_blocks_0_linear1.lora_down.weight", {4, 8}, a1},
                      {"lora_unet_single_blocks_0_linear1.lora_up.weight", {40, 4}, lin1}});
    const auto ad = ddo::load_lora_adapter(path, base);
    REQUIRE(ad.deltas.size() == 7);
    const auto check_rows = [&](const std::string& name, const std::vector<float>& up,
                                std::size_t first_row, std::size_t rows, float alpha_scale) {
      INFO(name);
      const auto* d = ad.find(*base.find(name));
      REQUIRE(d != nullptr);
      CHECK(d->rows == static_cast<std::int64_t>(rows));
      CHECK(d->alpha_scale == alpha_scale);
      CHECK(d->up == std::vector<float>(up.begin() + static_cast<long>(first_row * 4),
                                        up.begin() + static_cast<long>((first_row + rows) * 4)));
    };
    check_rows("transformer_blocks.0.attn.to_q.weight", qkv, 0, 8, 0.5f);
    check_rows("transformer_blocks.0.attn.to_k.weight", qkv, 8, 8, 0.5f);
    check_rows("transformer_blocks.0.attn.to_v.weight", qkv, 16, 8, 0.5f);
    check_rows("single_transformer_blocks.0.attn.to_q.weight", lin1, 0, 8, 1.0f);
    check_rows("single_transformer_blocks.0.attn.to_v.weight", lin1, 16, 8, 1.0f);
    check_rows("single_transformer_blocks.0.proj_mlp.weight", lin1, 24, 16, 1.0f);
    CHECK(ad.find(*base.find("single_transformer_blocks.0.attn.to_k.weight"))->down == a1);
  }

  TEST_CASE(
      "kohya's final adaLN swaps the halves of its up factor (shift, scale to scale, shift)") {
    ddo_test::temp_dir dir;
    const auto base = flux_base();
    const auto a = random_values(2 * 8, 7), b = random_values(16 * 2, 8);
    const std::string path = dir.file("final.safetensors");
    write_file(path, {{"lora_unet_final_layer_adaLN_modulation_1.lora_down.weight", {2, 8}, a},
                      {"lora_unet_final_layer_adaLN_modulation_1.lora_up.weight", {16, 2}, b}});
    const auto ad = ddo::load_lora_adapter(path, base);
    REQUIRE(ad.deltas.size() == 1);
    std::vector<float> swapped(b.begin() + 16, b.end());
    swapped.insert(swapped.end(), b.begin(), b.begin() + 16);
    CHECK(ad.deltas[0].target == "norm_out.linear.weight");
    CHECK(ad.deltas[0].up == swapped);
  }

  TEST_CASE("kohya keys of SD-family UNets and BFL-named checkpoints match the base by name") {
    ddo_test::temp_dir dir;
    ddo::weight_table base;
    add_weight(base, "down_blocks.0.attentions.0.proj_in.weight", {8, 4, 1, 1}, ddo::dtype::f16);
    add_weight(base, "input_blocks.4.1.transformer_blocks.0.attn1.to_q.weight", {8, 8});
    add_weight(base, "double_blocks.0.img_attn.qkv.weight", {24, 8}, ddo::dtype::f32);
    const std::string path = dir.file("sd.safetensors");
    write_file(
        path,
        {{"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight",
          {2, 4, 1, 1},
          random_values(8, 9)},
         {"lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight",
          {8, 2, 1, 1},
          random_values(16, 10)},
         {"lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q.lora_down.weight",
          {2, 8},
          random_values(16, 11)},
         {"lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q.lora_up.weight",
          {8, 2},
          random_values(16, 12)},
         {"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", {2, 8}, random_values(16, 13)},
         {"lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight",
          {24, 2},
          random_values(48, 14)}});
    const auto ad = ddo::load_lora_adapter(path, base);
    REQUIRE(ad.deltas.size() == 3);
    CHECK(ad.deltas[0].target == "down_blocks.0.attentions.0.proj_in.weight");
    CHECK(ad.deltas[0].cols == 4);
    CHECK(ad.deltas[1].target == "input_blocks.4.1.transformer_blocks.0.attn1.to_q.weight");
    CHECK(ad.deltas[2].target == "double_blocks.0.img_attn.qkv.weight");
    CHECK(ad.deltas[2].rows == 24);
  }

  TEST_CASE("bad LoRA files are refused with the key named") {
    ddo_test::temp_dir dir;
    const auto base = flux_base();
    const auto a = random_values(16, 15), b = random_values(16, 16);
    const std::string down = "transformer.transformer_blocks.0.attn.to_q.lora_A.weight";
    const std::string up = "transformer.transformer_blocks.0.attn.to_q.lora_B.weight";
    int n = 0;
    const auto file = [&](std::vector<tensor> ts) {
      const std::string path = dir.file("bad" + std::to_string(n++) + ".safetensors");
      write_file(path, ts);
      return path;
    };
    expect_refused(
        file({{down, {2, 8}, a}, {up, {8, 2}, b}, {"transformer.extra.weight", {2}, {1, 2}}}), base,
        "transformer.extra.weight", "is no LoRA factor");
    expect_refused(file({{down, {2, 8}, a}}), base, down, "no up (lora_B / lora_up) factor");
    expect_refused(file({{up, {8, 2}, b}}), base, up, "no down (lora_A / lora_down) factor");
    expect_refused(file({{"transformer.nothing.lora_A.weight", {2, 8}, a},
                         {"transformer.nothing.lora_B.weight", {8, 2}, b}}),
                   base, "transformer.nothing.lora_A.weight",
                   "matches no weight of the base model");
    expect_refused(file({{"lora_unet_double_blocks_0_img_attn_nope.lora_down.weight", {2, 8}, a},
                         {"lora_unet_double_blocks_0_img_attn_nope.lora_up.weight", {8, 2}, b}}),
                   base, "lora_unet_double_blocks_0_img_attn_nope.lora_down.weight",
                   "matches no weight");
    expect_refused(file({{down, {2, 4}, random_values(8, 17)}, {up, {8, 2}, b}}), base, down,
                   "does not fit base weight 'transformer_blocks.0.attn.to_q.weight'");
    expect_refused(file({{down, {2, 8}, a}, {up, {4, 2}, random_values(8, 18)}}), base, up,
                   "has 4 rows; its base weights have 8");
    expect_refused(file({{down, {2, 8}, a}, {up, {8, 3}, random_values(24, 19)}}), base, down,
                   "no rank-r pair");
    expect_refused(file({{down, {2, 8}, a, ddo::dtype::i8}, {up, {8, 2}, b}}), base, down,
                   "LoRA factors and alphas are F32, F16, BF16 or F64");
    expect_refused(file({{"x_embedder.lora_A.weight", {2, 4}, random_values(8, 20)},
                         {"x_embedder.lora_B.weight", {8, 2}, b}}),
                   base, "x_embedder.lora_A.weight", "applies the delta in its own GEMM");
    expect_refused(file({{down, {2, 8}, a},
                         {up, {8, 2}, b},
                         {"transformer_blocks.0.attn.to_q.lora_A.weight", {2, 8}, a},
                         {"transformer_blocks.0.attn.to_q.lora_B.weight", {8, 2}, b}}),
                   base, "transformer_blocks.0.attn.to_q", "both change base weight");
    expect_refused(file({{down, {2, 8}, a},
                         {up, {8, 2}, b},
                         {"transformer.transformer_blocks.0.attn.to_q.alpha", {2}, {1, 2}}}),
                   base, "transformer.transformer_blocks.0.attn.to_q.alpha", "is no scalar");
  }
}

}  // namespace lora_load_test
