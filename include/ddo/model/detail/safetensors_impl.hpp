// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Implementation of the safetensors reader and writer (model/safetensors.hpp).

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "ddo/core/detail/json.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/core/text.hpp"
#include "ddo/model/module_kind_inference.hpp"
// Part of ddo/model/safetensors.hpp, which includes it (not back: no include cycles).

namespace ddo {
inline namespace v0 {
namespace detail {

[[noreturn]] inline void throw_format(std::string_view file, std::string_view tensor,
                                      const std::string& what) {
  std::string message = "malformed safetensors file '" + sanitize_utf8(file) + "'";
  if (!tensor.empty()) message += ", tensor '" + json_parser::printable(tensor) + "'";
  message += ": " + what;
  throw format_error(std::string(file), std::string(tensor), message);
}

DDO_INLINE void write_text_file(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw io_error(path, errno, "cannot create '" + path + "': " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      throw io_error(path, e, "cannot write '" + path + "': " + std::strerror(e));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0)
    throw io_error(path, errno, "cannot close '" + path + "': " + std::strerror(errno));
}

[[nodiscard]] DDO_INLINE std::uint64_t read_le64(const std::array<std::byte, 8>& b) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<std::uint64_t>(b[static_cast<std::size_t>(i)]);
  return v;
}

}  // namespace detail

namespace detail {

/// Throws "<what>, found <what @p value is>" (naming @p file and @p tensor) unless @p ok.
DDO_INLINE void expect_json(bool ok, std::string_view file, std::string_view tensor,
                            const std::string& what, const json_value& value) {
  if (!ok) throw_format(file, tensor, what + ", found " + std::string(value.describe()));
}

/// One tensor of a safetensors header, checked on its own: its fields, a byte size that fits 64
/// bits and data_offsets within the @p data_bytes of the data section that span that size.
DDO_INLINE safetensors_tensor parse_safetensors_tensor(std::string_view file, std::string name,
                                                       const json_value& entry,
                                                       std::uint64_t data_bytes) {
  using std::to_string;
  if (name.empty()) throw_format(file, name, "tensor name is empty");
  expect_json(entry.is_object(), file, name,
              "entry must be an object with dtype, shape and data_offsets", entry);
  // Other fields are ignored, as the reference implementation (serde without
  // deny_unknown_fields) ignores them.
  const auto field = [&](const std::string& key) {
    const auto* value = entry.find(key);
    if (value == nullptr) throw_format(file, name, "missing field '" + key + "'");
    return value;
  };
  const json_value& dtype_value = *field("dtype");
  const json_value& shape_value = *field("shape");
  const json_value& offsets_value = *field("data_offsets");

  expect_json(dtype_value.is_string(), file, name, "dtype must be a string", dtype_value);
  const auto type = parse_dtype(dtype_value.text());
  if (!type) {
    std::string known;
    for (const auto& info : dtype_table)
      known += (known.empty() ? "" : ", ") + std::string(info.safetensors_name);
    throw_format(file, name,
                 "unknown dtype '" + json_parser::printable(dtype_value.text()) +
                     "' (known: " + known + ")");
  }
  safetensors_tensor t;
  t.name = std::move(name);
  t.type = *type;

  expect_json(shape_value.is_array(), file, t.name, "shape must be a list of integers",
              shape_value);
  // The byte size: the product of the element size (never 0) and every dimension; a zero
  // dimension makes it 0 whatever overflowed before it.
  std::uint64_t expected = size_of(t.type);
  bool overflow = false;
  for (const auto& d : shape_value.items()) {
    const auto dim = d.as_u64();
    if (!dim || *dim > static_cast<std::uint64_t>(INT64_MAX))
      throw_format(
          file, t.name,
          "shape entries must be non-negative integers, found '" +
              json_parser::printable(d.is_number() ? d.text() : std::string(d.describe())) + "'");
    t.shape.push_back(static_cast<std::int64_t>(*dim));
    overflow = overflow || (*dim != 0 && expected > UINT64_MAX / *dim);
    expected *= *dim;
  }
  if (overflow && std::find(t.shape.begin(), t.shape.end(), 0) == t.shape.end())
    throw_format(file, t.name, "shape's byte size overflows 64 bits");

  if (!offsets_value.is_array() || offsets_value.items().size() != 2)
    throw_format(file, t.name, "data_offsets must be a list of two integers [begin, end]");
  const auto begin = offsets_value.items()[0].as_u64();
  const auto end = offsets_value.items()[1].as_u64();
  if (!begin || !end)
    throw_format(file, t.name, "data_offsets must be non-negative integers that fit 64 bits");
  t.begin = *begin;
  t.end = *end;
  if (t.begin > t.end)
    throw_format(file, t.name,
                 "data_offsets begin " + to_string(t.begin) + " is after end " + to_string(t.end));
  if (t.end > data_bytes)
    throw_format(file, t.name,
                 "data_offsets [" + to_string(t.begin) + ", " + to_string(t.end) +
                     ") reach past the data section of " + to_string(data_bytes) +
                     " bytes (file truncated?)");
  if (t.end - t.begin != expected)
    throw_format(file, t.name,
                 "data_offsets span " + to_string(t.end - t.begin) + " bytes but shape x dtype (" +
                     std::string(ddo::to_string(t.type)) + ") needs " + to_string(expected));
  return t;
}

/// The `__metadata__` member of a safetensors header: an object of strings, in file order.
DDO_INLINE std::vector<std::pair<std::string, std::string>> parse_safetensors_metadata(
    std::string_view file, const json_value& entry) {
  expect_json(entry.is_object(), file, "", "__metadata__ must be an object of strings", entry);
  std::vector<std::pair<std::string, std::string>> metadata;
  for (const auto& [key, value] : entry.members()) {
    expect_json(value.is_string(), file, "",
                "__metadata__ value of '" + json_parser::printable(key) + "' must be a string",
                value);
    metadata.emplace_back(key, value.text());
  }
  return metadata;
}

}  // namespace detail

DDO_INLINE safetensors_header parse_safetensors_header(std::string_view header_json,
                                                       std::uint64_t data_bytes,
                                                       std::string_view file) {
  using detail::json_parser;
  using detail::throw_format;
  using std::to_string;
  // The reference reads the header as UTF-8 text first (std::str::from_utf8).
  if (const std::size_t at = valid_utf8_prefix(header_json); at != header_json.size())
    throw_format(file, "",
                 "header is not valid UTF-8 (invalid byte at header byte " + to_string(at) +
                     "); the safetensors format requires a UTF-8 JSON header");
  safetensors_header header;
  header.header_bytes = header_json.size();
  header.data_bytes = data_bytes;
  bool metadata_seen = false;
  // Each member is checked and turned into a safetensors_tensor as it is parsed: the JSON tree
  // of a whole header (about 10x its size) never exists (reliability.md, class 7).
  // A JSON syntax error anywhere wins over a rule broken by an earlier member: the first
  // broken rule is kept and thrown only once the whole header has parsed.
  std::optional<format_error> first_broken_rule;
  const auto on_member = [&](std::string name, const detail::json_value& entry) {
    if (first_broken_rule) return;
    try {
      if (name != "__metadata__")
        return header.tensors.push_back(
            detail::parse_safetensors_tensor(file, std::move(name), entry, data_bytes));
      if (metadata_seen) throw_format(file, "", "__metadata__ appears twice");
      metadata_seen = true;
      header.metadata = detail::parse_safetensors_metadata(file, entry);
    } catch (const format_error& e) {
      first_broken_rule = e;
    }
  };
  try {
    if (!json_parser(header_json).parse_object_members(on_member))
      throw_format(file, "",
                   "header must be a JSON object, found " +
                       std::string(detail::parse_json(header_json).describe()));
  } catch (const detail::json_error& e) {
    throw_format(
        file, "",
        "header is not valid JSON: " + e.message + " at header byte " + to_string(e.offset));
  }
  if (first_broken_rule) throw *first_broken_rule;

  // Duplicate names: found next to each other once sorted by name.
  std::ranges::sort(header.tensors, {}, &safetensors_tensor::name);
  const auto twice = std::ranges::adjacent_find(header.tensors, {}, &safetensors_tensor::name);
  if (twice != header.tensors.end())
    throw_format(file, twice->name,
                 "duplicate key \"" + json_parser::printable(twice->name) +
                     "\" in the header: the tensor name appears twice");

  // The reference's rule: sorted by offsets, the tensors tile the data area exactly — each
  // begins where the previous one ended (the first at 0) and the last ends at the end of the
  // file. A gap, an overlap or trailing bytes is refused.
  std::ranges::sort(header.tensors, {},
                    [](const auto& t) { return std::tie(t.begin, t.end, t.name); });
  const std::string rule = "(rule: tensors must tile the data area exactly)";
  std::uint64_t covered = 0;
  std::string previous = "the start of the data area";
  for (const auto& t : header.tensors) {
    if (t.begin != covered)
      throw_format(
          file, t.name,
          "byte range [" + to_string(t.begin) + ", " + to_string(t.end) + ") " +
              (t.begin < covered ? "overlaps " + previous + " which ends at " + to_string(covered)
                                 : "leaves a gap of " + to_string(t.begin - covered) +
                                       " bytes after " + previous) +
              " " + rule);
    covered = t.end;
    previous = "tensor '" + json_parser::printable(t.name) + "'";
  }
  if (covered != data_bytes)
    throw_format(file, "",
                 "the data area has " + to_string(data_bytes) + " bytes but the tensors cover " +
                     to_string(covered) + " (" + to_string(data_bytes - covered) +
                     " trailing bytes; rule: tensors must tile the data area exactly)");
  return header;
}

DDO_INLINE safetensors_header read_safetensors_header(const file_reader& file) {
  using detail::throw_format;
  const std::string& path = file.path();
  if (file.size() < 8)
    throw_format(path, "",
                 "file has " + std::to_string(file.size()) +
                     " bytes, fewer than the 8-byte header length (truncated?)");
  std::array<std::byte, 8> length_bytes{};
  file.read(0, length_bytes);
  const std::uint64_t n = detail::read_le64(length_bytes);
  if (n > max_safetensors_header_bytes)
    throw_format(path, "",
                 "header length " + std::to_string(n) + " exceeds the limit of " +
                     std::to_string(max_safetensors_header_bytes) +
                     " bytes (not a safetensors file, or corrupt)");
  if (n > file.size() - 8)
    throw_format(path, "",
                 "header length " + std::to_string(n) + " is longer than the " +
                     std::to_string(file.size() - 8) + " bytes that follow it (truncated?)");
  if (n < 2)
    throw_format(path, "",
                 "header length " + std::to_string(n) + " is too short for a JSON object");
  std::string json(static_cast<std::size_t>(n), '\0');
  file.read(8, std::as_writable_bytes(std::span<char>(json.data(), json.size())));
  // The safetensors writer pads the header with trailing spaces; JSON allows them.
  safetensors_header header = parse_safetensors_header(json, file.size() - 8 - n, path);
  header.data_offset = 8 + n;
  return header;
}

DDO_INLINE bool is_safetensors_index(std::string_view path) noexcept {
  return path.ends_with(".index.json");
}

namespace detail {

DDO_INLINE void append_one_safetensors_file(weight_table& table, const std::string& path,
                                            safetensors_backend backend,
                                            std::vector<std::string>* names_out) {
  const file_reader reader(path, backend);
  const safetensors_header header = read_safetensors_header(reader);
  const std::size_t file_index = table.add_file(path);
  for (const auto& t : header.tensors) {
    if (table.find(t.name))
      throw_format(path, t.name,
                   "tensor name appears twice in the model (another file already has it)");
    weight_info w;
    w.name = t.name;
    w.module_name = module_name_of(t.name);
    w.type = t.type;
    w.shape = t.shape;
    w.bytes = t.end - t.begin;
    w.source = file_source{file_index, header.data_offset + t.begin};
    table.add(std::move(w));
    if (names_out != nullptr) names_out->push_back(t.name);
  }
}

/// A sharded model's index: the shard files in order of first appearance and each tensor's shard.
struct safetensors_index {
  std::vector<std::string> shards;
  std::unordered_map<std::string, std::string> shard_of;
};

/// Parses and checks the text of a `*.safetensors.index.json` (named @p index_path in
/// messages): UTF-8 JSON, a "weight_map" object of non-empty relative shard names.
/// Only the weight map is kept: every other member (the metadata) is checked as JSON and
/// dropped as it is read, so memory grows with the weight map, not with the file (a 48 MB
/// metadata array parsed into a tree took 2.87 GB).
/// @throws format_error naming the index and, where known, the tensor.
DDO_INLINE safetensors_index parse_safetensors_index(std::string_view text,
                                                     const std::string& index_path) {
  if (!is_valid_utf8(text))
    throw_format(index_path, "", "index is not valid UTF-8 (JSON files are UTF-8 text)");
  safetensors_index index;
  auto& shards = index.shards;
  auto& shard_of = index.shard_of;
  std::unordered_set<std::string> seen_shards;  // a set: an index may list many shards
  bool found = false, object = false;
  const auto not_an_object = [&] {
    throw_format(index_path, "", "index must be a JSON object with a \"weight_map\" object");
  };
  const auto read_entry = [&](json_parser& parser, std::string tensor) {
    if (parser.next() != '"')
      throw_format(index_path, tensor, "weight_map value must be a shard file name");
    const json_value shard = parser.value(2);
    if (shard.text().empty())
      throw_format(index_path, tensor, "weight_map value must be a shard file name");
    const std::filesystem::path p(shard.text());
    bool escapes = p.is_absolute();
    for (const auto& part : p) escapes = escapes || part == "..";
    if (escapes)
      throw_format(index_path, tensor,
                   "shard '" + json_parser::printable(shard.text()) +
                       "' must be a file name relative to the index's directory");
    if (seen_shards.insert(shard.text()).second) shards.push_back(shard.text());
    if (!shard_of.emplace(tensor, shard.text()).second)
      throw_format(index_path, tensor,
                   "index is not valid JSON: duplicate key \"" + json_parser::printable(tensor) +
                       "\" in JSON object (weight_map)");
  };
  try {
    json_parser parser(text);
    if (parser.next() != '{') not_an_object();
    parser.members(0, [&](std::string key) {
      if (key != "weight_map") {
        parser.skip(1);
        return;
      }
      if (found)
        throw_format(index_path, "",
                     "index is not valid JSON: duplicate key \"weight_map\" in JSON object");
      found = true;
      object = parser.next() == '{';
      if (!object) return parser.skip(1);  // refused below, once the whole text is known JSON
      parser.members(1, [&](std::string tensor) { read_entry(parser, std::move(tensor)); });
    });
    parser.end();
  } catch (const json_error& e) {
    throw_format(index_path, "",
                 "index is not valid JSON: " + e.message + " at byte " + std::to_string(e.offset));
  }
  if (!found || !object) not_an_object();
  return index;
}

DDO_INLINE void append_safetensors_index(weight_table& table, const std::string& index_path,
                                         safetensors_backend backend) {
  const file_reader reader(index_path, safetensors_backend::pread);
  // An index lists tensor names only: a few MB at most. Bound it anyway before allocating.
  if (reader.size() > max_safetensors_header_bytes)
    throw_format(index_path, "",
                 "index file of " + std::to_string(reader.size()) + " bytes exceeds the limit of " +
                     std::to_string(max_safetensors_header_bytes) + " bytes");
  std::string text(static_cast<std::size_t>(reader.size()), '\0');
  reader.read(0, std::as_writable_bytes(std::span<char>(text.data(), text.size())));
  const safetensors_index index = parse_safetensors_index(text, index_path);
  const auto& shards = index.shards;
  const auto& shard_of = index.shard_of;
  const std::filesystem::path directory = std::filesystem::path(index_path).parent_path();
  for (const auto& shard : shards) {
    const std::string shard_path = (directory / shard).string();
    std::vector<std::string> names;
    append_one_safetensors_file(table, shard_path, backend, &names);
    for (const auto& name : names) {
      const auto it = shard_of.find(name);
      if (it == shard_of.end())
        throw_format(shard_path, name, "tensor is not listed in the index '" + index_path + "'");
      if (it->second != shard)
        throw_format(shard_path, name,
                     "index '" + index_path + "' places this tensor in '" + it->second + "'");
    }
  }
  for (const auto& [tensor, shard] : shard_of)
    if (!table.find(tensor))
      throw_format((directory / shard).string(), tensor,
                   "tensor listed in the index '" + index_path + "' is missing from its shard");
}

}  // namespace detail

DDO_INLINE void append_safetensors(weight_table& table, const std::string& path,
                                   safetensors_backend backend) {
  const std::size_t first = table.size();
  if (is_safetensors_index(path))
    detail::append_safetensors_index(table, path, backend);
  else
    detail::append_one_safetensors_file(table, path, backend, nullptr);
  infer_module_kinds(table, {}, first);
}

DDO_INLINE weight_table load_safetensors(const std::string& path, safetensors_backend backend) {
  weight_table table;
  append_safetensors(table, path, backend);
  return table;
}

DDO_INLINE weight_table load_safetensors(std::span<const std::string> paths,
                                         safetensors_backend backend) {
  weight_table table;
  for (const auto& path : paths) append_safetensors(table, path, backend);
  return table;
}

// ---------------------------------------------------------------------------------------------
// Writer

DDO_INLINE std::uint64_t safetensors_tensor_spec::bytes() const {
  std::uint64_t elements = 1;
  for (auto d : shape) {
    DDO_EXPECTS(d >= 0, "safetensors_tensor_spec: negative dimension in '" + name + "'");
    elements *= static_cast<std::uint64_t>(d);
  }
  return elements * size_of(type);
}

DDO_INLINE safetensors_writer::safetensors_writer(
    std::string path, std::vector<safetensors_tensor_spec> tensors,
    std::vector<std::pair<std::string, std::string>> metadata)
    : path_(std::move(path)) {
  json_writer writer;
  writer.begin_object();
  if (!metadata.empty()) {
    writer.key("__metadata__").begin_object();
    for (const auto& [key, value] : metadata) writer.member(key, value);
    writer.end_object();
  }
  std::unordered_set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    DDO_EXPECTS(is_valid_utf8(t.name),
                "safetensors_writer: tensor name '" + sanitize_utf8(t.name) +
                    "' is not valid UTF-8; the format's header is UTF-8 JSON");
    DDO_EXPECTS(!t.name.empty() && t.name != "__metadata__",
                "safetensors_writer: invalid tensor name '" + t.name + "'");
    DDO_EXPECTS(names.insert(t.name).second,
                "safetensors_writer: duplicate tensor name '" + t.name + "'");
    const std::uint64_t bytes = t.bytes();
    writer.key(t.name).begin_object().member("dtype", to_string(t.type));
    writer.key("shape").begin_array();
    for (auto d : t.shape) writer.value(d);
    writer.end_array();
    writer.key("data_offsets").begin_array().value(offset).value(offset + bytes).end_array();
    writer.end_object();
    offset += bytes;
  }
  writer.end_object();
  std::string json = writer.take();
  while ((8 + json.size()) % 8 != 0) json += ' ';
  data_bytes_ = offset;
  data_offset_ = 8 + json.size();

  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw io_error(path_, errno, "cannot create '" + path_ + "': " + std::strerror(errno));
  buffer_.resize(16 * 1024 * 1024);
  std::array<std::byte, 8> length{};
  for (std::size_t i = 0; i < 8; ++i)
    length[i] = static_cast<std::byte>((static_cast<std::uint64_t>(json.size()) >> (8 * i)) & 0xff);
  std::memcpy(buffer_.data(), length.data(), 8);
  buffered_ = 8;
  // The header itself goes through the same buffer (it may be larger than the buffer).
  const auto* header = reinterpret_cast<const std::byte*>(json.data());
  std::size_t left = json.size();
  while (left > 0) {
    const std::size_t n = std::min(left, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, header, n);
    buffered_ += n;
    header += n;
    left -= n;
    if (buffered_ == buffer_.size()) flush();
  }
}

DDO_INLINE safetensors_writer::~safetensors_writer() {
  if (fd_ >= 0) ::close(fd_);
}

DDO_INLINE void safetensors_writer::flush() {
  std::size_t done = 0;
  while (done < buffered_) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffered_ - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw io_error(path_, errno, "cannot write '" + path_ + "': " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  buffered_ = 0;
}

DDO_INLINE void safetensors_writer::write(std::span<const std::byte> bytes) {
  DDO_EXPECTS(fd_ >= 0, "safetensors_writer::write after finish()");
  DDO_EXPECTS(bytes.size() <= data_bytes_ - written_,
              "safetensors_writer::write: " + std::to_string(bytes.size()) +
                  " bytes given but only " + std::to_string(data_bytes_ - written_) +
                  " remain in '" + path_ + "'");
  written_ += bytes.size();
  while (!bytes.empty()) {
    if (buffered_ == 0 && bytes.size() >= buffer_.size()) {
      // Large writes bypass the buffer: one copy less.
      const std::size_t n = bytes.size() / buffer_.size() * buffer_.size();
      std::size_t done = 0;
      while (done < n) {
        const ssize_t w = ::write(fd_, bytes.data() + done, n - done);
        if (w < 0) {
          if (errno == EINTR) continue;
          throw io_error(path_, errno, "cannot write '" + path_ + "': " + std::strerror(errno));
        }
        done += static_cast<std::size_t>(w);
      }
      bytes = bytes.subspan(n);
      continue;
    }
    const std::size_t n = std::min(bytes.size(), buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, bytes.data(), n);
    buffered_ += n;
    bytes = bytes.subspan(n);
    if (buffered_ == buffer_.size()) flush();
  }
}

DDO_INLINE void safetensors_writer::finish() {
  DDO_EXPECTS(fd_ >= 0, "safetensors_writer::finish called twice");
  DDO_EXPECTS(written_ == data_bytes_, "safetensors_writer::finish: " + std::to_string(written_) +
                                           " of " + std::to_string(data_bytes_) +
                                           " data bytes written to '" + path_ + "'");
  flush();
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0)
    throw io_error(path_, errno, "cannot close '" + path_ + "': " + std::strerror(errno));
}

DDO_INLINE void write_safetensors(const std::string& path,
                                  std::span<const safetensors_tensor_data> tensors,
                                  std::vector<std::pair<std::string, std::string>> metadata) {
  std::vector<safetensors_tensor_spec> specs;
  specs.reserve(tensors.size());
  for (const auto& t : tensors) {
    DDO_EXPECTS(t.data.size() == t.spec.bytes(),
                "write_safetensors: '" + t.spec.name + "' has " + std::to_string(t.data.size()) +
                    " bytes of data but its shape needs " + std::to_string(t.spec.bytes()));
    specs.push_back(t.spec);
  }
  safetensors_writer writer(path, std::move(specs), std::move(metadata));
  for (const auto& t : tensors) writer.write(t.data);
  writer.finish();
}

DDO_INLINE void write_safetensors_index(
    const std::string& path, std::span<const std::pair<std::string, std::string>> weight_map,
    std::uint64_t total_size) {
  json_writer index;
  index.begin_object(json_layout::lines);
  index.key("metadata").begin_object(json_layout::spaced).member("total_size", total_size).end_object();
  index.key("weight_map").begin_object(json_layout::lines);
  for (const auto& [tensor, file] : weight_map) index.member(tensor, file);
  index.end_object().end_object();
  detail::write_text_file(path, index.take() + "\n");
}

}  // namespace v0
}  // namespace ddo
