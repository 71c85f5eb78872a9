// SPDX-License-Identifier: Apache-2.0
#include "runner/synthetic_forward.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

std::vector<std::byte> random_bf16(std::size_t count, float scale, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<std::byte> out(2 * count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint16_t bits = ddo::runner::internal::float_to_bf16(u(rng));
    std::memcpy(out.data() + 2 * i, &bits, 2);
  }
  return out;
}

double activation_rms(const ddo::runner::cpu_synthetic_forward& f, std::int64_t columns) {
  double sum = 0;
  const auto a = f.activation();
  for (std::int64_t t = 0; t < f.tokens(); ++t)
    for (std::int64_t c = 0; c < columns; ++c) {
      const double v = a[static_cast<std::size_t>(t * f.width() + c)];
      sum += v * v;
    }
  return std::sqrt(sum / static_cast<double>(f.tokens() * columns));
}

}  // namespace

TEST_SUITE("runner") {
  TEST_CASE("bf16 and fp16 conversions keep values the formats can represent") {
    using namespace ddo::runner::internal;
    for (float v : {1.0f, -2.5f, 0.15625f, 3.0e38f, -1.0e-30f})
      CHECK(bf16_to_float(float_to_bf16(v)) == doctest::Approx(v).epsilon(1e-2));
    CHECK(bf16_to_float(0x3f80) == 1.0f);
    CHECK(f16_to_float(0x3c00) == 1.0f);
    CHECK(f16_to_float(0xc000) == -2.0f);
    CHECK(f16_to_float(0x7bff) == 65504.0f);
    CHECK(f16_to_float(0x0001) == std::ldexp(1.0f, -24));  // smallest denormal
    CHECK(std::isinf(f16_to_float(0x7c00)));
    CHECK(std::isnan(f16_to_float(0x7e00)));
    CHECK(f16_to_float(float_to_f16(0.375f)) == 0.375f);
    CHECK(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  }

  TEST_CASE("the CPU stand-in computes alpha * X * W^T for a row-major [out, in] weight") {
    std::mt19937_64 rng(std::random_device{}());
    const std::int64_t tokens = 3, out = 5, in = 7, width = 8;
    ddo::runner::cpu_synthetic_forward f(tokens, width, rng());
    const std::vector<float> x(f.activation().begin(), f.activation().end());
    const auto w = random_bf16(static_cast<std::size_t>(out * in), 1.0f, rng);
    const float alpha = 0.75f;
    f.linear(w.data(), out, in, ddo::dtype::bf16, alpha);
    const auto y = f.activation();
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t o = 0; o < out; ++o) {
        double expected = 0;
        for (std::int64_t i = 0; i < in; ++i)
          expected += static_cast<double>(x[static_cast<std::size_t>(t * width + i)]) *
                      ddo::runner::element_as_float(w.data(), ddo::dtype::bf16,
                                                    static_cast<std::size_t>(o * in + i));
        CHECK(y[static_cast<std::size_t>(t * width + o)] ==
              doctest::Approx(alpha * expected).epsilon(1e-4));
      }
  }

  TEST_CASE("one changed weight element changes the CPU stand-in's result") {
    std::mt19937_64 rng(std::random_device{}());
    const std::uint64_t seed = rng();
    auto w = random_bf16(16 * 16, 1.0f, rng);
    ddo::runner::cpu_synthetic_forward a(4, 16, seed), b(4, 16, seed);
    a.linear(w.data(), 16, 16, ddo::dtype::bf16);
    const std::size_t victim = std::uniform_int_distribution<std::size_t>(0, 255)(rng);
    w[2 * victim + 1] ^= std::byte{0x40};  // flips an exponent bit of one element
    b.linear(w.data(), 16, 16, ddo::dtype::bf16);
    CHECK(a.checksum() != b.checksum());
  }

  TEST_CASE("the variance-preserving scale keeps activations finite and steady over many layers") {
    std::mt19937_64 rng(std::random_device{}());
    const std::int64_t n = 64;
    ddo::runner::cpu_synthetic_forward f(4, n, rng());
    const double start = activation_rms(f, n);
    for (int layer = 0; layer < 100; ++layer) {
      const auto w = random_bf16(static_cast<std::size_t>(n * n), 0.02f, rng);
      const float alpha = ddo::runner::variance_preserving_alpha(w.data(), ddo::dtype::bf16, n, n);
      f.linear(w.data(), n, n, ddo::dtype::bf16, alpha);
    }
    const double end = activation_rms(f, n);
    CHECK(std::isfinite(end));
    CHECK(end > start / 20);
    CHECK(end < start * 20);
  }

  TEST_CASE("element_as_float reads fp32 and fp16 weights") {
    const float values[2] = {1.5f, -0.25f};
    std::byte raw[8];
    std::memcpy(raw, values, 8);
    CHECK(ddo::runner::element_as_float(raw, ddo::dtype::f32, 1) == -0.25f);
    const std::uint16_t half = 0x3e00;  // 1.5
    std::memcpy(raw, &half, 2);
    CHECK(ddo::runner::element_as_float(raw, ddo::dtype::f16, 0) == 1.5f);
  }

  TEST_CASE("layers wider than the activation are refused with the sizes in the message") {
    ddo::runner::cpu_synthetic_forward f(2, 8, 1);
    std::vector<std::byte> w(2 * 16 * 8, std::byte{0x3c});
    CHECK_THROWS_WITH_AS(f.linear(w.data(), 16, 8, ddo::dtype::bf16),
                         doctest::Contains("[16, 8]"), ddo::usage_error);
  }

  TEST_CASE("probing for a GPU never throws and gives a reason when there is none") {
    const auto probe = ddo::runner::probe_gpu(0);
    if (probe.available) {
      CHECK(!probe.name.empty());
      CHECK(probe.total_bytes > 0);
    } else {
      CHECK(probe.reason.find("no GPU") != std::string::npos);
    }
  }
}
