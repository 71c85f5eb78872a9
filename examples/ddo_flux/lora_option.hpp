// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux's --lora FILE[:SCALE]: LoRA files loaded onto the model's table (PEFT/diffusers
/// or kohya naming, ddo/adapter/lora_adapter.hpp) and attached to the offloader after setup, in
/// the order given; --check merges the same adapters into its all-resident weights with the same
/// function. Example code (docs/adapters.md).

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ddo/adapter/float_bits.hpp"
#include "ddo/adapter/lora_adapter.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/model/safetensors.hpp"

namespace ddo_flux {

/// @brief One --lora: its file (also its name on the offloader), its scale, what it holds.
struct lora_choice {
  std::string file;
  float scale = 1.0f;
  std::shared_ptr<const ddo::lora_adapter> adapter;
};

/// @brief FILE[:SCALE]: the scale after the last ':' when it reads as a number (a path may hold
/// ':' too), else 1. @throws ddo::usage_error for an empty file or a scale that is no finite
/// number.
inline std::pair<std::string, float> parse_lora_text(const std::string& text) {
  std::string file = text;
  float scale = 1.0f;
  if (const auto colon = text.rfind(':'); colon != std::string::npos) {
    const std::string tail = text.substr(colon + 1);
    char* end = nullptr;
    const double v = std::strtod(tail.c_str(), &end);
    const bool number = !tail.empty() && end == tail.c_str() + tail.size();
    if (number) {
      if (!(v > -1e6 && v < 1e6))
        throw ddo::usage_error("--lora '" + text + "': the scale " + tail +
                               " is not a finite number in (-1e6, 1e6)");
      file = text.substr(0, colon);
      scale = static_cast<float>(v);
    }
  }
  if (file.empty()) throw ddo::usage_error("--lora '" + text + "': FILE[:SCALE] names no file");
  return {file, scale};
}

/// @brief Every --lora read and mapped onto @p table before any work: a bad file is refused with
/// its key named (ddo::format_error) before setup.
inline std::vector<lora_choice> load_loras(const std::vector<std::string>& texts,
                                           const ddo::weight_table& table) {
  std::vector<lora_choice> out;
  for (const auto& text : texts) {
    auto [file, scale] = parse_lora_text(text);
    for (const auto& c : out)
      if (c.file == file) throw ddo::usage_error("--lora '" + file + "' is given twice");
    auto adapter = std::make_shared<const ddo::lora_adapter>(ddo::load_lora_adapter(file, table));
    out.push_back({std::move(file), scale, std::move(adapter)});
  }
  return out;
}

/// @brief Attaches @p loras to @p off in order and says what they take on the device.
template <class Offloader>
void attach_loras(Offloader& off, const std::vector<lora_choice>& loras) {
  for (const auto& l : loras) {
    off.attach_adapter(l.file, l.adapter, l.scale);
    std::printf("lora: %s at scale %g: %zu weights, %s on the device\n", l.file.c_str(),
                static_cast<double>(l.scale), l.adapter->deltas.size(),
                ddo::format_bytes(l.adapter->factor_bytes()).c_str());
  }
}

/// @brief The device bytes @p loras take once attached (the engine states them to the plan).
inline std::uint64_t lora_device_bytes(const std::vector<lora_choice>& loras) {
  std::uint64_t n = 0;
  for (const auto& l : loras) n += l.adapter->factor_bytes();
  return n;
}

/// @brief (adapter, scale) pairs for flux::host_weights::merge.
inline std::vector<std::pair<const ddo::lora_adapter*, float>> merge_list(
    const std::vector<lora_choice>& loras) {
  std::vector<std::pair<const ddo::lora_adapter*, float>> out;
  for (const auto& l : loras) out.emplace_back(l.adapter.get(), l.scale);
  return out;
}

/// @brief Whether @p name is an attention or MLP linear of FLUX.1 in diffusers' naming (what
/// --make-lora adapts: the done-when run's "every attention and MLP linear").
inline bool attention_or_mlp_linear(const std::string& name) {
  static constexpr const char* suffixes[] = {".attn.to_q.weight",
                                             ".attn.to_k.weight",
                                             ".attn.to_v.weight",
                                             ".attn.to_out.0.weight",
                                             ".attn.add_q_proj.weight",
                                             ".attn.add_k_proj.weight",
                                             ".attn.add_v_proj.weight",
                                             ".attn.to_add_out.weight",
                                             ".ff.net.0.proj.weight",
                                             ".ff.net.2.weight",
                                             ".ff_context.net.0.proj.weight",
                                             ".ff_context.net.2.weight",
                                             ".proj_mlp.weight"};
  for (const char* s : suffixes)
    if (name.ends_with(s)) return true;
  return name.starts_with("single_transformer_blocks.") && name.ends_with(".proj_out.weight");
}

/// @brief --make-lora FILE: a seeded rank-@p rank LoRA in PEFT naming (`transformer.<module>.
/// lora_A.weight` / `.lora_B.weight`, bf16, no alpha) over every attention and MLP linear of
/// @p table, streamed to FILE tensor by tensor. A ~ U(-1, 1) / sqrt(in), B ~ U(-1, 1) / 64: a
/// visible but small change. @return the factor bytes written.
inline std::uint64_t write_seeded_lora(const ddo::weight_table& table, const std::string& path,
                                       std::int64_t rank, std::uint64_t seed) {
  std::vector<ddo::safetensors_tensor_spec> specs;
  std::vector<std::size_t> weights;
  for (std::size_t w = 0; w < table.size(); ++w) {
    const auto& info = table[w];
    if (!attention_or_mlp_linear(info.name) || info.shape.size() != 2) continue;
    const std::string module = "transformer." + info.name.substr(0, info.name.size() - 7);
    specs.push_back({module + ".lora_A.weight", ddo::dtype::bf16, {rank, info.shape[1]}});
    specs.push_back({module + ".lora_B.weight", ddo::dtype::bf16, {info.shape[0], rank}});
    weights.push_back(w);
  }
  if (weights.empty())
    throw ddo::usage_error(
        "--make-lora: the model has no FLUX.1 attention or MLP linear in "
        "diffusers' naming");
  ddo::safetensors_writer out(path, specs);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<std::byte> bytes;
  for (const auto& spec : specs) {
    const auto n = static_cast<std::size_t>(spec.shape[0] * spec.shape[1]);
    const bool down = spec.name.ends_with(".lora_A.weight");
    const float bound = down ? 1.0f / std::sqrt(static_cast<float>(spec.shape[1])) : 1.0f / 64;
    bytes.resize(2 * n);
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint16_t bits = ddo::float_to_bf16_bits(unit(rng) * bound);
      std::memcpy(bytes.data() + 2 * k, &bits, 2);
    }
    out.write(bytes);
  }
  out.finish();
  return out.data_bytes();
}

}  // namespace ddo_flux
