// SPDX-License-Identifier: Apache-2.0
// A seeded model whose weights are random bf16 bytes, each either in one temporary file of its
// own model (the registry keys pieces by file identity) or in host memory: the builder the
// switch and budget-move suites share. Each suite lays its blocks out with add().
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "ddo/model/execution_groups.hpp"
#include "ddo/model/weight_table.hpp"
#include "random_bytes.hpp"

namespace ddo_test {

struct seeded_file_model {
  ddo::weight_table table;
  std::vector<std::vector<std::byte>> expected;  ///< every weight's bytes, by weight index
  std::filesystem::path file;
  std::vector<ddo::execution_group> groups;

  seeded_file_model(const seeded_file_model&) = delete;
  seeded_file_model& operator=(const seeded_file_model&) = delete;
  ~seeded_file_model() {
    std::error_code ec;
    std::filesystem::remove(file, ec);
  }

 protected:
  /// @p prefix names the file (with the seed and the process id); @p weights reserves room for
  /// that many weights (expected's addresses are the host weights' sources: no reallocation).
  seeded_file_model(const std::string& prefix, std::uint32_t seed, std::size_t weights)
      : file(std::filesystem::temp_directory_path() /
             (prefix + std::to_string(seed) + "_" + std::to_string(::getpid()) + ".bin")),
        rng(seed),
        out(file, std::ios::binary),
        file_index(table.add_file(file.string())) {
    expected.reserve(weights);
  }

  /// Adds a bf16 weight of @p elems random elements (a norm when its name says so, else a
  /// linear), its bytes written to the file or held in host memory. Returns its index.
  std::size_t add(const std::string& name, std::int64_t elems, bool from_file = true) {
    auto& v = expected.emplace_back(static_cast<std::size_t>(elems * 2));
    fill_random_bytes(v, rng);  // a draw per 4 bytes: a draw per byte was most of a case's
                                // time under TSan (these models hold 10-40 MiB)
    ddo::weight_info w;
    w.name = name;
    w.kind = name.find("norm") == std::string::npos ? ddo::module_kind::linear
                                                    : ddo::module_kind::other;
    w.type = ddo::dtype::bf16;
    w.shape = {elems};
    if (from_file) {
      out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size()));
      w.source = ddo::file_source{file_index, offset};
      offset += v.size();
    } else {
      w.source = ddo::host_source{v.data()};
    }
    return table.add(w);
  }
  /// Ends the file: call once every weight was added.
  void finish() { out.close(); }

  std::mt19937 rng;

 private:
  std::ofstream out;
  std::size_t file_index;
  std::uint64_t offset = 0;
};

}  // namespace ddo_test
