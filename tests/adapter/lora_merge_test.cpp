// SPDX-License-Identifier: Apache-2.0
#include "ddo/adapter/lora_merge.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "adapter/lora_test_support.hpp"

namespace lora_merge_test {

using lora_test_support::encode;
using lora_test_support::random_values;

inline float element(const std::vector<std::byte>& w, ddo::dtype type, std::size_t k) {
  return ddo::detail::load_weight_element(w.data(), type, k);
}

TEST_SUITE("adapter") {
  TEST_CASE("bf16 and fp16 bit patterns convert to float and back unchanged") {
    for (std::uint32_t u = 0; u < 65536; ++u) {
      const auto bits = static_cast<std::uint16_t>(u);
      const float b = ddo::bf16_bits_to_float(bits);
      if (!std::isnan(b)) REQUIRE(ddo::float_to_bf16_bits(b) == bits);
      const float h = ddo::f16_bits_to_float(bits);
      if (!std::isnan(h)) REQUIRE(ddo::float_to_f16_bits(h) == bits);
      if (std::isnan(h)) CHECK(std::isnan(ddo::f16_bits_to_float(ddo::float_to_f16_bits(h))));
    }
    CHECK(ddo::f16_bits_to_float(0x0001) == std::ldexp(1.0f, -24));  // the smallest subnormal
    CHECK(ddo::f16_bits_to_float(0x7bff) == 65504.0f);
  }

  TEST_CASE("float rounds to the nearest bf16 and fp16, ties to even") {
    std::mt19937 rng(42);
    for (int i = 0; i < 200000; ++i) {
      // Random bit patterns cover every exponent (fp16's subnormals and overflow too).
      const float x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()) & 0xc7ffffffu);
      if (std::isnan(x)) continue;
      for (bool bf : {true, false}) {
        const auto bits = bf ? ddo::float_to_bf16_bits(x) : ddo::float_to_f16_bits(x);
        const auto to = [&](std::uint16_t v) {
          return static_cast<double>(bf ? ddo::bf16_bits_to_float(v) : ddo::f16_bits_to_float(v));
        };
        const double got = to(bits);
        if (std::isinf(got)) continue;  // overflow: checked against the largest finite value below
        // No neighbour of the result is nearer; a tie keeps the even pattern.
        for (int step : {-1, 1}) {
          const auto n = static_cast<std::uint16_t>(bits + step);
          const double other = to(n);
          if (std::isnan(other) || std::isinf(other) || ((n ^ bits) & 0x8000u)) continue;
          const double dg = std::fabs(got - x), dn = std::fabs(other - x);
          INFO(x, " bf16=", bf);
          REQUIRE(dg <= dn);
          if (dg == dn) REQUIRE((bits & 1u) == 0u);
        }
      }
    }
    CHECK(ddo::float_to_f16_bits(65520.0f) == 0x7c00);  // halfway to 2^16 rounds to infinity
    CHECK(ddo::float_to_f16_bits(65519.0f) == 0x7bff);
    CHECK(ddo::float_to_f16_bits(std::ldexp(1.0f, -25)) == 0x0000);  // a tie to even (zero)
    CHECK(ddo::float_to_f16_bits(std::ldexp(1.5f, -25)) == 0x0001);
  }

  TEST_CASE("the merge is the fp32 fma chain over terms and ranks, rounded once") {
    const std::int64_t rows = 6, cols = 5, r1 = 3, r2 = 2;
    const auto a1 = random_values(r1 * cols, 1), b1 = random_values(rows * r1, 2);
    const auto a2 = random_values(r2 * cols, 3), b2 = random_values(rows * r2, 4);
    const auto w = random_values(rows * cols, 5);
    const std::vector<ddo::lora_term> terms = {{a1.data(), b1.data(), r1, 0.75f},
                                               {a2.data(), b2.data(), r2, -1.5f}};
    for (auto type : {ddo::dtype::f32, ddo::dtype::bf16, ddo::dtype::f16}) {
      INFO(ddo::to_string(type));
      auto bytes = encode(w, type);
      const auto base = bytes;
      ddo::merge_lora(bytes.data(), type, rows, cols, terms);
      for (std::int64_t o = 0; o < rows; ++o) {
        for (std::int64_t c = 0; c < cols; ++c) {
          const auto k = static_cast<std::size_t>(o * cols + c);
          float acc = element(base, type, k), d1 = 0.0f, d2 = 0.0f;
          for (std::int64_t r = 0; r < r1; ++r) d1 = std::fma(b1[o * r1 + r], a1[r * cols + c], d1);
          acc = std::fma(0.75f, d1, acc);
          for (std::int64_t r = 0; r < r2; ++r) d2 = std::fma(b2[o * r2 + r], a2[r * cols + c], d2);
          acc = std::fma(-1.5f, d2, acc);
          const auto expect = encode({acc}, type);
          REQUIRE(std::memcmp(bytes.data() + k * ddo::size_of(type), expect.data(),
                              expect.size()) == 0);
          // And within the dtype's rounding of the exact value (double).
          double exact = element(base, type, k);
          for (std::int64_t r = 0; r < r1; ++r) exact += 0.75 * b1[o * r1 + r] * a1[r * cols + c];
          for (std::int64_t r = 0; r < r2; ++r) exact -= 1.5 * b2[o * r2 + r] * a2[r * cols + c];
          const double ulp = type == ddo::dtype::f32    ? 1e-6
                             : type == ddo::dtype::bf16 ? 8e-3
                                                        : 1e-3;
          CHECK(std::fabs(element(bytes, type, k) - exact) <= ulp * (1.0 + std::fabs(exact)));
        }
      }
    }
  }

  TEST_CASE("factors kept in bf16 or fp16 merge as their float values") {
    const std::int64_t rows = 4, cols = 7, rank = 3;
    const auto a = random_values(rank * cols, 11), b = random_values(rows * rank, 12);
    const auto w = encode(random_values(rows * cols, 13), ddo::dtype::bf16);
    auto as_float = w;
    const std::vector<ddo::lora_term> f32 = {{a.data(), b.data(), rank, 0.5f}};
    ddo::merge_lora(as_float.data(), ddo::dtype::bf16, rows, cols, f32);
    for (auto type : {ddo::dtype::bf16, ddo::dtype::f16}) {
      const auto a16 = encode(a, type), b16 = encode(b, type);  // exact: bf16 values, |v| < 1
      auto merged = w;
      const std::vector<ddo::lora_term> half = {{a16.data(), b16.data(), rank, 0.5f, type}};
      ddo::merge_lora(merged.data(), ddo::dtype::bf16, rows, cols, half);
      CHECK(merged == as_float);
    }
  }

  TEST_CASE("the merge refuses fp8 and integer weights") {
    std::vector<std::byte> w(4);
    const std::vector<float> a(2, 1.0f), b(2, 1.0f);
    const std::vector<ddo::lora_term> terms = {{a.data(), b.data(), 1, 1.0f}};
    CHECK_FALSE(ddo::lora_mergeable(ddo::dtype::f8_e4m3));
    CHECK_FALSE(ddo::lora_mergeable(ddo::dtype::i8));
    CHECK_THROWS_WITH_AS(ddo::merge_lora(w.data(), ddo::dtype::f8_e4m3, 2, 2, terms),
                         doctest::Contains("not F8_E4M3"), ddo::usage_error);
  }
}

}  // namespace lora_merge_test
