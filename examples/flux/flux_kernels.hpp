// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The FLUX.1 forward's CUDA kernels other than the GEMMs, each the GPU twin of steps of
/// flux_cpu.hpp and held to them by tests/gpu/flux_kernels_test.cpp: LayerNorm without affine
/// with adaLN modulation (rounded to bf16 for the next GEMM), RMSNorm per head, RoPE, GELU
/// (tanh, rounded to bf16), SiLU, gated residual, and
/// attention that streams keys in tiles with an online softmax (never the N x N scores; no
/// split-KV, so every output is summed in one fixed order: bitwise reproducible). float
/// activations; the GEMMs' operands are rounded to bf16 by to_bf16 (examples/flux/flux_gpu.hpp
/// runs the GEMMs with cuBLASLt). Compiled by nvcc (examples/flux/flux_kernels.cu); this header
/// needs only the CUDA runtime's types. Every function checks its launch where it makes it (no
/// sync) and throws ddo::cuda_error naming the kernel when it fails. Example code
/// (examples/flux/).

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flux::gpu {

/// @brief RMSNorm (eps 1e-6) of each head_dim-wide piece of each row, times @p weight; in place.
void rms_norm_heads(float* x, int rows, int width, int head_dim, const float* weight,
                    cudaStream_t stream);

/// @brief Rotates the interleaved pairs of every head by @p cos / @p sin (rows x head_dim).
void rope(float* x, int rows, int width, int head_dim, const float* cos, const float* sin,
          cudaStream_t stream);

/// @brief x * sigmoid(x), in place.
void silu(float* x, long long n, cudaStream_t stream);

/// @brief x += gate * y per row; y with its own row stride.
void gated_add(float* x, int rows, int n, const float* gate, const float* y, int y_stride,
               cudaStream_t stream);

/// @brief softmax(q k^T / sqrt(head_dim)) v per head over n tokens (q, k, v, out: n x width).
/// head_dim 64 or 128. @return false for another head size (nothing launched).
bool attention(const float* q, const float* k, const float* v, float* out, int n, int width,
               int head_dim, cudaStream_t stream);

/// @brief attention() on the tensor cores: q, k and v in bf16 (n x width, rows 16-byte aligned:
/// width a multiple of 8), scores, softmax and output in float, P rounded to bf16 for P v
/// (FlashAttention-2's scheme with mma.sync; never the N x N scores, no split-KV: bitwise
/// reproducible). head_dim 64 or 128. @return false for another head size (nothing launched).
bool attention_bf16(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                    float* out, int n, int width, int head_dim, cudaStream_t stream);

/// @brief attention_bf16 pipelined: k and v tiles loaded by cp.async two stages deep while the
/// previous tile is computed, fragments by ldmatrix, and @p row_tiles 16-row query tiles per
/// warp (1: 64-key tiles, q in registers; 2: 32-key tiles, q in shared memory, each k and v
/// fragment read once for 32 rows). The output float or (@p out_bf16) rounded to bf16, row
/// stride @p out_stride (even). Deterministic; not bitwise equal to attention_bf16, nor across
/// row_tiles (the softmax rescales at other keys). Opt-in (ddo-flux --attention tensor2): not
/// yet run on a GPU. @return false for a head_dim other than 64 or 128 or row_tiles other than
/// 1 or 2 (nothing launched). q, k and v are read 16 bytes at a time (cp.async, ldmatrix): their
/// base pointers 16-byte aligned and width a multiple of 8, as attention_bf16's.
/// @throws ddo::cuda_error naming the kernel when the device refuses the shared memory the tile
/// needs (36,864 bytes at head_dim 64, 69,632 at 128) or the launch fails.
bool attention_bf16_pipelined(const std::uint16_t* q, const std::uint16_t* k,
                              const std::uint16_t* v, void* out, bool out_bf16, int out_stride,
                              int n, int width, int head_dim, int row_tiles, cudaStream_t stream);

/// @brief y = bf16(LayerNorm(x) (1 + scale) + shift) per row (rows x n, eps 1e-6, no affine; y
/// with its own stride): the CPU path's layer_norm and modulate, rounded, in one pass.
void layer_norm_modulate_bf16(const float* x, int rows, int n, const float* shift,
                              const float* scale, std::uint16_t* y, int y_stride,
                              cudaStream_t stream);

/// @brief y = bf16(GELU-tanh(x)), rows x n, each with its own row stride: the CPU path's
/// gelu_tanh, rounded, in one pass.
void gelu_bf16(const float* x, int rows, int n, int x_stride, std::uint16_t* y, int y_stride,
               cudaStream_t stream);

/// @brief x += y per row (rows x n); y with its own row stride.
void add(float* x, const float* y, int rows, int n, int y_stride, cudaStream_t stream);

/// @brief y = x rounded to bf16 (nearest even), rows x n; each with its own row stride.
void to_bf16(const float* x, int rows, int n, int x_stride, std::uint16_t* y, int y_stride,
             cudaStream_t stream);

/// @brief y = x widened to float; x holds @p n bf16 values (@p bf16) or floats.
void to_float(const void* x, bool bf16, float* y, long long n, cudaStream_t stream);

/// @brief y[r, c] += bias[c] for rows x n with row stride @p y_stride; bias bf16 or float.
void add_bias(float* y, int rows, int n, int y_stride, const void* bias, bool bf16,
              cudaStream_t stream);

/// @brief Writes the sinusoidal projection of value x 1000 (diffusers' Timesteps: 256 channels,
/// cos first, no frequency shift) to @p out; float math as flux_forward.hpp's.
void timestep_projection(float value, float* out, cudaStream_t stream);

}  // namespace flux::gpu
