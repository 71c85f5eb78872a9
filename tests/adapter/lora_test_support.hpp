// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers for the adapter suite: small LoRA files written with write_safetensors, base tables.

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ddo/adapter/float_bits.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/model/weight_table.hpp"

namespace lora_test_support {

/// A tensor of a LoRA file under construction: its values as floats, stored in @p type.
struct tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
  ddo::dtype type = ddo::dtype::f32;
};

inline std::vector<std::byte> encode(const std::vector<float>& v, ddo::dtype type) {
  std::vector<std::byte> out(v.size() * ddo::size_of(type));
  for (std::size_t k = 0; k < v.size(); ++k) {
    if (type == ddo::dtype::f32) {
      std::memcpy(out.data() + 4 * k, &v[k], 4);
    } else if (type == ddo::dtype::bf16 || type == ddo::dtype::f16) {
      const auto bits =
          type == ddo::dtype::bf16 ? ddo::float_to_bf16_bits(v[k]) : ddo::float_to_f16_bits(v[k]);
      std::memcpy(out.data() + 2 * k, &bits, 2);
    } else {
      out[k * ddo::size_of(type)] = static_cast<std::byte>(v[k]);  // integer types: small values
    }
  }
  return out;
}

inline void write_file(const std::string& path, const std::vector<tensor>& tensors) {
  std::vector<std::vector<std::byte>> bytes;
  std::vector<ddo::safetensors_tensor_data> data;
  for (const auto& t : tensors) bytes.push_back(encode(t.values, t.type));
  for (std::size_t i = 0; i < tensors.size(); ++i)
    data.push_back({{tensors[i].name, tensors[i].type, tensors[i].shape}, bytes[i]});
  ddo::write_safetensors(path, data);
}

/// Values in [-1, 1) exactly representable in bf16 (so a bf16 file holds them unchanged).
inline std::vector<float> random_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> out(n);
  for (auto& v : out) v = ddo::bf16_bits_to_float(ddo::float_to_bf16_bits(dist(rng)));
  return out;
}

/// Adds a weight of @p shape and @p type to @p table (a memory source: the loader reads none).
inline void add_weight(ddo::weight_table& table, const std::string& name,
                       std::vector<std::int64_t> shape, ddo::dtype type = ddo::dtype::bf16) {
  ddo::weight_info info;
  info.name = name;
  info.module_name = ddo::module_name_of(name);
  info.type = type;
  info.shape = std::move(shape);
  table.add(std::move(info));
}

}  // namespace lora_test_support
