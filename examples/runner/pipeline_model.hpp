// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The synthetic three-component pipeline of `ddo-run --pipeline`: a text encoder, a
/// transformer and a VAE decoder, each a stack of blocks of six linear layers (attention q, k,
/// v, out: h×h; MLP up 4h×h and down h×4h; 12·h² bf16 elements per block) in engine-owned host
/// memory, filled with random non-zero values. The block families are the ones ddo infers
/// execution groups from (encoder_layers, transformer_blocks, decoder_layers). Example code
/// (examples/runner/).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ddo/model/synthetic_model.hpp"
#include "ddo/model/weight_table.hpp"
#include "runner/synthetic_forward.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief Sizes of the synthetic pipeline and of the work it runs per image.
struct pipeline_shape {
  std::uint32_t hidden = 3072;
  std::uint32_t text_encoder_blocks = 12;
  std::uint32_t transformer_blocks = 24;
  std::uint32_t vae_blocks = 4;
  std::int64_t text_tokens = 512;  ///< rows the text encoder multiplies
  std::int64_t tokens = 4608;      ///< rows the transformer and the VAE multiply
  int steps = 4;                   ///< transformer passes per image
};

/// @brief One component: its weights, their host bytes and how the engine runs it per image.
struct pipeline_model_component {
  std::string name;            ///< "text_encoder", "transformer", "vae"
  weight_table table;
  std::unique_ptr<std::byte[]> storage;  ///< every weight's bytes, back to back
  std::vector<float> alpha;    ///< per weight: the GEMM scale (variance_preserving_alpha)
  std::int64_t rows = 1;       ///< tokens each GEMM multiplies
  int passes = 1;              ///< passes over all groups per image (the transformer: steps)
};

/// @brief The three components, in pipeline order.
class pipeline_model {
 public:
  /// @brief Generates the weights (one thread per component). @throws usage_error for a zero size.
  explicit pipeline_model(const pipeline_shape& shape, std::uint64_t seed = 0x91e1) {
    DDO_EXPECTS(shape.hidden > 0 && shape.text_encoder_blocks > 0 && shape.transformer_blocks > 0 &&
                    shape.vae_blocks > 0 && shape.text_tokens > 0 && shape.tokens > 0 && shape.steps > 0,
                "pipeline model: every size must be at least 1");
    add("text_encoder", "encoder_layers", shape.text_encoder_blocks, shape.text_tokens, 1, shape.hidden);
    add("transformer", "transformer_blocks", shape.transformer_blocks, shape.tokens, shape.steps, shape.hidden);
    add("vae", "decoder_layers", shape.vae_blocks, shape.tokens, 1, shape.hidden);
    std::vector<std::thread> fillers;
    for (std::size_t c = 0; c < components_.size(); ++c)
      fillers.emplace_back([this, c, seed] { fill(components_[c], seed + c); });
    for (auto& t : fillers) t.join();
  }

  [[nodiscard]] std::vector<pipeline_model_component>& components() noexcept { return components_; }
  [[nodiscard]] const std::vector<pipeline_model_component>& components() const noexcept {
    return components_;
  }
  /// @brief The widest GEMM dimension (4h): the engine's activation width.
  [[nodiscard]] std::int64_t width() const noexcept { return width_; }
  [[nodiscard]] std::uint64_t total_bytes() const noexcept {
    std::uint64_t b = 0;
    for (const auto& c : components_) b += c.table.total_bytes();
    return b;
  }

 private:
  void add(const char* name, const std::string& family, std::uint32_t blocks, std::int64_t rows,
           int passes, std::uint32_t hidden) {
    pipeline_model_component c;
    c.name = name;
    c.rows = rows;
    c.passes = passes;
    const std::int64_t h = hidden, m = 4 * static_cast<std::int64_t>(hidden);
    width_ = std::max(width_, m);
    struct layer {
      const char* name;
      std::int64_t out, in;
    };
    const layer layers[] = {{"attn.to_q", h, h}, {"attn.to_k", h, h},   {"attn.to_v", h, h},
                            {"attn.to_out", h, h}, {"ff.up", m, h}, {"ff.down", h, m}};
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> offsets;
    for (std::uint32_t b = 0; b < blocks; ++b)
      for (const auto& l : layers) {
        weight_info w;
        w.name = family + "." + std::to_string(b) + "." + l.name + ".weight";
        w.kind = module_kind::linear;
        w.type = dtype::bf16;
        w.shape = {l.out, l.in};
        c.table.add(w);
        offsets.push_back(offset);
        offset += static_cast<std::uint64_t>(l.out * l.in) * 2;
      }
    c.storage.reset(new std::byte[offset]);  // not zeroed: fill() writes every byte once
    for (std::size_t i = 0; i < c.table.size(); ++i)
      c.table[i].source = host_source{c.storage.get() + offsets[i]};
    components_.push_back(std::move(c));
  }

  static void fill(pipeline_model_component& c, std::uint64_t seed) {
    splitmix64 rng{seed};
    c.alpha.resize(c.table.size());
    for (std::size_t i = 0; i < c.table.size(); ++i) {
      auto& w = c.table[i];
      auto* data = const_cast<std::byte*>(std::get<host_source>(w.source).data);
      fill_random_nonzero(std::span<std::byte>(data, w.bytes), w.type, rng);
      c.alpha[i] = variance_preserving_alpha(data, w.type, w.shape[0], w.shape[1]);
    }
  }

  std::vector<pipeline_model_component> components_;
  std::int64_t width_ = 1;
};

}  // namespace runner
}  // namespace v0
}  // namespace ddo
