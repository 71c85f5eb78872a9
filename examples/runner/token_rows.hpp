// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief How many activation rows each linear weight of the synthetic compute multiplies, so the
/// two kinds of a Flux-like model's blocks differ in compute per byte as FLUX.1's do.
///
/// In FLUX.1 a double-stream block keeps the image and the text tokens apart: its image weights
/// see the image tokens, its text weights (`add_*_proj`, `to_add_out`, `ff_context`,
/// `norm1_context`) only the 512 text tokens; its adaLN modulations (`norm1.linear`, ...) and the
/// time embedders run once per sample (one row). A single-stream block runs every weight but its
/// modulation over all the tokens. So a double block, 2.4x the bytes of a single block, computes
/// only about 1.1x as long: its compute per byte is about half the single block's — the
/// difference an overlap-aware planner has to see. The DiT shape's weights all see every token
/// (its only one-row weights are the time embedder and the output modulation).
///
/// The runner's `--tokens T` counts the image tokens; the text stream is T / 8 rows (512 beside
/// FLUX.1's 4096 image tokens at 1024²), at least one. Example code (examples/runner/).

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief Which rows a weight multiplies (see the file comment).
enum class token_stream : unsigned char {
  image,       ///< every token (T rows)
  text,        ///< the text tokens (T / 8 rows)
  modulation,  ///< one row per sample (adaLN modulations, time embedders)
};

/// @brief The stream of the weight named @p name (a diffusers-style tensor name).
[[nodiscard]] constexpr token_stream token_stream_of(std::string_view name) noexcept {
  constexpr std::array<std::string_view, 5> modulation = {
      "norm1.linear.", "norm1_context.linear.", "norm.linear.", "norm_out.linear.",
      "time_text_embed."};
  constexpr std::array<std::string_view, 5> text = {"add_q_proj.", "add_k_proj.", "add_v_proj.",
                                                    "to_add_out.", "ff_context."};
  for (auto m : modulation)
    if (name.find(m) != std::string_view::npos) return token_stream::modulation;
  for (auto t : text)
    if (name.find(t) != std::string_view::npos) return token_stream::text;
  if (name.starts_with("context_embedder.")) return token_stream::text;
  return token_stream::image;
}

/// @brief Rows of the GEMM of a weight in stream @p s when the run has @p tokens image tokens.
[[nodiscard]] constexpr std::int64_t token_rows(token_stream s, std::int64_t tokens) noexcept {
  switch (s) {
    case token_stream::modulation: return 1;
    case token_stream::text: return std::max<std::int64_t>(1, tokens / 8);
    case token_stream::image: return tokens;
  }
  return tokens;
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
