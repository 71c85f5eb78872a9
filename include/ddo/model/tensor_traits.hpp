// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Describing an engine's own tensor type to ddo: the ddo::customize::tensor_traits trait
/// and ddo::add_tensor, which adds such a tensor to a weight table as a host source.
///
/// An engine specialises the trait once, in its own code:
/// @code
/// template <>
/// struct ddo::customize::tensor_traits<my_engine::tensor> {
///   static std::vector<std::int64_t> shape(const my_engine::tensor& t) { return t.dims; }
///   static ddo::dtype dtype(const my_engine::tensor& t) { return t.bf16 ? ddo::dtype::bf16 :
///   ddo::dtype::f32; } static const std::byte* data(const my_engine::tensor& t) { return
///   t.host_bytes; }
/// };
/// ddo::add_tensor(table, "blocks.0.attn.to_q.weight", engine_tensor);
/// @endcode

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddo/core/module_kind.hpp"
#include "ddo/model/dtype.hpp"
#include "ddo/model/module_kind_inference.hpp"
#include "ddo/model/weight_table.hpp"

namespace ddo {
inline namespace v0 {
namespace customize {

/// @brief Specialise for an engine tensor type T with three static functions: `shape(const T&)`
/// (a range of integral dimensions), `dtype(const T&)` returning ddo::dtype, and
/// `data(const T&)` returning the host bytes (convertible to `const std::byte*`). The primary
/// template is deliberately undefined.
template <class T>
struct tensor_traits;

}  // namespace customize

/// @brief A type described by a ddo::customize::tensor_traits specialisation.
template <class T>
concept described_tensor = requires(const T& t) {
  {customize::tensor_traits<T>::shape(t)};
  { customize::tensor_traits<T>::dtype(t) } -> std::same_as<dtype>;
  { customize::tensor_traits<T>::data(t) } -> std::convertible_to<const std::byte*>;
};

/// @brief Adds @p tensor to @p table as a host source named @p name. The module kind is
/// @p kind, or inferred from the name and rank (model/module_kind_inference.hpp).
/// @tparam T an engine tensor type with a ddo::customize::tensor_traits specialisation.
/// @throws usage_error as weight_table::add.
template <class T>
std::size_t add_tensor(weight_table& table, std::string name, const T& tensor,
                       std::optional<module_kind> kind = std::nullopt) {
  static_assert(described_tensor<T>,
                "ddo::add_tensor: describe the engine tensor type with a specialisation of "
                "ddo::customize::tensor_traits<T> providing static shape(), dtype() and data(); "
                "see ddo/model/tensor_traits.hpp");
  using traits = customize::tensor_traits<T>;
  weight_info w;
  for (auto d : traits::shape(tensor)) w.shape.push_back(static_cast<std::int64_t>(d));
  w.type = traits::dtype(tensor);
  w.source = host_source{static_cast<const std::byte*>(traits::data(tensor))};
  w.module_name = module_name_of(name);
  w.kind = kind ? *kind : infer_module_kind(w.module_name, w.shape.size());
  w.name = std::move(name);
  return table.add(std::move(w));
}

}  // namespace v0
}  // namespace ddo
