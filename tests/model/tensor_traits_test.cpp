// SPDX-License-Identifier: Apache-2.0
#include "ddo/model/tensor_traits.hpp"

#include <doctest/doctest.h>

#include <array>
#include <vector>

namespace engine {
/// An engine's own tensor type, unknown to ddo.
struct tensor {
  std::vector<int> dims;
  bool half = true;
  std::vector<std::byte> bytes;
};
struct undescribed {};
}  // namespace engine

template <>
struct ddo::customize::tensor_traits<engine::tensor> {
  static const std::vector<int>& shape(const engine::tensor& t) { return t.dims; }
  static ddo::dtype dtype(const engine::tensor& t) {
    return t.half ? ddo::dtype::f16 : ddo::dtype::f32;
  }
  static const std::byte* data(const engine::tensor& t) { return t.bytes.data(); }
};

static_assert(ddo::described_tensor<engine::tensor>);
static_assert(!ddo::described_tensor<engine::undescribed>);

TEST_SUITE("model") {
  TEST_CASE("an engine tensor described by the customize trait enters the table as a host source") {
    engine::tensor t{{6, 4}, true, std::vector<std::byte>(48, std::byte{0x5A})};
    ddo::weight_table table;
    const auto i = ddo::add_tensor(table, "blocks.0.ff.net.2.weight", t);
    const auto& w = table[i];
    CHECK(w.shape == std::vector<std::int64_t>{6, 4});
    CHECK(w.type == ddo::dtype::f16);
    CHECK(w.bytes == 48);
    CHECK(w.module_name == "blocks.0.ff.net.2");
    CHECK(w.kind == ddo::module_kind::linear);
    CHECK(std::get<ddo::host_source>(w.source).data == t.bytes.data());
    engine::tensor norm{{4}, false, std::vector<std::byte>(16, std::byte{1})};
    CHECK(table[ddo::add_tensor(table, "blocks.0.norm2.weight", norm)].kind ==
          ddo::module_kind::norm);
    CHECK(table[ddo::add_tensor(table, "x.weight", norm, ddo::module_kind::other)].kind ==
          ddo::module_kind::other);
    // A second weight of the same name is the weight table's usage error.
    CHECK_THROWS_AS(ddo::add_tensor(table, "x.weight", norm), ddo::usage_error);
  }
}
