// SPDX-License-Identifier: Apache-2.0
// The FLUX.1 forward's CUDA kernels (declared and described in flux_kernels.hpp). Reductions use
// fixed shuffle trees and fixed per-thread strides, so a kernel gives the same bits every run.
// Every launch is checked where it is made (cudaGetLastError: a host call, no sync): a launch
// that fails (a bad configuration, more shared memory than the device allows, no image for the
// device) throws ddo::cuda_error naming the kernel instead of leaving stale outputs.

#include <cuda_bf16.h>
#include <math.h>

#include <cstdlib>
#include <atomic>
#include <cstdint>
#include <string>

#include "ddo/adapter/lora_merge_cuda.cuh"

#include "ddo/core/error.hpp"
#include "flux/flux_kernels.hpp"

namespace flux::gpu {
namespace {

using bf16 = __nv_bfloat16;
constexpr unsigned full_mask = 0xffffffffu;
constexpr int row_threads = 256;  // threads per block of the row-wise element kernels

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(full_mask, v, o);
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

__device__ inline float load_float(const void* p, bool is_bf16, int i) {
  return is_bf16 ? __bfloat162float(static_cast<const bf16*>(p)[i])
                 : static_cast<const float*>(p)[i];
}

// The row-wise element kernels run on a grid of (rows, column blocks): row and column come from
// the block index, with no 64-bit division per element.
#define FLUX_ROW_COL                                                      \
  const long long r = blockIdx.x;                                         \
  const int c = static_cast<int>(blockIdx.y) * row_threads + threadIdx.x; \
  if (c >= n) return

/// One warp per (row, head): RMSNorm of the head (float), times the weight, RoPE on its
/// interleaved pairs, rounded back to bf16 in place. Each lane holds D / 32 consecutive values,
/// so a RoPE pair never leaves its lane.
template <int D>
__global__ void rms_rope_bf16_kernel(bf16* x, int row0, int rows, int width, const void* weight,
                                     bool weight_bf16, const float* cos, const float* sin) {
  constexpr int per = D / 32;
  const int heads = width / D;
  const int item = static_cast<int>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (item >= rows * heads) return;
  const int lane = threadIdx.x % 32, i = lane * per;
  const long long row = row0 + item / heads;
  bf16* p = x + row * width + (item % heads) * D + i;
  float v[per];
  for (int e = 0; e < per; e += 2) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p + e));
    v[e] = f.x;
    v[e + 1] = f.y;
  }
  float ss = 0.f;
  for (int e = 0; e < per; ++e) ss += v[e] * v[e];
  const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(D) + 1e-6f);
  for (int e = 0; e < per; ++e) v[e] = v[e] * inv * load_float(weight, weight_bf16, i + e);
  const float* cr = cos + row * D + i;
  const float* sr = sin + row * D + i;
  for (int e = 0; e < per; e += 2) {
    const float a = v[e], b = v[e + 1];
    *reinterpret_cast<__nv_bfloat162*>(p + e) =
        __floats2bfloat162_rn(a * cr[e] - b * sr[e], b * cr[e + 1] + a * sr[e + 1]);
  }
}

__global__ void silu_kernel(float* x, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  x[i] = x[i] / (1.f + expf(-x[i]));
}

__global__ void gated_add_kernel(float* x, int n, const float* gate, const float* y, int y_stride) {
  FLUX_ROW_COL;
  x[r * n + c] += gate[c] * y[r * y_stride + c];
}

/// LayerNorm (no affine), then x (1 + scale) + shift, rounded to bf16, in one pass.
__global__ void layer_norm_modulate_bf16_kernel(const float* x, int n, const float* shift,
                                                const float* scale, bf16* y, int y_stride) {
  __shared__ float scratch[32];
  const float* xr = x + static_cast<long long>(blockIdx.x) * n;
  bf16* yr = y + static_cast<long long>(blockIdx.x) * y_stride;
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

/// GELU (tanh) of bf16 values in float, rounded back to bf16 (x may be y).
__global__ void gelu_bf16_kernel(const bf16* x, int n, int x_stride, bf16* y, int y_stride) {
  FLUX_ROW_COL;
  const float v = __bfloat162float(x[r * x_stride + c]);
  y[r * y_stride + c] = __float2bfloat16_rn(
      0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))));
}

__global__ void add_kernel(float* x, const float* y, int n, int y_stride) {
  FLUX_ROW_COL;
  x[r * n + c] += y[r * y_stride + c];
}

__global__ void to_bf16_kernel(const float* x, int n, int x_stride, bf16* y, int y_stride) {
  FLUX_ROW_COL;
  y[r * y_stride + c] = __float2bfloat16_rn(x[r * x_stride + c]);
}

__device__ inline void add_to(float& y, float b) {
  y += b;
}
__device__ inline void add_to(bf16& y, float b) {
  y = __float2bfloat16_rn(__bfloat162float(y) + b);
}

template <class T>
__global__ void add_bias_kernel(T* y, int n, int y_stride, const void* bias, bool bf16_bias) {
  FLUX_ROW_COL;
  add_to(y[r * y_stride + c], load_float(bias, bf16_bias, c));
}

__global__ void timestep_projection_kernel(const float* value, float* out) {
  constexpr int half = 128;
  const int i = threadIdx.x;
  if (i >= half) return;
  const float t = *value * 1000.f;
  const float log_period = -9.210340371976184f;  // -ln(10000), rounded to float as on the host
  const float exponent = log_period * static_cast<float>(i) / static_cast<float>(half);
  const float arg = t * expf(exponent);
  out[i] = cosf(arg);
  out[half + i] = sinf(arg);
}

// --- attention on the tensor cores -------------------------------------------------------------
// FlashAttention-2's scheme with mma.sync m16n8k16 (bf16 in, float accumulate): a block of 4
// warps takes 64 query rows of one head, each warp 16 rows whose q stays in registers; keys and
// values stream through shared memory 64 at a time in two stages (cp.async: the next tile loads
// while this one is computed); k's and v's fragments come by ldmatrix; S = q k^T and the online
// softmax stay in registers (never the N x N scores); P is rounded to bf16 for P v. Keys past n
// are zero-filled and score -inf. Every output is summed in one fixed order (no split-KV, no
// atomics).
constexpr int mma_warps = 4;
/// Keys per shared-memory tile: 64, or 32 with two row tiles per warp (their scores in
/// registers beside twice the outputs).
template <int RT>
constexpr int mma_keys = RT == 1 ? 64 : 32;
constexpr int mma_pad = 8;  // bf16 of padding per shared row: rows 16 bytes apart in the banks

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

__device__ inline void ldmatrix_x4(unsigned (&b)[4], const bf16* p) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(address));
}

__device__ inline void ldmatrix_x4_trans(unsigned (&b)[4], const bf16* p) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(address));
}

/// 16 bytes global -> shared, asynchronously; zeros when !valid (nothing read).
__device__ inline void cp_async16(bf16* shared, const bf16* global, bool valid) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
}

__device__ inline void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// Two adjacent bf16 of row @p row (zero past n) as one register.
__device__ inline unsigned load_pair(const bf16* x, int row, int n, long long at) {
  return row < n ? *reinterpret_cast<const unsigned*>(x + at) : 0u;
}

__device__ inline void store_pair(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
__device__ inline void store_pair(bf16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}

/// Query rows per block: 4 warps of @p RT 16-row tiles each.
template <int RT>
constexpr int mma_rows = mma_warps * 16 * RT;

/// Shared memory: two stages of k and v tiles; with RT > 1 the block's q too (its fragments come
/// by ldmatrix: in registers they would not fit beside RT tiles of outputs).
template <int D, int RT>
constexpr int attention_smem_bytes = (2 * 2 * mma_keys<RT> + (RT > 1 ? mma_rows<RT> : 0)) *
                                     (D + mma_pad) * 2;

/// RT = 1: each warp 16 query rows, q in registers. RT = 2: each warp 32 rows (two tiles) that
/// share every k and v fragment read from shared memory (half the shared-memory reads per
/// FLOP), q in shared memory.
template <int D, int RT, class Out>
__global__ void __launch_bounds__(mma_warps * 32, 2)
    attention_mma_kernel(const bf16* q, const bf16* k, const bf16* v, Out* out, int out_stride,
                         int n, int width, float scale_log2) {
  using tile = bf16[mma_keys<RT>][D + mma_pad];
  using row = bf16[D + mma_pad];
  extern __shared__ __align__(16) unsigned char smem[];
  tile* ks = reinterpret_cast<tile*>(smem);  // [2] stages
  tile* vs = ks + 2;                         // [2] stages
  row* qs = reinterpret_cast<row*>(vs + 2);  // RT > 1: [mma_rows<RT>]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const int col0 = blockIdx.y * D;
  const int block_row = blockIdx.x * mma_rows<RT>, warp_row = warp * 16 * RT;
  const auto load_rows = [&](const bf16* src, bf16* dst0, int rows, int j0) {
    for (int idx = threadIdx.x; idx < rows * D / 8; idx += mma_warps * 32) {
      const int r = idx / (D / 8), c = idx % (D / 8) * 8;
      const bool in = j0 + r < n;
      const long long at = static_cast<long long>(in ? j0 + r : 0) * width + col0 + c;
      cp_async16(dst0 + r * (D + mma_pad) + c, src + at, in);
    }
  };
  bf16* const k_stages = &ks[0][0][0];
  bf16* const v_stages = &vs[0][0][0];
  constexpr int tile_elements = mma_keys<RT> * (D + mma_pad);
  const auto load_tile = [&](int stage, int j0) {
    load_rows(k, k_stages + stage * tile_elements, mma_keys<RT>, j0);
    load_rows(v, v_stages + stage * tile_elements, mma_keys<RT>, j0);
    cp_async_commit();
  };
  bf16* const q_rows = &qs[0][0];
  if constexpr (RT > 1) load_rows(q, q_rows, mma_rows<RT>, block_row);  // with tile 0's group
  load_tile(0, 0);
  unsigned qa[RT == 1 ? D / 16 : 1][4];  // RT = 1: q's A fragments for the whole head
  if constexpr (RT == 1) {
    const int r0 = block_row + warp_row + g, r1 = r0 + 8;
    for (int kk = 0; kk < D / 16; ++kk) {
      const int c = col0 + kk * 16 + tig * 2;
      qa[kk][0] = load_pair(q, r0, n, static_cast<long long>(r0) * width + c);
      qa[kk][1] = load_pair(q, r1, n, static_cast<long long>(r1) * width + c);
      qa[kk][2] = load_pair(q, r0, n, static_cast<long long>(r0) * width + c + 8);
      qa[kk][3] = load_pair(q, r1, n, static_cast<long long>(r1) * width + c + 8);
    }
  }
  float o[RT][D / 8][4];
  for (int rt = 0; rt < RT; ++rt)
    for (int i = 0; i < D / 8; ++i) o[rt][i][0] = o[rt][i][1] = o[rt][i][2] = o[rt][i][3] = 0.f;
  // Running maxima in raw score units (rows g and g + 8 of each tile); row sums per thread (its
  // columns), summed over the quad at the end (every thread of a quad applies the same
  // corrections).
  float m[RT][2], l[RT][2];
  for (int rt = 0; rt < RT; ++rt) m[rt][0] = m[rt][1] = -INFINITY, l[rt][0] = l[rt][1] = 0.f;
  const int tiles = (n + mma_keys<RT> - 1) / mma_keys<RT>;
  for (int t = 0; t < tiles; ++t) {
    const int j0 = t * mma_keys<RT>, stage = t & 1;
    if (t + 1 < tiles) {
      load_tile(stage ^ 1, j0 + mma_keys<RT>);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // this stage's tile (and q) is in shared memory for every warp
    float s[RT][mma_keys<RT> / 8][4];
    for (int rt = 0; rt < RT; ++rt)
      for (int kt = 0; kt < mma_keys<RT> / 8; ++kt)
        s[rt][kt][0] = s[rt][kt][1] = s[rt][kt][2] = s[rt][kt][3] = 0.f;
    for (int kk = 0; kk < D / 16; kk += 2) {
      unsigned a[RT][2][4];  // q's A fragments of k-steps kk, kk + 1
      if constexpr (RT == 1) {
        for (int e = 0; e < 4; ++e) a[0][0][e] = qa[kk][e], a[0][1][e] = qa[kk + 1][e];
      } else {
        for (int rt = 0; rt < RT; ++rt)
          for (int h = 0; h < 2; ++h)
            ldmatrix_x4(a[rt][h],
                        &qs[warp_row + rt * 16 + (lane & 15)][(kk + h) * 16 + (lane >> 4) * 8]);
      }
      for (int kt = 0; kt < mma_keys<RT> / 8; ++kt) {
        // keys kt*8 + 0..7; the four 8x8 matrices are dims kk*16 + {0, 8, 16, 24}: the B
        // fragments of k-steps kk and kk + 1
        unsigned b[4];
        ldmatrix_x4(b, &ks[stage][kt * 8 + (lane & 7)][kk * 16 + (lane >> 3) * 8]);
        for (int rt = 0; rt < RT; ++rt) {
          mma_16816(s[rt][kt], a[rt][0], b[0], b[1]);
          mma_16816(s[rt][kt], a[rt][1], b[2], b[3]);
        }
      }
    }
    if (j0 + mma_keys < RT >> n)  // the last, partial tile
      for (int rt = 0; rt < RT; ++rt)
        for (int kt = 0; kt < mma_keys<RT> / 8; ++kt)
          for (int e = 0; e < 4; ++e)
            if (j0 + kt * 8 + tig * 2 + (e & 1) >= n) s[rt][kt][e] = -INFINITY;
    for (int rt = 0; rt < RT; ++rt) {
      float mx0 = m[rt][0], mx1 = m[rt][1];
      for (int kt = 0; kt < mma_keys<RT> / 8; ++kt) {
        mx0 = fmaxf(mx0, fmaxf(s[rt][kt][0], s[rt][kt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[rt][kt][2], s[rt][kt][3]));
      }
      for (int o2 = 1; o2 < 4; o2 *= 2) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(full_mask, mx0, o2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(full_mask, mx1, o2));
      }
      const float c0 = exp2f((m[rt][0] - mx0) * scale_log2);
      const float c1 = exp2f((m[rt][1] - mx1) * scale_log2);
      m[rt][0] = mx0;
      m[rt][1] = mx1;
      const float ms0 = mx0 * scale_log2, ms1 = mx1 * scale_log2;
      float sum0 = 0.f, sum1 = 0.f;
      for (int kt = 0; kt < mma_keys<RT> / 8; ++kt) {
        s[rt][kt][0] = exp2f(fmaf(s[rt][kt][0], scale_log2, -ms0));
        s[rt][kt][1] = exp2f(fmaf(s[rt][kt][1], scale_log2, -ms0));
        s[rt][kt][2] = exp2f(fmaf(s[rt][kt][2], scale_log2, -ms1));
        s[rt][kt][3] = exp2f(fmaf(s[rt][kt][3], scale_log2, -ms1));
        sum0 += s[rt][kt][0] + s[rt][kt][1];
        sum1 += s[rt][kt][2] + s[rt][kt][3];
      }
      l[rt][0] = l[rt][0] * c0 + sum0;
      l[rt][1] = l[rt][1] * c1 + sum1;
      for (int i = 0; i < D / 8; ++i) {
        o[rt][i][0] *= c0;
        o[rt][i][1] *= c0;
        o[rt][i][2] *= c1;
        o[rt][i][3] *= c1;
      }
    }
    for (int kk = 0; kk < mma_keys<RT> / 16; ++kk) {
      unsigned pa[RT][4];
      for (int rt = 0; rt < RT; ++rt) {
        pa[rt][0] = pack_bf16(s[rt][2 * kk][0], s[rt][2 * kk][1]);
        pa[rt][1] = pack_bf16(s[rt][2 * kk][2], s[rt][2 * kk][3]);
        pa[rt][2] = pack_bf16(s[rt][2 * kk + 1][0], s[rt][2 * kk + 1][1]);
        pa[rt][3] = pack_bf16(s[rt][2 * kk + 1][2], s[rt][2 * kk + 1][3]);
      }
      // v's B fragments by ldmatrix .trans: lanes 0-15 address keys kk*16 + 0..15 of 8 columns,
      // lanes 16-31 the same keys 8 columns on; one x4 load feeds two 8-column tiles.
      const bf16* value = &vs[stage][kk * 16 + (lane & 15)][(lane / 16) * 8];
      for (int i = 0; i < D / 8; i += 2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, value + i * 8);
        for (int rt = 0; rt < RT; ++rt) {
          mma_16816(o[rt][i], pa[rt], b[0], b[1]);
          mma_16816(o[rt][i + 1], pa[rt], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) {
    float l0 = l[rt][0], l1 = l[rt][1];
    for (int o2 = 1; o2 < 4; o2 *= 2) {
      l0 += __shfl_xor_sync(full_mask, l0, o2);
      l1 += __shfl_xor_sync(full_mask, l1, o2);
    }
    const float inv0 = 1.f / l0, inv1 = 1.f / l1;
    const int r0 = block_row + warp_row + rt * 16 + g, r1 = r0 + 8;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int c = col0 + i * 8 + tig * 2;
      if (r0 < n)
        store_pair(out + static_cast<long long>(r0) * out_stride + c, o[rt][i][0] * inv0,
                   o[rt][i][1] * inv0);
      if (r1 < n)
        store_pair(out + static_cast<long long>(r1) * out_stride + c, o[rt][i][2] * inv1,
                   o[rt][i][3] * inv1);
    }
  }
}

/// Throws ddo::cuda_error naming @p kernel (and @p call, the step that failed) for @p status.
[[noreturn]] void throw_kernel_error(cudaError_t status, const char* kernel, const char* call) {
  const char* name = cudaGetErrorName(status);
  const char* text = cudaGetErrorString(status);
  throw ddo::cuda_error(static_cast<int>(status), name ? name : "unknown", call, __FILE__,
                        __LINE__,
                        std::string("flux kernel ") + kernel + ": " + call + " failed: " +
                            (name ? name : "unknown error") + " (" + (text ? text : "") + ")");
}

/// Checks the launch just made of @p kernel: cudaGetLastError returns (and clears) its launch
/// error without waiting for the device; a fault while the kernel runs surfaces at the next
/// synchronization, through DDO_CUDA_TRY there.
void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw_kernel_error(status, kernel, "launch");
}

template <int D, int RT, class Out>
void launch_attention(const bf16* q, const bf16* k, const bf16* v, Out* out, int out_stride, int n,
                      int width, cudaStream_t stream) {
  constexpr int smem = attention_smem_bytes<D, RT>;
  const char* const name = "attention_mma_kernel";
  {
    // Above the 48 KiB default: raised once per device and instantiation (the attribute stays
    // set for the device's context), refused with the numbers where the device allows less. A
    // bit per device ordinal (< 64; beyond, raised at every launch): no lock per launch; two
    // threads that both see it unset both raise it, which is harmless.
    static std::atomic<std::uint64_t> raised{0};
    int device = 0;
    if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess)
      throw_kernel_error(e, name, "cudaGetDevice");
    const std::uint64_t bit = device < 64 ? std::uint64_t{1} << device : 0;
    if (bit == 0 || (raised.load(std::memory_order_acquire) & bit) == 0) {
      const cudaError_t e = cudaFuncSetAttribute(attention_mma_kernel<D, RT, Out>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();  // not sticky: later calls work
        const std::string call = "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " +
                                 std::to_string(smem) + " bytes for head_dim " +
                                 std::to_string(D) + ", " + std::to_string(RT) + " row tile(s))";
        throw_kernel_error(e, name, call.c_str());
      }
      raised.fetch_or(bit, std::memory_order_release);
    }
  }
  const dim3 grid(static_cast<unsigned>((n + mma_rows<RT> - 1) / mma_rows<RT>),
                  static_cast<unsigned>(width / D));
  const float scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(D));
  attention_mma_kernel<D, RT, Out>
      <<<grid, mma_warps * 32, smem, stream>>>(q, k, v, out, out_stride, n, width, scale_log2);
  check_launch(name);
}

template <int D, class Out>
void launch_attention(int row_tiles, const bf16* q, const bf16* k, const bf16* v, Out* out,
                      int out_stride, int n, int width, cudaStream_t stream) {
  if (row_tiles == 1)
    launch_attention<D, 1>(q, k, v, out, out_stride, n, width, stream);
  else
    launch_attention<D, 2>(q, k, v, out, out_stride, n, width, stream);
}

unsigned blocks_for(long long items, int threads) {
  return static_cast<unsigned>((items + threads - 1) / threads);
}

/// The (rows, column blocks) grid of the FLUX_ROW_COL kernels.
dim3 row_grid(int rows, int n) {
  return {static_cast<unsigned>(rows), blocks_for(n, row_threads)};
}

}  // namespace

bool rms_rope_bf16(std::uint16_t* x, int row_begin, int rows, int width, int head_dim,
                   const void* weight, bool weight_bf16, const float* cos, const float* sin,
                   cudaStream_t stream) {
  if (head_dim != 64 && head_dim != 128) return false;
  const long long items = static_cast<long long>(rows) * (width / head_dim);
  if (items <= 0) return true;
  auto* xb = reinterpret_cast<bf16*>(x);
  if (head_dim == 64) {
    rms_rope_bf16_kernel<64><<<blocks_for(items, 8), 256, 0, stream>>>(
        xb, row_begin, rows, width, weight, weight_bf16, cos, sin);
    check_launch("rms_rope_bf16_kernel");
  } else {
    rms_rope_bf16_kernel<128><<<blocks_for(items, 8), 256, 0, stream>>>(
        xb, row_begin, rows, width, weight, weight_bf16, cos, sin);
    check_launch("rms_rope_bf16_kernel");
  }
  return true;
}

void silu(float* x, long long n, cudaStream_t stream) {
  if (n > 0) {
    silu_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, n);
    check_launch("silu_kernel");
  }
}

void gated_add(float* x, int rows, int n, const float* gate, const float* y, int y_stride,
               cudaStream_t stream) {
  if (rows > 0 && n > 0) {
    gated_add_kernel<<<row_grid(rows, n), row_threads, 0, stream>>>(x, n, gate, y, y_stride);
    check_launch("gated_add_kernel");
  }
}

bool attention_bf16(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                    void* out, bool out_bf16, int out_stride, int n, int width, int head_dim,
                    cudaStream_t stream, int row_tiles) {
  if (head_dim != 64 && head_dim != 128) return false;
  if (n <= 0) return true;
  if (row_tiles != 1 && row_tiles != 2) {
    // Read once per process (57 calls a step read it before).
    static const int from_environment = [] {
      const char* env = std::getenv("DDO_FLUX_ATTENTION_ROW_TILES");
      return env != nullptr && env[0] == '1' ? 1 : 2;
    }();
    row_tiles = from_environment;
  }
  const auto* qb = reinterpret_cast<const bf16*>(q);
  const auto* kb = reinterpret_cast<const bf16*>(k);
  const auto* vb = reinterpret_cast<const bf16*>(v);
  auto* of = static_cast<float*>(out);
  auto* ob = static_cast<bf16*>(out);
  if (head_dim == 64) {
    if (out_bf16)
      launch_attention<64>(row_tiles, qb, kb, vb, ob, out_stride, n, width, stream);
    else
      launch_attention<64>(row_tiles, qb, kb, vb, of, out_stride, n, width, stream);
  } else {
    if (out_bf16)
      launch_attention<128>(row_tiles, qb, kb, vb, ob, out_stride, n, width, stream);
    else
      launch_attention<128>(row_tiles, qb, kb, vb, of, out_stride, n, width, stream);
  }
  return true;
}

void add(float* x, const float* y, int rows, int n, int y_stride, cudaStream_t stream) {
  if (rows > 0 && n > 0) {
    add_kernel<<<row_grid(rows, n), row_threads, 0, stream>>>(x, y, n, y_stride);
    check_launch("add_kernel");
  }
}

void to_bf16(const float* x, int rows, int n, int x_stride, std::uint16_t* y, int y_stride,
             cudaStream_t stream) {
  if (rows > 0 && n > 0) {
    to_bf16_kernel<<<row_grid(rows, n), row_threads, 0, stream>>>(
        x, n, x_stride, reinterpret_cast<bf16*>(y), y_stride);
    check_launch("to_bf16_kernel");
  }
}

void add_bias(void* y, bool y_bf16, int rows, int n, int y_stride, const void* bias, bool bf16_bias,
              cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  if (y_bf16) {
    add_bias_kernel<<<row_grid(rows, n), row_threads, 0, stream>>>(static_cast<bf16*>(y), n,
                                                                   y_stride, bias, bf16_bias);
    check_launch("add_bias_kernel");
  } else {
    add_bias_kernel<<<row_grid(rows, n), row_threads, 0, stream>>>(static_cast<float*>(y), n,
                                                                   y_stride, bias, bf16_bias);
    check_launch("add_bias_kernel");
  }
}

void timestep_projection(const float* value, float* out, cudaStream_t stream) {
  timestep_projection_kernel<<<1, 128, 0, stream>>>(value, out);
  check_launch("timestep_projection_kernel");
}

void layer_norm_modulate_bf16(const float* x, int rows, int n, const float* shift,
                              const float* scale, std::uint16_t* y, int y_stride,
                              cudaStream_t stream) {
  if (rows > 0) {
    layer_norm_modulate_bf16_kernel<<<rows, 256, 0, stream>>>(x, n, shift, scale,
                                                              reinterpret_cast<bf16*>(y), y_stride);
    check_launch("layer_norm_modulate_bf16_kernel");
  }
}

void gelu_bf16(const std::uint16_t* x, int rows, int n, int x_stride, std::uint16_t* y,
               int y_stride, cudaStream_t stream) {
  if (rows > 0 && n > 0) {
    gelu_bf16_kernel<<<row_grid(rows, n), row_threads, 0, stream>>>(
        reinterpret_cast<const bf16*>(x), n, x_stride, reinterpret_cast<bf16*>(y), y_stride);
    check_launch("gelu_bf16_kernel");
  }
}

ddo::lora_merge_launcher lora_merge_launcher() { return &ddo::launch_lora_merge_cuda; }

}  // namespace flux::gpu
