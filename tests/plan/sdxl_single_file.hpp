// SPDX-License-Identifier: Apache-2.0
#pragma once
// SDXL base 1.0 as Stability's single file bundles it (sgm naming, fp16): the UNet under
// model.diffusion_model. (input_blocks / middle_block / output_blocks with ResBlocks and
// SpatialTransformers of 2 and 10 transformer blocks), CLIP ViT-L and OpenCLIP ViT-bigG under
// conditioner.embedders.{0,1}., and the VAE under first_stage_model. (the ldm naming of
// runner/published_layouts.hpp's sd3_vae). Derived from the public sgm code; nothing downloaded.

#include <string>
#include <vector>

#include "runner/published_layouts.hpp"

namespace ddo_test {

inline published_layout sdxl_single_file() {
  using namespace layout_detail;
  const auto t = ddo::dtype::f16;
  published_layout l{"SDXL base (single file with its text encoders and VAE)", {}, 1,
                     "sd_xl_base_1.0", {}, 0};
  auto& v = l.tensors;
  // CLIP ViT-L/14 text model.
  const std::string c = "conditioner.embedders.0.transformer.text_model.";
  v.push_back({c + "embeddings.token_embedding.weight", {49408, 768}, t});
  v.push_back({c + "embeddings.position_embedding.weight", {77, 768}, t});
  for (int n = 0; n < 12; ++n) {
    const std::string p = c + "encoder.layers." + std::to_string(n) + ".";
    norm(v, p + "layer_norm1", 768, t);
    for (const char* m : {"q_proj", "k_proj", "v_proj", "out_proj"})
      linear(v, p + "self_attn." + m, 768, 768, t);
    norm(v, p + "layer_norm2", 768, t);
    linear(v, p + "mlp.fc1", 3072, 768, t);
    linear(v, p + "mlp.fc2", 768, 3072, t);
  }
  norm(v, c + "final_layer_norm", 768, t);
  // OpenCLIP ViT-bigG/14 text model.
  const std::string g = "conditioner.embedders.1.model.";
  v.push_back({g + "token_embedding.weight", {49408, 1280}, t});
  v.push_back({g + "positional_embedding", {77, 1280}, t});
  for (int n = 0; n < 32; ++n) {
    const std::string p = g + "transformer.resblocks." + std::to_string(n) + ".";
    norm(v, p + "ln_1", 1280, t);
    v.push_back({p + "attn.in_proj_weight", {3840, 1280}, t});
    v.push_back({p + "attn.in_proj_bias", {3840}, t});
    linear(v, p + "attn.out_proj", 1280, 1280, t);
    norm(v, p + "ln_2", 1280, t);
    linear(v, p + "mlp.c_fc", 5120, 1280, t);
    linear(v, p + "mlp.c_proj", 1280, 5120, t);
  }
  norm(v, g + "ln_final", 1280, t);
  v.push_back({g + "text_projection", {1280, 1280}, t});
  // The UNet.
  const std::string u = "model.diffusion_model.";
  auto res = [&](const std::string& p, std::int64_t in, std::int64_t out) {
    norm(v, p + ".in_layers.0", in, t);
    conv(v, p + ".in_layers.2", out, in, 3, t);
    linear(v, p + ".emb_layers.1", out, 1280, t);
    norm(v, p + ".out_layers.0", out, t);
    conv(v, p + ".out_layers.3", out, out, 3, t);
    if (in != out) conv(v, p + ".skip_connection", out, in, 1, t);
  };
  auto st = [&](const std::string& p, std::int64_t ch, int depth) {
    norm(v, p + ".norm", ch, t);
    linear(v, p + ".proj_in", ch, ch, t);
    for (int j = 0; j < depth; ++j) {
      const std::string q = p + ".transformer_blocks." + std::to_string(j) + ".";
      for (const char* n : {"to_q", "to_k", "to_v"}) linear(v, q + "attn1." + n, ch, ch, t, false);
      linear(v, q + "attn1.to_out.0", ch, ch, t);
      linear(v, q + "attn2.to_q", ch, ch, t, false);
      linear(v, q + "attn2.to_k", ch, 2048, t, false);
      linear(v, q + "attn2.to_v", ch, 2048, t, false);
      linear(v, q + "attn2.to_out.0", ch, ch, t);
      linear(v, q + "ff.net.0.proj", 8 * ch, ch, t);
      linear(v, q + "ff.net.2", ch, 4 * ch, t);
      for (const char* n : {"norm1", "norm2", "norm3"}) norm(v, q + n, ch, t);
    }
    linear(v, p + ".proj_out", ch, ch, t);
  };
  linear(v, u + "time_embed.0", 1280, 320, t);
  linear(v, u + "time_embed.2", 1280, 1280, t);
  linear(v, u + "label_emb.0.0", 1280, 2816, t);
  linear(v, u + "label_emb.0.2", 1280, 1280, t);
  conv(v, u + "input_blocks.0.0", 320, 4, 3, t);
  const std::int64_t ch[3] = {320, 640, 1280};
  const int depth[3] = {0, 2, 10};
  std::vector<std::int64_t> skips = {320};
  std::int64_t in = 320;
  int block = 1;
  for (int level = 0; level < 3; ++level) {
    for (int r = 0; r < 2; ++r, ++block) {
      const std::string p = u + "input_blocks." + std::to_string(block);
      res(p + ".0", in, ch[level]);
      in = ch[level];
      if (depth[level] != 0) st(p + ".1", in, depth[level]);
      skips.push_back(in);
    }
    if (level != 2) {
      conv(v, u + "input_blocks." + std::to_string(block++) + ".0.op", in, in, 3, t);
      skips.push_back(in);
    }
  }
  res(u + "middle_block.0", 1280, 1280);
  st(u + "middle_block.1", 1280, 10);
  res(u + "middle_block.2", 1280, 1280);
  for (int b = 0; b < 9; ++b) {
    const int level = 2 - b / 3;
    const std::string p = u + "output_blocks." + std::to_string(b);
    const std::int64_t skip = skips.back();
    skips.pop_back();
    res(p + ".0", in + skip, ch[level]);
    in = ch[level];
    if (depth[level] != 0) st(p + ".1", in, depth[level]);
    if (b % 3 == 2 && level != 0)
      conv(v, p + (depth[level] != 0 ? ".2" : ".1") + ".conv", in, in, 3, t);
  }
  norm(v, u + "out.0", 320, t);
  conv(v, u + "out.2", 4, 320, 3, t);
  sd3_vae(v, "first_stage_model.", t);
  return l;
}

}  // namespace ddo_test
