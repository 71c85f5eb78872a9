// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers for the model and plan suites: a temporary directory removed at scope exit, raw file
// writing for crafted bad files, and random bytes.

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace ddo_test {

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class temp_dir {
 public:
  temp_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ddo_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  [[nodiscard]] std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_raw(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A safetensors file from a header text and a data section: 8-byte little-endian length first.
/// @p declared_length overrides the length field (for lying headers).
inline std::string safetensors_bytes(std::string_view header, std::string_view data,
                                     std::uint64_t declared_length = UINT64_MAX) {
  const std::uint64_t n = declared_length == UINT64_MAX ? header.size() : declared_length;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out += data;
  return out;
}

/// Random bytes, never all zero (every byte is in 1..255).
inline std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(1 + rng() % 255);
  return out;
}

inline std::string random_data(std::size_t n, std::uint64_t seed) {
  const auto bytes = random_bytes(n, seed);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace ddo_test
