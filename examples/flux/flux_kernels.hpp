// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The FLUX.1 forward's CUDA kernels other than the GEMMs, each the GPU twin of a
/// function of flux_cpu.hpp and held to it by tests/gpu/flux_kernels_test.cpp: LayerNorm without
/// affine, RMSNorm per head, RoPE, GELU (tanh), SiLU, adaLN modulation, gated residual, and
/// attention that streams keys in tiles with an online softmax (never the N x N scores; no
/// split-KV, so every output is summed in one fixed order: bitwise reproducible). float
/// activations. Compiled by nvcc (examples/flux/flux_kernels.cu); this header needs only the
/// CUDA runtime's types. Example code (examples/flux/).

#include <cuda_runtime_api.h>

namespace flux::gpu {

/// @brief y = LayerNorm(x) per row (eps 1e-6, no affine); rows x n.
void layer_norm(const float* x, float* y, int rows, int n, cudaStream_t stream);

/// @brief RMSNorm (eps 1e-6) of each head_dim-wide piece of each row, times @p weight; in place.
void rms_norm_heads(float* x, int rows, int width, int head_dim, const float* weight,
                    cudaStream_t stream);

/// @brief Rotates the interleaved pairs of every head by @p cos / @p sin (rows x head_dim).
void rope(float* x, int rows, int width, int head_dim, const float* cos, const float* sin,
          cudaStream_t stream);

/// @brief tanh-approximated GELU, in place.
void gelu_tanh(float* x, long long n, cudaStream_t stream);

/// @brief x * sigmoid(x), in place.
void silu(float* x, long long n, cudaStream_t stream);

/// @brief x = x * (1 + scale) + shift per row; rows x n.
void modulate(float* x, int rows, int n, const float* shift, const float* scale,
              cudaStream_t stream);

/// @brief x += gate * y per row; y with its own row stride.
void gated_add(float* x, int rows, int n, const float* gate, const float* y, int y_stride,
               cudaStream_t stream);

/// @brief softmax(q k^T / sqrt(head_dim)) v per head over n tokens (q, k, v, out: n x width).
/// head_dim 64 or 128. @return false for another head size (nothing launched).
bool attention(const float* q, const float* k, const float* v, float* out, int n, int width,
               int head_dim, cudaStream_t stream);

}  // namespace flux::gpu
