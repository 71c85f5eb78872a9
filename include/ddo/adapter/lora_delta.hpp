// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::lora_delta and ddo::lora_adapter: a LoRA mapped onto a base model's weight table,
/// its factors in fp32 on the host (loaded by adapter/lora_adapter.hpp; what the runtime
/// attaches: runtime/basic_offloader.hpp). A value header: no file reading.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddo/adapter/lora_merge.hpp"

namespace ddo {
inline namespace v0 {

/// @brief One adapter's delta on one base weight: B · A with B rows × rank, A rank × cols
/// (the base weight's shape[0] × the product of the rest).
struct lora_delta {
  std::string key;         ///< the module as the file names it (messages)
  std::string target;      ///< the base weight's name
  std::size_t weight = 0;  ///< its index in the base table
  std::int64_t rank = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  float alpha_scale = 1.0f;  ///< alpha / rank (1 where the file has no alpha)
  std::vector<float> down;   ///< A, rank × cols
  std::vector<float> up;     ///< B, rows × rank
  /// The type the factors are kept in on the device: the file's when both factors had it (BF16,
  /// F16: every value converts back exactly), else F32.
  dtype factor_type = dtype::f32;
  /// @brief The merge term over the host factors at the engine's @p scale (scale × alpha /
  /// rank, one float product).
  [[nodiscard]] lora_term term(float scale) const {
    return lora_term{down.data(), up.data(), rank, scale * alpha_scale, dtype::f32};
  }
  /// @brief Bytes of the two factors on the device (in factor_type).
  [[nodiscard]] std::uint64_t factor_bytes() const noexcept {
    return size_of(factor_type) * static_cast<std::uint64_t>(down.size() + up.size());
  }
};

/// @brief A LoRA file mapped onto a base model: one delta per base weight it changes, in the
/// base table's order.
struct lora_adapter {
  std::string file;
  std::vector<lora_delta> deltas;
  /// @brief The delta on base weight @p weight, or null.
  [[nodiscard]] const lora_delta* find(std::size_t weight) const noexcept {
    for (const auto& d : deltas)
      if (d.weight == weight) return &d;
    return nullptr;
  }
  /// @brief Bytes of every factor on the device (what the adapter takes there).
  [[nodiscard]] std::uint64_t factor_bytes() const noexcept {
    std::uint64_t n = 0;
    for (const auto& d : deltas) n += d.factor_bytes();
    return n;
  }
};

}  // namespace v0
}  // namespace ddo
