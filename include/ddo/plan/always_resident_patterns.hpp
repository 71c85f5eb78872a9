// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The built-in always-resident module patterns (what the reference's from_env(...)
/// supplies "for common projection, embedding and normalization modules").
///
/// They are ECMAScript regexes searched in module names. They keep the model's input and output
/// projections, its embedders and its norm leaves on the GPU; the projections inside numbered
/// blocks (to_q, ff.net.2, norm1.linear, ...) are the bulk of a model and stay streamable.

#include <string>
#include <vector>

namespace ddo {
inline namespace v0 {

/// @brief Input and output projections of the whole model (not those inside blocks).
inline constexpr const char* builtin_projection_pattern =
    R"((^|\.)(proj_in|proj_out|conv_in|conv_out|img_in|txt_in|time_in|vector_in|guidance_in|final_layer|lm_head|norm_out|norm_f|ln_f)(\.|$))";
/// @brief Any module under a name component containing "embed" (x_embedder,
/// time_text_embed.timestep_embedder.linear_1, embed_tokens, pos_embed, ...).
inline constexpr const char* builtin_embedding_pattern = R"((^|\.)[^.]*embed[^.]*(\.|$))";
/// @brief Norm leaves: a module whose last component is a norm (norm, norm1, norm_q, q_norm,
/// layernorm, ln_1, ...). A norm's child projection (norm1.linear) is not matched.
inline constexpr const char* builtin_norm_pattern =
    R"((^|\.)([^.]*norm[^.]*|ln|ln_[^.]*|ln[0-9]+)$)";

/// @brief The three built-in patterns, in the order above.
[[nodiscard]] inline std::vector<std::string> default_always_resident_module_patterns() {
  return {builtin_projection_pattern, builtin_embedding_pattern, builtin_norm_pattern};
}

}  // namespace v0
}  // namespace ddo
