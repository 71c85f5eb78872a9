// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The sizes of a FLUX.1 transformer as diffusers' FluxTransformer2DModel configures it
/// (FLUX.1-dev's by default), read back from a weight table's published names and shapes, and
/// the weight names and shapes a configuration has. Example code (examples/flux/).

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/model/synthetic_model.hpp"
#include "ddo/model/weight_table.hpp"

namespace flux {

/// @brief FluxTransformer2DModel's configuration (patch size 1, MLP ratio 4, theta 10000).
struct config {
  int double_blocks = 19;               ///< num_layers
  int single_blocks = 38;               ///< num_single_layers
  int heads = 24;                       ///< num_attention_heads
  int head_dim = 128;                   ///< attention_head_dim
  int in_channels = 64;                 ///< packed latent channels (16 VAE channels x 2 x 2 patch)
  int text_dim = 4096;                  ///< joint_attention_dim (T5-XXL's width)
  int pooled_dim = 768;                 ///< pooled_projection_dim (CLIP-L's pooled width)
  bool guidance = true;                 ///< guidance_embeds (FLUX.1-dev: yes; schnell: no)
  std::array<int, 3> axes{16, 56, 56};  ///< axes_dims_rope, summing to head_dim

  [[nodiscard]] int hidden() const noexcept { return heads * head_dim; }
  [[nodiscard]] int mlp() const noexcept { return 4 * hidden(); }
};

/// @brief The tests' tiny model (tools/flux_reference.py's CONFIG): 2 double + 2 single
/// blocks, 2 heads x 64, RoPE axes (8, 28, 28), text width 96, pooled 48, guidance.
[[nodiscard]] inline config tiny_config() {
  config c;
  c.double_blocks = 2;
  c.single_blocks = 2;
  c.heads = 2;
  c.head_dim = 64;
  c.text_dim = 96;
  c.pooled_dim = 48;
  c.axes = {8, 28, 28};
  return c;
}

/// @brief Refuses a configuration the forward cannot run, naming the field.
inline void validate(const config& c) {
  const auto positive = [](int v, const char* field) {
    if (v <= 0)
      throw ddo::usage_error(std::string("flux config: ") + field + " must be positive, got " +
                             std::to_string(v));
  };
  positive(c.double_blocks + c.single_blocks, "double_blocks + single_blocks");
  if (c.double_blocks < 0 || c.single_blocks < 0)
    throw ddo::usage_error("flux config: block counts cannot be negative");
  positive(c.heads, "heads");
  positive(c.head_dim, "head_dim");
  positive(c.in_channels, "in_channels");
  positive(c.text_dim, "text_dim");
  positive(c.pooled_dim, "pooled_dim");
  int sum = 0;
  for (int a : c.axes) {
    if (a <= 0 || a % 2 != 0)
      throw ddo::usage_error("flux config: each RoPE axis must be a positive even number, got " +
                             std::to_string(a));
    sum += a;
  }
  if (sum != c.head_dim)
    throw ddo::usage_error("flux config: the RoPE axes (" + std::to_string(c.axes[0]) + ", " +
                           std::to_string(c.axes[1]) + ", " + std::to_string(c.axes[2]) +
                           ") must sum to head_dim " + std::to_string(c.head_dim));
}

/// @brief One weight of a configuration: its published diffusers name and shape.
struct weight_spec {
  std::string name;
  std::vector<std::int64_t> shape;
};

/// @brief Every weight of @p c, in execution order, by its published diffusers name (the
/// library's list: ddo::flux_transformer_specs, which the synthetic flux shape also writes).
[[nodiscard]] inline std::vector<weight_spec> weight_specs(const config& c) {
  ddo::flux_transformer_dims dims;
  dims.double_blocks = c.double_blocks;
  dims.single_blocks = c.single_blocks;
  dims.hidden = c.hidden();
  dims.head_dim = c.head_dim;
  dims.mlp = c.mlp();
  dims.in_channels = c.in_channels;
  dims.text_dim = c.text_dim;
  dims.pooled_dim = c.pooled_dim;
  dims.guidance = c.guidance;
  std::vector<weight_spec> s;
  for (auto& spec : ddo::flux_transformer_specs(dims, ddo::dtype::bf16))
    s.push_back({std::move(spec.name), std::move(spec.shape)});
  return s;
}

/// @brief The configuration a weight table holds, read from its published names and shapes
/// (the RoPE axes are not in the weights: @p axes), checked against weight_specs: a missing
/// weight or a wrong shape is an error naming it.
[[nodiscard]] inline config config_of(const ddo::weight_table& table, std::array<int, 3> axes) {
  const auto shape = [&](const std::string& name) -> const std::vector<std::int64_t>& {
    const auto w = table.find(name);
    if (!w)
      throw ddo::usage_error("flux model: no weight '" + name +
                             "' (FluxTransformer2DModel's published names are expected)");
    return table[*w].shape;
  };
  config c;
  const auto count = [&](const std::string& prefix) {
    int n = 0;
    while (table.find(prefix + std::to_string(n) + ".attn.to_q.weight")) ++n;
    return n;
  };
  c.double_blocks = count("transformer_blocks.");
  c.single_blocks = count("single_transformer_blocks.");
  const std::string first_norm = c.double_blocks > 0
                                     ? "transformer_blocks.0.attn.norm_q.weight"
                                     : "single_transformer_blocks.0.attn.norm_q.weight";
  c.head_dim = static_cast<int>(shape(first_norm).at(0));
  const auto& x = shape("x_embedder.weight");
  c.in_channels = static_cast<int>(x.at(1));
  if (x.at(0) % c.head_dim != 0)
    throw ddo::usage_error("flux model: hidden size " + std::to_string(x.at(0)) +
                           " is not a multiple of the head size " + std::to_string(c.head_dim));
  c.heads = static_cast<int>(x.at(0) / c.head_dim);
  c.text_dim = static_cast<int>(shape("context_embedder.weight").at(1));
  c.pooled_dim = static_cast<int>(shape("time_text_embed.text_embedder.linear_1.weight").at(1));
  c.guidance = table.find("time_text_embed.guidance_embedder.linear_1.weight").has_value();
  c.axes = axes;
  validate(c);
  for (const auto& spec : weight_specs(c))
    if (shape(spec.name) != spec.shape)
      throw ddo::usage_error("flux model: weight '" + spec.name + "' has the wrong shape for a " +
                             std::to_string(c.heads) + " x " + std::to_string(c.head_dim) +
                             " model");
  return c;
}

}  // namespace flux
