// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Implementation of the synthetic model writer (model/synthetic_model.hpp).

#include <algorithm>
#include <cstring>
#include <tuple>

// Part of ddo/model/synthetic_model.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {

DDO_INLINE std::vector<safetensors_tensor_spec> flux_transformer_specs(
    const flux_transformer_dims& d, dtype type) {
  DDO_EXPECTS(d.double_blocks >= 0 && d.single_blocks >= 0 && d.hidden > 0 && d.head_dim > 0 &&
                  d.mlp > 0 && d.in_channels > 0 && d.text_dim > 0 && d.pooled_dim > 0,
              "flux_transformer_specs: block counts must be >= 0 and every width > 0");
  const std::int64_t h = d.hidden, m = d.mlp;
  std::vector<safetensors_tensor_spec> specs;
  auto linear = [&](const std::string& module, std::int64_t out, std::int64_t in) {
    specs.push_back({module + ".weight", type, {out, in}});
    specs.push_back({module + ".bias", type, {out}});
  };
  auto norm = [&](const std::string& module) {
    specs.push_back({module + ".weight", type, {d.head_dim}});
  };
  linear("x_embedder", h, d.in_channels);
  linear("time_text_embed.timestep_embedder.linear_1", h, 256);
  linear("time_text_embed.timestep_embedder.linear_2", h, h);
  if (d.guidance) {
    linear("time_text_embed.guidance_embedder.linear_1", h, 256);
    linear("time_text_embed.guidance_embedder.linear_2", h, h);
  }
  linear("time_text_embed.text_embedder.linear_1", h, d.pooled_dim);
  linear("time_text_embed.text_embedder.linear_2", h, h);
  linear("context_embedder", h, d.text_dim);
  for (std::int64_t b = 0; b < d.double_blocks; ++b) {
    const std::string p = "transformer_blocks." + std::to_string(b) + ".";
    linear(p + "norm1.linear", 6 * h, h);
    linear(p + "norm1_context.linear", 6 * h, h);
    for (const char* n : {"to_q", "to_k", "to_v"}) linear(p + "attn." + n, h, h);
    norm(p + "attn.norm_q");
    norm(p + "attn.norm_k");
    for (const char* n : {"add_q_proj", "add_k_proj", "add_v_proj"}) linear(p + "attn." + n, h, h);
    norm(p + "attn.norm_added_q");
    norm(p + "attn.norm_added_k");
    linear(p + "attn.to_out.0", h, h);
    linear(p + "attn.to_add_out", h, h);
    linear(p + "ff.net.0.proj", m, h);
    linear(p + "ff.net.2", h, m);
    linear(p + "ff_context.net.0.proj", m, h);
    linear(p + "ff_context.net.2", h, m);
  }
  for (std::int64_t b = 0; b < d.single_blocks; ++b) {
    const std::string p = "single_transformer_blocks." + std::to_string(b) + ".";
    linear(p + "norm.linear", 3 * h, h);
    for (const char* n : {"to_q", "to_k", "to_v"}) linear(p + "attn." + n, h, h);
    norm(p + "attn.norm_q");
    norm(p + "attn.norm_k");
    linear(p + "proj_mlp", m, h);
    linear(p + "proj_out", h, h + m);
  }
  linear("norm_out.linear", 2 * h, h);
  linear("proj_out", d.in_channels, h);
  return specs;
}

DDO_INLINE std::vector<safetensors_tensor_spec> synthetic_model_specs(
    const synthetic_model_options& o) {
  DDO_EXPECTS(o.blocks > 0 && o.hidden > 0 && o.mlp_ratio > 0,
              "synthetic model: blocks, hidden and mlp ratio must be positive");
  DDO_EXPECTS(o.shape == synthetic_shape::flux || o.single_blocks == 0,
              "synthetic model: single-stream blocks (" + std::to_string(o.single_blocks) +
                  ") need the flux shape; the dit shape has one kind of block");
  DDO_EXPECTS(
      o.type == dtype::bf16 || o.type == dtype::f16 || o.type == dtype::f32,
      "synthetic model: dtype must be bf16, fp16 or fp32, got " + std::string(to_string(o.type)));
  const std::int64_t h = o.hidden;
  const std::int64_t m = h * static_cast<std::int64_t>(o.mlp_ratio);
  const std::int64_t head = h < 128 ? h : 128;
  if (o.shape == synthetic_shape::flux) {
    // FLUX.1's own list, with FLUX.1-dev's text (4096), pooled (768) and latent (64) widths.
    flux_transformer_dims dims;
    dims.double_blocks = o.blocks;
    dims.single_blocks = o.single_blocks;
    dims.hidden = h;
    dims.head_dim = head;
    dims.mlp = m;
    return flux_transformer_specs(dims, o.type);
  }
  std::vector<safetensors_tensor_spec> specs;
  auto linear = [&](const std::string& module, std::int64_t out, std::int64_t in) {
    specs.push_back({module + ".weight", o.type, {out, in}});
    specs.push_back({module + ".bias", o.type, {out}});
  };
  auto vec = [&](const std::string& name, std::int64_t n) { specs.push_back({name, o.type, {n}}); };
  {  // the dit shape
    linear("x_embedder", h, 64);
    linear("context_embedder", h, 4096);
    linear("time_text_embed.timestep_embedder.linear_1", h, 256);
    linear("time_text_embed.timestep_embedder.linear_2", h, h);
    for (std::uint32_t b = 0; b < o.blocks; ++b) {
      const std::string p = "transformer_blocks." + std::to_string(b) + ".";
      vec(p + "norm1.weight", h);
      linear(p + "attn.to_q", h, h);
      linear(p + "attn.to_k", h, h);
      linear(p + "attn.to_v", h, h);
      vec(p + "attn.norm_q.weight", head);
      vec(p + "attn.norm_k.weight", head);
      linear(p + "attn.to_out.0", h, h);
      vec(p + "norm2.weight", h);
      linear(p + "ff.net.0.proj", m, h);
      linear(p + "ff.net.2", h, m);
    }
  }
  linear("norm_out.linear", 2 * h, h);
  linear("proj_out", 64, h);
  return specs;
}

namespace detail {

/// A flux-shape tensor's place in FluxTransformer2DModel's state dict: (section, block, module
/// within the block), in the registration order the file comment lists.
[[nodiscard]] inline std::tuple<std::size_t, std::uint64_t, std::size_t> flux_state_dict_key(
    std::string_view name) {
  static constexpr std::string_view sections[] = {
      "time_text_embed.timestep_embedder.", "time_text_embed.guidance_embedder.",
      "time_text_embed.text_embedder.",     "context_embedder.",
      "x_embedder.",                        "transformer_blocks.",
      "single_transformer_blocks.",         "norm_out.",
      "proj_out."};
  static constexpr std::string_view double_block[] = {
      "norm1.linear.",      "norm1_context.linear.", "attn.norm_q.",        "attn.norm_k.",
      "attn.to_q.",         "attn.to_k.",            "attn.to_v.",          "attn.add_k_proj.",
      "attn.add_v_proj.",   "attn.add_q_proj.",      "attn.to_out.0.",      "attn.to_add_out.",
      "attn.norm_added_q.", "attn.norm_added_k.",    "ff.net.0.proj.",      "ff.net.2.",
      "ff_context.net.0.proj.", "ff_context.net.2."};
  static constexpr std::string_view single_block[] = {
      "norm.linear.", "proj_mlp.",    "proj_out.",  "attn.norm_q.",
      "attn.norm_k.", "attn.to_q.",   "attn.to_k.", "attn.to_v."};
  for (std::size_t s = 0; s < std::size(sections); ++s) {
    if (!name.starts_with(sections[s])) continue;
    if (s != 5 && s != 6) return {s, 0, 0};
    std::string_view rest = name.substr(sections[s].size());
    std::uint64_t block = 0;
    std::size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9')
      block = block * 10 + static_cast<std::uint64_t>(rest[digits++] - '0');
    rest = rest.substr(std::min(rest.size(), digits + 1));
    const std::span<const std::string_view> modules =
        s == 5 ? std::span<const std::string_view>(double_block) : std::span<const std::string_view>(single_block);
    for (std::size_t m = 0; m < modules.size(); ++m)
      if (rest.starts_with(modules[m])) return {s, block, m};
  }
  throw usage_error("synthetic model: '" + std::string(name) +
                    "' has no place in FluxTransformer2DModel's state dict");
}

}  // namespace detail

DDO_INLINE std::vector<std::vector<safetensors_tensor_spec>> diffusers_shards(
    const synthetic_model_options& o) {
  DDO_EXPECTS(o.shape == synthetic_shape::flux,
              "synthetic model: the diffusers layout is FluxTransformer2DModel's; it needs the "
              "flux shape, got " + std::string(to_string(o.shape)));
  DDO_EXPECTS(o.shard_max_bytes > 0, "synthetic model: the diffusers layout's shard_max_bytes "
                                     "must be positive");
  auto specs = synthetic_model_specs(o);
  // Stable: a module's weight stays before its bias, as nn.Linear registers them.
  std::stable_sort(specs.begin(), specs.end(), [](const auto& a, const auto& b) {
    return detail::flux_state_dict_key(a.name) < detail::flux_state_dict_key(b.name);
  });
  std::vector<std::vector<safetensors_tensor_spec>> shards(1);
  std::uint64_t size = 0;
  for (auto& spec : specs) {
    // huggingface_hub's rule: a tensor that would take the shard over the limit starts the next.
    if (!shards.back().empty() && size + spec.bytes() > o.shard_max_bytes) {
      shards.emplace_back();
      size = 0;
    }
    size += spec.bytes();
    shards.back().push_back(std::move(spec));
  }
  for (auto& shard : shards)
    std::sort(shard.begin(), shard.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return shards;
}

DDO_INLINE void fill_random_nonzero(std::span<std::byte> out, dtype type, splitmix64& rng) {
  const std::size_t size = size_of(type);
  DDO_EXPECTS(size != 0 && out.size() % size == 0, "fill_random_nonzero: partial element");
  std::byte* p = out.data();
  const std::size_t n = out.size() / size;
  if (type == dtype::f32) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t r = rng.next();
      // sign | exponent 117..122 (2^-10 .. 2^-5 scale) | 23-bit mantissa
      const auto bits = static_cast<std::uint32_t>(((r >> 63) << 31) |
                                                   ((117 + (r >> 32) % 6) << 23) | (r & 0x7fffffu));
      std::memcpy(p + 4 * i, &bits, 4);
    }
    return;
  }
  const bool bf16 = type == dtype::bf16;
  std::size_t i = 0;
  while (i < n) {
    const std::uint64_t r = rng.next();
    for (int k = 0; k < 4 && i < n; ++k, ++i) {
      const auto r16 = static_cast<std::uint16_t>(r >> (16 * k));
      std::uint16_t bits;
      if (bf16) {
        // sign | exponent 117..124 | 7-bit mantissa
        bits = static_cast<std::uint16_t>((r16 & 0x8000u) | ((117u + ((r16 >> 7) & 7u)) << 7) |
                                          (r16 & 0x7fu));
      } else {
        // fp16: sign | exponent 5..12 (bias 15) | 10-bit mantissa
        bits = static_cast<std::uint16_t>((r16 & 0x8000u) | ((5u + ((r16 >> 10) & 7u)) << 10) |
                                          (r16 & 0x3ffu));
      }
      std::memcpy(p + 2 * i, &bits, 2);
    }
  }
}

namespace detail {

/// Writes each shard's tensors, filled from one splitmix64 stream seeded by o.seed.
DDO_INLINE void write_synthetic_files(
    const synthetic_model_options& o, const synthetic_model_result& result,
    const std::vector<std::vector<safetensors_tensor_spec>>& shard_specs) {
  splitmix64 rng{o.seed};
  std::vector<std::byte> chunk(32 * 1024 * 1024);
  const std::vector<std::pair<std::string, std::string>> metadata = {
      {"format", "pt"}, {"generator", "ddo-make-model"}};
  for (std::size_t s = 0; s < result.files.size(); ++s) {
    safetensors_writer writer(result.files[s], shard_specs[s], metadata);
    std::uint64_t left = writer.data_bytes();
    while (left > 0) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk.size()));
      // Chunks are multiples of 4 bytes except the last, and tensor sizes are multiples of the
      // element size, so elements never straddle chunks.
      const std::span<std::byte> part(chunk.data(), n);
      fill_random_nonzero(part, o.type, rng);
      writer.write(part);
      left -= n;
    }
    writer.finish();
  }
}

}  // namespace detail

DDO_INLINE synthetic_model_result write_synthetic_model(const synthetic_model_options& o) {
  DDO_EXPECTS(!o.output.empty(), "synthetic model: an output path is needed");
  DDO_EXPECTS(o.shards >= 1, "synthetic model: shards must be at least 1");
  const bool diffusers = o.layout == synthetic_layout::diffusers;
  DDO_EXPECTS(!diffusers || o.shards == 1,
              "synthetic model: the diffusers layout splits at shard_max_bytes; shards (" +
                  std::to_string(o.shards) + ") applies to the execution layout");
  const auto specs = synthetic_model_specs(o);
  DDO_EXPECTS(o.shards <= specs.size(), "synthetic model: " + std::to_string(o.shards) +
                                            " shards for only " + std::to_string(specs.size()) +
                                            " tensors");
  synthetic_model_result result;
  result.tensors = specs.size();
  for (const auto& s : specs) result.tensor_bytes += s.bytes();

  // Shards: the diffusers layout's at shard_max_bytes, in a folder; the execution layout's
  // split the execution-ordered tensors into contiguous runs of about equal bytes, their files
  // beside the index named by the output path.
  std::vector<std::vector<safetensors_tensor_spec>> shard_specs(o.shards);
  std::filesystem::path folder;
  std::string stem, index;
  if (diffusers) {
    shard_specs = diffusers_shards(o);
    folder = o.output;
    std::filesystem::create_directories(folder);
    stem = diffusers_weights_name.substr(0, diffusers_weights_name.find('.'));
    index = (folder / diffusers_index_name).string();
  } else {
    std::uint64_t done = 0;
    std::size_t shard = 0;
    for (std::size_t t = 0; t < specs.size(); ++t) {
      const std::size_t left_tensors = specs.size() - t;
      const std::size_t left_shards = o.shards - shard;
      // Move on once this shard has its share, keeping at least one tensor per remaining shard.
      if (!shard_specs[shard].empty() && shard + 1 < o.shards &&
          (done * o.shards >= result.tensor_bytes * (shard + 1) || left_tensors < left_shards))
        ++shard;
      shard_specs[shard].push_back(specs[t]);
      done += specs[t].bytes();
    }
    folder = std::filesystem::path(o.output).parent_path();
    stem = std::filesystem::path(o.output).filename().string();
    for (std::string_view suffix : {".safetensors.index.json", ".index.json", ".json"})
      if (stem.size() > suffix.size() && stem.ends_with(suffix)) {
        stem.resize(stem.size() - suffix.size());
        break;
      }
    index = o.output;
  }
  // One file: the diffusers file in its folder, or the output path itself. Several:
  // "<stem>-00001-of-0000N.safetensors" and an index.
  const auto count = static_cast<unsigned>(shard_specs.size());
  std::vector<std::pair<std::string, std::string>> weight_map;
  char number[64];
  for (unsigned s = 0; s < count; ++s) {
    std::snprintf(number, sizeof number, "-%05u-of-%05u.safetensors", s + 1, count);
    const std::string name = stem + number;
    result.files.push_back(count > 1   ? (folder / name).string()
                           : diffusers ? (folder / diffusers_weights_name).string()
                                       : o.output);
    for (const auto& spec : shard_specs[s]) weight_map.emplace_back(spec.name, name);
  }
  if (count > 1) {
    if (diffusers) std::sort(weight_map.begin(), weight_map.end());
    result.index = index;
  }
  detail::write_synthetic_files(o, result, shard_specs);
  if (count > 1) write_safetensors_index(result.index, weight_map, result.tensor_bytes);
  return result;
}


}  // namespace v0
}  // namespace ddo
