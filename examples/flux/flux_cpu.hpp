// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The CPU float kernels of the FLUX.1 forward: linear layers over weights in their file
/// dtype (bf16, f16 or f32, widened to float row by row), LayerNorm without affine, RMSNorm over
/// each head, RoPE on interleaved pairs, GELU (tanh), SiLU, and attention that keeps one row of
/// scores per query (never the N x N matrix). Single-threaded and in a fixed order, so a run is
/// bitwise reproducible: the streamed and the all-resident forward agree to the bit. These are
/// the reference the GPU kernels are held to; they are written for clarity, with enough care
/// (a row of the weight widened once per output, four partial sums) to run the tiny test model
/// in milliseconds. Example code (examples/flux/).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/model/dtype.hpp"

namespace flux::cpu {

/// @brief A weight as the engine sees it: bytes in the file's dtype, wherever they lie (the
/// lease's device pointer on host_sim, the host copy in the resident reference).
struct tensor_ref {
  const std::byte* data = nullptr;
  ddo::dtype type = ddo::dtype::f32;
  std::size_t elements = 0;
};

[[nodiscard]] inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while ((mantissa & 0x400u) == 0);
      bits = sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// @brief Widens elements [first, first + out.size()) of @p t to float.
inline void widen(const tensor_ref& t, std::size_t first, std::span<float> out) {
  const std::byte* p = t.data + first * ddo::size_of(t.type);
  switch (t.type) {
    case ddo::dtype::f32:
      std::memcpy(out.data(), p, out.size() * 4);
      return;
    case ddo::dtype::bf16:
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
        std::memcpy(&out[i], &bits, 4);
      }
      return;
    case ddo::dtype::f16:
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = half_to_float(h);
      }
      return;
    default:
      throw ddo::usage_error("flux: weights must be bf16, f16 or f32, got " +
                             std::string(ddo::to_string(t.type)));
  }
}

/// @brief The whole of @p t as floats.
[[nodiscard]] inline std::vector<float> to_floats(const tensor_ref& t) {
  std::vector<float> out(t.elements);
  widen(t, 0, out);
  return out;
}

/// @brief y[r, o] = b[o] + sum_k x[r, k] W[o, k] (PyTorch Linear: W is [out, in]); x is
/// rows x in, y rows x out, both row-major with the given strides (a strided y lets one call
/// write a column block of a wider activation).
inline void linear(const float* x, std::size_t x_stride, std::size_t rows, const tensor_ref& w,
                   const tensor_ref& b, std::size_t in, std::size_t out, float* y,
                   std::size_t y_stride) {
  DDO_EXPECTS(w.elements == in * out && b.elements == out, "flux: linear shape mismatch");
  std::vector<float> row(in), bias(out);
  widen(b, 0, bias);
  // The row through a raw pointer: the sanitizer builds run this unoptimised, where
  // vector::operator[] is a call per multiply (37% of ddo-flux's CPU path under ASan).
  const float* rw = row.data();
  for (std::size_t o = 0; o < out; ++o) {
    widen(w, o * in, row);
    for (std::size_t r = 0; r < rows; ++r) {
      const float* xr = x + r * x_stride;
      float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
      // The four-wide part ends at a bound computed once: written as `k + 4 <= in`, g++ 12 at
      // -O3 proves an impossible wrapped trip count for the scalar tail and stops -Werror builds.
      const std::size_t in_by_four = in - in % 4;
      std::size_t k = 0;
      for (; k < in_by_four; k += 4) {
        s0 += xr[k] * rw[k];
        s1 += xr[k + 1] * rw[k + 1];
        s2 += xr[k + 2] * rw[k + 2];
        s3 += xr[k + 3] * rw[k + 3];
      }
      for (; k < in; ++k) s0 += xr[k] * rw[k];
      y[r * y_stride + o] = bias[o] + ((s0 + s1) + (s2 + s3));
    }
  }
}

/// @brief LayerNorm over each row of @p x (rows x n) without affine parameters (eps 1e-6).
inline void layer_norm(const float* x, std::size_t rows, std::size_t n, float* y) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double mean = 0.0;
    for (std::size_t i = 0; i < n; ++i) mean += xr[i];
    mean /= static_cast<double>(n);
    double var = 0.0;
    for (std::size_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(n);
    const auto inv = static_cast<float>(1.0 / std::sqrt(var + 1e-6));
    const auto m = static_cast<float>(mean);
    for (std::size_t i = 0; i < n; ++i) y[r * n + i] = (xr[i] - m) * inv;
  }
}

/// @brief x * (1 + scale) + shift per row (adaLN modulation), in place.
inline void modulate(float* x, std::size_t rows, std::size_t n, const float* shift,
                     const float* scale) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < n; ++i) x[r * n + i] = x[r * n + i] * (1.f + scale[i]) + shift[i];
}

/// @brief x += gate * y per row (the gated residual), @p y with its own stride.
inline void gated_add(float* x, std::size_t rows, std::size_t n, const float* gate, const float* y,
                      std::size_t y_stride) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < n; ++i) x[r * n + i] += gate[i] * y[r * y_stride + i];
}

/// @brief RMSNorm (eps 1e-6) of each head_dim-wide piece of each row, times @p weight.
inline void rms_norm_heads(float* x, std::size_t rows, std::size_t width, std::size_t head_dim,
                           const std::vector<float>& weight) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t h = 0; h < width; h += head_dim) {
      float* v = x + r * width + h;
      double ss = 0.0;
      for (std::size_t i = 0; i < head_dim; ++i) ss += static_cast<double>(v[i]) * v[i];
      const auto inv =
          static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(head_dim) + 1e-6));
      for (std::size_t i = 0; i < head_dim; ++i) v[i] = v[i] * inv * weight[i];
    }
}

/// @brief tanh-approximated GELU, in place.
inline void gelu_tanh(float* x, std::size_t n) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.f + std::tanh(k * (v + 0.044715f * v * v * v)));
  }
}

/// @brief SiLU (x * sigmoid(x)), in place.
inline void silu(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = x[i] / (1.f + std::exp(-x[i]));
}

/// @brief Rotates the interleaved pairs (2k, 2k + 1) of every head of every row by the angles
/// whose cos and sin are @p cos / @p sin (rows x head_dim, each pair's value repeated).
inline void rope(float* x, std::size_t rows, std::size_t width, std::size_t head_dim,
                 const float* cos, const float* sin) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t h = 0; h < width; h += head_dim) {
      float* v = x + r * width + h;
      const float* c = cos + r * head_dim;
      const float* s = sin + r * head_dim;
      for (std::size_t i = 0; i < head_dim; i += 2) {
        const float a = v[i], b = v[i + 1];
        v[i] = a * c[i] - b * s[i];
        v[i + 1] = b * c[i + 1] + a * s[i + 1];
      }
    }
}

/// @brief softmax(q k^T / sqrt(d)) v per head over n tokens (q, k, v, out: n x width, heads of
/// head_dim side by side). One query at a time with one row of scores: memory O(n), not O(n^2).
inline void attention(const float* q, const float* k, const float* v, std::size_t n,
                      std::size_t width, std::size_t head_dim, float* out) {
  std::vector<float> scores(n);
  std::vector<double> acc(head_dim);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  for (std::size_t h = 0; h < width; h += head_dim)
    for (std::size_t i = 0; i < n; ++i) {
      const float* qi = q + i * width + h;
      float top = -INFINITY;
      for (std::size_t j = 0; j < n; ++j) {
        const float* kj = k + j * width + h;
        float s0 = 0.f, s1 = 0.f;
        for (std::size_t t = 0; t < head_dim; t += 2) {
          s0 += qi[t] * kj[t];
          s1 += qi[t + 1] * kj[t + 1];
        }
        scores[j] = static_cast<float>((s0 + s1) * scale);
        top = std::max(top, scores[j]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::size_t j = 0; j < n; ++j) {
        const double p = std::exp(static_cast<double>(scores[j] - top));
        sum += p;
        const float* vj = v + j * width + h;
        for (std::size_t t = 0; t < head_dim; ++t) acc[t] += p * vj[t];
      }
      for (std::size_t t = 0; t < head_dim; ++t)
        out[i * width + h + t] = static_cast<float>(acc[t] / sum);
    }
}

}  // namespace flux::cpu
