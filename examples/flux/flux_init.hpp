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
#include <future>
#include <span>
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

/// @brief u for element @p i of the tensor whose key is fnv1a64(name) xor seed.
[[nodiscard]] inline double seeded_u(std::uint64_t key, std::size_t i) {
  ddo::splitmix64 rng{key + i};
  return static_cast<double>(rng.next() >> 40) * 0x1p-23 - 1.0;
}

/// @brief u for elements [0, n) of @p name (see the file comment).
[[nodiscard]] inline std::vector<double> seeded_uniform(std::string_view name, std::size_t n,
                                                        std::uint64_t seed) {
  std::vector<double> u(n);
  const std::uint64_t key = fnv1a64(name) ^ seed;
  for_chunks(n, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) u[i] = seeded_u(key, i);
  });
  return u;
}

/// @brief Element i of weight @p spec's seeded value (see the file comment), computed on its own.
class seeded_values {
 public:
  seeded_values(const weight_spec& spec, std::uint64_t seed)
      : key_(fnv1a64(spec.name) ^ seed),
        bias_(spec.name.ends_with(".bias")),
        matrix_(spec.shape.size() == 2),
        scale_(matrix_ ? 1.0 / std::sqrt(static_cast<double>(spec.shape[1])) : 0.0) {
    for (auto d : spec.shape) size_ *= static_cast<std::size_t>(d);
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] float operator()(std::size_t i) const noexcept {
    const double u = seeded_u(key_, i);
    return static_cast<float>(bias_ ? u / 16.0 : matrix_ ? u * scale_ : 1.0 + u / 4.0);
  }

 private:
  std::uint64_t key_;
  bool bias_, matrix_;
  double scale_;
  std::size_t size_ = 1;
};

/// @brief The seeded value of weight @p spec (see the file comment).
[[nodiscard]] inline std::vector<float> seeded_weight(const weight_spec& spec, std::uint64_t seed) {
  const seeded_values values(spec, seed);
  std::vector<float> out(values.size());
  for_chunks(out.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) out[i] = values(i);
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
/// rounded to nearest even), in execution order. Each tensor's bytes are computed straight into
/// one of two reused buffers (no per-tensor temporaries: FLUX.1-dev's largest is 75 MB of bf16)
/// while the other is written, so the file is written at about the rate the page cache takes it.
inline void write_seeded_model(const config& c, const std::filesystem::path& path, ddo::dtype type,
                               std::uint64_t seed) {
  DDO_EXPECTS(type == ddo::dtype::f32 || type == ddo::dtype::bf16,
              "flux: seeded models are f32 or bf16, got " + std::string(ddo::to_string(type)));
  const auto specs = weight_specs(c);
  std::vector<ddo::safetensors_tensor_spec> files;
  for (const auto& s : specs) files.push_back({s.name, type, s.shape});
  ddo::safetensors_writer writer(path.string(), files,
                                 {{"format", "pt"}, {"generator", "ddo-flux"}});
  const std::size_t width = ddo::size_of(type);
  std::size_t largest = 0;
  for (const auto& s : specs) largest = std::max(largest, seeded_values(s, seed).size() * width);
  std::vector<std::byte> buffers[2] = {std::vector<std::byte>(largest),
                                       std::vector<std::byte>(largest)};
  std::future<void> writing;  // the previous tensor's write (it reads the other buffer)
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const seeded_values values(specs[k], seed);
    std::byte* bytes = buffers[k % 2].data();
    for_chunks(values.size(), [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        const float v = values(i);
        std::uint32_t bits;
        std::memcpy(&bits, &v, 4);
        if (type == ddo::dtype::f32) {
          std::memcpy(bytes + 4 * i, &bits, 4);
        } else {
          const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
          const auto half = static_cast<std::uint16_t>(rounded >> 16);
          std::memcpy(bytes + 2 * i, &half, 2);
        }
      }
    });
    if (writing.valid()) writing.get();  // also rethrows its error
    writing = std::async(std::launch::async, [&writer, bytes, n = values.size() * width] {
      writer.write(std::span<const std::byte>(bytes, n));
    });
  }
  if (writing.valid()) writing.get();
  writer.finish();
}

}  // namespace flux
