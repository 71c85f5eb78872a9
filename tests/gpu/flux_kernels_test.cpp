// SPDX-License-Identifier: Apache-2.0
// ddo-flux's CUDA kernels (examples/flux/flux_kernels.cu) against their CPU twins
// (examples/flux/flux_cpu.hpp) on seeded data; attention at lengths that are and are not
// multiples of its 32-key tile and its 4-row blocks, and bitwise equal on a second run (no
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
#include "runner/synthetic_forward.hpp"
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

/// @p x rounded to bf16 (nearest even) on the host: the bits in @p bits (the kernels' inputs),
/// the rounded values returned as floats (the reference's inputs).
std::vector<float> round_to_bf16(const std::vector<float>& x, std::vector<std::uint16_t>& bits) {
  std::vector<float> rounded(x.size());
  bits.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    bits[i] = ddo::runner::internal::float_to_bf16(x[i]);
    rounded[i] = ddo::runner::internal::bf16_to_float(bits[i]);
  }
  return rounded;
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

TEST_SUITE("gpu") {
  TEST_CASE("flux kernels: RMSNorm, RoPE, SiLU and the gated residual match the CPU") {
    DDO_SKIP_FLUX_WITHOUT_GPU();
    const int rows = 37, width = 256, head_dim = 128;
    const auto x = data("x", rows * width);
    {
      const auto w = data("w", head_dim);
      device_buffer dx(x), dw(w);
      flux::gpu::rms_norm_heads(dx.p, rows, width, head_dim, dw.p, nullptr);
      auto cpu = x;
      flux::cpu::rms_norm_heads(cpu.data(), rows, width, head_dim, w);
      check_close(dx.host(), cpu, 1e-5);
    }
    {
      const auto c = data("cos", rows * head_dim), s = data("sin", rows * head_dim);
      device_buffer dx(x), dc(c), ds(s);
      flux::gpu::rope(dx.p, rows, width, head_dim, dc.p, ds.p, nullptr);
      auto cpu = x;
      flux::cpu::rope(cpu.data(), rows, width, head_dim, c.data(), s.data());
      check_close(dx.host(), cpu, 1e-6);
    }
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
      auto cpu = x;
      flux::cpu::gated_add(cpu.data(), rows, width, scale.data(), y.data(), width);
      check_close(dx.host(), cpu, 1e-6);
    }
  }

  TEST_CASE("flux kernels: the fused bf16 kernels match the CPU's float steps, then rounded") {
    DDO_SKIP_FLUX_WITHOUT_GPU();
    const int rows = 37, width = 256;
    const auto x = data("x", rows * width), shift = data("shift", width),
               scale = data("scale", width);
    // bf16 bits back to float
    const auto widen = [](const std::vector<std::uint16_t>& bits) {
      std::vector<float> out(bits.size());
      for (std::size_t i = 0; i < bits.size(); ++i) {
        const std::uint32_t u = static_cast<std::uint32_t>(bits[i]) << 16;
        std::memcpy(&out[i], &u, 4);
      }
      return out;
    };
    const auto device_bits = [](std::uint16_t* dev, std::size_t n) {
      std::vector<std::uint16_t> bits(n);
      DDO_CUDA_TRY(cudaDeviceSynchronize());
      DDO_CUDA_TRY(cudaMemcpy(bits.data(), dev, n * 2, cudaMemcpyDeviceToHost));
      return bits;
    };
    std::uint16_t* y = nullptr;
    DDO_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&y), x.size() * 2));
    {
      device_buffer dx(x), dsh(shift), dsc(scale);
      flux::gpu::layer_norm_modulate_bf16(dx.p, rows, width, dsh.p, dsc.p, y, width, nullptr);
      std::vector<float> cpu(x.size());
      flux::cpu::layer_norm(x.data(), rows, width, cpu.data());
      flux::cpu::modulate(cpu.data(), rows, width, shift.data(), scale.data());
      // one bf16 rounding: within 2^-8 of the value (4e-3 relative, with the float differences)
      check_close(widen(device_bits(y, x.size())), cpu, 8e-3);
    }
    {
      device_buffer dx(x);
      flux::gpu::gelu_bf16(dx.p, rows, width, width, y, width, nullptr);
      auto cpu = x;
      flux::cpu::gelu_tanh(cpu.data(), cpu.size());
      check_close(widen(device_bits(y, x.size())), cpu, 8e-3);
    }
    cudaFree(y);
  }

  TEST_CASE(
      "flux kernels: attention matches the naive reference at lengths off its tiles, and "
      "repeats bitwise") {
    DDO_SKIP_FLUX_WITHOUT_GPU();
    for (const int head_dim : {64, 128})
      for (const int n : {1, 5, 31, 32, 33, 100, 257}) {
        CAPTURE(head_dim);
        CAPTURE(n);
        const int width = 2 * head_dim;
        const auto q = data("q", n * width), k = data("k", n * width), v = data("v", n * width);
        device_buffer dq(q), dk(k), dv(v), out(std::vector<float>(q.size())),
            again(std::vector<float>(q.size()));
        REQUIRE(flux::gpu::attention(dq.p, dk.p, dv.p, out.p, n, width, head_dim, nullptr));
        REQUIRE(flux::gpu::attention(dq.p, dk.p, dv.p, again.p, n, width, head_dim, nullptr));
        std::vector<float> cpu(q.size());
        flux::cpu::attention(q.data(), k.data(), v.data(), n, width, head_dim, cpu.data());
        const auto gpu = out.host();
        check_close(gpu, cpu, 1e-5);
        const auto second = again.host();
        CHECK(std::memcmp(gpu.data(), second.data(), gpu.size() * sizeof(float)) == 0);
      }
    device_buffer b(std::vector<float>(96));
    CHECK_FALSE(flux::gpu::attention(b.p, b.p, b.p, b.p, 1, 96, 96, nullptr));
  }

  TEST_CASE(
      "flux kernels: tensor-core attention matches the naive reference on the same bf16 inputs "
      "at lengths off its 64-key and 128-row tiles, and repeats bitwise") {
    DDO_SKIP_FLUX_WITHOUT_GPU();
    for (const int head_dim : {64, 128})
      for (const int n : {1, 5, 63, 64, 65, 127, 128, 129, 300}) {
        CAPTURE(head_dim);
        CAPTURE(n);
        const int width = 2 * head_dim;
        std::vector<std::uint16_t> qb, kb, vb;
        const auto q = round_to_bf16(data("q", n * width), qb),
                   k = round_to_bf16(data("k", n * width), kb),
                   v = round_to_bf16(data("v", n * width), vb);
        std::uint16_t* dev = nullptr;
        const std::size_t count = static_cast<std::size_t>(n) * width;
        DDO_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&dev), 3 * count * 2));
        DDO_CUDA_TRY(cudaMemcpy(dev, qb.data(), count * 2, cudaMemcpyHostToDevice));
        DDO_CUDA_TRY(cudaMemcpy(dev + count, kb.data(), count * 2, cudaMemcpyHostToDevice));
        DDO_CUDA_TRY(cudaMemcpy(dev + 2 * count, vb.data(), count * 2, cudaMemcpyHostToDevice));
        device_buffer out(std::vector<float>(count, 0.f)), again(std::vector<float>(count, 0.f));
        REQUIRE(flux::gpu::attention_bf16(dev, dev + count, dev + 2 * count, out.p, n, width,
                                          head_dim, nullptr));
        REQUIRE(flux::gpu::attention_bf16(dev, dev + count, dev + 2 * count, again.p, n, width,
                                          head_dim, nullptr));
        std::vector<float> cpu(count);
        flux::cpu::attention(q.data(), k.data(), v.data(), n, width, head_dim, cpu.data());
        const auto gpu = out.host();
        const auto second = again.host();
        cudaFree(dev);
        // The kernel rounds only P to bf16 (its sum stays float): each output is then off by at
        // most 2^-9 of max |v| (here 1); 4e-3 is twice that.
        check_close(gpu, cpu, 4e-3);
        CHECK(std::memcmp(gpu.data(), second.data(), gpu.size() * sizeof(float)) == 0);
      }
    CHECK_FALSE(flux::gpu::attention_bf16(nullptr, nullptr, nullptr, nullptr, 1, 96, 96, nullptr));
  }

  TEST_CASE(
      "flux kernels: the pipelined tensor-core attention (both row-tile variants) matches the "
      "naive reference at lengths off its tiles, repeats bitwise, and writes bf16 rows in place") {
    DDO_SKIP_FLUX_WITHOUT_GPU();
    for (const int row_tiles : {1, 2})
      for (const int head_dim : {64, 128})
        for (const int n : {1, 5, 31, 33, 63, 64, 65, 127, 128, 129, 300}) {
          CAPTURE(row_tiles);
          CAPTURE(head_dim);
          CAPTURE(n);
          const int width = 2 * head_dim, stride = width + 8;
          const std::size_t count = static_cast<std::size_t>(n) * width;
          std::vector<std::uint16_t> qb, kb, vb;
          const auto q = round_to_bf16(data("q", count), qb),
                     k = round_to_bf16(data("k", count), kb),
                     v = round_to_bf16(data("v", count), vb);
          std::uint16_t* dev = nullptr;  // q, k, v, then the bf16 output rows (stride + 8)
          const std::size_t wide = static_cast<std::size_t>(n) * stride;
          DDO_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&dev), (3 * count + wide) * 2));
          DDO_CUDA_TRY(cudaMemcpy(dev, qb.data(), count * 2, cudaMemcpyHostToDevice));
          DDO_CUDA_TRY(cudaMemcpy(dev + count, kb.data(), count * 2, cudaMemcpyHostToDevice));
          DDO_CUDA_TRY(cudaMemcpy(dev + 2 * count, vb.data(), count * 2, cudaMemcpyHostToDevice));
          DDO_CUDA_TRY(cudaMemset(dev + 3 * count, 0x7f, wide * 2));
          device_buffer out(std::vector<float>(count, 0.f)), again(std::vector<float>(count, 0.f));
          for (auto* o : {out.p, again.p})
            REQUIRE(flux::gpu::attention_bf16_pipelined(dev, dev + count, dev + 2 * count, o, false,
                                                        width, n, width, head_dim, row_tiles,
                                                        nullptr));
          REQUIRE(flux::gpu::attention_bf16_pipelined(dev, dev + count, dev + 2 * count,
                                                      dev + 3 * count, true, stride, n, width,
                                                      head_dim, row_tiles, nullptr));
          std::vector<std::uint16_t> rows(wide);
          DDO_CUDA_TRY(cudaDeviceSynchronize());
          DDO_CUDA_TRY(cudaMemcpy(rows.data(), dev + 3 * count, wide * 2, cudaMemcpyDeviceToHost));
          cudaFree(dev);
          std::vector<float> cpu(count);
          flux::cpu::attention(q.data(), k.data(), v.data(), n, width, head_dim, cpu.data());
          const auto gpu = out.host();
          const auto second = again.host();
          check_close(gpu, cpu, 4e-3);  // as attention_bf16: only P is rounded
          CHECK(std::memcmp(gpu.data(), second.data(), gpu.size() * sizeof(float)) == 0);
          // the bf16 output is the float output rounded, bit for bit; the gaps stay untouched
          std::vector<std::uint16_t> rounded;
          round_to_bf16(gpu, rounded);
          bool same = true, gaps = true;
          for (int r = 0; r < n; ++r) {
            const std::size_t at = static_cast<std::size_t>(r) * stride;
            same = same && std::memcmp(&rows[at], &rounded[static_cast<std::size_t>(r) * width],
                                       static_cast<std::size_t>(width) * 2) == 0;
            for (int c = width; c < stride; ++c) gaps = gaps && rows[at + c] == 0x7f7f;
          }
          CHECK(same);
          CHECK(gaps);
        }
    CHECK_FALSE(flux::gpu::attention_bf16_pipelined(nullptr, nullptr, nullptr, nullptr, false, 96,
                                                    1, 96, 96, 2, nullptr));
    CHECK_FALSE(flux::gpu::attention_bf16_pipelined(nullptr, nullptr, nullptr, nullptr, false, 128,
                                                    1, 128, 128, 3, nullptr));
  }
}

}  // namespace flux_kernels_test
