// SPDX-License-Identifier: Apache-2.0
#include "runner/model_cache.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <random>
#include <set>
#include <string>

#include "ddo/model/safetensors.hpp"
#include "ddo/transport/host_sim.hpp"
#include "runner/setup_floor.hpp"

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

ddo::synthetic_model_options small_model() {
  ddo::synthetic_model_options o;
  o.blocks = 2;
  o.hidden = 32;
  o.seed = std::random_device{}();
  return o;
}

std::size_t entries(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("runner") {
  TEST_CASE("the cache key names every model parameter but not the output path") {
    const ddo::synthetic_model_options base;
    std::set<std::string> keys{ddo::runner::synthetic_model_key(base)};
    auto vary = [&](auto change) {
      auto o = base;
      change(o);
      keys.insert(ddo::runner::synthetic_model_key(o));
    };
    vary([](auto& o) { o.blocks = 9; });
    vary([](auto& o) { o.hidden = 512; });
    vary([](auto& o) { o.mlp_ratio = 2; });
    vary([](auto& o) { o.type = ddo::dtype::f16; });
    vary([](auto& o) { o.shards = 2; });
    vary([](auto& o) { o.seed = 7; });
    vary([](auto& o) { o.shape = ddo::synthetic_shape::flux; });
    vary([](auto& o) {
      o.shape = ddo::synthetic_shape::flux;
      o.single_blocks = 2;
    });
    CHECK(keys.size() == 9);
    auto elsewhere = base;
    elsewhere.output = "/somewhere/else.safetensors";
    CHECK(ddo::runner::synthetic_model_key(elsewhere) == ddo::runner::synthetic_model_key(base));
  }

  TEST_CASE("the default Flux-sized model shrinks to what the disk and RAM hold, and says so") {
    const auto full = ddo::flux_model_options();
    std::string why;
    auto same = ddo::runner::fit_flux_model(full, 100'000'000'000, 128'000'000'000, &why);
    CHECK(same.blocks == 19);
    CHECK(same.single_blocks == 38);
    CHECK(why.empty());
    auto disk = ddo::runner::fit_flux_model(full, 13'000'000'000, 0, &why);
    CHECK(disk.blocks < 19);
    CHECK(disk.single_blocks == 2 * disk.blocks);
    std::uint64_t bytes = 0;
    for (const auto& s : ddo::synthetic_model_specs(disk)) bytes += s.bytes();
    CHECK(bytes + bytes / 10 <= 13'000'000'000ull);
    CHECK(why.find("of disk, 13.0 GB free") != std::string::npos);
    CHECK(why.find("double- and") != std::string::npos);
    auto ram = ddo::runner::fit_flux_model(full, 0, 16'000'000'000, &why);
    CHECK(ram.blocks < disk.blocks);
    CHECK(why.find("of RAM") != std::string::npos);
  }

  TEST_CASE("the model is written once, loads, and later runs reuse the cached file") {
    temp_dir dir;
    const auto o = small_model();
    bool generated = false;
    const auto first = ddo::runner::ensure_synthetic_model(o, dir.path, &generated);
    CHECK(generated);
    const auto table = ddo::load_safetensors(first);
    CHECK(table.size() == ddo::synthetic_model_specs(o).size());
    const auto when = std::filesystem::last_write_time(first);
    const auto second = ddo::runner::ensure_synthetic_model(o, dir.path, &generated);
    CHECK_FALSE(generated);
    CHECK(first == second);
    CHECK(std::filesystem::last_write_time(second) == when);
    CHECK(entries(dir.path) == 1);  // no temporary directory left behind
  }

  TEST_CASE("the setup floor reads every file byte into fresh pages and registers them") {
    temp_dir dir;
    auto o = small_model();
    o.shards = 2;
    const auto table = ddo::load_safetensors(ddo::runner::ensure_synthetic_model(o, dir.path));
    std::uint64_t file_bytes = 0;
    for (const auto& f : table.files()) file_bytes += std::filesystem::file_size(f);
    ddo::host_sim_transport t;
    // chunks smaller than a file: several per file, the last one short
    const auto f = ddo::runner::measure_setup_floor(table, t, 3, 64 * ddo::kib);
    CHECK(f.bytes == file_bytes);
    CHECK(f.threads == 3);
    CHECK(f.registered);
    CHECK(f.read_s > 0.0);
    CHECK(f.floor_s() == std::max(f.read_s, f.register_s));
    CHECK(t.registered_bytes_in_use() == 0);  // every chunk unregistered
    CHECK(t.ledger().peak(ddo::ledger_kind::registered) == 64 * ddo::kib);
    ddo::host_sim_options refuse;
    refuse.fail_host_registration = true;
    ddo::host_sim_transport refusing(refuse);
    CHECK_FALSE(ddo::runner::measure_setup_floor(table, refusing, 1).registered);
  }

  TEST_CASE("a sharded model is cached under its index") {
    temp_dir dir;
    auto o = small_model();
    o.shards = 3;
    const auto path = ddo::runner::ensure_synthetic_model(o, dir.path);
    CHECK(ddo::is_safetensors_index(path));
    const auto table = ddo::load_safetensors(path);
    CHECK(table.files().size() == 3);
  }

  TEST_CASE("invalid parameters fail without leaving anything in the cache") {
    temp_dir dir;
    auto o = small_model();
    o.type = ddo::dtype::i32;
    CHECK_THROWS_AS(ddo::runner::ensure_synthetic_model(o, dir.path), ddo::usage_error);
    CHECK(entries(dir.path) == 0);
  }

  TEST_CASE("an unwritable cache directory is reported as io_error naming it") {
    CHECK_THROWS_WITH_AS(
        ddo::runner::ensure_synthetic_model(small_model(), "/proc/ddo-cannot-write-here"),
        doctest::Contains("/proc/ddo-cannot-write-here"), ddo::io_error);
  }
}
