// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The forward pass of diffusers' FluxTransformer2DModel on the CPU in float, cut into
/// the stages an engine runs one execution group at a time: embed (x_embedder, the time,
/// guidance and pooled-text embedders, context_embedder), each double-stream block, each
/// single-stream block, and the head (norm_out, proj_out). Each stage reads its weights through
/// a lookup by published name, so the same code runs on the pointers of a ddo lease and on the
/// host copy of every weight. Written from diffusers' definitions (transformer_flux.py,
/// embeddings.py, normalization.py), not copied from them. Example code (examples/flux/).
///
/// The activations are one joint sequence, text tokens first and image tokens after them, as
/// FluxAttnProcessor concatenates them: the double-stream blocks work on the two slices, the
/// single-stream blocks on the whole.

#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ddo/core/error.hpp"
#include "flux/flux_config.hpp"
#include "flux/flux_cpu.hpp"

namespace flux {

/// @brief A stage's access to its weights: the tensor called NAME.
using weight_lookup = std::function<cpu::tensor_ref(const std::string& name)>;

/// @brief The lookup over a name -> tensor map (the host model's, or its device copy's), which
/// must outlive it; a name the model lacks is refused with the name.
[[nodiscard]] inline weight_lookup lookup_in(
    const std::unordered_map<std::string, cpu::tensor_ref>& refs) {
  return [&refs](const std::string& name) {
    const auto it = refs.find(name);
    if (it == refs.end()) throw ddo::usage_error("flux: the model has no weight '" + name + "'");
    return it->second;
  };
}

/// @brief What a pipeline hands the transformer for one image (batch 1).
struct inputs {
  std::size_t image_tokens = 0;  ///< packed 2x2 latent patches: (height / 16) x (width / 16)
  std::size_t text_tokens = 0;   ///< 512 for FLUX.1-dev's T5 prompt
  std::vector<float> latents;    ///< image_tokens x in_channels
  std::vector<float> text;       ///< text_tokens x text_dim (T5 hidden states)
  std::vector<float> pooled;     ///< pooled_dim (CLIP pooled output)
  std::vector<float> img_ids;    ///< image_tokens x 3: (0, row, column)
  std::vector<float> txt_ids;    ///< text_tokens x 3: zeros
  float guidance = 3.5f;         ///< the guidance scale (the transformer multiplies it by 1000)
};

/// @brief The image position ids of a packed latent of @p rows x @p cols patches: (0, r, c).
[[nodiscard]] inline std::vector<float> image_ids(std::size_t rows, std::size_t cols) {
  std::vector<float> ids(rows * cols * 3, 0.f);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      ids[(r * cols + c) * 3 + 1] = static_cast<float>(r);
      ids[(r * cols + c) * 3 + 2] = static_cast<float>(c);
    }
  return ids;
}

/// @brief The rotary angles of every token (text ids first) into @p cos / @p sin (tokens x
/// head_dim), as FluxPosEmbed computes them: per axis i of width d, frequency 10000^(-2k / d) in
/// double, angle pos x frequency, cos and sin each repeated for the pair (2k, 2k + 1), rounded
/// to float. The CPU and the GPU forward both use these tables.
inline void rope_tables(const config& c, const std::vector<float>& txt_ids,
                        const std::vector<float>& img_ids, std::vector<float>& cos,
                        std::vector<float>& sin) {
  DDO_EXPECTS(txt_ids.size() % 3 == 0 && img_ids.size() % 3 == 0,
              "flux: position ids must be tokens x 3");
  const std::size_t nt = txt_ids.size() / 3, n = nt + img_ids.size() / 3;
  const auto d = static_cast<std::size_t>(c.head_dim);
  cos.assign(n * d, 0.f);
  sin.assign(n * d, 0.f);
  for (std::size_t t = 0; t < n; ++t) {
    const float* id = t < nt ? &txt_ids[t * 3] : &img_ids[(t - nt) * 3];
    std::size_t col = 0;
    for (std::size_t a = 0; a < 3; ++a) {
      const auto dim = static_cast<std::size_t>(c.axes[a]);
      for (std::size_t k = 0; k < dim; k += 2) {
        const double freq =
            1.0 / std::pow(10000.0, static_cast<double>(k) / static_cast<double>(dim));
        const double angle = static_cast<double>(id[a]) * freq;
        cos[t * d + col + k] = cos[t * d + col + k + 1] = static_cast<float>(std::cos(angle));
        sin[t * d + col + k] = sin[t * d + col + k + 1] = static_cast<float>(std::sin(angle));
      }
      col += dim;
    }
  }
}

/// @brief One forward's activations and its stages.
class forward {
 public:
  forward(const config& c, std::size_t image_tokens, std::size_t text_tokens)
      : c_(c), ni_(image_tokens), nt_(text_tokens), n_(image_tokens + text_tokens) {
    validate(c_);
    const auto h = static_cast<std::size_t>(c_.hidden());
    x_.resize(n_ * h);
    temb_.resize(h);
    silu_temb_.resize(h);
    cos_.resize(n_ * static_cast<std::size_t>(c_.head_dim));
    sin_.resize(cos_.size());
  }

  /// @brief The rotary angles of every token (rope_tables).
  void set_positions(const std::vector<float>& txt_ids, const std::vector<float>& img_ids) {
    DDO_EXPECTS(txt_ids.size() == nt_ * 3 && img_ids.size() == ni_ * 3,
                "flux: position ids must be tokens x 3");
    rope_tables(c_, txt_ids, img_ids, cos_, sin_);
  }

  /// @brief x_embedder, the conditioning embedding and context_embedder. @p timestep is what
  /// the pipeline hands the transformer (sigma); it and the guidance are multiplied by 1000 here.
  void embed(const weight_lookup& w, const inputs& in, float timestep) {
    const auto h = static_cast<std::size_t>(c_.hidden());
    DDO_EXPECTS(in.latents.size() == ni_ * static_cast<std::size_t>(c_.in_channels) &&
                    in.text.size() == nt_ * static_cast<std::size_t>(c_.text_dim) &&
                    in.pooled.size() == static_cast<std::size_t>(c_.pooled_dim),
                "flux: the inputs do not match the model's widths");
    lin(w, "x_embedder", in.latents.data(), c_.in_channels, ni_, &x_[nt_ * h], h);
    lin(w, "context_embedder", in.text.data(), c_.text_dim, nt_, x_.data(), h);
    std::vector<float> t_emb = timestep_embedding(w, "time_text_embed.timestep_embedder", timestep);
    if (c_.guidance) {
      const std::vector<float> g =
          timestep_embedding(w, "time_text_embed.guidance_embedder", in.guidance);
      for (std::size_t i = 0; i < h; ++i) t_emb[i] += g[i];
    }
    std::vector<float> p1(h), p2(h);
    lin(w, "time_text_embed.text_embedder.linear_1", in.pooled.data(), c_.pooled_dim, 1, p1.data(),
        h);
    cpu::silu(p1.data(), h);
    lin(w, "time_text_embed.text_embedder.linear_2", p1.data(), h, 1, p2.data(), h);
    for (std::size_t i = 0; i < h; ++i) temb_[i] = t_emb[i] + p2[i];
    silu_temb_ = temb_;
    cpu::silu(silu_temb_.data(), h);
    set_positions(in.txt_ids, in.img_ids);
  }

  /// @brief Double-stream block @p b (FluxTransformerBlock): each stream modulated by its own
  /// adaLN-Zero, one joint attention, each stream's own output projection and feed-forward.
  void double_block(int b, const weight_lookup& w) {
    const std::string p = "transformer_blocks." + std::to_string(b) + ".";
    const auto h = static_cast<std::size_t>(c_.hidden());
    const auto d = static_cast<std::size_t>(c_.head_dim);
    float* txt = x_.data();
    float* img = x_.data() + nt_ * h;
    std::vector<float> mod(6 * h), cmod(6 * h);
    lin(w, p + "norm1.linear", silu_temb_.data(), h, 1, mod.data(), 6 * h);
    lin(w, p + "norm1_context.linear", silu_temb_.data(), h, 1, cmod.data(), 6 * h);
    // chunks: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
    const auto chunk = [&](std::vector<float>& m, int i) {
      return m.data() + static_cast<std::size_t>(i) * h;
    };
    std::vector<float> norm(n_ * h);
    cpu::layer_norm(txt, nt_, h, norm.data());
    cpu::layer_norm(img, ni_, h, norm.data() + nt_ * h);
    cpu::modulate(norm.data(), nt_, h, chunk(cmod, 0), chunk(cmod, 1));
    cpu::modulate(norm.data() + nt_ * h, ni_, h, chunk(mod, 0), chunk(mod, 1));
    std::vector<float> q(n_ * h), k(n_ * h), v(n_ * h);
    const float* ntxt = norm.data();
    const float* nimg = norm.data() + nt_ * h;
    lin(w, p + "attn.to_q", nimg, h, ni_, q.data() + nt_ * h, h);
    lin(w, p + "attn.to_k", nimg, h, ni_, k.data() + nt_ * h, h);
    lin(w, p + "attn.to_v", nimg, h, ni_, v.data() + nt_ * h, h);
    lin(w, p + "attn.add_q_proj", ntxt, h, nt_, q.data(), h);
    lin(w, p + "attn.add_k_proj", ntxt, h, nt_, k.data(), h);
    lin(w, p + "attn.add_v_proj", ntxt, h, nt_, v.data(), h);
    cpu::rms_norm_heads(q.data() + nt_ * h, ni_, h, d, floats(w, p + "attn.norm_q.weight"));
    cpu::rms_norm_heads(k.data() + nt_ * h, ni_, h, d, floats(w, p + "attn.norm_k.weight"));
    cpu::rms_norm_heads(q.data(), nt_, h, d, floats(w, p + "attn.norm_added_q.weight"));
    cpu::rms_norm_heads(k.data(), nt_, h, d, floats(w, p + "attn.norm_added_k.weight"));
    joint_attention(q, k, v, norm);  // norm now holds the attention output
    std::vector<float> out(n_ * h);
    lin(w, p + "attn.to_add_out", norm.data(), h, nt_, out.data(), h);
    lin(w, p + "attn.to_out.0", norm.data() + nt_ * h, h, ni_, out.data() + nt_ * h, h);
    cpu::gated_add(img, ni_, h, chunk(mod, 2), out.data() + nt_ * h, h);
    feed_forward(w, p + "ff", img, ni_, chunk(mod, 3), chunk(mod, 4), chunk(mod, 5));
    cpu::gated_add(txt, nt_, h, chunk(cmod, 2), out.data(), h);
    feed_forward(w, p + "ff_context", txt, nt_, chunk(cmod, 3), chunk(cmod, 4), chunk(cmod, 5));
  }

  /// @brief Single-stream block @p b (FluxSingleTransformerBlock): one adaLN-Zero over the joint
  /// sequence, attention and the MLP side by side, one output projection of both, gated residual.
  void single_block(int b, const weight_lookup& w) {
    const std::string p = "single_transformer_blocks." + std::to_string(b) + ".";
    const auto h = static_cast<std::size_t>(c_.hidden());
    const auto m = static_cast<std::size_t>(c_.mlp());
    const auto d = static_cast<std::size_t>(c_.head_dim);
    std::vector<float> mod(3 * h);  // shift, scale, gate
    lin(w, p + "norm.linear", silu_temb_.data(), h, 1, mod.data(), 3 * h);
    std::vector<float> norm(n_ * h);
    cpu::layer_norm(x_.data(), n_, h, norm.data());
    cpu::modulate(norm.data(), n_, h, mod.data(), mod.data() + h);
    std::vector<float> cat(n_ * (h + m));  // [attention | mlp] per token, as proj_out reads it
    lin(w, p + "proj_mlp", norm.data(), h, n_, cat.data() + h, h + m);
    for (std::size_t t = 0; t < n_; ++t) cpu::gelu_tanh(cat.data() + t * (h + m) + h, m);
    std::vector<float> q(n_ * h), k(n_ * h), v(n_ * h);
    lin(w, p + "attn.to_q", norm.data(), h, n_, q.data(), h);
    lin(w, p + "attn.to_k", norm.data(), h, n_, k.data(), h);
    lin(w, p + "attn.to_v", norm.data(), h, n_, v.data(), h);
    cpu::rms_norm_heads(q.data(), n_, h, d, floats(w, p + "attn.norm_q.weight"));
    cpu::rms_norm_heads(k.data(), n_, h, d, floats(w, p + "attn.norm_k.weight"));
    joint_attention(q, k, v, norm);
    for (std::size_t t = 0; t < n_; ++t)
      std::copy_n(norm.data() + t * h, h, cat.data() + t * (h + m));
    std::vector<float> out(n_ * h);
    lin(w, p + "proj_out", cat.data(), h + m, n_, out.data(), h);
    cpu::gated_add(x_.data(), n_, h, mod.data() + 2 * h, out.data(), h);
  }

  /// @brief norm_out (AdaLayerNormContinuous: scale, then shift) and proj_out of the image
  /// tokens: the velocity, image_tokens x in_channels.
  [[nodiscard]] std::vector<float> head(const weight_lookup& w) {
    const auto h = static_cast<std::size_t>(c_.hidden());
    std::vector<float> emb(2 * h);
    lin(w, "norm_out.linear", silu_temb_.data(), h, 1, emb.data(), 2 * h);
    std::vector<float> norm(ni_ * h);
    cpu::layer_norm(x_.data() + nt_ * h, ni_, h, norm.data());
    cpu::modulate(norm.data(), ni_, h, emb.data() + h, emb.data());
    std::vector<float> out(ni_ * static_cast<std::size_t>(c_.in_channels));
    lin(w, "proj_out", norm.data(), h, ni_, out.data(), static_cast<std::size_t>(c_.in_channels));
    return out;
  }

  [[nodiscard]] const config& model_config() const noexcept { return c_; }

 private:
  /// y = W x + b for the Linear called @p module, rows of width @p in into rows of width
  /// @p out_stride (the layer's output width unless it writes part of a wider row).
  static void lin(const weight_lookup& w, const std::string& module, const float* x, std::size_t in,
                  std::size_t rows, float* y, std::size_t out_stride) {
    const cpu::tensor_ref weight = w(module + ".weight");
    const cpu::tensor_ref bias = w(module + ".bias");
    cpu::linear(x, in, rows, weight, bias, in, bias.elements, y, out_stride);
  }
  static void lin(const weight_lookup& w, const std::string& module, const float* x, int in,
                  std::size_t rows, float* y, std::size_t out_stride) {
    lin(w, module, x, static_cast<std::size_t>(in), rows, y, out_stride);
  }

  static std::vector<float> floats(const weight_lookup& w, const std::string& name) {
    return cpu::to_floats(w(name));
  }

  /// TimestepEmbedding of the sinusoidal projection of value x 1000 (Timesteps: 256 channels,
  /// cos first, frequency shift 0), all in float as diffusers computes it.
  std::vector<float> timestep_embedding(const weight_lookup& w, const std::string& module,
                                        float value) const {
    const auto h = static_cast<std::size_t>(c_.hidden());
    constexpr std::size_t half = 128;
    const float t = value * 1000.f;
    const auto log_period = static_cast<float>(-std::log(10000.0));
    std::vector<float> proj(2 * half);
    for (std::size_t i = 0; i < half; ++i) {
      const float exponent = log_period * static_cast<float>(i) / static_cast<float>(half);
      const float arg = t * std::exp(exponent);
      proj[i] = std::cos(arg);
      proj[half + i] = std::sin(arg);
    }
    std::vector<float> a(h), out(h);
    lin(w, module + ".linear_1", proj.data(), 2 * half, 1, a.data(), h);
    cpu::silu(a.data(), h);
    lin(w, module + ".linear_2", a.data(), h, 1, out.data(), h);
    return out;
  }

  /// RoPE on q and k (every token), then attention into @p out.
  void joint_attention(std::vector<float>& q, std::vector<float>& k, const std::vector<float>& v,
                       std::vector<float>& out) const {
    const auto h = static_cast<std::size_t>(c_.hidden());
    const auto d = static_cast<std::size_t>(c_.head_dim);
    cpu::rope(q.data(), n_, h, d, cos_.data(), sin_.data());
    cpu::rope(k.data(), n_, h, d, cos_.data(), sin_.data());
    cpu::attention(q.data(), k.data(), v.data(), n_, h, d, out.data());
  }

  /// x += gate * ff(LayerNorm(x) * (1 + scale) + shift), ff = net.2(GELU-tanh(net.0.proj(.))).
  void feed_forward(const weight_lookup& w, const std::string& module, float* x, std::size_t rows,
                    const float* shift, const float* scale, const float* gate) const {
    const auto h = static_cast<std::size_t>(c_.hidden());
    const auto m = static_cast<std::size_t>(c_.mlp());
    std::vector<float> norm(rows * h), mid(rows * m), out(rows * h);
    cpu::layer_norm(x, rows, h, norm.data());
    cpu::modulate(norm.data(), rows, h, shift, scale);
    lin(w, module + ".net.0.proj", norm.data(), h, rows, mid.data(), m);
    cpu::gelu_tanh(mid.data(), mid.size());
    lin(w, module + ".net.2", mid.data(), m, rows, out.data(), h);
    cpu::gated_add(x, rows, h, gate, out.data(), h);
  }

  config c_;
  std::size_t ni_, nt_, n_;
  std::vector<float> x_;  ///< the joint sequence: text rows, then image rows
  std::vector<float> temb_, silu_temb_;
  std::vector<float> cos_, sin_;
};

}  // namespace flux
