// SPDX-License-Identifier: Apache-2.0
// ddo-flux's CUDA kernels (examples/flux/flux_kernels.cu) against their CPU twins
// (examples/flux/flux_cpu.hpp) on seeded data; attention at lengths that are and are not
// multiples of its 64-key tiles and 64-row blocks, and bitwise equal on a second run (no
// atomics, fixed reduction order). Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>

#include "flux/flux_cpu.hpp"
#include "flux/flux_init.hpp"
#include "flux/flux_kernels.hpp"
#include "gpu_support.hpp"

namespace flux_kernels_test {

#define DDO_SKIP_FLUX_WITHOUT_GPU()                                   \
  do {                                                                \
    if (const auto why = ddo_test::gpu_skip_reason(); !why.empty()) { \
      MESSAGE("skipped: " << why);                                    \
      return;                                                         \
    }                                                                 \
  } while (false)

std::vector<float> data(const char* name, std::size_t n) {
  const auto u = flux::seeded_uniform(name, n, 7);
  return {u.begin(), u.end()};
}

/// A device copy of a host vector, freed with the object.
struct device_buffer {
  float* p = nullptr;
  std::size_t n = 0;
  explicit device_buffer(const std::vector<float>& host) : n(host.size()) {
    DDO_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float) + 4));
    DDO_CUDA_TRY(cudaMemcpy(p, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~device_buffer() { cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  [[nodiscard]] std::vector<float> host() const {
    std::vector<float> out(n);
    DDO_CUDA_TRY(cudaDeviceSynchronize());
    DDO_CUDA_TRY(cudaMemcpy(out.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
  }
};

void check_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double tolerance) {
  REQUIRE(gpu.size() == cpu.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < gpu.size(); ++i)
    worst = std::max(worst, std::fabs(double(gpu[i]) - cpu[i]) / (1.0 + std::fabs(double(cpu[i]))));
  CHECK(worst < tolerance);
}

/// Rounds to bf16 (nearest even) on the host: @p bits, and the rounded values as floats.
std::vector<float> round_bf16(const std::vector<float>& x, std::vector<std::uint16_t>& bits) {
  std::vector<float> rounded(x.size());
  bits.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &x[i], 4);
    bits[i] = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    const std::uint32_t back = static_cast<std::uint32_t>(bits[i]) << 16;
    std::memcpy(&rounded[i], &back, 4);
  }
  return rounded;
}

/// bf16 bits back to floats.
std::vector<float> widen(const std::vector<std::uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(bits[i]) << 16;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

/// A device copy of bf16 bits, freed with the object.
struct device_bits {
  std::uint16_t* p = nullptr;
  std::size_t n = 0;
  explicit device_bits(const std::vector<std::uint16_t>& host) : n(host.size()) {
    DDO_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&p), n * 2 + 4));
    DDO_CUDA_TRY(cudaMemcpy(p, host.data(), n * 2, cudaMemcpyHostToDevice));
  }
  ~device_bits() { cudaFree(p); }
  device_bits(const device_bits&) = delete;
  device_bits& operator=(const device_bits&) = delete;
  [[nodiscard]] std::vector<std::uint16_t> host() const {
    std::vector<std::uint16_t> out(n);
    DDO_CUDA_TRY(cudaDeviceSynchronize());
    DDO_CUDA_TRY(cudaMemcpy(out.data(), p, n * 2, cudaMemcpyDeviceToHost));
    return out;
  }
};

TEST_SUITE("gpu") {
  TEST_CASE("flux kernels: SiLU, gated residual and the bias add match the CPU") {
    DDO_SKIP_FLUX_WITHOUT_GPU();
    const int rows = 37, width = 256;
    const auto x = data("x", rows * width);
    {
      device_buffer s(x);
      flux::gpu::silu(s.p, static_cast<long long>(x.size()), nullptr);
      auto cs = x;
      flux::cpu::silu(cs.data(), cs.size());
      check_close(s.host(), cs, 1e-6);
    }
    {
      const auto scale = data("scale", width), y = data("y", rows * width);
      device_buffer dx(x), dsc(scale), dy(y);
      flux::gpu::gated_add(dx.p, rows, width, dsc.p, dy.p, width, nullptr);
      flux::gpu::add_bias(dx.p, false, rows, width, width, dsc.p, false, nullptr);
      auto cpu = x;
      flux::cpu::gated_add(cpu.data(), rows, width, scale.data(), y.data(), width);
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < width; ++c) cpu[r * width + c] += scale[c];
      check_close(dx.host(), cpu, 1e-6);
    }
  }

  TEST_CASE("flux kernels: the fused bf16 kernels match the CPU's float steps, then rounded") {
    DDO_SKIP_FLUX_WITHOUT_GPU();
    const int rows = 37, width = 256, head_dim = 128;
    const auto x = data("x", rows * width), shift = data("shift", width),
               scale = data("scale", width);
    std::vector<std::uint16_t> bits;
    const auto xr = round_bf16(x, bits);
    {
      device_buffer dx(x), dsh(shift), dsc(scale);
      device_bits y(std::vector<std::uint16_t>(x.size()));
      flux::gpu::layer_norm_modulate_bf16(dx.p, rows, width, dsh.p, dsc.p, y.p, width, nullptr);
      std::vector<float> cpu(x.size());
      flux::cpu::layer_norm(x.data(), rows, width, cpu.data());
      flux::cpu::modulate(cpu.data(), rows, width, shift.data(), scale.data());
      // one bf16 rounding: within 2^-8 of the value (4e-3 relative, with the float differences)
      check_close(widen(y.host()), cpu, 8e-3);
    }
    {
      device_bits y(bits);  // in place
      flux::gpu::gelu_bf16(y.p, rows, width, width, y.p, width, nullptr);
      auto cpu = xr;
      flux::cpu::gelu_tanh(cpu.data(), cpu.size());
      check_close(widen(y.host()), cpu, 8e-3);
    }
    {
      // RMSNorm + RoPE of rows 5.. of the bf16 q (rows before stay as they were), the weight
      // in bf16 and in float
      const auto c = data("cos", rows * head_dim), s = data("sin", rows * head_dim);
      std::vector<std::uint16_t> wbits;
      const auto w = round_bf16(data("w", head_dim), wbits);
      const int first = 5;
      auto cpu = xr;
      flux::cpu::rms_norm_heads(cpu.data() + first * width, rows - first, width, head_dim, w);
      flux::cpu::rope(cpu.data() + first * width, rows - first, width, head_dim,
                      c.data() + first * head_dim, s.data() + first * head_dim);
      device_buffer dc(c), ds(s), dw(w);
      device_bits dwb(wbits);
      for (const bool weight_bf16 : {true, false}) {
        CAPTURE(weight_bf16);
        device_bits y(bits);
        REQUIRE(flux::gpu::rms_rope_bf16(y.p, first, rows - first, width, head_dim,
                                         weight_bf16 ? static_cast<const void*>(dwb.p) : dw.p,
                                         weight_bf16, dc.p, ds.p, nullptr));
        const auto out = y.host();
        CHECK(std::memcmp(out.data(), bits.data(), first * width * 2) == 0);
        check_close(widen(out), cpu, 8e-3);
      }
      CHECK_FALSE(flux::gpu::rms_rope_bf16(nullptr, 0, 1, 96, 96, nullptr, false, nullptr, nullptr,
                                           nullptr));
    }
  }

  TEST_CASE(
      "flux kernels: tensor-core attention matches the naive reference on the same bf16 inputs "
      "at lengths off its key and row tiles (both row-tile variants), and repeats bitwise") {
    DDO_SKIP_FLUX_WITHOUT_GPU();
    for (const int row_tiles : {1, 2})
      for (const int head_dim : {64, 128})
        for (const int n : {1, 5, 63, 64, 65, 127, 128, 129, 300}) {
          CAPTURE(row_tiles);
          CAPTURE(head_dim);
          CAPTURE(n);
          const int width = 2 * head_dim;
          std::vector<std::uint16_t> qb, kb, vb;
          const auto q = round_bf16(data("q", n * width), qb),
                     k = round_bf16(data("k", n * width), kb),
                     v = round_bf16(data("v", n * width), vb);
          const std::size_t count = static_cast<std::size_t>(n) * width;
          device_bits dq(qb), dk(kb), dv(vb);
          device_buffer out(std::vector<float>(count, 0.f)), again(std::vector<float>(count, 0.f));
          REQUIRE(flux::gpu::attention_bf16(dq.p, dk.p, dv.p, out.p, false, width, n, width,
                                            head_dim, nullptr, row_tiles));
          REQUIRE(flux::gpu::attention_bf16(dq.p, dk.p, dv.p, again.p, false, width, n, width,
                                            head_dim, nullptr, row_tiles));
          // bf16 output into rows of a wider buffer (stride width + 8): the float output rounded,
          // bit for bit, and the gaps untouched
          const int stride = width + 8;
          device_bits wide(
              std::vector<std::uint16_t>(static_cast<std::size_t>(n) * stride, 0x7fc1));
          REQUIRE(flux::gpu::attention_bf16(dq.p, dk.p, dv.p, wide.p, true, stride, n, width,
                                            head_dim, nullptr, row_tiles));
          std::vector<float> cpu(count);
          flux::cpu::attention(q.data(), k.data(), v.data(), n, width, head_dim, cpu.data());
          const auto gpu = out.host();
          const auto second = again.host();
          // The kernel rounds only P to bf16 (its sum stays float): each output is then off by at
          // most 2^-9 of max |v| (here 1); 4e-3 is twice that.
          check_close(gpu, cpu, 4e-3);
          CHECK(std::memcmp(gpu.data(), second.data(), gpu.size() * sizeof(float)) == 0);
          std::vector<std::uint16_t> rounded;
          round_bf16(gpu, rounded);
          const auto w = wide.host();
          bool same = true, gaps = true;
          for (int r = 0; r < n; ++r) {
            same = same && std::memcmp(&w[std::size_t(r) * stride],
                                       &rounded[std::size_t(r) * width], width * 2) == 0;
            for (int c = width; c < stride; ++c)
              gaps = gaps && w[std::size_t(r) * stride + c] == 0x7fc1;
          }
          CHECK(same);
          CHECK(gaps);
        }
    CHECK_FALSE(flux::gpu::attention_bf16(nullptr, nullptr, nullptr, nullptr, false, 96, 1, 96, 96,
                                          nullptr));
  }
}

}  // namespace flux_kernels_test
