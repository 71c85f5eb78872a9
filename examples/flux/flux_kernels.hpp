// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The FLUX.1 forward's CUDA kernels other than the GEMMs, each the GPU twin of steps of
/// flux_cpu.hpp and held to them by tests/gpu/flux_kernels_test.cpp: RMSNorm + RoPE of q and k
/// (bf16 in place), LayerNorm without affine + adaLN modulation (rounded to bf16 for the next
/// GEMM), GELU (tanh) on bf16, SiLU, gated residual, and attention on the tensor cores that
/// streams keys in tiles with an online softmax (never the N x N scores; no split-KV, so every
/// output is summed in one fixed order: bitwise reproducible). The residual stream and the
/// modulation vectors are float; what feeds a GEMM or attention is bf16
/// (examples/flux/flux_gpu.hpp runs the GEMMs with cuBLASLt). Compiled by nvcc
/// (examples/flux/flux_kernels.cu); this header needs only the CUDA runtime's types. Every
/// function checks its launch where it makes it (no sync) and throws ddo::cuda_error naming the
/// kernel when it fails. Example code (examples/flux/).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ddo/adapter/lora_merge.hpp"

namespace flux::gpu {

/// @brief For rows [row_begin, row_begin + rows) of bf16 @p x (row stride @p width): RMSNorm
/// (eps 1e-6) of each head_dim-wide head times @p weight (head_dim values, bf16 when
/// @p weight_bf16, else float), then RoPE of its interleaved pairs by the row's @p cos / @p sin
/// (tokens x head_dim, indexed by the absolute row), in float, rounded back to bf16 in place.
/// @return false for a head_dim other than 64 or 128 (nothing launched).
bool rms_rope_bf16(std::uint16_t* x, int row_begin, int rows, int width, int head_dim,
                   const void* weight, bool weight_bf16, const float* cos, const float* sin,
                   cudaStream_t stream);

/// @brief x * sigmoid(x), in place.
void silu(float* x, long long n, cudaStream_t stream);

/// @brief x += gate * y per row (rows x n, x dense); y with its own row stride.
void gated_add(float* x, int rows, int n, const float* gate, const float* y, int y_stride,
               cudaStream_t stream);

/// @brief softmax(q k^T / sqrt(head_dim)) v per head over n tokens on the tensor cores: q, k and
/// v bf16 (n x width each, rows 16-byte aligned: width a multiple of 8), scores, softmax and
/// output in float, P rounded to bf16 for P v (FlashAttention-2's scheme with mma.sync; never
/// the N x N scores, no split-KV: bitwise reproducible). The output goes to @p out with row
/// stride @p out_stride (even), as float or, with @p out_bf16, rounded to bf16 (what the next
/// GEMM reads). head_dim 64 or 128. @p row_tiles: 16-row query tiles per warp, 1 (64 keys per
/// tile) or 2 (32 keys per tile; each k and v fragment read from shared memory once for 32
/// rows): each deterministic, the two not bitwise equal to each other (the softmax rescales at
/// other keys). Any other value takes DDO_FLUX_ATTENTION_ROW_TILES from the environment (read at
/// the first such call), else 2.
/// q, k and v are read 16 bytes at a time (cp.async, ldmatrix): base pointers 16-byte aligned.
/// @return false for another head size (nothing launched).
/// @throws ddo::cuda_error naming the kernel when the device refuses the shared memory the tile
/// needs or the launch fails.
bool attention_bf16(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                    void* out, bool out_bf16, int out_stride, int n, int width, int head_dim,
                    cudaStream_t stream, int row_tiles = 0);

/// @brief y = bf16(LayerNorm(x) (1 + scale) + shift) per row (rows x n, eps 1e-6, no affine; y
/// with its own stride): the CPU's layer_norm, modulate and a rounding, in one pass.
void layer_norm_modulate_bf16(const float* x, int rows, int n, const float* shift,
                              const float* scale, std::uint16_t* y, int y_stride,
                              cudaStream_t stream);

/// @brief y = bf16(GELU-tanh(x)) for bf16 x, in float; rows x n, each with its own row stride
/// (x may be y: in place).
void gelu_bf16(const std::uint16_t* x, int rows, int n, int x_stride, std::uint16_t* y,
               int y_stride, cudaStream_t stream);

/// @brief x += y per row (rows x n, x dense); y with its own row stride.
void add(float* x, const float* y, int rows, int n, int y_stride, cudaStream_t stream);

/// @brief y = x rounded to bf16 (nearest even), rows x n; each with its own row stride.
void to_bf16(const float* x, int rows, int n, int x_stride, std::uint16_t* y, int y_stride,
             cudaStream_t stream);

/// @brief y[r, c] += bias[c] for rows x n with row stride @p y_stride; y float or (@p y_bf16)
/// bf16, rounded back; bias bf16 (@p bf16_bias) or float.
void add_bias(void* y, bool y_bf16, int rows, int n, int y_stride, const void* bias, bool bf16_bias,
              cudaStream_t stream);

/// @brief Writes the sinusoidal projection of value x 1000 (diffusers' Timesteps: 256 channels,
/// cos first, no frequency shift) to @p out; float math as flux_forward.hpp's. @p value is read
/// from device memory when the kernel runs, not passed by value: a captured step (ddo-flux
/// --graph) replays with the timestep written there before each launch.
void timestep_projection(const float* value, float* out, cudaStream_t stream);

/// @brief ddo's merge kernel (ddo/adapter/lora_merge_cuda.cuh, compiled here by nvcc) for
/// basic_offloader::set_lora_merge_launcher: --lora on the GPU forward.
ddo::lora_merge_launcher lora_merge_launcher();

}  // namespace flux::gpu
