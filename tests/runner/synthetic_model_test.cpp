// SPDX-License-Identifier: Apache-2.0
#include "runner/synthetic_model.hpp"
#include "runner/synthetic_forward.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ddo/model/safetensors.hpp"

namespace {

/// A fresh directory under the system temp dir, removed at scope exit.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("ddo-runner-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::vector<unsigned char> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_SUITE("runner") {
  TEST_CASE("the synthetic model has 16 tensors per block plus embedders and output layers") {
    ddo::runner::synthetic_model_params p;
    p.blocks = 3;
    p.hidden = 96;
    p.mlp_ratio = 2.5;
    const auto specs = ddo::runner::synthetic_model_tensors(p);
    CHECK(specs.size() == 4 + 16 * 3 + 4);
    CHECK(p.mlp() == 240);
    std::set<std::string> names;
    for (const auto& s : specs) names.insert(s.name);
    CHECK(names.size() == specs.size());
    CHECK(names.contains("transformer_blocks.2.ff.net.0.proj.weight"));
    const auto up = std::find_if(specs.begin(), specs.end(), [](const auto& s) {
      return s.name == "transformer_blocks.1.ff.net.0.proj.weight";
    });
    REQUIRE(up != specs.end());
    CHECK(up->shape == std::vector<std::int64_t>{240, 96});
  }

  TEST_CASE("the Flux-sized parameters give the benchmark's 5.4 GB model") {
    ddo::runner::synthetic_model_params p;
    p.blocks = 24;
    p.hidden = 3072;
    p.mlp_ratio = 4.0;
    const double gb = static_cast<double>(ddo::runner::synthetic_model_bytes(p)) / 1e9;
    CHECK(gb > 5.4);
    CHECK(gb < 5.5);
  }

  TEST_CASE("a written model loads with ddo's safetensors reader and holds no zero elements") {
    temp_dir dir;
    ddo::runner::synthetic_model_params p;
    p.blocks = 2;
    p.hidden = 32;
    p.seed = std::random_device{}();
    std::uint64_t last_done = 0, calls = 0;
    const auto path = ddo::runner::write_synthetic_model(
        p, dir.path, [&](std::uint64_t done, std::uint64_t total) {
          CHECK(done <= total);
          CHECK(done >= last_done);
          last_done = done;
          ++calls;
        });
    CHECK(calls > 0);
    CHECK(last_done == ddo::runner::synthetic_model_bytes(p));
    const auto table = ddo::load_safetensors(path);
    const auto specs = ddo::runner::synthetic_model_tensors(p);
    REQUIRE(table.size() == specs.size());
    for (const auto& s : specs) {
      const auto i = table.find(s.name);
      REQUIRE(i.has_value());
      CHECK(table[*i].shape == s.shape);
      CHECK(table[*i].type == ddo::dtype::bf16);
    }
    const auto bytes = read_all(path);
    std::uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = header << 8 | bytes[static_cast<std::size_t>(i)];
    std::size_t zeros = 0;
    for (std::size_t i = 8 + header; i + 1 < bytes.size(); i += 2)
      zeros += bytes[i] == 0 && bytes[i + 1] == 0;
    CHECK(zeros == 0);
  }

  TEST_CASE("fp16 and fp32 models hold values of the intended magnitude") {
    temp_dir dir;
    for (const auto type : {ddo::dtype::f16, ddo::dtype::f32}) {
      ddo::runner::synthetic_model_params p;
      p.blocks = 1;
      p.hidden = 16;
      p.type = type;
      const auto path = ddo::runner::write_synthetic_model(p, dir.path / std::string(to_string(type)));
      const auto bytes = read_all(path);
      std::uint64_t header = 0;
      for (int i = 7; i >= 0; --i) header = header << 8 | bytes[static_cast<std::size_t>(i)];
      const std::size_t size = ddo::size_of(type);
      for (std::size_t i = 8 + header; i + size <= bytes.size(); i += size) {
        const float v = ddo::runner::element_as_float(
            reinterpret_cast<const std::byte*>(bytes.data() + i), type, 0);
        REQUIRE(std::abs(v) >= 0.0078125f);  // 2^-7
        REQUIRE(std::abs(v) < 0.03125f);     // 2^-5
      }
    }
  }

  TEST_CASE("a sharded model writes an index whose shards hold every tensor") {
    temp_dir dir;
    ddo::runner::synthetic_model_params p;
    p.blocks = 4;
    p.hidden = 16;
    p.shards = 3;
    const auto path = ddo::runner::write_synthetic_model(p, dir.path);
    CHECK(ddo::is_safetensors_index(path));
    const auto table = ddo::load_safetensors(path);
    CHECK(table.size() == ddo::runner::synthetic_model_tensors(p).size());
    CHECK(table.files().size() == 3);
  }

  TEST_CASE("the cache key names every parameter") {
    const ddo::runner::synthetic_model_params base;
    std::set<std::string> keys{ddo::runner::synthetic_model_key(base)};
    auto vary = [&](auto change) {
      auto p = base;
      change(p);
      keys.insert(ddo::runner::synthetic_model_key(p));
    };
    vary([](auto& p) { p.blocks = 9; });
    vary([](auto& p) { p.hidden = 512; });
    vary([](auto& p) { p.mlp_ratio = 2.5; });
    vary([](auto& p) { p.type = ddo::dtype::f16; });
    vary([](auto& p) { p.shards = 2; });
    vary([](auto& p) { p.seed = 7; });
    CHECK(keys.size() == 7);
  }

  TEST_CASE("ensure_synthetic_model writes the model once and then reuses the cached file") {
    temp_dir dir;
    ddo::runner::synthetic_model_params p;
    p.blocks = 1;
    p.hidden = 16;
    bool generated = false;
    const auto first = ddo::runner::ensure_synthetic_model(p, dir.path, &generated);
    CHECK(generated);
    const auto when = std::filesystem::last_write_time(first);
    const auto second = ddo::runner::ensure_synthetic_model(p, dir.path, &generated);
    CHECK_FALSE(generated);
    CHECK(first == second);
    CHECK(std::filesystem::last_write_time(second) == when);
    // No temporary directory is left behind.
    std::size_t entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
      (void)e;
      ++entries;
    }
    CHECK(entries == 1);
  }

  TEST_CASE("invalid model parameters are refused with a message naming the parameter") {
    ddo::runner::synthetic_model_params p;
    p.blocks = 0;
    CHECK_THROWS_WITH_AS(ddo::runner::validate(p), doctest::Contains("blocks"), ddo::usage_error);
    p = {};
    p.shards = 9;
    CHECK_THROWS_WITH_AS(ddo::runner::validate(p), doctest::Contains("shards"), ddo::usage_error);
    p = {};
    p.type = ddo::dtype::i32;
    CHECK_THROWS_WITH_AS(ddo::runner::validate(p), doctest::Contains("dtype"), ddo::usage_error);
  }
}
