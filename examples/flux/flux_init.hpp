// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Seeded weights and inputs, reproducible in Python (tools/flux_reference.py computes
/// diffusers' reference outputs from the same values): for a tensor NAME and element i,
///   key = fnv1a64(NAME) xor seed;  r = splitmix64 output for the state key + i;
///   u = (r >> 40) x 2^-23 - 1 in [-1, 1) (24 bits, exact in float);
///   linear weight [out, in]: u / sqrt(in); bias: u / 16; RMSNorm weight: 1 + u / 4; inputs: u;
/// each computed in double and rounded once to float. Example code (examples/flux/).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ddo/model/safetensors.hpp"
#include "ddo/model/synthetic_model.hpp"
#include "flux/flux_config.hpp"
#include "flux/flux_forward.hpp"

namespace flux {

[[nodiscard]] inline std::uint64_t fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

/// @brief fn(begin, end) over [0, @p n) in equal chunks, on every hardware thread from a million
/// elements up (each element is computed on its own, so the result does not depend on the
/// split): FLUX.1-dev's 12 billion seeded values take seconds on a GPU machine's cores, where one
/// thread took about a minute.
template <class Fn>
void for_chunks(std::size_t n, Fn fn) {
  const std::size_t threads =
      n < (std::size_t{1} << 20)
          ? 1
          : std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 64);
  if (threads == 1) {
    fn(std::size_t{0}, n);
    return;
  }
  const std::size_t per = (n + threads - 1) / threads;
  std::vector<std::jthread> pool;
  for (std::size_t begin = 0; begin < n; begin += per)
    pool.emplace_back(fn, begin, std::min(n, begin + per));
}

/// @brief u for elements [0, n) of @p name (see the file comment).
[[nodiscard]] inline std::vector<double> seeded_uniform(std::string_view name, std::size_t n,
                                                        std::uint64_t seed) {
  std::vector<double> u(n);
  const std::uint64_t key = fnv1a64(name) ^ seed;
  for_chunks(n, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      ddo::splitmix64 rng{key + i};
      u[i] = static_cast<double>(rng.next() >> 40) * 0x1p-23 - 1.0;
    }
  });
  return u;
}

/// @brief The seeded value of weight @p spec (see the file comment).
[[nodiscard]] inline std::vector<float> seeded_weight(const weight_spec& spec, std::uint64_t seed) {
  std::size_t n = 1;
  for (auto d : spec.shape) n *= static_cast<std::size_t>(d);
  const auto u = seeded_uniform(spec.name, n, seed);
  std::vector<float> out(n);
  const bool bias = spec.name.ends_with(".bias");
  const bool matrix = spec.shape.size() == 2;
  const double scale = matrix ? 1.0 / std::sqrt(static_cast<double>(spec.shape[1])) : 0.0;
  for_chunks(n, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i)
      out[i] = static_cast<float>(bias ? u[i] / 16.0 : matrix ? u[i] * scale : 1.0 + u[i] / 4.0);
  });
  return out;
}

/// @brief Seeded inputs for @p c: an image of @p rows x @p cols packed patches, @p text_tokens
/// text tokens, the guidance scale; position ids as FluxPipeline makes them.
[[nodiscard]] inline inputs seeded_inputs(const config& c, std::size_t rows, std::size_t cols,
                                          std::size_t text_tokens, float guidance,
                                          std::uint64_t seed) {
  inputs in;
  in.image_tokens = rows * cols;
  in.text_tokens = text_tokens;
  const auto to_float = [](const std::vector<double>& v) {
    return std::vector<float>(v.begin(), v.end());
  };
  in.latents = to_float(seeded_uniform(
      "input.hidden_states", in.image_tokens * static_cast<std::size_t>(c.in_channels), seed));
  in.text = to_float(seeded_uniform("input.encoder_hidden_states",
                                    text_tokens * static_cast<std::size_t>(c.text_dim), seed));
  in.pooled = to_float(
      seeded_uniform("input.pooled_projections", static_cast<std::size_t>(c.pooled_dim), seed));
  in.img_ids = image_ids(rows, cols);
  in.txt_ids.assign(text_tokens * 3, 0.f);
  in.guidance = guidance;
  return in;
}

/// @brief Writes the seeded weights of @p c to one safetensors file in @p type (f32, or bf16
/// rounded to nearest even), in execution order.
inline void write_seeded_model(const config& c, const std::filesystem::path& path, ddo::dtype type,
                               std::uint64_t seed) {
  DDO_EXPECTS(type == ddo::dtype::f32 || type == ddo::dtype::bf16,
              "flux: seeded models are f32 or bf16, got " + std::string(ddo::to_string(type)));
  const auto specs = weight_specs(c);
  std::vector<ddo::safetensors_tensor_spec> files;
  for (const auto& s : specs) files.push_back({s.name, type, s.shape});
  ddo::safetensors_writer writer(path.string(), files,
                                 {{"format", "pt"}, {"generator", "ddo-flux"}});
  for (const auto& s : specs) {
    const auto values = seeded_weight(s, seed);
    std::vector<std::byte> bytes(values.size() * ddo::size_of(type));
    for_chunks(values.size(), [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        std::uint32_t bits;
        std::memcpy(&bits, &values[i], 4);
        if (type == ddo::dtype::f32) {
          std::memcpy(&bytes[4 * i], &bits, 4);
        } else {
          const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
          const auto half = static_cast<std::uint16_t>(rounded >> 16);
          std::memcpy(&bytes[2 * i], &half, 2);
        }
      }
    });
    writer.write(bytes);
  }
  writer.finish();
}

}  // namespace flux
