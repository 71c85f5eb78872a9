// SPDX-License-Identifier: Apache-2.0
// write-layout: writes one of the published checkpoint layouts of published_layouts.hpp as
// safetensors files, so that a GPU run can plan and stream a real family's names, shapes, dtypes
// and shard splits through `ddo-run --model`:
//   write-layout --list
//   write-layout NAME DIR [--fill SEED]
// NAME: a layout's label or any part of it, case-insensitive, that names one layout ("sdxl").
// Without --fill the data is a sparse hole (zeros; header-valid, as the planning tests use it);
// with --fill every data byte is written with seeded pseudo-random bytes (xorshift64*), so that
// `ddo-run --verify` compares bytes that differ from tensor to tensor. Prints the paths written.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "published_layouts.hpp"

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Fills the data region (after the 8-byte length and the header) of @p path with seeded bytes.
bool fill(const std::string& path, std::uint64_t seed) {
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) return false;
  unsigned char len[8];
  std::uint64_t header = 0;
  bool ok = ::pread(fd, len, 8, 0) == 8;
  for (int k = 0; k < 8; ++k) header |= static_cast<std::uint64_t>(len[k]) << (8 * k);
  const off_t end = ::lseek(fd, 0, SEEK_END);
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 1;
  std::vector<std::uint64_t> chunk(8u << 20);  // 64 MiB
  for (std::uint64_t at = 8 + header; ok && at < static_cast<std::uint64_t>(end);) {
    for (auto& w : chunk) {
      state ^= state >> 12;
      state ^= state << 25;
      state ^= state >> 27;
      w = state * 0x2545F4914F6CDD1DULL;
    }
    const std::uint64_t n = std::min<std::uint64_t>(chunk.size() * 8, end - at);
    ok = ::pwrite(fd, chunk.data(), n, static_cast<off_t>(at)) == static_cast<ssize_t>(n);
    at += n;
  }
  return ::close(fd) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  const auto layouts = ddo_test::published_layouts();
  if (argc == 2 && std::string(argv[1]) == "--list") {
    for (const auto& make : layouts) std::printf("%s\n", make().label.c_str());
    return 0;
  }
  const bool filled = argc == 5 && std::string(argv[3]) == "--fill";
  if (argc != 3 && !filled) {
    std::fprintf(stderr, "usage: write-layout --list | NAME DIR [--fill SEED]\n");
    return 2;
  }
  std::vector<ddo_test::published_layout> found;
  for (const auto& make : layouts)
    if (auto l = make(); lower(l.label).find(lower(argv[1])) != std::string::npos) found.push_back(l);
  if (found.size() != 1) {
    std::fprintf(stderr, "write-layout: '%s' names %zu layouts (write-layout --list names them)\n",
                 argv[1], found.size());
    return 2;
  }
  char* end = nullptr;
  const std::uint64_t seed = filled ? std::strtoull(argv[4], &end, 10) : 0;
  if (filled && (end == argv[4] || *end != '\0')) {
    std::fprintf(stderr, "write-layout: --fill takes a decimal seed (got '%s')\n", argv[4]);
    return 2;
  }
  try {
    for (const auto& path : ddo_test::write_sparse_layout(found[0], argv[2])) {
      if (filled && !fill(path, seed + 1)) {
        std::fprintf(stderr, "write-layout: cannot fill %s\n", path.c_str());
        return 1;
      }
      std::printf("%s\n", path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write-layout: %s\n", e.what());
    return 1;
  }
  return 0;
}
