// SPDX-License-Identifier: Apache-2.0
#pragma once
// Published checkpoint layouts as lists of tensor names, shapes and dtypes (and their shard
// splits), derived from the public model code and conversion scripts — nothing downloaded:
//  - FLUX.1-dev: diffusers FluxTransformer2DModel (transformer_blocks 19, single_transformer_
//    blocks 38, inner 3072, mlp 12288, guidance embeds), 3 shards; the original single file in
//    Black Forest Labs' naming (flux/model.py: double_blocks, single_blocks, img_in, ...);
//  - SD3.5-large: diffusers SD3Transformer2DModel (38 joint blocks of 2432, the last one
//    context_pre_only), 2 shards; Stability's single file (sd3 mmditx.py naming under
//    model.diffusion_model., with the 16-channel VAE under first_stage_model.);
//  - Wan2.1-T2V-14B (wan/modules/model.py: 40 blocks of 5120, ffn 13824), fp32 in 6 shards;
//    Wan2.1-T2V-1.3B (30 blocks of 1536, ffn 8960), one fp32 file; the 14B model in ComfyUI's
//    scaled-fp8 convention (block linears F8_E4M3 with an F32 scale_weight each, the rest F32, a
//    scaled_fp8 marker);
//  - Llama-3-8B (transformers LlamaForCausalLM: 32 layers, 4096, GQA 8 kv heads, 14336, vocab
//    128256), bf16 in 4 shards;
//  - held out: the SDXL UNet (diffusers UNet2DConditionModel, stages down_blocks 3 / mid_block /
//    up_blocks 3 with nested resnets, attentions and transformer blocks), fp16, one file; its
//    blocks are the units a stage runs in order (resnets, transformer blocks, resamplers).
// Repeated blocks are generated from a per-block template. Shards split the state-dict order
// by size as Hugging Face's save_pretrained does (a new shard when the next tensor would pass
// total / shards); each file lists its tensors sorted by name, as safetensors writes them.
// The files are header-valid safetensors whose data is a sparse hole (ftruncate).

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddo/core/json_writer.hpp"
#include "ddo/model/dtype.hpp"

namespace ddo_test {

struct tensor_spec {
  std::string name;
  std::vector<std::int64_t> shape;
  ddo::dtype type = ddo::dtype::bf16;
  [[nodiscard]] std::uint64_t bytes() const {
    std::uint64_t n = ddo::size_of(type);
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
  }
};

struct published_layout {
  std::string label;                 ///< as the docs' table names it
  std::vector<tensor_spec> tensors;  ///< state-dict order
  std::size_t shards = 1;
  std::string file_stem;             ///< "diffusion_pytorch_model", "model", ...
  std::vector<std::string> blocks;   ///< the real blocks, in execution order
  std::size_t real_block_count = 0;  ///< as the model's code counts them
  [[nodiscard]] std::uint64_t bytes() const {
    std::uint64_t b = 0;
    for (const auto& t : tensors) b += t.bytes();
    return b;
  }
};

namespace layout_detail {

using shape = std::vector<std::int64_t>;

/// A linear layer: weight [out, in] and, when @p bias, bias [out].
inline void linear(std::vector<tensor_spec>& out, const std::string& name, std::int64_t o,
                   std::int64_t i, ddo::dtype t, bool bias = true) {
  out.push_back({name + ".weight", {o, i}, t});
  if (bias) out.push_back({name + ".bias", {o}, t});
}

inline void vec(std::vector<tensor_spec>& out, const std::string& name, std::int64_t n,
                ddo::dtype t) {
  out.push_back({name, {n}, t});
}

inline void conv(std::vector<tensor_spec>& out, const std::string& name, std::int64_t o,
                 std::int64_t i, std::int64_t k, ddo::dtype t) {
  out.push_back({name + ".weight", {o, i, k, k}, t});
  out.push_back({name + ".bias", {o}, t});
}

inline void norm(std::vector<tensor_spec>& out, const std::string& name, std::int64_t n,
                 ddo::dtype t, bool bias = true) {
  out.push_back({name + ".weight", {n}, t});
  if (bias) out.push_back({name + ".bias", {n}, t});
}

}  // namespace layout_detail

// --- FLUX.1-dev -------------------------------------------------------------------------------

inline published_layout flux_dev_diffusers() {
  using namespace layout_detail;
  const auto t = ddo::dtype::bf16;
  const std::int64_t d = 3072, mlp = 12288;
  published_layout l{"FLUX.1-dev (diffusers, 3 shards)", {}, 3, "diffusion_pytorch_model", {}, 57};
  auto& v = l.tensors;
  linear(v, "x_embedder", d, 64, t);
  linear(v, "context_embedder", d, 4096, t);
  for (const char* e : {"timestep_embedder", "guidance_embedder", "text_embedder"}) {
    linear(v, std::string("time_text_embed.") + e + ".linear_1", d,
           std::string(e) == "text_embedder" ? 768 : 256, t);
    linear(v, std::string("time_text_embed.") + e + ".linear_2", d, d, t);
  }
  for (int b = 0; b < 19; ++b) {
    const std::string p = "transformer_blocks." + std::to_string(b) + ".";
    linear(v, p + "norm1.linear", 6 * d, d, t);
    linear(v, p + "norm1_context.linear", 6 * d, d, t);
    for (const char* n : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj",
                          "to_out.0", "to_add_out"})
      linear(v, p + "attn." + n, d, d, t);
    for (const char* n : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
      vec(v, p + "attn." + n + ".weight", 128, t);
    for (const char* f : {"ff", "ff_context"}) {
      linear(v, p + f + ".net.0.proj", mlp, d, t);
      linear(v, p + f + ".net.2", d, mlp, t);
    }
    l.blocks.push_back("transformer_blocks." + std::to_string(b));
  }
  for (int b = 0; b < 38; ++b) {
    const std::string p = "single_transformer_blocks." + std::to_string(b) + ".";
    linear(v, p + "norm.linear", 3 * d, d, t);
    linear(v, p + "proj_mlp", mlp, d, t);
    linear(v, p + "proj_out", d, d + mlp, t);
    for (const char* n : {"to_q", "to_k", "to_v"}) linear(v, p + "attn." + n, d, d, t);
    vec(v, p + "attn.norm_q.weight", 128, t);
    vec(v, p + "attn.norm_k.weight", 128, t);
    l.blocks.push_back("single_transformer_blocks." + std::to_string(b));
  }
  linear(v, "norm_out.linear", 2 * d, d, t);
  linear(v, "proj_out", 64, d, t);
  return l;
}

inline published_layout flux_dev_original() {
  using namespace layout_detail;
  const auto t = ddo::dtype::bf16;
  const std::int64_t d = 3072, mlp = 12288;
  published_layout l{"FLUX.1-dev (original single file)", {}, 1, "flux1-dev", {}, 57};
  auto& v = l.tensors;
  linear(v, "img_in", d, 64, t);
  linear(v, "time_in.in_layer", d, 256, t);
  linear(v, "time_in.out_layer", d, d, t);
  linear(v, "guidance_in.in_layer", d, 256, t);
  linear(v, "guidance_in.out_layer", d, d, t);
  linear(v, "vector_in.in_layer", d, 768, t);
  linear(v, "vector_in.out_layer", d, d, t);
  linear(v, "txt_in", d, 4096, t);
  for (int b = 0; b < 19; ++b) {
    const std::string p = "double_blocks." + std::to_string(b) + ".";
    for (const char* s : {"img", "txt"}) {
      const std::string q = p + s;
      linear(v, q + "_mod.lin", 6 * d, d, t);
      linear(v, q + "_attn.qkv", 3 * d, d, t);
      vec(v, q + "_attn.norm.query_norm.scale", 128, t);
      vec(v, q + "_attn.norm.key_norm.scale", 128, t);
      linear(v, q + "_attn.proj", d, d, t);
      linear(v, q + "_mlp.0", mlp, d, t);
      linear(v, q + "_mlp.2", d, mlp, t);
    }
    l.blocks.push_back("double_blocks." + std::to_string(b));
  }
  for (int b = 0; b < 38; ++b) {
    const std::string p = "single_blocks." + std::to_string(b) + ".";
    linear(v, p + "linear1", 3 * d + mlp, d, t);
    linear(v, p + "linear2", d, d + mlp, t);
    vec(v, p + "norm.query_norm.scale", 128, t);
    vec(v, p + "norm.key_norm.scale", 128, t);
    linear(v, p + "modulation.lin", 3 * d, d, t);
    l.blocks.push_back("single_blocks." + std::to_string(b));
  }
  linear(v, "final_layer.adaLN_modulation.1", 2 * d, d, t);
  linear(v, "final_layer.linear", 64, d, t);
  return l;
}

// --- SD3.5-large ------------------------------------------------------------------------------

inline published_layout sd35_large_diffusers() {
  using namespace layout_detail;
  const auto t = ddo::dtype::bf16;
  const std::int64_t d = 2432, mlp = 4 * 2432;
  published_layout l{"SD3.5-large (diffusers, 2 shards)", {}, 2, "diffusion_pytorch_model", {}, 38};
  auto& v = l.tensors;
  v.push_back({"pos_embed.proj.weight", {d, 16, 2, 2}, t});
  v.push_back({"pos_embed.proj.bias", {d}, t});
  v.push_back({"pos_embed.pos_embed", {1, 192 * 192, d}, t});
  linear(v, "time_text_embed.timestep_embedder.linear_1", d, 256, t);
  linear(v, "time_text_embed.timestep_embedder.linear_2", d, d, t);
  linear(v, "time_text_embed.text_embedder.linear_1", d, 2048, t);
  linear(v, "time_text_embed.text_embedder.linear_2", d, d, t);
  linear(v, "context_embedder", d, 4096, t);
  for (int b = 0; b < 38; ++b) {
    const bool last = b == 37;  // context_pre_only
    const std::string p = "transformer_blocks." + std::to_string(b) + ".";
    linear(v, p + "norm1.linear", 6 * d, d, t);
    linear(v, p + "norm1_context.linear", (last ? 2 : 6) * d, d, t);
    for (const char* n :
         {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0"})
      linear(v, p + "attn." + n, d, d, t);
    if (!last) linear(v, p + "attn.to_add_out", d, d, t);
    for (const char* n : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
      vec(v, p + "attn." + n + ".weight", 64, t);
    linear(v, p + "ff.net.0.proj", mlp, d, t);
    linear(v, p + "ff.net.2", d, mlp, t);
    if (!last) {
      linear(v, p + "ff_context.net.0.proj", mlp, d, t);
      linear(v, p + "ff_context.net.2", d, mlp, t);
    }
    l.blocks.push_back("transformer_blocks." + std::to_string(b));
  }
  linear(v, "norm_out.linear", 2 * d, d, t);
  linear(v, "proj_out", 64, d, t);
  return l;
}

/// The SD3 VAE (16 latent channels, ch 128, mult 1-2-4-4, 2 resnets per level) under @p prefix,
/// in the original (ldm) naming.
inline void sd3_vae(std::vector<tensor_spec>& v, const std::string& prefix, ddo::dtype t) {
  using namespace layout_detail;
  auto resnet = [&](const std::string& p, std::int64_t in, std::int64_t out) {
    norm(v, p + ".norm1", in, t);
    conv(v, p + ".conv1", out, in, 3, t);
    norm(v, p + ".norm2", out, t);
    conv(v, p + ".conv2", out, out, 3, t);
    if (in != out) conv(v, p + ".nin_shortcut", out, in, 1, t);
  };
  auto attn = [&](const std::string& p) {
    norm(v, p + ".norm", 512, t);
    for (const char* n : {"q", "k", "v", "proj_out"}) conv(v, p + "." + n, 512, 512, 1, t);
  };
  const std::int64_t ch[4] = {128, 256, 512, 512};
  conv(v, prefix + "encoder.conv_in", 128, 3, 3, t);
  std::int64_t in = 128;
  for (int i = 0; i < 4; ++i) {
    for (int r = 0; r < 2; ++r) {
      resnet(prefix + "encoder.down." + std::to_string(i) + ".block." + std::to_string(r), in,
             ch[i]);
      in = ch[i];
    }
    if (i != 3)
      conv(v, prefix + "encoder.down." + std::to_string(i) + ".downsample.conv", in, in, 3, t);
  }
  resnet(prefix + "encoder.mid.block_1", 512, 512);
  attn(prefix + "encoder.mid.attn_1");
  resnet(prefix + "encoder.mid.block_2", 512, 512);
  norm(v, prefix + "encoder.norm_out", 512, t);
  conv(v, prefix + "encoder.conv_out", 32, 512, 3, t);
  conv(v, prefix + "decoder.conv_in", 512, 16, 3, t);
  resnet(prefix + "decoder.mid.block_1", 512, 512);
  attn(prefix + "decoder.mid.attn_1");
  resnet(prefix + "decoder.mid.block_2", 512, 512);
  in = 512;
  for (int i = 3; i >= 0; --i) {
    for (int r = 0; r < 3; ++r) {
      resnet(prefix + "decoder.up." + std::to_string(i) + ".block." + std::to_string(r), in, ch[i]);
      in = ch[i];
    }
    if (i != 0)
      conv(v, prefix + "decoder.up." + std::to_string(i) + ".upsample.conv", in, in, 3, t);
  }
  norm(v, prefix + "decoder.norm_out", 128, t);
  conv(v, prefix + "decoder.conv_out", 3, 128, 3, t);
}

inline published_layout sd35_large_single_file() {
  using namespace layout_detail;
  const auto t = ddo::dtype::bf16;
  const std::int64_t d = 2432, mlp = 4 * 2432;
  const std::string m = "model.diffusion_model.";
  published_layout l{"SD3.5-large (single file with its VAE)", {}, 1, "sd3.5_large", {}, 38};
  auto& v = l.tensors;
  v.push_back({m + "x_embedder.proj.weight", {d, 16, 2, 2}, t});
  v.push_back({m + "x_embedder.proj.bias", {d}, t});
  v.push_back({m + "pos_embed", {1, 192 * 192, d}, t});
  linear(v, m + "t_embedder.mlp.0", d, 256, t);
  linear(v, m + "t_embedder.mlp.2", d, d, t);
  linear(v, m + "y_embedder.mlp.0", d, 2048, t);
  linear(v, m + "y_embedder.mlp.2", d, d, t);
  linear(v, m + "context_embedder", d, 4096, t);
  for (int b = 0; b < 38; ++b) {
    const bool last = b == 37;
    const std::string p = m + "joint_blocks." + std::to_string(b) + ".";
    for (const char* s : {"x_block", "context_block"}) {
      const bool pre_only = last && std::string(s) == "context_block";
      const std::string q = p + s + ".";
      linear(v, q + "adaLN_modulation.1", (pre_only ? 2 : 6) * d, d, t);
      linear(v, q + "attn.qkv", 3 * d, d, t);
      vec(v, q + "attn.ln_q.weight", 64, t);
      vec(v, q + "attn.ln_k.weight", 64, t);
      if (!pre_only) {
        linear(v, q + "attn.proj", d, d, t);
        linear(v, q + "mlp.fc1", mlp, d, t);
        linear(v, q + "mlp.fc2", d, mlp, t);
      }
    }
    l.blocks.push_back(m + "joint_blocks." + std::to_string(b));
  }
  linear(v, m + "final_layer.adaLN_modulation.1", 2 * d, d, t);
  linear(v, m + "final_layer.linear", 64, d, t);
  sd3_vae(v, "first_stage_model.", t);
  return l;
}

// --- Wan2.1 -----------------------------------------------------------------------------------

/// Wan2.1 T2V in the original naming; @p fp8: ComfyUI's scaled-fp8 file of it.
inline published_layout wan21(std::string label, std::int64_t d, std::int64_t ffn, int layers,
                              std::size_t shards, bool fp8) {
  using namespace layout_detail;
  const auto t = ddo::dtype::f32;
  published_layout l{std::move(label),
                     {},
                     shards,
                     fp8 ? "wan2.1_t2v_14B_fp8_scaled" : "diffusion_pytorch_model",
                     {},
                     static_cast<std::size_t>(layers)};
  auto& v = l.tensors;
  v.push_back({"patch_embedding.weight", {d, 16, 1, 2, 2}, t});
  v.push_back({"patch_embedding.bias", {d}, t});
  linear(v, "text_embedding.0", d, 4096, t);
  linear(v, "text_embedding.2", d, d, t);
  linear(v, "time_embedding.0", d, 256, t);
  linear(v, "time_embedding.2", d, d, t);
  linear(v, "time_projection.1", 6 * d, d, t);
  // A block linear: F8_E4M3 weight with an F32 scale (scaled fp8), or F32.
  auto block_linear = [&](const std::string& name, std::int64_t o, std::int64_t i) {
    v.push_back({name + ".weight", {o, i}, fp8 ? ddo::dtype::f8_e4m3 : t});
    v.push_back({name + ".bias", {o}, t});
    if (fp8) v.push_back({name + ".scale_weight", {1}, t});
  };
  for (int b = 0; b < layers; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    v.push_back({p + "modulation", {1, 6, d}, t});
    for (const char* a : {"self_attn", "cross_attn"}) {
      for (const char* n : {"q", "k", "v", "o"}) block_linear(p + a + "." + n, d, d);
      vec(v, p + a + ".norm_q.weight", d, t);
      vec(v, p + a + ".norm_k.weight", d, t);
    }
    norm(v, p + "norm3", d, t);
    block_linear(p + "ffn.0", ffn, d);
    block_linear(p + "ffn.2", d, ffn);
    l.blocks.push_back("blocks." + std::to_string(b));
  }
  v.push_back({"head.modulation", {1, 2, d}, t});
  linear(v, "head.head", 64, d, t);
  if (fp8) v.push_back({"scaled_fp8", {2}, ddo::dtype::f8_e4m3});
  return l;
}

inline published_layout wan21_14b() {
  return wan21("Wan2.1-T2V-14B (fp32, 6 shards)", 5120, 13824, 40, 6, false);
}
inline published_layout wan21_1_3b() {
  return wan21("Wan2.1-T2V-1.3B (fp32, one file)", 1536, 8960, 30, 1, false);
}
inline published_layout wan21_14b_fp8_scaled() {
  return wan21("Wan2.1-T2V-14B fp8-scaled (mixed F8_E4M3/F32)", 5120, 13824, 40, 1, true);
}

// --- Llama-3-8B -------------------------------------------------------------------------------

inline published_layout llama3_8b() {
  using namespace layout_detail;
  const auto t = ddo::dtype::bf16;
  const std::int64_t d = 4096, ffn = 14336, kv = 1024, vocab = 128256;
  published_layout l{"Llama-3-8B (bf16, 4 shards)", {}, 4, "model", {}, 32};
  auto& v = l.tensors;
  v.push_back({"model.embed_tokens.weight", {vocab, d}, t});
  for (int b = 0; b < 32; ++b) {
    const std::string p = "model.layers." + std::to_string(b) + ".";
    vec(v, p + "input_layernorm.weight", d, t);
    linear(v, p + "self_attn.q_proj", d, d, t, false);
    linear(v, p + "self_attn.k_proj", kv, d, t, false);
    linear(v, p + "self_attn.v_proj", kv, d, t, false);
    linear(v, p + "self_attn.o_proj", d, d, t, false);
    vec(v, p + "post_attention_layernorm.weight", d, t);
    linear(v, p + "mlp.gate_proj", ffn, d, t, false);
    linear(v, p + "mlp.up_proj", ffn, d, t, false);
    linear(v, p + "mlp.down_proj", d, ffn, t, false);
    l.blocks.push_back("model.layers." + std::to_string(b));
  }
  vec(v, "model.norm.weight", d, t);
  v.push_back({"lm_head.weight", {vocab, d}, t});
  return l;
}

// --- SDXL UNet (held out) ---------------------------------------------------------------------

/// SDXL's UNet under @p prefix, named as diffusers names it (down_blocks.I.resnets.R, ...) or,
/// with @p sgm, as the sgm code that Stability's single file uses names it (input_blocks.N.0,
/// middle_block, output_blocks; tests/plan/sdxl_single_file.hpp): the same tensors either way.
/// blocks lists the streaming units (issue 38) under either naming.
inline published_layout sdxl_unet(const std::string& prefix = "", bool sgm = false) {
  using namespace layout_detail;
  const auto t = ddo::dtype::f16;
  published_layout l{"SDXL UNet (held out; diffusers, fp16)", {}, 1,
                     "diffusion_pytorch_model.fp16",          {}, 0};
  auto& v = l.tensors;
  // The streaming units (issue 38): each resnet, each attention's transformer blocks (an
  // attention of depth 0 is none), each resampler, in the order the stage runs them.
  auto unit = [&](const std::string& p) { l.blocks.push_back(prefix + p); };
  auto resnet = [&](const std::string& p, std::int64_t in, std::int64_t out) {
    const std::string q = prefix + p + ".";
    norm(v, q + (sgm ? "in_layers.0" : "norm1"), in, t);
    conv(v, q + (sgm ? "in_layers.2" : "conv1"), out, in, 3, t);
    linear(v, q + (sgm ? "emb_layers.1" : "time_emb_proj"), out, 1280, t);
    norm(v, q + (sgm ? "out_layers.0" : "norm2"), out, t);
    conv(v, q + (sgm ? "out_layers.3" : "conv2"), out, out, 3, t);
    if (in != out) conv(v, q + (sgm ? "skip_connection" : "conv_shortcut"), out, in, 1, t);
    unit(p);
  };
  auto transformer = [&](const std::string& p, std::int64_t c, int depth) {
    norm(v, prefix + p + ".norm", c, t);
    linear(v, prefix + p + ".proj_in", c, c, t);
    for (int j = 0; j < depth; ++j) {
      const std::string q = prefix + p + ".transformer_blocks." + std::to_string(j) + ".";
      norm(v, q + "norm1", c, t);
      for (const char* n : {"to_q", "to_k", "to_v"}) linear(v, q + "attn1." + n, c, c, t, false);
      linear(v, q + "attn1.to_out.0", c, c, t);
      norm(v, q + "norm2", c, t);
      linear(v, q + "attn2.to_q", c, c, t, false);
      linear(v, q + "attn2.to_k", c, 2048, t, false);
      linear(v, q + "attn2.to_v", c, 2048, t, false);
      linear(v, q + "attn2.to_out.0", c, c, t);
      norm(v, q + "norm3", c, t);
      linear(v, q + "ff.net.0.proj", 8 * c, c, t);
      linear(v, q + "ff.net.2", c, 4 * c, t);
      unit(p + ".transformer_blocks." + std::to_string(j));
    }
    linear(v, prefix + p + ".proj_out", c, c, t);
  };
  // A resampler's conv: its unit is the module that holds it.
  auto resampler = [&](const std::string& module, const std::string& conv_name, std::int64_t c) {
    conv(v, prefix + module + conv_name, c, c, 3, t);
    unit(module);
  };
  conv(v, prefix + (sgm ? "input_blocks.0.0" : "conv_in"), 320, 4, 3, t);
  linear(v, prefix + (sgm ? "time_embed.0" : "time_embedding.linear_1"), 1280, 320, t);
  linear(v, prefix + (sgm ? "time_embed.2" : "time_embedding.linear_2"), 1280, 1280, t);
  linear(v, prefix + (sgm ? "label_emb.0.0" : "add_embedding.linear_1"), 1280, 2816, t);
  linear(v, prefix + (sgm ? "label_emb.0.2" : "add_embedding.linear_2"), 1280, 1280, t);
  const std::int64_t ch[3] = {320, 640, 1280};
  const int depth[3] = {0, 2, 10};
  std::int64_t in = 320;
  int block = 1;  // sgm: input_blocks.N (0 is conv_in)
  for (int i = 0; i < 3; ++i) {
    const std::string p = "down_blocks." + std::to_string(i);
    for (int r = 0; r < 2; ++r, ++block) {
      const std::string n = "input_blocks." + std::to_string(block);
      resnet(sgm ? n + ".0" : p + ".resnets." + std::to_string(r), in, ch[i]);
      in = ch[i];
      if (depth[i] != 0)
        transformer(sgm ? n + ".1" : p + ".attentions." + std::to_string(r), ch[i], depth[i]);
    }
    if (i != 2 && sgm) resampler("input_blocks." + std::to_string(block++) + ".0", ".op", ch[i]);
    if (i != 2 && !sgm) resampler(p + ".downsamplers.0", ".conv", ch[i]);
  }
  resnet(sgm ? "middle_block.0" : "mid_block.resnets.0", 1280, 1280);
  transformer(sgm ? "middle_block.1" : "mid_block.attentions.0", 1280, 10);
  resnet(sgm ? "middle_block.2" : "mid_block.resnets.1", 1280, 1280);
  // Skip connections popped from the down path's outputs, last first.
  std::vector<std::int64_t> skips = {320, 320, 320, 320, 640, 640, 640, 1280, 1280};
  in = 1280;
  for (int i = 0; i < 3; ++i) {
    const std::int64_t out = ch[2 - i];
    const std::string p = "up_blocks." + std::to_string(i);
    for (int r = 0; r < 3; ++r) {
      const std::string n = "output_blocks." + std::to_string(3 * i + r);
      const std::int64_t skip = skips.back();
      skips.pop_back();
      resnet(sgm ? n + ".0" : p + ".resnets." + std::to_string(r), in + skip, out);
      in = out;
      if (depth[2 - i] != 0)
        transformer(sgm ? n + ".1" : p + ".attentions." + std::to_string(r), out, depth[2 - i]);
      if (r == 2 && i != 2 && sgm) resampler(n + (depth[2 - i] != 0 ? ".2" : ".1"), ".conv", out);
    }
    if (i != 2 && !sgm) resampler(p + ".upsamplers.0", ".conv", out);
  }
  l.real_block_count = l.blocks.size();
  norm(v, prefix + (sgm ? "out.0" : "conv_norm_out"), 320, t);
  conv(v, prefix + (sgm ? "out.2" : "conv_out"), 4, 320, 3, t);
  return l;
}

inline std::vector<std::function<published_layout()>> published_layouts() {
  return {flux_dev_diffusers,     flux_dev_original, sd35_large_diffusers,
          sd35_large_single_file, wan21_14b,         wan21_1_3b,
          wan21_14b_fp8_scaled,   llama3_8b,         [] { return sdxl_unet(); }};
}

/// Writes @p l as header-only sparse safetensors files in @p dir (see the file comment); returns
/// their paths in shard order.
inline std::vector<std::string> write_sparse_layout(const published_layout& l,
                                                    const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::uint64_t limit = (l.bytes() + l.shards - 1) / l.shards;
  std::vector<std::vector<const tensor_spec*>> files(1);
  std::uint64_t in_file = 0;
  for (const auto& s : l.tensors) {
    if (in_file != 0 && in_file + s.bytes() > limit && files.size() < l.shards) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().push_back(&s);
    in_file += s.bytes();
  }
  std::vector<std::string> paths;
  for (std::size_t f = 0; f < files.size(); ++f) {
    auto& list = files[f];
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->name < b->name; });
    ddo::json_writer json;
    json.begin_object();
    std::uint64_t offset = 0;
    for (const auto* s : list) {
      json.key(s->name).begin_object().member("dtype", ddo::to_string(s->type));
      json.key("shape").begin_array();
      for (auto d : s->shape) json.value(d);
      json.end_array().key("data_offsets").begin_array().value(offset).value(offset + s->bytes());
      json.end_array().end_object();
      offset += s->bytes();
    }
    std::string header = json.end_object().take();
    while (header.size() % 8 != 0) header += ' ';
    char shard[64];
    std::snprintf(shard, sizeof shard, "-%05zu-of-%05zu", f + 1, files.size());
    const std::string path =
        (dir / (l.file_stem + (files.size() > 1 ? shard : "") + ".safetensors")).string();
    const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) throw std::runtime_error("cannot create " + path);
    const std::uint64_t n = header.size();
    unsigned char len[8];
    for (int k = 0; k < 8; ++k) len[k] = static_cast<unsigned char>(n >> (8 * k));
    const bool ok =
        ::write(fd, len, 8) == 8 &&
        ::write(fd, header.data(), header.size()) == static_cast<ssize_t>(header.size()) &&
        ::ftruncate(fd, static_cast<off_t>(8 + n + offset)) == 0;
    ::close(fd);
    if (!ok) throw std::runtime_error("cannot write " + path);
    paths.push_back(path);
  }
  return paths;
}

}  // namespace ddo_test
