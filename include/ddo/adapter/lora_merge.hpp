// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The merge W' = W + Σ_i s_i · B_i · A_i: the one reference function (host_sim's slots,
/// resident weights on host_sim, the CPU forward). Per element, in fp32 with a fixed order: the
/// base element converted exactly to float; for each term in the order given, d = Σ_r B[o,r] ·
/// A[r,c] accumulated with fma over r = 0..rank-1, then acc = fma(s, d, acc); rounded once to the
/// weight's dtype (nearest even). Every step is an IEEE fma or an exact conversion, so a device
/// kernel doing the same steps (fmaf, __float2bfloat16_rn) gives the same bits.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "ddo/adapter/float_bits.hpp"
#include "ddo/core/error.hpp"
#include "ddo/model/dtype.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One adapter's delta on one weight: A (rank × cols, row-major) and B (rows × rank),
/// both of @p factor_type (F32, BF16 or F16: each element converted exactly to float), and its
/// scale s (the engine's scale × alpha / rank, one float product).
struct lora_term {
  const void* down = nullptr;  ///< A
  const void* up = nullptr;    ///< B
  std::int64_t rank = 0;
  float scale = 1.0f;
  dtype factor_type = dtype::f32;
};

/// @brief Whether the merge takes weights of @p type (bf16, fp16, fp32); fp8 and integer formats
/// need scales the merge does not know: the engine applies the delta in its own GEMM there.
[[nodiscard]] constexpr bool lora_mergeable(dtype type) noexcept {
  return type == dtype::bf16 || type == dtype::f16 || type == dtype::f32;
}

namespace detail {
// __builtin_fmaf, not std::fma: the same IEEE fma without <cmath> in every TU of the runtime
// (the include-cost check, docs/development.md).
inline float load_weight_element(const std::byte* w, dtype type, std::size_t k) noexcept {
  if (type == dtype::f32) {
    float v;
    std::memcpy(&v, w + 4 * k, 4);
    return v;
  }
  std::uint16_t bits;
  std::memcpy(&bits, w + 2 * k, 2);
  return type == dtype::bf16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
}
inline void store_weight_element(std::byte* w, dtype type, std::size_t k, float v) noexcept {
  if (type == dtype::f32) {
    std::memcpy(w + 4 * k, &v, 4);
    return;
  }
  const std::uint16_t bits = type == dtype::bf16 ? float_to_bf16_bits(v) : float_to_f16_bits(v);
  std::memcpy(w + 2 * k, &bits, 2);
}
}  // namespace detail

/// @brief Merges @p terms into rows [row_begin, row_end) of the weight at @p weight (rows × cols,
/// row-major, of @p type) in place (see the file comment for the arithmetic).
/// @throws usage_error for a type the merge does not take.
inline void merge_lora_rows(std::byte* weight, dtype type, std::int64_t cols,
                            std::span<const lora_term> terms, std::int64_t row_begin,
                            std::int64_t row_end) {
  DDO_EXPECTS(lora_mergeable(type),
              "merge_lora_rows: a LoRA merges into BF16, F16 or F32 weights, "
              "not " +
                  std::string(to_string(type)));
  for (std::int64_t o = row_begin; o < row_end; ++o) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto k = static_cast<std::size_t>(o * cols + c);
      float acc = detail::load_weight_element(weight, type, k);
      for (const auto& t : terms) {
        const auto* a = static_cast<const std::byte*>(t.down);
        const auto* b = static_cast<const std::byte*>(t.up);
        float d = 0.0f;
        for (std::int64_t r = 0; r < t.rank; ++r)
          d = __builtin_fmaf(
              detail::load_weight_element(b, t.factor_type,
                                          static_cast<std::size_t>(o * t.rank + r)),
              detail::load_weight_element(a, t.factor_type, static_cast<std::size_t>(r * cols + c)),
              d);
        acc = __builtin_fmaf(t.scale, d, acc);
      }
      detail::store_weight_element(weight, type, k, acc);
    }
  }
}

/// @brief The most adapters merged into one weight at once (a merge job carries its terms by
/// value, so a device kernel takes it as one parameter).
inline constexpr std::size_t max_lora_terms = 8;

/// @brief One weight's merge as the runtime issues it: the weight's device bytes and every
/// attached adapter's term on it, in attach order (the factors' addresses are device addresses
/// on a GPU route; host_sim's device memory is host memory).
struct lora_merge_job {
  std::byte* weight = nullptr;
  dtype type = dtype::bf16;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::size_t term_count = 0;
  lora_term terms[max_lora_terms] = {};
};

/// @brief Launches @p job on a device stream (the engine's compiled merge kernel,
/// adapter/lora_merge_cuda.cuh: the same arithmetic on the device). @p stream is the
/// transport's native stream (a cudaStream_t on the linear route).
using lora_merge_launcher = void (*)(const lora_merge_job& job, void* stream);

/// @brief Merges @p terms into the whole weight (rows × cols). See merge_lora_rows.
inline void merge_lora(std::byte* weight, dtype type, std::int64_t rows, std::int64_t cols,
                       std::span<const lora_term> terms) {
  merge_lora_rows(weight, type, cols, terms, 0, rows);
}

/// @brief Runs @p job on the host (host_sim's merge). See merge_lora_rows.
inline void merge_lora(const lora_merge_job& job) {
  merge_lora_rows(job.weight, job.type, job.cols, std::span(job.terms, job.term_count), 0,
                  job.rows);
}

}  // namespace v0
}  // namespace ddo
