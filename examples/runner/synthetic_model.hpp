// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The synthetic DiT-like model ddo-run runs by default: its tensor layout, random
/// contents (never zeros) and a cache keyed by its parameters, written with ddo's own
/// safetensors writer (no external process).
///
/// Layout (Flux/DiT-like; hidden H, MLP width F = round(H × mlp_ratio), head width min(128, H)):
///   <before>: x_embedder.{weight [H, 64], bias [H]},
///             time_text_embed.timestep_embedder.linear_1.{weight [H, 256], bias [H]}
///   per block i, 16 tensors under transformer_blocks.i.:
///             attn.to_{q,k,v}.{weight [H, H], bias [H]}, attn.to_out.0.{weight [H, H], bias [H]},
///             attn.norm_{q,k}.weight [head], ff.net.0.proj.{weight [F, H], bias [F]},
///             ff.net.2.{weight [H, F], bias [H]}, norm1.weight [H], norm2.weight [H]
///   <after>:  norm_out.linear.{weight [2H, H], bias [2H]}, proj_out.{weight [64, H], bias [64]}
/// At H = 3072, F = 12288 and 24 blocks this is the ~5.4 GB model of the streaming benchmark.
///
/// Example code (examples/runner/), shared by ddo-run and its tests.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/model/dtype.hpp"
#include "ddo/model/safetensors.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief What ddo-make-model takes: --blocks, --hidden, --mlp-ratio, --dtype, --shards, --seed.
struct synthetic_model_params {
  int blocks = 8;
  std::int64_t hidden = 256;
  double mlp_ratio = 4.0;
  dtype type = dtype::bf16;
  int shards = 1;
  std::uint64_t seed = 1;

  /// @brief The MLP width: round(hidden × mlp_ratio), at least 1.
  [[nodiscard]] std::int64_t mlp() const noexcept {
    return std::max<std::int64_t>(1, std::llround(static_cast<double>(hidden) * mlp_ratio));
  }
};

/// @brief Checks the parameters; @throws usage_error naming the bad one and what is allowed.
inline void validate(const synthetic_model_params& p) {
  DDO_EXPECTS(p.blocks >= 1 && p.blocks <= 4096,
              "synthetic model: blocks must be 1..4096, got " + std::to_string(p.blocks));
  DDO_EXPECTS(p.hidden >= 8 && p.hidden <= 65536,
              "synthetic model: hidden must be 8..65536, got " + std::to_string(p.hidden));
  DDO_EXPECTS(p.mlp_ratio > 0.0 && p.mlp_ratio <= 64.0,
              "synthetic model: mlp ratio must be in (0, 64], got " + std::to_string(p.mlp_ratio));
  DDO_EXPECTS(p.type == dtype::bf16 || p.type == dtype::f16 || p.type == dtype::f32,
              "synthetic model: dtype must be bf16, fp16 or fp32, got " +
                  std::string(to_string(p.type)));
  DDO_EXPECTS(p.shards >= 1 && p.shards <= p.blocks,
              "synthetic model: shards must be 1..blocks (" + std::to_string(p.blocks) +
                  "), got " + std::to_string(p.shards));
}

/// @brief The tensors of the model in file order (see the file comment).
[[nodiscard]] inline std::vector<safetensors_tensor_spec> synthetic_model_tensors(
    const synthetic_model_params& p) {
  validate(p);
  const std::int64_t h = p.hidden, f = p.mlp(), head = std::min<std::int64_t>(128, h);
  std::vector<safetensors_tensor_spec> specs;
  auto add = [&](std::string name, std::vector<std::int64_t> shape) {
    specs.push_back({std::move(name), p.type, std::move(shape)});
  };
  add("x_embedder.weight", {h, 64});
  add("x_embedder.bias", {h});
  add("time_text_embed.timestep_embedder.linear_1.weight", {h, 256});
  add("time_text_embed.timestep_embedder.linear_1.bias", {h});
  for (int b = 0; b < p.blocks; ++b) {
    const std::string prefix = "transformer_blocks." + std::to_string(b) + ".";
    for (const char* proj : {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0"}) {
      add(prefix + proj + ".weight", {h, h});
      add(prefix + proj + ".bias", {h});
    }
    add(prefix + "attn.norm_q.weight", {head});
    add(prefix + "attn.norm_k.weight", {head});
    add(prefix + "ff.net.0.proj.weight", {f, h});
    add(prefix + "ff.net.0.proj.bias", {f});
    add(prefix + "ff.net.2.weight", {h, f});
    add(prefix + "ff.net.2.bias", {h});
    add(prefix + "norm1.weight", {h});
    add(prefix + "norm2.weight", {h});
  }
  add("norm_out.linear.weight", {2 * h, h});
  add("norm_out.linear.bias", {2 * h});
  add("proj_out.weight", {64, h});
  add("proj_out.bias", {64});
  return specs;
}

/// @brief Total weight bytes of the model.
[[nodiscard]] inline std::uint64_t synthetic_model_bytes(const synthetic_model_params& p) {
  std::uint64_t total = 0;
  for (const auto& s : synthetic_model_tensors(p)) total += s.bytes();
  return total;
}

/// @brief A file-name-safe key naming every parameter (and the layout version), e.g.
/// "dit-v1-b8-h256-r4-BF16-k1-s1".
[[nodiscard]] inline std::string synthetic_model_key(const synthetic_model_params& p) {
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%g", p.mlp_ratio);
  return "dit-v1-b" + std::to_string(p.blocks) + "-h" + std::to_string(p.hidden) + "-r" + ratio +
         "-" + std::string(to_string(p.type)) + "-k" + std::to_string(p.shards) + "-s" +
         std::to_string(p.seed);
}

/// @brief Fills @p out with random values of @p type, magnitude 2^-7 .. 2^-5 and random sign
/// (about a trained 3072-wide layer's scale), from a splitmix64 stream at @p state (advanced).
/// Never zeros: every exponent field is non-zero.
inline void fill_random_values(std::span<std::byte> out, dtype type, std::uint64_t& state) {
  auto next = [&state] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::size_t i = 0;
  const std::size_t n = out.size();
  if (type == dtype::f32) {
    for (; i + 4 <= n; i += 4) {
      const std::uint64_t z = next();
      // sign, exponent 120 or 121, 23 random mantissa bits
      const auto bits = static_cast<std::uint32_t>((z & 0x807fffffull) | (120ull << 23) |
                                                   (((z >> 40) & 1ull) << 23));
      std::memcpy(out.data() + i, &bits, 4);
    }
  } else {
    // bf16: sign | exp(120|121) << 7 | 7 mantissa bits; f16: sign | exp(8|9) << 10 | 10 bits.
    const std::uint64_t keep = type == dtype::bf16 ? 0x807f807f807f807full : 0x83ff83ff83ff83ffull;
    const std::uint64_t base = type == dtype::bf16 ? 0x3c003c003c003c00ull : 0x2000200020002000ull;
    const std::uint64_t bump = type == dtype::bf16 ? 0x0080008000800080ull : 0x0400040004000400ull;
    for (; i + 8 <= n; i += 8) {
      const std::uint64_t z = next();
      const std::uint64_t lanes = (z & keep) | base | ((z >> 3) & bump);
      std::memcpy(out.data() + i, &lanes, 8);
    }
  }
  for (; i < n; ++i) out[i] = std::byte{0x3c};
}

/// @brief Progress callback: (bytes done, bytes total).
using progress_fn = std::function<void(std::uint64_t, std::uint64_t)>;

/// @brief Writes the model at @p directory: "model.safetensors" for one shard, else
/// "model-0000i-of-0000K.safetensors" shards (blocks split evenly) and
/// "model.safetensors.index.json". Returns the path to pass to load_safetensors.
/// @throws usage_error on bad parameters, io_error when a file cannot be written.
inline std::string write_synthetic_model(const synthetic_model_params& p,
                                         const std::filesystem::path& directory,
                                         const progress_fn& progress = {}) {
  const auto specs = synthetic_model_tensors(p);
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec)
    throw io_error(directory.string(), ec.value(),
                   "cannot create the model directory " + directory.string() + ": " + ec.message());
  // Shard i holds the tensors of blocks [i*B/K, (i+1)*B/K); <before> goes to the first shard and
  // <after> to the last.
  auto shard_of = [&](const std::string& name) {
    constexpr std::string_view family = "transformer_blocks.";
    if (name.rfind(family, 0) != 0) return name.rfind("norm_out", 0) == 0 || name.rfind("proj_out", 0) == 0 ? p.shards - 1 : 0;
    const int block = std::atoi(name.c_str() + family.size());
    return static_cast<int>(static_cast<long long>(block) * p.shards / p.blocks);
  };
  std::uint64_t total = 0;
  for (const auto& s : specs) total += s.bytes();
  std::uint64_t done = 0;
  std::uint64_t state = p.seed * 0x2545f4914f6cdd1dull + 0x0dd0;
  std::vector<std::byte> buffer(16 * mib);
  std::vector<std::pair<std::string, std::string>> weight_map;
  for (int k = 0; k < p.shards; ++k) {
    std::vector<safetensors_tensor_spec> mine;
    for (const auto& s : specs)
      if (shard_of(s.name) == k) mine.push_back(s);
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, p.shards);
    const std::string file = p.shards == 1 ? std::string("model.safetensors") : std::string(name);
    for (const auto& s : mine) weight_map.emplace_back(s.name, file);
    safetensors_writer writer((directory / file).string(), mine,
                              {{"format", "pt"}, {"ddo_synthetic", synthetic_model_key(p)}});
    std::uint64_t left = writer.data_bytes();
    while (left > 0) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, buffer.size()));
      fill_random_values(std::span(buffer.data(), n), p.type, state);
      writer.write(std::span<const std::byte>(buffer.data(), n));
      left -= n;
      done += n;
      if (progress) progress(done, total);
    }
    writer.finish();
  }
  if (p.shards == 1) return (directory / "model.safetensors").string();
  const auto index = (directory / "model.safetensors.index.json").string();
  write_safetensors_index(index, weight_map, total);
  return index;
}

/// @brief Where cached models live when no directory is given: $DDO_MODEL_CACHE, else
/// "synthetic-models" beside the running executable (the build dir) when writable, else
/// $TMPDIR (or /tmp)/ddo-synthetic-models.
[[nodiscard]] inline std::filesystem::path default_model_cache_dir() {
  if (const char* env = std::getenv("DDO_MODEL_CACHE"); env != nullptr && *env != '\0')
    return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto dir = exe.parent_path();
    if (::access(dir.c_str(), W_OK) == 0) return dir / "synthetic-models";
  }
  const char* tmp = std::getenv("TMPDIR");
  return std::filesystem::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
         "ddo-synthetic-models";
}

/// @brief The cached model for @p p under @p cache_dir, written first when missing. A model is
/// written into a temporary directory and renamed into place, so an interrupted run never
/// leaves a half-written model that a later run would trust.
/// @param generated set to true when the model was written by this call.
inline std::string ensure_synthetic_model(const synthetic_model_params& p,
                                          const std::filesystem::path& cache_dir,
                                          bool* generated = nullptr,
                                          const progress_fn& progress = {}) {
  validate(p);
  const auto dir = cache_dir / synthetic_model_key(p);
  const auto entry = dir / (p.shards == 1 ? "model.safetensors" : "model.safetensors.index.json");
  if (generated) *generated = false;
  if (std::filesystem::exists(entry)) return entry.string();
  const auto tmp = cache_dir / (synthetic_model_key(p) + ".tmp-" + std::to_string(::getpid()));
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  write_synthetic_model(p, tmp, progress);
  std::filesystem::rename(tmp, dir, ec);
  if (ec && !std::filesystem::exists(entry)) {  // another process may have won the race
    std::filesystem::remove_all(tmp, ec);
    throw io_error(dir.string(), ec.value(),
                   "cannot move the generated model into " + dir.string() + ": " + ec.message());
  }
  std::filesystem::remove_all(tmp, ec);
  if (generated) *generated = true;
  return entry.string();
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
