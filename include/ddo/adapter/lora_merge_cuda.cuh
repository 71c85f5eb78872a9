// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The merge on a CUDA device (compile with nvcc, in the engine's .cu): the arithmetic of
/// adapter/lora_merge.hpp step by step — the base element converted exactly to float, per term
/// d = fmaf(B[o,r], A[r,c], d) over r = 0..rank-1 then acc = fmaf(s, d, acc), rounded once to
/// nearest even — so it gives the host reference's bits. Pass ddo::launch_lora_merge_cuda to
/// basic_offloader::set_lora_merge_launcher: the runtime launches it on its merge stream after a
/// slot's copies (an event wait), and the slot's ready event is recorded again after it, so the
/// copy stream goes on to the next slot meanwhile (docs/adapters.md).
///
/// The tiled kernel: a block of 256 threads owns 128 x 128 outputs, each thread an 8 x 8 register
/// micro-tile; B's rows and A's columns pass through shared memory in chunks of 16 ranks,
/// converted to float once there. Only data reuse changes: every output still runs its own
/// fmaf chain over r in order (no tensor cores, no split over the rank, no reassociation), so
/// the bits stay the reference's; a chunk shorter than 16 ranks runs only its ranks (a padded
/// fmaf(0, 0, -0.0f) would give +0). ~0.25 shared loads per FMA: near the fp32 FMA peak, where
/// the one-thread-per-element kernel (kept for grids the tiled one does not cover) reads two
/// global values per FMA. The factors are F32, BF16 or F16 (lora_term::factor_type), each
/// element converted exactly.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "ddo/adapter/lora_merge.hpp"
#include "ddo/core/error.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

__device__ inline float lora_load_element(const std::byte* w, dtype type, std::int64_t k) {
  if (type == dtype::f32) return reinterpret_cast<const float*>(w)[k];
  const std::uint32_t bits = reinterpret_cast<const std::uint16_t*>(w)[k];
  if (type == dtype::bf16) return __uint_as_float(bits << 16);
  // IEEE binary16, subnormals included (exact).
  const std::uint32_t sign = (bits & 0x8000u) << 16, exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return __uint_as_float(sign);
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  return __uint_as_float(sign | (static_cast<std::uint32_t>(113 - shift) << 23) |
                         ((mantissa & 0x3ffu) << 13));
}

__device__ inline std::uint16_t lora_round_f16(float x) {
  const std::uint32_t u = __float_as_uint(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return sign;
    const std::uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
    const std::uint32_t q = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    const bool up = rest > half || (rest == half && (q & 1u));
    return static_cast<std::uint16_t>(sign | (q + (up ? 1u : 0u)));
  }
  const std::uint32_t rebased = a - (112u << 23);
  return static_cast<std::uint16_t>(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
}

__device__ inline void lora_store_element(std::byte* w, dtype type, std::int64_t k, float v) {
  if (type == dtype::f32) {
    reinterpret_cast<float*>(w)[k] = v;
    return;
  }
  std::uint16_t bits;
  if (type == dtype::bf16) {
    const std::uint32_t u = __float_as_uint(v);
    bits = (u & 0x7fffffffu) > 0x7f800000u
               ? static_cast<std::uint16_t>((u >> 16) | 0x0040u)
               : static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  } else {
    bits = lora_round_f16(v);
  }
  reinterpret_cast<std::uint16_t*>(w)[k] = bits;
}

// A template, so that every TU including this header may instantiate it (no ODR clash).
template <int = 0>
__global__ void lora_merge_kernel(lora_merge_job job) {
  const std::int64_t n = job.rows * job.cols;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const std::int64_t o = k / job.cols, c = k - o * job.cols;
    float acc = lora_load_element(job.weight, job.type, k);
    for (std::size_t t = 0; t < job.term_count; ++t) {
      const lora_term& term = job.terms[t];
      const auto* a = static_cast<const std::byte*>(term.down);
      const auto* b = static_cast<const std::byte*>(term.up);
      float d = 0.0f;
      for (std::int64_t r = 0; r < term.rank; ++r)
        d = fmaf(lora_load_element(b, term.factor_type, o * term.rank + r),
                 lora_load_element(a, term.factor_type, r * job.cols + c), d);
      acc = fmaf(term.scale, d, acc);
    }
    lora_store_element(job.weight, job.type, k, acc);
  }
}

/// The tiled kernel's shape (see the file comment).
struct lora_tile {
  static constexpr int rows = 128, cols = 128, ranks = 16, threads = 256;
  static constexpr int pad = 4;  // B's transposed rows padded: fewer bank conflicts on the fill
};

struct alignas(16) lora_tile_smem {
  float a[lora_tile::ranks][lora_tile::cols];                   // A[r0 + k, col0 + n]
  float b[lora_tile::ranks][lora_tile::rows + lora_tile::pad];  // B[row0 + m, r0 + k]
};

// Thread (tx, ty)'s i-th row (column) of the tile: 4 at ty*4 and 4 at 64 + ty*4, so that a
// warp's float4 reads of shared memory are conflict-free and its stores span whole rows.
__device__ inline int lora_tile_offset(int t, int i) {
  return t * 4 + (i < 4 ? i : 60 + i);
}

/// Fills the shared tile with ranks [r0, r0 + kc) of @p term; out of range reads as 0 (those
/// outputs are never stored, and ranks past kc are never multiplied).
__device__ inline void lora_tile_fill(lora_tile_smem& s, const lora_term& term, std::int64_t rows,
                                      std::int64_t cols, std::int64_t row0, std::int64_t col0,
                                      std::int64_t r0, int kc) {
  const auto* a = static_cast<const std::byte*>(term.down);
  const auto* b = static_cast<const std::byte*>(term.up);
  for (int i = static_cast<int>(threadIdx.x); i < lora_tile::ranks * lora_tile::cols;
       i += lora_tile::threads) {
    const int k = i / lora_tile::cols, n = i % lora_tile::cols;
    s.a[k][n] = k < kc && col0 + n < cols
                    ? lora_load_element(a, term.factor_type, (r0 + k) * cols + col0 + n)
                    : 0.0f;
  }
  for (int i = static_cast<int>(threadIdx.x); i < lora_tile::ranks * lora_tile::rows;
       i += lora_tile::threads) {
    const int m = i / lora_tile::ranks, k = i % lora_tile::ranks;
    s.b[k][m] = k < kc && row0 + m < rows
                    ? lora_load_element(b, term.factor_type, (row0 + m) * term.rank + r0 + k)
                    : 0.0f;
  }
}

/// d[i][j] = fmaf(B[o_i, r], A[r, c_j], d[i][j]) for the chunk's kc ranks, in order.
__device__ inline void lora_tile_chunk(const lora_tile_smem& s, int tx, int ty, int kc,
                                       float (&d)[8][8]) {
  for (int k = 0; k < kc; ++k) {
    float bv[8], av[8];
    *reinterpret_cast<float4*>(bv) = *reinterpret_cast<const float4*>(&s.b[k][ty * 4]);
    *reinterpret_cast<float4*>(bv + 4) = *reinterpret_cast<const float4*>(&s.b[k][64 + ty * 4]);
    *reinterpret_cast<float4*>(av) = *reinterpret_cast<const float4*>(&s.a[k][tx * 4]);
    *reinterpret_cast<float4*>(av + 4) = *reinterpret_cast<const float4*>(&s.a[k][64 + tx * 4]);
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) d[i][j] = fmaf(bv[i], av[j], d[i][j]);
  }
}

/// One term over the thread's micro-tile: d over the whole rank, then acc = fmaf(scale, d, acc).
__device__ inline void lora_tile_term(lora_tile_smem& s, const lora_term& term, std::int64_t rows,
                                      std::int64_t cols, std::int64_t row0, std::int64_t col0,
                                      float (&acc)[8][8]) {
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  float d[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) d[i][j] = 0.0f;
  for (std::int64_t r0 = 0; r0 < term.rank; r0 += lora_tile::ranks) {
    const int kc = static_cast<int>(
        term.rank - r0 < lora_tile::ranks ? term.rank - r0 : std::int64_t{lora_tile::ranks});
    __syncthreads();  // the previous chunk's reads are done
    lora_tile_fill(s, term, rows, cols, row0, col0, r0, kc);
    __syncthreads();
    lora_tile_chunk(s, tx, ty, kc, d);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(term.scale, d[i][j], acc[i][j]);
}

/// Loads (store == false) or stores the thread's micro-tile of the weight.
__device__ inline void lora_tile_weight(const lora_merge_job& job, std::int64_t row0,
                                        std::int64_t col0, float (&acc)[8][8], bool store) {
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const std::int64_t o = row0 + lora_tile_offset(ty, i);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const std::int64_t c = col0 + lora_tile_offset(tx, j);
      if (o >= job.rows || c >= job.cols) continue;
      if (store)
        lora_store_element(job.weight, job.type, o * job.cols + c, acc[i][j]);
      else
        acc[i][j] = lora_load_element(job.weight, job.type, o * job.cols + c);
    }
  }
}

template <int = 0>
__global__ void __launch_bounds__(lora_tile::threads) lora_merge_tiled_kernel(lora_merge_job job) {
  __shared__ lora_tile_smem s;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * lora_tile::rows;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * lora_tile::cols;
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  lora_tile_weight(job, row0, col0, acc, false);
  for (std::size_t t = 0; t < job.term_count; ++t)
    lora_tile_term(s, job.terms[t], job.rows, job.cols, row0, col0, acc);
  lora_tile_weight(job, row0, col0, acc, true);
}

/// The one-thread-per-element kernel (the tiled one's fallback; the GPU test runs both).
inline void launch_lora_merge_elementwise(const lora_merge_job& job, cudaStream_t s) {
  constexpr unsigned threads = 256;
  const std::int64_t wanted = (job.rows * job.cols + threads - 1) / threads;
  const auto blocks = static_cast<unsigned>(wanted < 65535 ? wanted : 65535);
  lora_merge_kernel<><<<blocks, threads, 0, s>>>(job);
}

}  // namespace detail

/// @brief Launches @p job's merge on @p stream (a cudaStream_t); a lora_merge_launcher.
/// @throws cuda_error when the launch fails, usage_error for a type the merge does not take.
inline void launch_lora_merge_cuda(const lora_merge_job& job, void* stream) {
  DDO_EXPECTS(lora_mergeable(job.type), "launch_lora_merge_cuda: a LoRA merges into BF16, F16 "
                                        "or F32 weights only");
  const std::int64_t n = job.rows * job.cols;
  if (n == 0 || job.term_count == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t row_tiles = (job.rows + detail::lora_tile::rows - 1) / detail::lora_tile::rows;
  const std::int64_t col_tiles = (job.cols + detail::lora_tile::cols - 1) / detail::lora_tile::cols;
  if (row_tiles <= 65535 && col_tiles <= 0x7fffffff) {
    const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles));
    detail::lora_merge_tiled_kernel<><<<grid, detail::lora_tile::threads, 0, s>>>(job);
  } else {  // more than 8M rows: the grid-stride kernel, same bits
    detail::launch_lora_merge_elementwise(job, s);
  }
  DDO_CUDA_TRY(cudaGetLastError());
}

}  // namespace v0
}  // namespace ddo
