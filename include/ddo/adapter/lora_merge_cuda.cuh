// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The merge on a CUDA device (compile with nvcc, in the engine's .cu): the arithmetic of
/// adapter/lora_merge.hpp step by step — the base element converted exactly to float, per term
/// d = fmaf(B[o,r], A[r,c], d) over r = 0..rank-1 then acc = fmaf(s, d, acc), rounded once to
/// nearest even — so it gives the host reference's bits. Pass ddo::launch_lora_merge_cuda to
/// basic_offloader::set_lora_merge_launcher: the runtime then launches it on its copy stream
/// after a slot's copies and before the slot's ready event (docs/adapters.md).
///
/// One thread per weight element: A's row r is read coalesced across a warp's columns and B's
/// row o is broadcast; a rank-64 merge of a 3072 x 3072 bf16 weight is 0.6 GFMA. The factors are
/// F32, BF16 or F16 (lora_term::factor_type), each element converted exactly.

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

}  // namespace detail

/// @brief Launches @p job's merge on @p stream (a cudaStream_t); a lora_merge_launcher.
/// @throws cuda_error when the launch fails, usage_error for a type the merge does not take.
inline void launch_lora_merge_cuda(const lora_merge_job& job, void* stream) {
  DDO_EXPECTS(lora_mergeable(job.type), "launch_lora_merge_cuda: a LoRA merges into BF16, F16 "
                                        "or F32 weights only");
  const std::int64_t n = job.rows * job.cols;
  if (n == 0 || job.term_count == 0) return;
  constexpr unsigned threads = 256;
  const std::int64_t wanted = (n + threads - 1) / threads;
  const auto blocks = static_cast<unsigned>(wanted < 65535 ? wanted : 65535);
  detail::lora_merge_kernel<><<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(job);
  DDO_CUDA_TRY(cudaGetLastError());
}

}  // namespace v0
}  // namespace ddo
