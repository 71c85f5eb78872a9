// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief A synthetic DiT-like or Flux-like model written as safetensors: what ddo-make-model,
/// the tests, the runner and the benchmarks use instead of downloaded weights.
///
/// Two shapes (synthetic_shape). `dit`, one kind of block (the default, and the model of the
/// project's early measurements). Layout (PyTorch Linear weights are [out, in]); h = hidden,
/// m = hidden × mlp_ratio:
///  - before the blocks: x_embedder (h×64 + bias), context_embedder (h×4096 + bias),
///    time_text_embed.timestep_embedder.linear_1 (h×256 + bias) and linear_2 (h×h + bias);
///  - per block `transformer_blocks.N.`: attn.to_q/to_k/to_v/to_out.0 (h×h + bias each),
///    attn.norm_q/norm_k (head dim 128, or h when h < 128), ff.net.0.proj (m×h + bias),
///    ff.net.2 (h×m + bias), norm1/norm2 (h): 16 tensors, 12·h² + O(h) elements;
///  - after the blocks: norm_out.linear (2h×h + bias), proj_out (64×h + bias).
/// The defaults (24 blocks, h = 3072, ratio 4, bf16) give ≈ 5.4 GB of block weights: the Flux-like
/// model of the project's measurements. Tensors are written in execution order.
///
/// `flux`, two kinds of blocks of different widths, named as diffusers' FluxTransformer2DModel
/// names them (flux_model_options() gives FLUX.1's sizes, ≈ 23.8 GB of bf16):
///  - before the blocks: x_embedder (h×64), context_embedder (h×4096), and
///    time_text_embed.{timestep,guidance}_embedder.linear_1 (h×256) / linear_2 (h×h),
///    time_text_embed.text_embedder.linear_1 (h×768) / linear_2 (h×h), each + bias;
///  - `blocks` double-stream blocks `transformer_blocks.N.`: norm1.linear and
///    norm1_context.linear (6h×h, the adaLN modulations), attn.to_q/to_k/to_v and
///    attn.add_q_proj/add_k_proj/add_v_proj (h×h), attn.to_out.0 and attn.to_add_out (h×h),
///    ff.net.0.proj / ff_context.net.0.proj (m×h), ff.net.2 / ff_context.net.2 (h×m), each +
///    bias, and attn.norm_q/norm_k/norm_added_q/norm_added_k: 36·h² elements at ratio 4;
///  - `single_blocks` single-stream blocks `single_transformer_blocks.N.`: norm.linear (3h×h),
///    attn.to_q/to_k/to_v (h×h), proj_mlp (m×h), proj_out (h×(h+m)), each + bias, and
///    attn.norm_q/norm_k: 15·h² elements at ratio 4, so a double block is 2.4× a single one;
///  - after the blocks: norm_out.linear (2h×h), proj_out (64×h), each + bias.
/// The image stream's weights see every image token, the text stream's (`add_`, `_context`,
/// `context_embedder`) only the text tokens and the modulations (`norm1.linear`,
/// `norm.linear`, the time embedders) one row: the two kinds differ in compute per byte too
/// (the runner's synthetic compute follows these names; examples/runner/token_rows.hpp).
///
/// Two layouts of the files (synthetic_layout). `execution`: the tensors in execution order,
/// split into `shards` files of about equal bytes. `diffusers` (flux shape only): as diffusers'
/// `save_pretrained` publishes a transformer folder such as FLUX.1-dev's `transformer/` —
///  - the tensors in FluxTransformer2DModel's state-dict order (its modules' registration order
///    as of the 2024 release that wrote FLUX.1-dev: the time/guidance/text embedders,
///    context_embedder, x_embedder, the double-stream blocks — norm1, norm1_context, attn's
///    norm_q, norm_k, to_q, to_k, to_v, add_k_proj, add_v_proj, add_q_proj, to_out.0, to_add_out,
///    norm_added_q, norm_added_k, then ff and ff_context — the single-stream blocks — norm,
///    proj_mlp, proj_out, attn's norm_q, norm_k, to_q, to_k, to_v — then norm_out, proj_out);
///  - split as huggingface_hub's `split_torch_state_dict_into_shards` splits them: walk that
///    order, and start a new shard when the next tensor would take the current one over
///    `shard_max_bytes` (diffusers' default "10GB", 10^10 bytes). At FLUX.1's sizes this gives
///    the published split: 3 shards of 9 982 983 168, 9 949 272 064 and 3 870 561 408 bytes of
///    tensors, breaking after transformer_blocks.14.attn.norm_added_k and after
///    single_transformer_blocks.24.proj_mlp;
///  - within each file the tensors sorted by name (byte order), as the safetensors serializer
///    writes them (it sorts by dtype, then name; every tensor here has one dtype);
///  - files `diffusion_pytorch_model.safetensors` (one shard) or
///    `diffusion_pytorch_model-0000i-of-0000K.safetensors` with
///    `diffusion_pytorch_model.safetensors.index.json` (its weight map sorted by name), in the
///    folder `output` names.
///
/// Values are random and never zero: each element's bits are built directly (random sign, an
/// exponent giving magnitudes in [2^-10, 2^-4), random mantissa) from a splitmix64 stream seeded
/// by `seed`, so generation runs at disk speed.

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/core/enum_names.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/linkage.hpp"
#include "ddo/model/dtype.hpp"
#include "ddo/model/safetensors.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The layout of a synthetic model (see the file comment).
enum class synthetic_shape : unsigned char {
  dit,   ///< one kind of block (`transformer_blocks.N.`, 16 tensors, 12·h²)
  flux,  ///< double-stream blocks (36·h²) then single-stream blocks (15·h²), as FLUX.1
};

template <>
struct enum_names<synthetic_shape> {
  static constexpr std::array<std::string_view, 2> values = {"dit", "flux"};
};

/// @brief "dit", "flux".
[[nodiscard]] constexpr std::string_view to_string(synthetic_shape s) noexcept {
  return enum_name(s);
}

/// @brief How the tensors are laid out in files (see the file comment).
enum class synthetic_layout : unsigned char {
  execution,  ///< execution order, `shards` files of about equal bytes
  diffusers,  ///< diffusers' published transformer folder (flux shape): state-dict order split
              ///< at `shard_max_bytes`, names sorted within each file
};

/// @brief "execution", "diffusers".
[[nodiscard]] constexpr std::string_view to_string(synthetic_layout l) noexcept {
  return l == synthetic_layout::diffusers ? "diffusers" : "execution";
}

/// @brief diffusers' default `max_shard_size` ("10GB"), in bytes.
inline constexpr std::uint64_t diffusers_max_shard_bytes = 10'000'000'000ull;

/// @brief The file names of diffusers' layout.
inline constexpr std::string_view diffusers_weights_name = "diffusion_pytorch_model.safetensors";
inline constexpr std::string_view diffusers_index_name =
    "diffusion_pytorch_model.safetensors.index.json";

/// @brief Parameters of a synthetic model.
struct synthetic_model_options {
  /// execution layout: the .safetensors file, or the .index.json when shards > 1; diffusers
  /// layout: the folder (created if missing) the files go into.
  std::string output;
  synthetic_shape shape = synthetic_shape::dit;
  synthetic_layout layout = synthetic_layout::execution;
  std::uint32_t blocks = 24;         ///< dit: blocks; flux: double-stream blocks
  std::uint32_t single_blocks = 0;   ///< flux: single-stream blocks (dit: must be 0)
  std::uint32_t hidden = 3072;
  std::uint32_t mlp_ratio = 4;
  dtype type = dtype::bf16;  ///< bf16, f16 or f32
  std::uint32_t shards = 1;  ///< execution layout: > 1 writes shards next to the index
  std::uint64_t shard_max_bytes = diffusers_max_shard_bytes;  ///< diffusers layout's split
  std::uint64_t seed = 0;
};

/// @brief The Flux-like shape: FLUX.1's sizes by default (19 double-stream and 38
/// single-stream blocks, hidden 3072, MLP ratio 4, bf16: ≈ 23.8 GB); smaller models keep the
/// 1 : 2 proportion of the two kinds when the caller scales both counts.
[[nodiscard]] inline synthetic_model_options flux_model_options(std::uint32_t double_blocks = 19,
                                                                std::uint32_t single_blocks = 38,
                                                                std::uint32_t hidden = 3072) {
  synthetic_model_options o;
  o.shape = synthetic_shape::flux;
  o.blocks = double_blocks;
  o.single_blocks = single_blocks;
  o.hidden = hidden;
  return o;
}

/// @brief What was written.
struct synthetic_model_result {
  std::vector<std::string> files;  ///< the shard files (one when unsharded)
  std::string index;               ///< the index file, empty when unsharded
  std::uint64_t tensor_bytes = 0;  ///< sum of all tensors' bytes
  std::size_t tensors = 0;
};

/// @brief The sizes that fix FluxTransformer2DModel's weight names and shapes (FLUX.1-dev's by
/// default; the MLP is 4 x hidden as in every FLUX.1).
struct flux_transformer_dims {
  std::int64_t double_blocks = 19;
  std::int64_t single_blocks = 38;
  std::int64_t hidden = 3072;   ///< heads x head_dim
  std::int64_t head_dim = 128;  ///< RMSNorm weights of q and k have this many elements
  std::int64_t mlp = 4 * 3072;  ///< feed-forward and proj_mlp width
  std::int64_t in_channels = 64;
  std::int64_t text_dim = 4096;   ///< context_embedder's input (T5)
  std::int64_t pooled_dim = 768;  ///< text_embedder's input (CLIP pooled)
  bool guidance = true;           ///< guidance_embedder present (FLUX.1-dev; not schnell)
};

/// @brief Every weight of a FluxTransformer2DModel of @p dims, by its published diffusers name,
/// in execution order (embedders, double-stream blocks, single-stream blocks, head), all of
/// @p type: the one list of FLUX.1's names and shapes (the synthetic flux shape and ddo-flux's
/// engine both use it).
[[nodiscard]] DDO_INLINE std::vector<safetensors_tensor_spec> flux_transformer_specs(
    const flux_transformer_dims& dims, dtype type);

/// @brief The tensor specs of a synthetic model, in execution order.
/// @throws usage_error for zero blocks/hidden/ratio, single-stream blocks on the dit shape, or
/// an unsupported dtype.
[[nodiscard]] DDO_INLINE std::vector<safetensors_tensor_spec> synthetic_model_specs(
    const synthetic_model_options& options);

/// @brief The specs of a flux-shape model in FluxTransformer2DModel's state-dict order (see the
/// file comment), each file's share of them as the diffusers layout splits them at
/// @p shard_max_bytes, each share sorted by name as it is written.
/// @throws usage_error for a shape other than flux or a zero @p shard_max_bytes.
[[nodiscard]] DDO_INLINE std::vector<std::vector<safetensors_tensor_spec>> diffusers_shards(
    const synthetic_model_options& options);

/// @brief Writes the model. @throws usage_error for invalid options, io_error.
DDO_INLINE synthetic_model_result write_synthetic_model(const synthetic_model_options& options);

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
DDO_INLINE void fill_random_nonzero(std::span<std::byte> out, dtype type, splitmix64& rng);

}  // namespace v0
}  // namespace ddo

#if DDO_HEADER_ONLY
#include "ddo/model/detail/synthetic_model_impl.hpp"
#endif
