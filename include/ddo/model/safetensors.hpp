// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Reading and writing safetensors files: single files and sharded models
/// (`*.safetensors.index.json`), strictly validated, into a weight_table of file sources.
///
/// Format: 8 bytes little-endian header length N, N bytes of JSON header, then the data section.
/// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
/// relative to the data section) and may hold a "__metadata__" object of strings.
///
/// Validation (every failure is a ddo::format_error naming the file and, where there is one, the
/// tensor): the file holds at least the 8-byte length; N is at most
/// max_safetensors_header_bytes and within the file; the header is well-formed JSON (strict, no
/// duplicate keys) and an object; every dtype is known; every shape is a list of non-negative
/// integers whose element count × dtype size equals end − begin without overflow; begin ≤ end ≤
/// data-section size; no two tensors' byte ranges overlap; `__metadata__` values are strings.
/// For an index: well-formed JSON with a "weight_map" object of strings naming shard files in the
/// index's directory (no absolute paths, no ".."), every listed tensor present in its shard,
/// no tensor in a shard the index does not list, no tensor in two shards.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/linkage.hpp"
#include "ddo/core/safetensors_backend.hpp"
#include "ddo/model/dtype.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/weight_table.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The largest header ddo accepts (the safetensors library's own bound, 100 MB): a
/// header length above it is refused before anything is allocated.
inline constexpr std::uint64_t max_safetensors_header_bytes = 100'000'000;

/// @brief One tensor entry of a safetensors header.
struct safetensors_tensor {
  std::string name;
  dtype type = dtype::bf16;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  ///< offset of the first byte, relative to the data section
  std::uint64_t end = 0;    ///< one past the last byte, relative to the data section
};

/// @brief A parsed and validated safetensors header.
struct safetensors_header {
  std::uint64_t header_bytes = 0;           ///< N, the JSON length the file declares
  std::uint64_t data_offset = 0;            ///< 8 + N: absolute offset of the data section
  std::uint64_t data_bytes = 0;             ///< size of the data section
  std::vector<safetensors_tensor> tensors;  ///< sorted by begin (then name)
  std::vector<std::pair<std::string, std::string>> metadata;  ///< `__metadata__`, in file order
};

/// @brief Parses and validates a header's JSON text against a data section of @p data_bytes.
/// This is the function the fuzzer drives: any input either parses or throws format_error.
/// @param file_for_errors the file name quoted in error messages.
/// @throws format_error naming the file and tensor.
[[nodiscard]] DDO_INLINE safetensors_header parse_safetensors_header(
    std::string_view header_json, std::uint64_t data_bytes, std::string_view file_for_errors);

/// @brief Reads and validates the header of an open safetensors file.
/// @throws format_error on malformed content, io_error on read failures.
[[nodiscard]] DDO_INLINE safetensors_header read_safetensors_header(const file_reader& file);

/// @brief Whether @p path names a sharded-model index (ends in ".index.json").
[[nodiscard]] DDO_INLINE bool is_safetensors_index(std::string_view path) noexcept;

/// @brief Adds every tensor of one safetensors file (or every shard of an index) to @p table as
/// file sources, in data order (file by file, then offset), with module names and inferred kinds
/// (model/module_kind_inference.hpp).
/// @throws format_error (also for a tensor name already in @p table), io_error.
DDO_INLINE void append_safetensors(
    weight_table& table, const std::string& path,
    safetensors_backend backend = safetensors_backend::library_default);

/// @brief Loads one file or index into a new weight table. See append_safetensors.
[[nodiscard]] DDO_INLINE weight_table load_safetensors(
    const std::string& path, safetensors_backend backend = safetensors_backend::library_default);

/// @brief Loads several files or indexes (e.g. the MODEL... arguments of ddo-plan) into one
/// table, in the order given.
[[nodiscard]] DDO_INLINE weight_table
load_safetensors(std::span<const std::string> paths,
                 safetensors_backend backend = safetensors_backend::library_default);

/// @brief Shape and type of a tensor to be written.
struct safetensors_tensor_spec {
  std::string name;
  dtype type = dtype::bf16;
  std::vector<std::int64_t> shape;
  /// product(shape) × size_of(type).
  [[nodiscard]] std::uint64_t bytes() const;
};

/// @brief Writes a safetensors file in one pass: the header first (all shapes are known up
/// front), then the tensors' bytes streamed in spec order through a large buffer, so a model of
/// many GiB is written without holding it in memory.
class safetensors_writer {
 public:
  /// @brief Creates (truncates) @p path and writes the header. Tensors are laid out
  /// contiguously in the order given; the header is padded with spaces to a multiple of 8 bytes
  /// so every tensor starts 8-byte aligned, as the safetensors library does.
  /// @throws usage_error on duplicate or empty names, io_error when the file cannot be written.
  safetensors_writer(std::string path, std::vector<safetensors_tensor_spec> tensors,
                     std::vector<std::pair<std::string, std::string>> metadata = {});
  ~safetensors_writer();
  safetensors_writer(const safetensors_writer&) = delete;
  safetensors_writer& operator=(const safetensors_writer&) = delete;

  /// @brief Appends data bytes (any split: tensor boundaries come from the specs).
  /// @throws usage_error when more bytes arrive than the specs describe; io_error.
  void write(std::span<const std::byte> bytes);
  /// @brief Flushes and closes. @throws usage_error when fewer bytes were written than the specs
  /// describe; io_error.
  void finish();

  /// @brief Total data bytes the specs describe.
  [[nodiscard]] std::uint64_t data_bytes() const noexcept { return data_bytes_; }
  /// @brief Data bytes written so far.
  [[nodiscard]] std::uint64_t written_bytes() const noexcept { return written_; }
  /// @brief Absolute offset of the data section (8 + padded header length).
  [[nodiscard]] std::uint64_t data_offset() const noexcept { return data_offset_; }

 private:
  void flush();
  std::string path_;
  int fd_ = -1;
  std::uint64_t data_bytes_ = 0;
  std::uint64_t data_offset_ = 0;
  std::uint64_t written_ = 0;
  std::vector<std::byte> buffer_;
  std::size_t buffered_ = 0;
};

/// @brief A tensor with its bytes, for write_safetensors.
struct safetensors_tensor_data {
  safetensors_tensor_spec spec;
  std::span<const std::byte> data;  ///< exactly spec.bytes() bytes
};

/// @brief Writes a whole safetensors file from tensors in memory (tests, small models).
DDO_INLINE void write_safetensors(const std::string& path,
                                  std::span<const safetensors_tensor_data> tensors,
                                  std::vector<std::pair<std::string, std::string>> metadata = {});

/// @brief Writes a sharded-model index: {"metadata": {"total_size": N}, "weight_map": {...}}.
/// @param weight_map tensor name → shard file name (relative to the index's directory).
DDO_INLINE void write_safetensors_index(
    const std::string& path, std::span<const std::pair<std::string, std::string>> weight_map,
    std::uint64_t total_size);

}  // namespace v0
}  // namespace ddo

#if DDO_HEADER_ONLY
#include "ddo/model/detail/safetensors_impl.hpp"
#endif
