// SPDX-License-Identifier: Apache-2.0
#pragma once
// SDXL base 1.0 as Stability's single file bundles it (sgm naming, fp16): the UNet under
// model.diffusion_model. (input_blocks / middle_block / output_blocks with ResBlocks and
// SpatialTransformers of 2 and 10 transformer blocks: runner/published_layouts.hpp's
// sdxl_unet in its sgm naming), CLIP ViT-L and OpenCLIP ViT-bigG under
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
  // The UNet, in the sgm naming (published_layouts.hpp builds it).
  for (auto& unet : sdxl_unet("model.diffusion_model.", true).tensors) v.push_back(std::move(unet));
  sd3_vae(v, "first_stage_model.", t);
  return l;
}

}  // namespace ddo_test
