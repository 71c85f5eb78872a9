// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::weight_table: what an engine tells ddo about its model, once.
///
/// One entry per tensor: its name, its module, the module's kind, dtype, shape, size, and where
/// its bytes are now (a host pointer the engine owns, or a byte range in a file). Execution groups
/// (the units the runtime streams) are described in model/execution_groups.hpp.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/module_kind.hpp"
#include "ddo/model/dtype.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Bytes in host memory owned by the engine; ddo reads them (and may page-lock them with
/// cudaHostRegister) but never frees them. They must stay valid while the offloader lives.
struct host_source {
  const std::byte* data = nullptr;
};

/// @brief Bytes in a file: index into weight_table::files() and the absolute byte offset.
struct file_source {
  std::size_t file_index = 0;
  std::uint64_t offset = 0;
};

using weight_source = std::variant<host_source, file_source>;

/// @brief One tensor of the model.
struct weight_info {
  std::string name;         ///< full tensor name, e.g. "transformer_blocks.3.attn.to_q.weight"
  std::string module_name;  ///< owning module, e.g. "transformer_blocks.3.attn.to_q"
  module_kind kind = module_kind::other;
  dtype type = dtype::bf16;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;  ///< product(shape) * size_of(type)
  weight_source source;
};

/// @brief The module name of a tensor name: everything before the last '.', or "" when none.
[[nodiscard]] inline std::string module_name_of(std::string_view tensor_name) {
  const auto dot = tensor_name.rfind('.');
  return dot == std::string_view::npos ? std::string() : std::string(tensor_name.substr(0, dot));
}

/// @brief The weights of one model (component), in the order the engine or the file listed them.
class weight_table {
 public:
  /// @brief Adds a weight. @throws usage_error if the name is taken, the size does not match
  /// shape × dtype, or a file source names an unknown file.
  std::size_t add(weight_info info) {
    DDO_EXPECTS(!info.name.empty(), "weight_table::add: a weight needs a name");
    DDO_EXPECTS(!index_.contains(info.name),
                "weight_table::add: duplicate weight name '" + info.name + "'");
    std::uint64_t elements = 1;
    for (auto d : info.shape) {
      DDO_EXPECTS(d >= 0, "weight_table::add: negative dimension in '" + info.name + "'");
      elements *= static_cast<std::uint64_t>(d);
    }
    const std::uint64_t expected = elements * size_of(info.type);
    if (info.bytes == 0) info.bytes = expected;
    DDO_EXPECTS(info.bytes == expected,
                "weight_table::add: '" + info.name + "' has " + std::to_string(info.bytes) +
                    " bytes but shape x dtype gives " + std::to_string(expected));
    if (const auto* f = std::get_if<file_source>(&info.source))
      DDO_EXPECTS(f->file_index < files_.size(),
                  "weight_table::add: '" + info.name + "' names file index " +
                      std::to_string(f->file_index) + " but only " +
                      std::to_string(files_.size()) + " files are registered");
    if (info.module_name.empty()) info.module_name = module_name_of(info.name);
    const std::size_t index = weights_.size();
    index_.emplace(info.name, index);
    weights_.push_back(std::move(info));
    return index;
  }

  /// @brief Registers a file that file sources refer to by index; returns its index.
  std::size_t add_file(std::string path) {
    files_.push_back(std::move(path));
    return files_.size() - 1;
  }

  [[nodiscard]] std::size_t size() const noexcept { return weights_.size(); }
  [[nodiscard]] bool empty() const noexcept { return weights_.empty(); }
  [[nodiscard]] const weight_info& operator[](std::size_t i) const { return weights_.at(i); }
  [[nodiscard]] weight_info& operator[](std::size_t i) { return weights_.at(i); }
  [[nodiscard]] const std::vector<weight_info>& weights() const noexcept { return weights_; }
  [[nodiscard]] const std::vector<std::string>& files() const noexcept { return files_; }

  /// @brief Index of the weight called @p name, or nullopt.
  [[nodiscard]] std::optional<std::size_t> find(std::string_view name) const {
    const auto it = index_.find(std::string(name));
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }

  /// @brief Which contents of host memory the table's host sources mean: a token that a copy of
  /// the table keeps (shard_weight_table's too) and a table built anew gets fresh. A
  /// shared_weight_store keys host weights by address and this token, so a store that outlives
  /// a model reload never hands out the old bytes for a new weight at a freed weight's address.
  [[nodiscard]] std::uint64_t host_generation() const noexcept { return host_generation_; }
  /// @brief States that this table's host sources point into the same live bytes as @p other's
  /// (a table built again over the engine's buffers, or a part of @p other): a
  /// shared_weight_store then shares their copies between the two.
  void share_host_generation(const weight_table& other) noexcept {
    host_generation_ = other.host_generation_;
  }
  /// @brief States that the bytes behind this table's host sources changed (an engine that
  /// reloads into the same buffers and keeps the table): a shared_weight_store copies them again.
  void renew_host_generation() noexcept { host_generation_ = next_host_generation(); }

  /// @brief Sum of all weights' bytes.
  [[nodiscard]] std::uint64_t total_bytes() const noexcept {
    std::uint64_t total = 0;
    for (const auto& w : weights_) total += w.bytes;
    return total;
  }

 private:
  [[nodiscard]] static std::uint64_t next_host_generation() noexcept {
    static std::atomic<std::uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  std::vector<weight_info> weights_;
  std::vector<std::string> files_;
  std::unordered_map<std::string, std::size_t> index_;
  std::uint64_t host_generation_ = next_host_generation();  // copies keep it (member-wise)
};

}  // namespace v0
}  // namespace ddo
