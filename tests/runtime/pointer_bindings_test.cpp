// SPDX-License-Identifier: Apache-2.0
// Pointer bindings of the swap strategy: written for a lease, restored after it.
#include <doctest/doctest.h>

#include <cstddef>
#include <random>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/runtime/detail/group_layout.hpp"
#include "ddo/runtime/detail/pointer_bindings.hpp"

namespace {
void write_float_ptr(void* target, void* value) { *static_cast<float**>(target) = static_cast<float*>(value); }
}  // namespace

TEST_SUITE_BEGIN("runtime");

TEST_CASE("bindings write lease pointers into bound engine pointers and restore them") {
  std::mt19937 rng(99);
  std::vector<float> host(6);
  std::vector<float*> engine(6);
  for (std::size_t w = 0; w < 6; ++w) engine[w] = &host[w];
  const auto originals = engine;
  // weights 0..2 in group 0, 3..4 in group 1, 5 in no group
  ddo::detail::pointer_bindings b;
  b.reset({0, 0, 0, 1, 1, ddo::detail::no_group}, {{0, 1, 2}, {3, 4}});
  for (std::size_t w : {0u, 2u, 4u}) b.bind(w, {&engine[w], &write_float_ptr, engine[w]}, "w");
  CHECK_THROWS_AS(b.bind(5, {&engine[5], &write_float_ptr, engine[5]}, "w5"), ddo::usage_error);
  CHECK(b.any(0));
  CHECK(b.any(1));
  std::vector<std::byte> device(64);
  std::byte* ptrs[3] = {&device[rng() % 8], &device[8 + rng() % 8], &device[16 + rng() % 8]};
  b.write(0, ptrs);
  CHECK(engine[0] == reinterpret_cast<float*>(ptrs[0]));
  CHECK(engine[1] == originals[1]);  // not bound
  CHECK(engine[2] == reinterpret_cast<float*>(ptrs[2]));
  CHECK(engine[4] == originals[4]);  // other group untouched
  b.restore(0);
  CHECK(engine == originals);
  b.write(1, ptrs);
  CHECK(engine[4] == reinterpret_cast<float*>(ptrs[1]));
  b.unbind(4);  // restores and forgets
  CHECK(engine[4] == originals[4]);
  CHECK_FALSE(b.any(1));
  b.write(0, ptrs);
  b.restore_all();
  CHECK(engine == originals);
}

TEST_SUITE_END();
