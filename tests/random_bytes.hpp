// SPDX-License-Identifier: Apache-2.0
#pragma once
// Random test data, fast where the tests run unoptimised (the sanitizer builds): one draw of the
// engine per 4 or 8 bytes, not per byte. A model of tens of MiB filled a byte per draw took
// seconds under TSan at -O0.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace ddo_test {

/// Fills @p bytes from @p rng, as many bytes per draw as the engine's results carry (4 for
/// std::mt19937, 8 for std::mt19937_64).
template <class Engine>
void fill_random_bytes(std::span<std::byte> bytes, Engine& rng) {
  static_assert(Engine::min() == 0 && (Engine::max() == 0xffffffffu || Engine::max() == ~std::uint64_t{0}),
                "fill_random_bytes: an engine of full 32- or 64-bit results");
  using word_type = std::conditional_t<Engine::max() == 0xffffffffu, std::uint32_t, std::uint64_t>;
  constexpr std::size_t per_draw = sizeof(word_type);
  std::size_t i = 0;
  for (; i + per_draw <= bytes.size(); i += per_draw) {
    const auto word = static_cast<word_type>(rng());
    std::memcpy(bytes.data() + i, &word, per_draw);
  }
  if (i < bytes.size()) {
    const auto word = static_cast<word_type>(rng());
    std::memcpy(bytes.data() + i, &word, bytes.size() - i);
  }
}

}  // namespace ddo_test
