// SPDX-License-Identifier: Apache-2.0
// The FLUX.1 forward's CUDA kernels (declared and described in flux_kernels.hpp). Reductions use
// fixed shuffle trees and fixed per-thread strides, so a kernel gives the same bits every run.

#include <cuda_bf16.h>
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

__global__ void silu_kernel(float* x, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  x[i] = x[i] / (1.f + expf(-x[i]));
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
__global__ void attention_kernel(const float* q, const float* k, const float* v, float* out, int n,
                                 int width, float scale) {
  constexpr int per_lane = D / 32;
  __shared__ float ks[key_tile][D + 1];  // + 1: lanes read different rows without bank conflicts
  __shared__ float vs[key_tile][D];
  __shared__ float qs[attention_warps][D];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * attention_warps + warp;
  const int col0 = blockIdx.y * D;
  const bool active = row < n;
  if (active)
    for (int t = lane; t < D; t += 32)
      qs[warp][t] = q[static_cast<long long>(row) * width + col0 + t] * scale;
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

/// LayerNorm (no affine, eps 1e-6), then x (1 + scale) + shift, rounded to bf16, in one pass:
/// the float operations of the CPU path's layer_norm and modulate, in their order.
__global__ void layer_norm_modulate_bf16_kernel(const float* x, int n, const float* shift,
                                                const float* scale, __nv_bfloat16* y,
                                                int y_stride) {
  __shared__ float scratch[32];
  const float* xr = x + static_cast<long long>(blockIdx.x) * n;
  __nv_bfloat16* yr = y + static_cast<long long>(blockIdx.x) * y_stride;
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, scratch) / static_cast<float>(n);
  float v = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += (xr[i] - mean) * (xr[i] - mean);
  const float var = block_sum(v, scratch) / static_cast<float>(n);
  const float inv = rsqrtf(var + 1e-6f);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = __float2bfloat16_rn((xr[i] - mean) * inv * (1.f + scale[i]) + shift[i]);
}

/// GELU (tanh approximation, as the CPU path's gelu_tanh) rounded to bf16, in one pass.
__global__ void gelu_bf16_kernel(const float* x, int rows, int n, int x_stride, __nv_bfloat16* y,
                                 int y_stride) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(rows) * n) return;
  const long long r = i / n;
  const int c = static_cast<int>(i % n);
  const float v = x[r * x_stride + c];
  y[r * y_stride + c] = __float2bfloat16_rn(
      0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))));
}

__global__ void add_kernel(float* x, const float* y, int rows, int n, int y_stride) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(rows) * n) return;
  x[i] += y[(i / n) * y_stride + i % n];
}

__global__ void to_bf16_kernel(const float* x, int rows, int n, int x_stride, __nv_bfloat16* y,
                               int y_stride) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(rows) * n) return;
  const long long r = i / n;
  const int c = static_cast<int>(i % n);
  y[r * y_stride + c] = __float2bfloat16_rn(x[r * x_stride + c]);
}

__global__ void to_float_kernel(const void* x, bool bf16, float* y, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i])
              : static_cast<const float*>(x)[i];
}

__global__ void add_bias_kernel(float* y, int rows, int n, int y_stride, const void* bias,
                                bool bf16) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(rows) * n) return;
  const long long r = i / n;
  const int c = static_cast<int>(i % n);
  y[r * y_stride + c] += bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[c])
                              : static_cast<const float*>(bias)[c];
}

__global__ void timestep_projection_kernel(float t, float* out) {
  constexpr int half = 128;
  const int i = threadIdx.x;
  if (i >= half) return;
  const float log_period = -9.210340371976184f;  // -ln(10000), rounded to float as on the host
  const float exponent = log_period * static_cast<float>(i) / static_cast<float>(half);
  const float arg = t * expf(exponent);
  out[i] = cosf(arg);
  out[half + i] = sinf(arg);
}

// --- attention on the tensor cores -------------------------------------------------------------
// FlashAttention-2's scheme with mma.sync m16n8k16 (bf16 in, float accumulate): a block of 4
// warps takes 64 query rows of one head, each warp 16 rows whose q stays in registers; keys and
// values stream through shared memory 64 at a time; S = q k^T and the online softmax stay in
// registers (never the N x N scores); P is rounded to bf16 for P v. Keys past n score -inf, their
// values are zeros. Every output is summed in one fixed order (no split-KV, no atomics).
constexpr int mma_warps = 8;  // 16 query rows each
constexpr int mma_keys = 64;  // keys per shared-memory tile
constexpr int mma_pad = 8;    // bf16 of padding per shared row: rows 16 bytes apart in the banks

__device__ inline unsigned pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<const unsigned*>(&v);
}

__device__ inline void mma_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two adjacent bf16 of row @p row (zero past n) as one register.
__device__ inline unsigned load_pair(const __nv_bfloat16* x, int row, int n, long long at) {
  return row < n ? *reinterpret_cast<const unsigned*>(x + at) : 0u;
}

template <int D>
__global__ void __launch_bounds__(mma_warps * 32, 2)
    attention_mma_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                         float* out, int n, int width, float scale_log2) {
  __shared__ __align__(16) __nv_bfloat16 ks[mma_keys][D + mma_pad];
  __shared__ __align__(16) __nv_bfloat16 vs[mma_keys][D + mma_pad];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const int col0 = blockIdx.y * D;
  const int r0 = blockIdx.x * (mma_warps * 16) + warp * 16 + g, r1 = r0 + 8;
  unsigned qa[D / 16][4];
  for (int kk = 0; kk < D / 16; ++kk) {
    const int c = col0 + kk * 16 + tig * 2;
    qa[kk][0] = load_pair(q, r0, n, static_cast<long long>(r0) * width + c);
    qa[kk][1] = load_pair(q, r1, n, static_cast<long long>(r1) * width + c);
    qa[kk][2] = load_pair(q, r0, n, static_cast<long long>(r0) * width + c + 8);
    qa[kk][3] = load_pair(q, r1, n, static_cast<long long>(r1) * width + c + 8);
  }
  float o[D / 8][4];
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  constexpr int chunks = mma_keys * D / 8;  // 16-byte pieces of one tile
  for (int j0 = 0; j0 < n; j0 += mma_keys) {
    __syncthreads();  // the previous tile is no longer read
    for (int idx = threadIdx.x; idx < chunks; idx += mma_warps * 32) {
      const int r = idx / (D / 8), c = idx % (D / 8) * 8;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (j0 + r < n) {
        const long long at = static_cast<long long>(j0 + r) * width + col0 + c;
        kv = *reinterpret_cast<const uint4*>(k + at);
        vv = *reinterpret_cast<const uint4*>(v + at);
      }
      *reinterpret_cast<uint4*>(&ks[r][c]) = kv;
      *reinterpret_cast<uint4*>(&vs[r][c]) = vv;
    }
    __syncthreads();
    float s[mma_keys / 8][4];
    for (int t = 0; t < mma_keys / 8; ++t) {
      s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.f;
      const __nv_bfloat16* key = &ks[t * 8 + g][tig * 2];
      for (int kk = 0; kk < D / 16; ++kk)
        mma_16816(s[t], qa[kk], *reinterpret_cast<const unsigned*>(key + kk * 16),
                  *reinterpret_cast<const unsigned*>(key + kk * 16 + 8));
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
    for (int t = 0; t < mma_keys / 8; ++t)
      for (int e = 0; e < 4; ++e) {
        const bool valid = j0 + t * 8 + tig * 2 + (e & 1) < n;
        s[t][e] = valid ? s[t][e] * scale_log2 : -INFINITY;
        if (e < 2)
          mx0 = fmaxf(mx0, s[t][e]);
        else
          mx1 = fmaxf(mx1, s[t][e]);
      }
    for (int o2 = 1; o2 < 4; o2 *= 2) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(full_mask, mx0, o2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(full_mask, mx1, o2));
    }
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float c0 = exp2f(m0 - mn0), c1 = exp2f(m1 - mn1);
    float sum0 = 0.f, sum1 = 0.f;
    for (int t = 0; t < mma_keys / 8; ++t) {
      s[t][0] = exp2f(s[t][0] - mn0);
      s[t][1] = exp2f(s[t][1] - mn0);
      s[t][2] = exp2f(s[t][2] - mn1);
      s[t][3] = exp2f(s[t][3] - mn1);
      sum0 += s[t][0] + s[t][1];
      sum1 += s[t][2] + s[t][3];
    }
    for (int o2 = 1; o2 < 4; o2 *= 2) {
      sum0 += __shfl_xor_sync(full_mask, sum0, o2);
      sum1 += __shfl_xor_sync(full_mask, sum1, o2);
    }
    l0 = l0 * c0 + sum0;
    l1 = l1 * c1 + sum1;
    m0 = mn0;
    m1 = mn1;
    for (int i = 0; i < D / 8; ++i) {
      o[i][0] *= c0;
      o[i][1] *= c0;
      o[i][2] *= c1;
      o[i][3] *= c1;
    }
    for (int kk = 0; kk < mma_keys / 16; ++kk) {
      const unsigned pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]),
                              pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                              pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      // v's B fragments by ldmatrix .trans: lanes 0-15 address keys kk*16 + 0..15 of 8 columns,
      // lanes 16-31 the same keys 8 columns on; one x4 load feeds two 8-column tiles.
      const int key = kk * 16 + (lane & 15);
      for (int i = 0; i < D / 8; i += 2) {
        const unsigned address =
            static_cast<unsigned>(__cvta_generic_to_shared(&vs[key][i * 8 + (lane / 16) * 8]));
        unsigned b0, b1, b2, b3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                     : "r"(address));
        mma_16816(o[i], pa, b0, b1);
        mma_16816(o[i + 1], pa, b2, b3);
      }
    }
  }
  const float inv0 = 1.f / l0, inv1 = 1.f / l1;
  for (int i = 0; i < D / 8; ++i) {
    const int c = col0 + i * 8 + tig * 2;
    if (r0 < n)
      *reinterpret_cast<float2*>(out + static_cast<long long>(r0) * width + c) =
          make_float2(o[i][0] * inv0, o[i][1] * inv0);
    if (r1 < n)
      *reinterpret_cast<float2*>(out + static_cast<long long>(r1) * width + c) =
          make_float2(o[i][2] * inv1, o[i][3] * inv1);
  }
}

unsigned blocks_for(long long items, int threads) {
  return static_cast<unsigned>((items + threads - 1) / threads);
}

}  // namespace

void rms_norm_heads(float* x, int rows, int width, int head_dim, const float* weight,
                    cudaStream_t stream) {
  const long long items = static_cast<long long>(rows) * (width / head_dim);
  if (items > 0)
    rms_norm_heads_kernel<<<blocks_for(items, 8), 256, 0, stream>>>(x, rows, width, head_dim,
                                                                    weight);
}

void rope(float* x, int rows, int width, int head_dim, const float* cos, const float* sin,
          cudaStream_t stream) {
  const long long pairs = static_cast<long long>(rows) * width / 2;
  if (pairs > 0)
    rope_kernel<<<blocks_for(pairs, 256), 256, 0, stream>>>(x, rows, width, head_dim, cos, sin);
}

void silu(float* x, long long n, cudaStream_t stream) {
  if (n > 0) silu_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, n);
}

void gated_add(float* x, int rows, int n, const float* gate, const float* y, int y_stride,
               cudaStream_t stream) {
  const long long items = static_cast<long long>(rows) * n;
  if (items > 0)
    gated_add_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(x, rows, n, gate, y, y_stride);
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

void add(float* x, const float* y, int rows, int n, int y_stride, cudaStream_t stream) {
  const long long items = static_cast<long long>(rows) * n;
  if (items > 0) add_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(x, y, rows, n, y_stride);
}

void to_bf16(const float* x, int rows, int n, int x_stride, std::uint16_t* y, int y_stride,
             cudaStream_t stream) {
  const long long items = static_cast<long long>(rows) * n;
  if (items > 0)
    to_bf16_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(
        x, rows, n, x_stride, reinterpret_cast<__nv_bfloat16*>(y), y_stride);
}

void to_float(const void* x, bool bf16, float* y, long long n, cudaStream_t stream) {
  if (n > 0) to_float_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, bf16, y, n);
}

void add_bias(float* y, int rows, int n, int y_stride, const void* bias, bool bf16,
              cudaStream_t stream) {
  const long long items = static_cast<long long>(rows) * n;
  if (items > 0)
    add_bias_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(y, rows, n, y_stride, bias, bf16);
}

void timestep_projection(float value, float* out, cudaStream_t stream) {
  timestep_projection_kernel<<<1, 128, 0, stream>>>(value * 1000.f, out);
}

bool attention_bf16(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                    float* out, int n, int width, int head_dim, cudaStream_t stream) {
  if (n <= 0) return true;
  const dim3 grid(blocks_for(n, mma_warps * 16), static_cast<unsigned>(width / head_dim));
  const float scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(head_dim));
  const auto* qb = reinterpret_cast<const __nv_bfloat16*>(q);
  const auto* kb = reinterpret_cast<const __nv_bfloat16*>(k);
  const auto* vb = reinterpret_cast<const __nv_bfloat16*>(v);
  if (head_dim == 64) {
    attention_mma_kernel<64>
        <<<grid, mma_warps * 32, 0, stream>>>(qb, kb, vb, out, n, width, scale_log2);
  } else if (head_dim == 128) {
    attention_mma_kernel<128>
        <<<grid, mma_warps * 32, 0, stream>>>(qb, kb, vb, out, n, width, scale_log2);
  } else {
    return false;
  }
  return true;
}

void layer_norm_modulate_bf16(const float* x, int rows, int n, const float* shift,
                              const float* scale, std::uint16_t* y, int y_stride,
                              cudaStream_t stream) {
  if (rows > 0)
    layer_norm_modulate_bf16_kernel<<<rows, 256, 0, stream>>>(
        x, n, shift, scale, reinterpret_cast<__nv_bfloat16*>(y), y_stride);
}

void gelu_bf16(const float* x, int rows, int n, int x_stride, std::uint16_t* y, int y_stride,
               cudaStream_t stream) {
  const long long items = static_cast<long long>(rows) * n;
  if (items > 0)
    gelu_bf16_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(
        x, rows, n, x_stride, reinterpret_cast<__nv_bfloat16*>(y), y_stride);
}

}  // namespace flux::gpu
