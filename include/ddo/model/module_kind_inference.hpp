// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Inferring a module's kind (linear, embedding, norm, conv, other) from its name and the
/// shape of its weight, with engine overrides.
///
/// Rules, applied to a module's leaf name (the last dot-separated component of the module name)
/// and the rank of its representative tensor (its `.weight`, else its highest-rank tensor):
///  1. rank ≥ 3 → conv (conv1d/2d/3d kernels) when every dimension after the second is a kernel
///     extent (at most 16) or the leaf names a conv; other rank-3+ weights (Wan's modulation
///     [1, 6, 5120], a stacked parameter) → other;
///  2. a norm leaf ("norm", "norm1", "norm_q", "q_norm", "layernorm", "ln", "ln_1", "ln_f", any
///     leaf containing "norm") with rank ≤ 1 → norm;
///  3. rank 2 and an embedding leaf ("embed_tokens", "wte", "wpe", "tok_embeddings", "shared",
///     "embed", "emb", or ending in "embedding"/"embeddings") → embedding;
///  4. any other rank-2 weight → linear (the projection names to_q, to_out.0, ff.net.2, proj_out,
///     x_embedder, q_proj, fc1, ... all land here: a 2-D weight is a dense projection);
///  5. anything else → other.
/// Overrides are regular expressions (core/pattern.hpp's dialect) searched in the module name; the
/// first matching override wins over inference.

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/module_kind.hpp"
#include "ddo/core/pattern.hpp"
#include "ddo/model/weight_table.hpp"

namespace ddo {
inline namespace v0 {

/// @brief An engine's correction: modules whose name matches @p pattern have kind @p kind.
struct module_kind_override {
  std::string pattern;  ///< regular expression (core/pattern.hpp), searched in the module name
  module_kind kind = module_kind::other;
};

/// @brief The last dot-separated component of a module name ("to_q" of "blocks.0.attn.to_q").
[[nodiscard]] inline std::string_view module_leaf(std::string_view module_name) noexcept {
  const auto dot = module_name.rfind('.');
  return dot == std::string_view::npos ? module_name : module_name.substr(dot + 1);
}

namespace detail {
[[nodiscard]] inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
[[nodiscard]] inline bool is_norm_leaf(std::string_view leaf_in) {
  const std::string leaf = ascii_lower(leaf_in);
  if (leaf.find("norm") != std::string::npos) return true;
  if (leaf == "ln" || leaf.starts_with("ln_")) return true;
  if (leaf.size() > 2 && leaf.starts_with("ln") &&
      std::all_of(leaf.begin() + 2, leaf.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return true;
  return false;
}
[[nodiscard]] inline bool is_embedding_leaf(std::string_view leaf_in) {
  const std::string leaf = ascii_lower(leaf_in);
  for (std::string_view n :
       {"embed_tokens", "wte", "wpe", "tok_embeddings", "shared", "embed", "emb"})
    if (leaf == n) return true;
  return leaf.ends_with("embedding") || leaf.ends_with("embeddings");
}
}  // namespace detail

/// @brief The kind of a module called @p module_name whose representative tensor has @p rank
/// dimensions (see the rules in this header's description; rank ≥ 3 counts as a kernel).
[[nodiscard]] inline module_kind infer_module_kind(std::string_view module_name, std::size_t rank) {
  const std::string_view leaf = module_leaf(module_name);
  if (rank >= 3) return module_kind::conv;
  if (rank <= 1 && detail::is_norm_leaf(leaf)) return module_kind::norm;
  if (rank == 2)
    return detail::is_embedding_leaf(leaf) ? module_kind::embedding : module_kind::linear;
  return module_kind::other;
}

/// @brief As above, from the representative tensor's @p shape: a rank-3+ tensor is a conv
/// kernel only when its trailing extents are kernel-sized or its leaf names a conv.
[[nodiscard]] inline module_kind infer_module_kind(std::string_view module_name,
                                                   std::span<const std::int64_t> shape) {
  if (shape.size() >= 3) {
    const bool kernel = std::all_of(shape.begin() + 2, shape.end(),
                                    [](std::int64_t d) { return d >= 1 && d <= 16; });
    const bool named =
        detail::ascii_lower(module_leaf(module_name)).find("conv") != std::string::npos;
    return kernel || named ? module_kind::conv : module_kind::other;
  }
  return infer_module_kind(module_name, shape.size());
}

/// @brief Sets the kind of the weights [first, table.size()) of @p table: per module, inferred
/// from the module's representative tensor, then corrected by the first matching override.
/// @throws config_error (source "engine", key "module_kind_override") for an invalid regex.
inline void infer_module_kinds(weight_table& table,
                               std::span<const module_kind_override> overrides = {},
                               std::size_t first = 0) {
  std::vector<ddo::pattern> compiled;
  compiled.reserve(overrides.size());
  for (const auto& o : overrides) {
    try {
      compiled.emplace_back(o.pattern);
    } catch (const pattern_error& e) {
      throw config_error(origin::engine, "module_kind_override",
                         "module kind override pattern '" + o.pattern +
                             "' is not a valid regular expression: " + e.what());
    }
  }
  // Representative rank per module: its ".weight" tensor's, else the highest rank seen.
  // module -> (has .weight, representative shape)
  std::map<std::string, std::pair<bool, const std::vector<std::int64_t>*>> shape_of;
  for (std::size_t i = first; i < table.size(); ++i) {
    const weight_info& w = table[i];
    auto& [has_weight, shape] = shape_of[w.module_name];
    const bool is_weight = w.name.size() >= 7 && std::string_view(w.name).ends_with(".weight");
    if (is_weight && !has_weight) {
      has_weight = true;
      shape = &w.shape;
    } else if (!has_weight && (shape == nullptr || w.shape.size() > shape->size())) {
      shape = &w.shape;
    }
  }
  std::map<std::string, module_kind> kind_of;
  for (const auto& [module, info] : shape_of) {
    module_kind kind = infer_module_kind(module, std::span<const std::int64_t>(*info.second));
    for (std::size_t o = 0; o < compiled.size(); ++o)
      if (compiled[o].search(module)) {
        kind = overrides[o].kind;
        break;
      }
    kind_of.emplace(module, kind);
  }
  for (std::size_t i = first; i < table.size(); ++i)
    table[i].kind = kind_of.at(table[i].module_name);
}

}  // namespace v0
}  // namespace ddo
