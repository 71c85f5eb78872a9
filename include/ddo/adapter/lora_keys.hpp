// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief LoRA key names: which factor a safetensors key holds and which base weights the
/// module it names maps to, for the PEFT/diffusers naming (`<module>.lora_A.weight`,
/// `.lora_B.weight`, optional `.alpha`; also the older `.lora.down.weight` / `.lora.up.weight`)
/// and the kohya naming (`lora_unet_<module with _>.lora_down.weight`, `.lora_up.weight`,
/// `.alpha`). Kohya FLUX.1 keys map onto diffusers' FLUX.1 names as diffusers'
/// `_convert_kohya_flux_lora_to_diffusers` (loaders/lora_conversion_utils.py) does, fused
/// projections split by rows (qkv into to_q/to_k/to_v; a single block's linear1 into q, k, v and
/// proj_mlp); any other kohya key maps onto the base weight whose name, its dots written as
/// underscores, it is (SD-family UNets in either layout, BFL-named FLUX.1, text encoders).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddo {
inline namespace v0 {

/// @brief What a key of a LoRA file holds.
enum class lora_factor { down, up, alpha };

/// @brief A key split into its module stem and the factor it holds.
struct lora_key {
  std::string
      stem;  ///< the module as the file names it ("transformer.x_embedder", "lora_unet_img_in")
  lora_factor factor = lora_factor::down;
  bool kohya = false;  ///< named `lora_down` / `lora_up` (kohya), else `lora_A` / `lora_B`
};

/// @brief Splits @p key; nullopt when it is no LoRA factor of a known naming.
[[nodiscard]] inline std::optional<lora_key> parse_lora_key(std::string_view key) {
  struct suffix {
    std::string_view text;
    lora_factor factor;
    bool kohya;
  };
  static constexpr suffix suffixes[] = {{".lora_A.weight", lora_factor::down, false},
                                        {".lora_B.weight", lora_factor::up, false},
                                        {".lora.down.weight", lora_factor::down, false},
                                        {".lora.up.weight", lora_factor::up, false},
                                        {".lora_down.weight", lora_factor::down, true},
                                        {".lora_up.weight", lora_factor::up, true},
                                        {".alpha", lora_factor::alpha, false}};
  for (const auto& s : suffixes) {
    if (key.size() <= s.text.size() || !key.ends_with(s.text)) continue;
    lora_key k{std::string(key.substr(0, key.size() - s.text.size())), s.factor, s.kohya};
    if (k.stem.starts_with("lora_unet_") || k.stem.starts_with("lora_te")) k.kohya = true;
    return k;
  }
  return std::nullopt;
}

/// @brief The stem of a PEFT/diffusers key without the pipeline or PEFT prefix
/// ("transformer.", "unet.", "base_model.model."), i.e. the base model's module name.
[[nodiscard]] inline std::string peft_module_name(std::string_view stem) {
  for (std::string_view prefix : {"base_model.model.", "transformer.", "unet."})
    if (stem.starts_with(prefix)) stem.remove_prefix(prefix.size());
  return std::string(stem);
}

/// @brief A kohya module name for a base weight name: "a.b.c.weight" -> "a_b_c" (the form after
/// `lora_unet_` / `lora_te_`); empty for a name that is no `.weight`.
[[nodiscard]] inline std::string kohya_module_name(std::string_view weight_name) {
  if (!weight_name.ends_with(".weight")) return {};
  std::string out(weight_name.substr(0, weight_name.size() - 7));
  for (auto& c : out)
    if (c == '.') c = '_';
  return out;
}

/// @brief The kohya stem without its `lora_unet_` / `lora_te_` / `lora_teN_` prefix.
[[nodiscard]] inline std::string_view kohya_body(std::string_view stem) {
  for (std::string_view prefix : {"lora_unet_", "lora_te1_", "lora_te2_", "lora_te3_", "lora_te_"})
    if (stem.starts_with(prefix)) return stem.substr(prefix.size());
  return stem;
}

/// @brief Where a kohya FLUX.1 module goes in diffusers' FLUX.1 naming: its base modules in row
/// order (the up factor is split by their rows), and whether the up factor's two row halves are
/// swapped first (the final adaLN: BFL orders shift, scale; diffusers scale, shift).
struct kohya_flux_target {
  std::vector<std::string> modules;
  bool swap_halves = false;
};

/// @brief The diffusers FLUX.1 modules of the kohya module @p body (without `lora_unet_`);
/// nullopt when @p body is no FLUX.1 module.
[[nodiscard]] inline std::optional<kohya_flux_target> kohya_flux_modules(std::string_view body) {
  const auto block = [&](std::string_view head, std::string& rest) -> std::optional<std::string> {
    if (!body.starts_with(head)) return std::nullopt;
    auto tail = body.substr(head.size());
    const auto underscore = tail.find('_');
    if (underscore == 0 || underscore == std::string_view::npos) return std::nullopt;
    for (char c : tail.substr(0, underscore))
      if (c < '0' || c > '9') return std::nullopt;
    rest = std::string(tail.substr(underscore + 1));
    return std::string(tail.substr(0, underscore));
  };
  std::string rest;
  if (auto i = block("double_blocks_", rest)) {
    const std::string p = "transformer_blocks." + *i + ".";
    static constexpr std::string_view map[][2] = {{"img_attn_proj", "attn.to_out.0"},
                                                  {"img_mlp_0", "ff.net.0.proj"},
                                                  {"img_mlp_2", "ff.net.2"},
                                                  {"img_mod_lin", "norm1.linear"},
                                                  {"txt_attn_proj", "attn.to_add_out"},
                                                  {"txt_mlp_0", "ff_context.net.0.proj"},
                                                  {"txt_mlp_2", "ff_context.net.2"},
                                                  {"txt_mod_lin", "norm1_context.linear"}};
    for (const auto& m : map)
      if (rest == m[0]) return kohya_flux_target{{p + std::string(m[1])}};
    if (rest == "img_attn_qkv")
      return kohya_flux_target{{p + "attn.to_q", p + "attn.to_k", p + "attn.to_v"}};
    if (rest == "txt_attn_qkv")
      return kohya_flux_target{
          {p + "attn.add_q_proj", p + "attn.add_k_proj", p + "attn.add_v_proj"}};
    return std::nullopt;
  }
  if (auto i = block("single_blocks_", rest)) {
    const std::string p = "single_transformer_blocks." + *i + ".";
    if (rest == "linear1")
      return kohya_flux_target{{p + "attn.to_q", p + "attn.to_k", p + "attn.to_v", p + "proj_mlp"}};
    if (rest == "linear2") return kohya_flux_target{{p + "proj_out"}};
    if (rest == "modulation_lin") return kohya_flux_target{{p + "norm.linear"}};
    return std::nullopt;
  }
  static constexpr std::string_view top[][2] = {
      {"guidance_in_in_layer", "time_text_embed.guidance_embedder.linear_1"},
      {"guidance_in_out_layer", "time_text_embed.guidance_embedder.linear_2"},
      {"img_in", "x_embedder"},
      {"txt_in", "context_embedder"},
      {"time_in_in_layer", "time_text_embed.timestep_embedder.linear_1"},
      {"time_in_out_layer", "time_text_embed.timestep_embedder.linear_2"},
      {"vector_in_in_layer", "time_text_embed.text_embedder.linear_1"},
      {"vector_in_out_layer", "time_text_embed.text_embedder.linear_2"},
      {"final_layer_linear", "proj_out"}};
  for (const auto& m : top)
    if (body == m[0]) return kohya_flux_target{{std::string(m[1])}};
  if (body == "final_layer_adaLN_modulation_1") return kohya_flux_target{{"norm_out.linear"}, true};
  return std::nullopt;
}

}  // namespace v0
}  // namespace ddo
