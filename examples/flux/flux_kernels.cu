// SPDX-License-Identifier: Apache-2.0
// The FLUX.1 forward's CUDA kernels (declared and described in flux_kernels.hpp). Reductions use
// fixed shuffle trees and fixed per-thread strides, so a kernel gives the same bits every run.

#include <math.h>

#include "flux/flux_kernels.hpp"

namespace flux::gpu {
namespace {

constexpr unsigned full_mask = 0xffffffffu;

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(full_mask, v, o);
  return v;
}

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(full_mask, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024), the same value to every thread.
__device__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

__global__ void layer_norm_kernel(const float* x, float* y, int n) {
  __shared__ float scratch[32];
  const float* xr = x + static_cast<long long>(blockIdx.x) * n;
  float* yr = y + static_cast<long long>(blockIdx.x) * n;
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, scratch) / static_cast<float>(n);
  float v = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += (xr[i] - mean) * (xr[i] - mean);
  const float var = block_sum(v, scratch) / static_cast<float>(n);
  const float inv = rsqrtf(var + 1e-6f);
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = (xr[i] - mean) * inv;
}

/// One warp per (row, head).
__global__ void rms_norm_heads_kernel(float* x, int rows, int width, int head_dim,
                                      const float* weight) {
  const int heads = width / head_dim;
  const long long item = static_cast<long long>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (item >= static_cast<long long>(rows) * heads) return;
  const int lane = threadIdx.x % 32;
  float* v = x + (item / heads) * width + (item % heads) * head_dim;
  float ss = 0.f;
  for (int i = lane; i < head_dim; i += 32) ss += v[i] * v[i];
  const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(head_dim) + 1e-6f);
  for (int i = lane; i < head_dim; i += 32) v[i] = v[i] * inv * weight[i];
}

__global__ void rope_kernel(float* x, int rows, int width, int head_dim, const float* cos,
                            const float* sin) {
  const long long pair = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (pair >= static_cast<long long>(rows) * width / 2) return;
  const long long row = pair * 2 / width;
  const int col = static_cast<int>(pair * 2 % width);
  const int i = col % head_dim;
  float* p = x + row * width + col;
  const float* c = cos + row * head_dim + i;
  const float* s = sin + row * head_dim + i;
  const float a = p[0], b = p[1];
  p[0] = a * c[0] - b * s[0];
  p[1] = b * c[1] + a * s[1];
}

__global__ void gelu_tanh_kernel(float* x, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  x[i] = 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

__global__ void silu_kernel(float* x, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  x[i] = x[i] / (1.f + expf(-x[i]));
}

__global__ void modulate_kernel(float* x, int rows, int n, const float* shift, const float* scale) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(rows) * n) return;
  const int c = static_cast<int>(i % n);
  x[i] = x[i] * (1.f + scale[c]) + shift[c];
}

__global__ void gated_add_kernel(float* x, int rows, int n, const float* gate, const float* y,
                                 int y_stride) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(rows) * n) return;
  const long long r = i / n;
  const int c = static_cast<int>(i % n);
  x[i] += gate[c] * y[r * y_stride + c];
}

constexpr int attention_warps = 4;  // query rows per block, one warp each
constexpr int key_tile = 32;        // keys per shared-memory tile: one per lane

/// One warp per query row: each lane scores one key of the tile (a full dot product), the warp
/// updates the running max and sum, then each lane accumulates head_dim / 32 output columns over
/// the tile's keys in key order.
template <int D>
__global__ void attention_kernel(const float* q, const float* k, const float* v, float* out,
                                 int n, int width, float scale) {
  constexpr int per_lane = D / 32;
  __shared__ float ks[key_tile][D + 1];  // + 1: lanes read different rows without bank conflicts
  __shared__ float vs[key_tile][D];
  __shared__ float qs[attention_warps][D];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * attention_warps + warp;
  const int col0 = blockIdx.y * D;
  const bool active = row < n;
  if (active)
    for (int t = lane; t < D; t += 32) qs[warp][t] = q[static_cast<long long>(row) * width + col0 + t] * scale;
  float m = -INFINITY, l = 0.f, acc[per_lane];
  for (int i = 0; i < per_lane; ++i) acc[i] = 0.f;
  for (int j0 = 0; j0 < n; j0 += key_tile) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < key_tile * D; idx += blockDim.x) {
      const int j = idx / D, t = idx % D;
      const bool in = j0 + j < n;
      const long long at = static_cast<long long>(j0 + j) * width + col0 + t;
      ks[j][t] = in ? k[at] : 0.f;
      vs[j][t] = in ? v[at] : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    const bool key = j0 + lane < n;
    float s = -INFINITY;
    if (key) {
      float d0 = 0.f, d1 = 0.f;
      for (int t = 0; t < D; t += 2) {
        d0 += qs[warp][t] * ks[lane][t];
        d1 += qs[warp][t + 1] * ks[lane][t + 1];
      }
      s = d0 + d1;
    }
    const float m_new = fmaxf(m, warp_max(s));
    const float p = key ? expf(s - m_new) : 0.f;
    const float correction = expf(m - m_new);
    l = l * correction + warp_sum(p);
    for (int i = 0; i < per_lane; ++i) acc[i] *= correction;
    const int keys = min(key_tile, n - j0);
    for (int j = 0; j < keys; ++j) {
      const float pj = __shfl_sync(full_mask, p, j);
      for (int i = 0; i < per_lane; ++i) acc[i] += pj * vs[j][lane + 32 * i];
    }
    m = m_new;
  }
  if (active)
    for (int i = 0; i < per_lane; ++i)
      out[static_cast<long long>(row) * width + col0 + lane + 32 * i] = acc[i] / l;
}

unsigned blocks_for(long long items, int threads) {
  return static_cast<unsigned>((items + threads - 1) / threads);
}

}  // namespace

void layer_norm(const float* x, float* y, int rows, int n, cudaStream_t stream) {
  if (rows > 0) layer_norm_kernel<<<rows, 256, 0, stream>>>(x, y, n);
}

void rms_norm_heads(float* x, int rows, int width, int head_dim, const float* weight,
                    cudaStream_t stream) {
  const long long items = static_cast<long long>(rows) * (width / head_dim);
  if (items > 0) rms_norm_heads_kernel<<<blocks_for(items, 8), 256, 0, stream>>>(x, rows, width, head_dim, weight);
}

void rope(float* x, int rows, int width, int head_dim, const float* cos, const float* sin,
          cudaStream_t stream) {
  const long long pairs = static_cast<long long>(rows) * width / 2;
  if (pairs > 0) rope_kernel<<<blocks_for(pairs, 256), 256, 0, stream>>>(x, rows, width, head_dim, cos, sin);
}

void gelu_tanh(float* x, long long n, cudaStream_t stream) {
  if (n > 0) gelu_tanh_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, n);
}

void silu(float* x, long long n, cudaStream_t stream) {
  if (n > 0) silu_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, n);
}

void modulate(float* x, int rows, int n, const float* shift, const float* scale,
              cudaStream_t stream) {
  const long long items = static_cast<long long>(rows) * n;
  if (items > 0) modulate_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(x, rows, n, shift, scale);
}

void gated_add(float* x, int rows, int n, const float* gate, const float* y, int y_stride,
               cudaStream_t stream) {
  const long long items = static_cast<long long>(rows) * n;
  if (items > 0) gated_add_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(x, rows, n, gate, y, y_stride);
}

bool attention(const float* q, const float* k, const float* v, float* out, int n, int width,
               int head_dim, cudaStream_t stream) {
  if (n <= 0) return true;
  const dim3 grid(blocks_for(n, attention_warps), static_cast<unsigned>(width / head_dim));
  const float scale = 1.f / sqrtf(static_cast<float>(head_dim));
  if (head_dim == 64) {
    attention_kernel<64><<<grid, attention_warps * 32, 0, stream>>>(q, k, v, out, n, width, scale);
  } else if (head_dim == 128) {
    attention_kernel<128><<<grid, attention_warps * 32, 0, stream>>>(q, k, v, out, n, width, scale);
  } else {
    return false;
  }
  return true;
}

}  // namespace flux::gpu
