// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief load_lora_adapter's body (part of adapter/lora_adapter.hpp, which includes it; not
/// back: no include cycles).

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <span>
#include <unordered_map>
#include <utility>

#include "ddo/adapter/float_bits.hpp"
#include "ddo/adapter/lora_keys.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/safetensors.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

inline std::string format_shape(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

/// The tensors of one module of a LoRA file.
struct lora_stem_parts {
  const safetensors_tensor* down = nullptr;
  const safetensors_tensor* up = nullptr;
  const safetensors_tensor* alpha = nullptr;
  bool kohya = false;
};

/// The base weights a module maps to, in row order, and whether B's row halves swap first.
struct lora_targets {
  std::vector<std::size_t> weights;
  bool swap_halves = false;
};

class lora_loader {
 public:
  lora_loader(const std::string& path, const weight_table& base)
      : path_(path), base_(base), file_(path), header_(read_safetensors_header(file_)) {}

  lora_adapter run() {
    lora_adapter out;
    out.file = path_;
    for (const auto& [stem, parts] : collect()) add_module(out, stem, parts);
    std::sort(out.deltas.begin(), out.deltas.end(),
              [](const lora_delta& a, const lora_delta& b) { return a.weight < b.weight; });
    for (std::size_t i = 1; i < out.deltas.size(); ++i)
      if (out.deltas[i].weight == out.deltas[i - 1].weight)
        fail(out.deltas[i].key, "modules '" + out.deltas[i - 1].key + "' and '" +
                                    out.deltas[i].key + "' both change base weight '" +
                                    out.deltas[i].target + "'; a LoRA file changes a weight once");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw format_error(path_, key, "LoRA file " + path_ + ": " + what);
  }

  std::map<std::string, lora_stem_parts> collect() {
    std::map<std::string, lora_stem_parts> stems;
    for (const auto& t : header_.tensors) {
      const auto key = parse_lora_key(t.name);
      if (!key)
        fail(t.name, "key '" + t.name +
                         "' is no LoRA factor: a LoRA file holds "
                         "<module>.lora_A.weight / .lora_B.weight (PEFT, diffusers; also "
                         ".lora.down.weight / .lora.up.weight) or <module>.lora_down.weight / "
                         ".lora_up.weight with an optional <module>.alpha (kohya)");
      auto& parts = stems[key->stem];
      const safetensors_tensor** slot = key->factor == lora_factor::down ? &parts.down
                                        : key->factor == lora_factor::up ? &parts.up
                                                                         : &parts.alpha;
      if (*slot != nullptr)
        fail(t.name, "keys '" + (*slot)->name + "' and '" + t.name +
                         "' are the same factor of "
                         "module '" +
                         key->stem + "'");
      *slot = &t;
      parts.kohya = parts.kohya || key->kohya;
    }
    for (const auto& [stem, parts] : stems) {
      if (parts.down == nullptr || parts.up == nullptr) {
        const auto* present = parts.down ? parts.down : parts.up ? parts.up : parts.alpha;
        fail(present->name,
             "key '" + present->name + "' has no " +
                 (parts.down == nullptr ? "down (lora_A / lora_down)" : "up (lora_B / lora_up)") +
                 " factor beside it for module '" + stem + "'");
      }
    }
    return stems;
  }

  std::vector<float> read_floats(const safetensors_tensor& t) const {
    const auto count = static_cast<std::size_t>(
        std::accumulate(t.shape.begin(), t.shape.end(), std::int64_t{1}, std::multiplies<>()));
    std::vector<std::byte> bytes(t.end - t.begin);
    file_.read(header_.data_offset + t.begin, bytes);
    std::vector<float> out(count);
    for (std::size_t k = 0; k < count; ++k) {
      std::uint16_t h = 0;
      if (t.type == dtype::f32) {
        std::memcpy(&out[k], bytes.data() + 4 * k, 4);
      } else if (t.type == dtype::f64) {
        double d;
        std::memcpy(&d, bytes.data() + 8 * k, 8);
        out[k] = static_cast<float>(d);
      } else if (t.type == dtype::bf16 || t.type == dtype::f16) {
        std::memcpy(&h, bytes.data() + 2 * k, 2);
        out[k] = t.type == dtype::bf16 ? bf16_bits_to_float(h) : f16_bits_to_float(h);
      } else {
        fail(t.name, "key '" + t.name + "' is " + std::string(to_string(t.type)) +
                         "; LoRA factors and alphas are F32, F16, BF16 or F64");
      }
    }
    return out;
  }

  std::optional<std::size_t> kohya_index(std::string_view body) {
    if (kohya_names_.empty()) {
      for (std::size_t w = 0; w < base_.size(); ++w) {
        const auto name = kohya_module_name(base_[w].name);
        if (name.empty()) continue;
        const auto [it, fresh] = kohya_names_.emplace(name, w);
        if (!fresh) it->second = ambiguous_;
      }
    }
    const auto it = kohya_names_.find(std::string(body));
    if (it == kohya_names_.end()) return std::nullopt;
    return it->second;
  }

  lora_targets targets_of(const std::string& stem, const lora_stem_parts& parts) {
    const auto missing = [&](const std::string& what) {
      fail(parts.down->name, "module '" + stem + "' (key '" + parts.down->name +
                                 "') matches no weight of the base model: " + what);
    };
    if (!parts.kohya) {
      const std::string name = peft_module_name(stem) + ".weight";
      const auto w = base_.find(name);
      if (!w) missing("it has no '" + name + "'");
      return {{*w}};
    }
    const auto body = kohya_body(stem);
    if (const auto w = kohya_index(body)) {
      if (*w == ambiguous_)
        fail(parts.down->name, "kohya module '" + stem +
                                   "' names more than one base weight "
                                   "(their names differ only in '.' against '_')");
      return {{*w}};
    }
    const auto flux = kohya_flux_modules(body);
    if (!flux)
      missing("no base weight is named '" + std::string(body) +
              "' with '_' for '.', "
              "and it is no FLUX.1 module diffusers' kohya conversion knows");
    lora_targets out;
    out.swap_halves = flux->swap_halves;
    for (const auto& m : flux->modules) {
      const auto w = base_.find(m + ".weight");
      if (!w) missing("it is FLUX.1's '" + m + "' in diffusers' naming, which the base lacks");
      out.weights.push_back(*w);
    }
    return out;
  }

  void add_module(lora_adapter& out, const std::string& stem, const lora_stem_parts& parts);

  static constexpr std::size_t ambiguous_ = static_cast<std::size_t>(-1);
  std::string path_;
  const weight_table& base_;
  file_reader file_;
  safetensors_header header_;
  std::unordered_map<std::string, std::size_t> kohya_names_;
};

inline std::int64_t product_from(const std::vector<std::int64_t>& shape, std::size_t first) {
  std::int64_t n = 1;
  for (std::size_t i = first; i < shape.size(); ++i) n *= shape[i];
  return n;
}

inline void lora_loader::add_module(lora_adapter& out, const std::string& stem,
                                    const lora_stem_parts& parts) {
  const auto& a = *parts.down;
  const auto& b = *parts.up;
  if (a.shape.size() < 2 || b.shape.size() < 2 || product_from(b.shape, 2) != 1 ||
      b.shape[1] != a.shape[0] || a.shape[0] == 0)
    fail(a.name, "key '" + a.name + "' of shape " + format_shape(a.shape) + " and key '" + b.name +
                     "' of shape " + format_shape(b.shape) +
                     " are no rank-r pair (down r x in..., up out x r)");
  const auto targets = targets_of(stem, parts);
  const std::int64_t rank = a.shape[0], cols = product_from(a.shape, 1);
  std::int64_t rows = 0;
  for (const auto w : targets.weights) {
    const auto& info = base_[w];
    if (!lora_mergeable(info.type))
      fail(a.name, "key '" + a.name + "' changes base weight '" + info.name + "' of type " +
                       std::string(to_string(info.type)) +
                       "; ddo merges a LoRA into BF16, F16 "
                       "and F32 weights only (fp8 and integer weights need their scales: the "
                       "engine applies the delta in its own GEMM there, docs/adapters.md)");
    if (info.shape.empty() || product_from(info.shape, 1) != cols)
      fail(a.name, "key '" + a.name + "' of shape " + format_shape(a.shape) +
                       " does not fit base weight '" + info.name + "' of shape " +
                       format_shape(info.shape));
    rows += info.shape[0];
  }
  if (rows != b.shape[0])
    fail(b.name, "key '" + b.name + "' of shape " + format_shape(b.shape) + " has " +
                     std::to_string(b.shape[0]) + " rows; its base weights have " +
                     std::to_string(rows));
  auto up = read_floats(b);
  float alpha = static_cast<float>(rank);
  if (parts.alpha != nullptr) {
    if (product_from(parts.alpha->shape, 0) != 1)
      fail(parts.alpha->name, "alpha '" + parts.alpha->name + "' is no scalar");
    alpha = read_floats(*parts.alpha)[0];
  }
  if (targets.swap_halves) {
    if (rows % 2 != 0) fail(b.name, "key '" + b.name + "': an odd row count to swap halves of");
    const auto half = static_cast<std::size_t>(rows / 2 * rank);
    std::swap_ranges(up.begin(), up.begin() + static_cast<std::ptrdiff_t>(half),
                     up.begin() + static_cast<std::ptrdiff_t>(half));
  }
  const auto down = read_floats(a);
  // Factors stored in bf16 or fp16 stay so on the device (half the bytes of fp32, exact).
  const bool half = a.type == b.type && (a.type == dtype::bf16 || a.type == dtype::f16);
  const dtype kept = half ? a.type : dtype::f32;
  std::int64_t row = 0;
  for (const auto w : targets.weights) {
    lora_delta d{stem,
                 base_[w].name,
                 w,
                 rank,
                 base_[w].shape[0],
                 cols,
                 alpha / static_cast<float>(rank),
                 down,
                 {},
                 kept};
    d.up.assign(up.begin() + static_cast<std::ptrdiff_t>(row * rank),
                up.begin() + static_cast<std::ptrdiff_t>((row + d.rows) * rank));
    row += d.rows;
    out.deltas.push_back(std::move(d));
  }
}

}  // namespace detail

inline lora_adapter load_lora_adapter(const std::string& path, const weight_table& base) {
  return detail::lora_loader(path, base).run();
}

}  // namespace v0
}  // namespace ddo
