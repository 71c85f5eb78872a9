// SPDX-License-Identifier: Apache-2.0
#pragma once
// Random model layouts for the oracle's property test (issue 38): flat transformers (one or two
// block families, the published names), nested UNet-like stages (diffusers naming: down_blocks /
// mid_block / up_blocks with resnets and attentions holding transformer blocks), outsized
// embeddings and heads, mixed dtypes (bf16, f16, f32, scaled fp8 with f32 scales and biases),
// and bundled single files (the model under model.diffusion_model. with a text encoder under
// conditioner. and a VAE under first_stage_model.). Weights come from one file, listed in
// execution order or sorted by name as a safetensors file lists them. The execution units the
// oracle streams follow from the names (oracle_harness::unit_of).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ddo/model/module_kind_inference.hpp"
#include "ddo/model/weight_table.hpp"

namespace ddo_test::oracle_layouts {

struct random_layout {
  std::string kind;  ///< "flat", "nested", "+bundled", "+sorted", ...
  ddo::weight_table table;
};

namespace detail {

struct spec {
  std::string name;
  std::vector<std::int64_t> shape;
  ddo::dtype type;
};

/// Adds tensors in execution order, in the model's dtypes.
struct builder {
  std::vector<spec> v;
  ddo::dtype weights = ddo::dtype::bf16;  ///< 2-D weights of the blocks
  ddo::dtype other = ddo::dtype::bf16;    ///< biases, norms, convs, embeddings
  bool fp8 = false;                       ///< block linears F8_E4M3 with an F32 scale each

  void linear(const std::string& name, std::int64_t o, std::int64_t i, bool bias = true,
              bool block = true) {
    const bool scaled = fp8 && block;
    v.push_back({name + ".weight", {o, i}, scaled ? ddo::dtype::f8_e4m3 : block ? weights : other});
    if (bias) v.push_back({name + ".bias", {o}, other});
    if (scaled) v.push_back({name + ".scale_weight", {1}, ddo::dtype::f32});
  }
  void conv(const std::string& name, std::int64_t o, std::int64_t i, std::int64_t k) {
    v.push_back({name + ".weight", {o, i, k, k}, other});
    v.push_back({name + ".bias", {o}, other});
  }
  void norm(const std::string& name, std::int64_t n) {
    v.push_back({name + ".weight", {n}, other});
    v.push_back({name + ".bias", {n}, other});
  }
};

inline std::int64_t pick(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}

inline void choose_dtypes(std::mt19937_64& rng, builder& b, std::string& kind) {
  switch (rng() % 6) {
    case 0: b.weights = b.other = ddo::dtype::f16; break;
    case 1: b.weights = b.other = ddo::dtype::f32; kind += "+f32"; break;
    case 2:
      b.fp8 = true;
      b.other = ddo::dtype::f32;
      kind += "+fp8";
      break;
    case 3:
      b.weights = ddo::dtype::bf16;
      b.other = ddo::dtype::f32;
      kind += "+mixed";
      break;
    default: break;  // bf16
  }
}

/// Flat transformer: one or two block families of a random template, embedders and heads, some
/// of them outsized.
inline void flat(std::mt19937_64& rng, builder& b, const std::string& prefix) {
  struct family_names {
    const char* first;
    const char* second;
  };
  const family_names names[] = {{"blocks", nullptr},
                                {"model.layers", nullptr},
                                {"transformer.h", nullptr},
                                {"transformer_blocks", "single_transformer_blocks"},
                                {"double_blocks", "single_blocks"},
                                {"joint_blocks", nullptr}};
  const auto& f = names[rng() % 6];
  const double target = std::exp(std::log(3.0) + (std::log(64.0) - std::log(3.0)) *
                                                      static_cast<double>(rng() % 1000) / 1000.0);
  const int count1 = static_cast<int>(pick(rng, 2, 24));
  const int count2 = f.second != nullptr ? static_cast<int>(pick(rng, 2, 24)) : 0;
  // Per family a template of linears (out, in) in units of the width.
  auto make_template = [&] {
    std::vector<std::pair<std::int64_t, std::int64_t>> t;
    const int n = static_cast<int>(pick(rng, 2, 5));
    for (int k = 0; k < n; ++k) t.push_back({pick(rng, 1, 6), pick(rng, 1, 4)});
    return t;
  };
  const auto t1 = make_template(), t2 = make_template();
  std::int64_t units = 0;
  for (auto [o, i] : t1) units += count1 * o * i;
  for (auto [o, i] : t2) units += count2 * o * i;
  const double bytes_per = b.fp8 ? 1.0 : static_cast<double>(ddo::size_of(b.weights));
  const std::int64_t width = std::max<std::int64_t>(
      256, static_cast<std::int64_t>(std::sqrt(target * 1073741824.0 /
                                               (bytes_per * static_cast<double>(units)))) /
               64 * 64);
  const std::int64_t vocab = width * pick(rng, 1, 40);
  if (rng() % 2) b.linear(prefix + "embed_tokens", vocab, width, false, false);
  if (rng() % 2) b.linear(prefix + "x_embedder", width, 64);
  if (rng() % 2) {
    b.linear(prefix + "time_embedding.linear_1", width, 256, true, false);
    b.linear(prefix + "time_embedding.linear_2", width, width, true, false);
  }
  if (rng() % 4 == 0) b.linear(prefix + "time_projection.1", 6 * width, width, true, false);
  auto family = [&](const std::string& name, int count, const auto& t) {
    for (int n = 0; n < count; ++n) {
      const std::string p = prefix + name + "." + std::to_string(n) + ".";
      b.norm(p + "norm1", width);
      for (std::size_t k = 0; k < t.size(); ++k)
        b.linear(p + (k == t.size() - 1 && rng() % 3 == 0 ? std::string("proj_out")
                                                          : "lin" + std::to_string(k)),
                 t[k].first * width, t[k].second * width);
    }
  };
  family(f.first, count1, t1);
  if (f.second != nullptr) family(f.second, count2, t2);
  if (rng() % 2) b.linear(prefix + "norm_out.linear", 2 * width, width, true, false);
  switch (rng() % 3) {
    case 0: b.linear(prefix + "lm_head", vocab, width, false, false); break;
    case 1: b.linear(prefix + "proj_out", 64, width, true, false); break;
    default: break;
  }
}

/// A UNet's stages in diffusers naming: resnets and attentions (their transformer blocks) per
/// level, a middle stage, the up path with three resnets per level.
inline void nested(std::mt19937_64& rng, builder& b, const std::string& prefix) {
  const int levels = static_cast<int>(pick(rng, 2, 3));
  const std::int64_t base = 64 * pick(rng, 5, 20);
  const std::int64_t context = 256 * pick(rng, 3, 8);
  const std::int64_t temb = base * 4;
  std::vector<std::int64_t> ch, depth;
  for (int i = 0; i < levels; ++i) {
    ch.push_back(base << std::min(i, 2));
    depth.push_back(i == 0 && rng() % 2 ? 0 : pick(rng, 0, 4));
  }
  auto resnet = [&](const std::string& p, std::int64_t in, std::int64_t out) {
    b.norm(p + ".norm1", in);
    b.conv(p + ".conv1", out, in, 3);
    b.linear(p + ".time_emb_proj", out, temb);
    b.norm(p + ".norm2", out);
    b.conv(p + ".conv2", out, out, 3);
  };
  auto attention = [&](const std::string& p, std::int64_t c, std::int64_t d) {
    b.norm(p + ".norm", c);
    b.linear(p + ".proj_in", c, c);
    for (std::int64_t j = 0; j < d; ++j) {
      const std::string q = p + ".transformer_blocks." + std::to_string(j) + ".";
      for (const char* n : {"to_q", "to_k", "to_v"}) b.linear(q + "attn1." + n, c, c, false);
      b.linear(q + "attn1.to_out.0", c, c);
      b.linear(q + "attn2.to_q", c, c, false);
      b.linear(q + "attn2.to_k", c, context, false);
      b.linear(q + "attn2.to_v", c, context, false);
      b.linear(q + "attn2.to_out.0", c, c);
      b.linear(q + "ff.net.0.proj", 8 * c, c);
      b.linear(q + "ff.net.2", c, 4 * c);
    }
    b.linear(p + ".proj_out", c, c);
  };
  b.conv(prefix + "conv_in", base, 4, 3);
  b.linear(prefix + "time_embedding.linear_1", temb, base, true, false);
  b.linear(prefix + "time_embedding.linear_2", temb, temb, true, false);
  std::int64_t in = base;
  for (int i = 0; i < levels; ++i) {
    const std::string p = prefix + "down_blocks." + std::to_string(i);
    for (int r = 0; r < 2; ++r) {
      resnet(p + ".resnets." + std::to_string(r), in, ch[i]);
      in = ch[i];
      if (depth[i] != 0) attention(p + ".attentions." + std::to_string(r), ch[i], depth[i]);
    }
    if (i + 1 != levels) b.conv(p + ".downsamplers.0.conv", in, in, 3);
  }
  resnet(prefix + "mid_block.resnets.0", in, in);
  attention(prefix + "mid_block.attentions.0", in, std::max<std::int64_t>(1, depth.back()));
  resnet(prefix + "mid_block.resnets.1", in, in);
  for (int i = 0; i < levels; ++i) {
    const int level = levels - 1 - i;
    const std::string p = prefix + "up_blocks." + std::to_string(i);
    for (int r = 0; r < 3; ++r) {
      resnet(p + ".resnets." + std::to_string(r), in + ch[level], ch[level]);
      in = ch[level];
      if (depth[level] != 0)
        attention(p + ".attentions." + std::to_string(r), ch[level], depth[level]);
    }
    if (i + 1 != levels) b.conv(p + ".upsamplers.0.conv", in, in, 3);
  }
  b.norm(prefix + "conv_norm_out", base);
  b.conv(prefix + "conv_out", 4, base, 3);
}

/// A bundled file's other parts: a text encoder before the model, a VAE decoder after it.
inline void bundle(std::mt19937_64& rng, builder& b, std::vector<spec>& before) {
  builder text;
  text.weights = text.other = b.other == ddo::dtype::f32 ? ddo::dtype::f32 : ddo::dtype::f16;
  const std::int64_t w = 256 * pick(rng, 3, 5);
  const std::string p = "conditioner.embedders.0.transformer.text_model.";
  text.linear(p + "embeddings.token_embedding", 49408, w, false, false);
  for (int n = 0, layers = static_cast<int>(pick(rng, 4, 12)); n < layers; ++n) {
    const std::string q = p + "encoder.layers." + std::to_string(n) + ".";
    text.norm(q + "layer_norm1", w);
    for (const char* m : {"q_proj", "k_proj", "v_proj", "out_proj"})
      text.linear(q + "self_attn." + m, w, w);
    text.norm(q + "layer_norm2", w);
    text.linear(q + "mlp.fc1", 4 * w, w);
    text.linear(q + "mlp.fc2", w, 4 * w);
  }
  before = std::move(text.v);
  const std::string v = "first_stage_model.decoder.";
  b.conv(v + "conv_in", 512, 4, 3);
  for (int level = 3; level >= 0; --level)
    for (int r = 0; r < 3; ++r) {
      const std::string q = v + "up." + std::to_string(level) + ".block." + std::to_string(r);
      const std::int64_t c = 128 << std::min(level, 2);
      b.norm(q + ".norm1", c);
      b.conv(q + ".conv1", c, c, 3);
      b.conv(q + ".conv2", c, c, 3);
    }
  b.conv(v + "conv_out", 3, 128, 3);
}

}  // namespace detail

/// One random layout for @p rng (see the file comment).
inline random_layout make_random_layout(std::mt19937_64& rng) {
  random_layout out;
  detail::builder b;
  out.kind = rng() % 3 == 0 ? "nested" : "flat";
  detail::choose_dtypes(rng, b, out.kind);
  const bool bundled = rng() % 5 == 0;
  const std::string prefix = bundled ? "model.diffusion_model." : "";
  std::vector<detail::spec> before;
  if (bundled) out.kind += "+bundled";
  if (out.kind.starts_with("nested"))
    detail::nested(rng, b, prefix);
  else
    detail::flat(rng, b, prefix);
  if (bundled) detail::bundle(rng, b, before);
  std::vector<detail::spec> all = std::move(before);
  all.insert(all.end(), b.v.begin(), b.v.end());
  if (rng() % 2) {
    out.kind += "+sorted";
    std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.name < y.name; });
  }
  const std::size_t file = out.table.add_file("/nonexistent/random.safetensors");
  std::uint64_t offset = 0;
  for (auto& s : all) {
    ddo::weight_info w;
    w.name = std::move(s.name);
    w.shape = std::move(s.shape);
    w.type = s.type;
    w.source = ddo::file_source{file, offset};
    const std::size_t i = out.table.add(std::move(w));
    offset += out.table[i].bytes;
  }
  ddo::infer_module_kinds(out.table);
  return out;
}

}  // namespace ddo_test::oracle_layouts
