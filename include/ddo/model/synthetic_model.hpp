// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief A synthetic DiT-like (Flux-like) model written as safetensors: what ddo-make-model,
/// the tests, the runner and the benchmarks use instead of downloaded weights.
///
/// Layout (PyTorch Linear weights are [out, in]); h = hidden, m = hidden × mlp_ratio:
///  - before the blocks: x_embedder (h×64 + bias), context_embedder (h×4096 + bias),
///    time_text_embed.timestep_embedder.linear_1 (h×256 + bias) and linear_2 (h×h + bias);
///  - per block `transformer_blocks.N.`: attn.to_q/to_k/to_v/to_out.0 (h×h + bias each),
///    attn.norm_q/norm_k (head dim 128, or h when h < 128), ff.net.0.proj (m×h + bias),
///    ff.net.2 (h×m + bias), norm1/norm2 (h): 16 tensors, 12·h² + O(h) elements;
///  - after the blocks: norm_out.linear (2h×h + bias), proj_out (64×h + bias).
/// The defaults (24 blocks, h = 3072, ratio 4, bf16) give ≈ 5.4 GB of block weights: the Flux-like
/// model of the project's measurements. Tensors are written in execution order.
///
/// Values are random and never zero: each element's bits are built directly (random sign, an
/// exponent giving magnitudes in [2^-10, 2^-4), random mantissa) from a splitmix64 stream seeded
/// by `seed`, so generation runs at disk speed.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/model/dtype.hpp"
#include "ddo/model/safetensors.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Parameters of a synthetic model.
struct synthetic_model_options {
  std::string output;  ///< the .safetensors file, or the .index.json when shards > 1
  std::uint32_t blocks = 24;
  std::uint32_t hidden = 3072;
  std::uint32_t mlp_ratio = 4;
  dtype type = dtype::bf16;  ///< bf16, f16 or f32
  std::uint32_t shards = 1;  ///< > 1 writes shards next to the index
  std::uint64_t seed = 0;
};

/// @brief What was written.
struct synthetic_model_result {
  std::vector<std::string> files;  ///< the shard files (one when unsharded)
  std::string index;               ///< the index file, empty when unsharded
  std::uint64_t tensor_bytes = 0;  ///< sum of all tensors' bytes
  std::size_t tensors = 0;
};

/// @brief The tensor specs of a synthetic model, in execution order.
/// @throws usage_error for zero blocks/hidden/ratio or an unsupported dtype.
[[nodiscard]] inline std::vector<safetensors_tensor_spec> synthetic_model_specs(
    const synthetic_model_options& options);

/// @brief Writes the model. @throws usage_error for invalid options, io_error.
inline synthetic_model_result write_synthetic_model(const synthetic_model_options& options);

/// @brief splitmix64: the generator behind the synthetic values (public so tests can predict
/// them).
struct splitmix64 {
  std::uint64_t state = 0;
  constexpr std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

/// @brief Fills @p out with random non-zero values of @p type (bf16, f16 or f32) from @p rng.
/// The span's size must be a multiple of the element size.
inline void fill_random_nonzero(std::span<std::byte> out, dtype type, splitmix64& rng);

}  // namespace v0
}  // namespace ddo

#include "ddo/model/detail/synthetic_model_impl.hpp"
