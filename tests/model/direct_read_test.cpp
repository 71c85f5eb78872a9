// SPDX-License-Identifier: Apache-2.0
// O_DIRECT reads through ddo's one read pool (model/parallel_reader.hpp, read_task::direct) and
// file_reader::read_direct: aligned ranges land byte for byte with the pool split into requests;
// short reads continue; an error or an early end of file is an io_error naming the file and the
// offset; a direct read may end at the end of the file only after the bytes it must deliver.
// The files are written beside the test binary (the build directory: tmpfs may refuse
// O_DIRECT); each case says which path it exercised.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "ddo/memory/host_buffer.hpp"
#include "ddo/model/parallel_reader.hpp"
#include "ddo/transport/fault_injection.hpp"
#include "model_test_support.hpp"

namespace direct_read_test {

/// A file of @p n random bytes beside the test binary, removed at the end.
struct build_dir_file {
  std::string path;
  std::string bytes;
  build_dir_file(std::size_t n, std::uint32_t seed) {
    path = (std::filesystem::read_symlink("/proc/self/exe").parent_path() /
            ("ddo_direct_read_" + std::to_string(::getpid()) + "_" + std::to_string(seed) + ".bin"))
               .string();
    std::mt19937 rng(seed);
    bytes.resize(n);
    for (auto& c : bytes) c = static_cast<char>(rng() & 0xff);
    ddo_test::write_raw(path, bytes);
  }
  ~build_dir_file() { std::filesystem::remove(path); }
};

void say_path(const ddo::file_reader& f) {
  const std::string path = f.direct_io_active()
                               ? "exercised O_DIRECT reads"
                               : "exercised the buffered fallback (this file system refuses O_DIRECT)";
  MESSAGE(path);
}

}  // namespace direct_read_test

TEST_SUITE("model") {
  TEST_CASE("the read pool reads aligned ranges with O_DIRECT in requests, the tail cut by the end of file") {
    using namespace direct_read_test;
    const build_dir_file file(3 * 1024 * 1024 + 777, 3);
    const ddo::file_reader f(file.path, ddo::safetensors_backend::pread, {.direct_io = true});
    say_path(f);
    ddo::parallel_reader pool(4, 64 * 1024);
    const ddo::aligned_range whole = ddo::align_range(0, file.bytes.size());
    ddo::host_buffer out(whole.aligned_length);
    for (int round = 0; round < 3; ++round) {  // the pool is reused
      std::memset(out.data(), 0xCD, whole.aligned_length);
      ddo::read_task t;
      t.file = &f;
      t.dst = out.data();
      t.bytes = whole.aligned_length;  // past the end of the file
      t.direct = true;
      t.required = file.bytes.size();
      pool.run(std::span<const ddo::read_task>(&t, 1));
      CHECK(std::memcmp(out.data(), file.bytes.data(), file.bytes.size()) == 0);
    }
    // A piece in the middle, widened to blocks, read into the aligned buffer: its bytes at head.
    const ddo::aligned_range piece = ddo::align_range(100001, 1000000);
    ddo::read_task t;
    t.file = &f;
    t.file_offset = piece.aligned_offset;
    t.dst = out.data();
    t.bytes = piece.aligned_length;
    t.direct = true;
    t.required = piece.aligned_length;
    pool.run(std::span<const ddo::read_task>(&t, 1));
    CHECK(std::memcmp(out.data() + piece.head, file.bytes.data() + 100001, 1000000) == 0);
  }

  TEST_CASE("read_direct continues short reads and names file and offset on EIO and an early end") {
    using namespace direct_read_test;
    const build_dir_file file(300000, 4);
    ddo::fault_injector faults;
    const ddo::file_reader f(file.path, ddo::safetensors_backend::pread, {.direct_io = true, .faults = &faults});
    say_path(f);
    ddo::host_buffer out(ddo::align_range(0, 300000).aligned_length);

    faults.fail_nth(ddo::fault_point::file_read, 1, {ddo::file_read_fault::kind::short_count, 0});
    CHECK(f.read_direct(4096, {out.data(), 204800}, 204800) == 204800);
    CHECK(faults.calls(ddo::fault_point::file_read) >= 2);  // the rest was read on
    CHECK(std::memcmp(out.data(), file.bytes.data() + 4096, 204800) == 0);

    faults.reset();
    faults.fail_nth(ddo::fault_point::file_read, 1);
    try {
      (void)f.read_direct(8192, {out.data(), 8192}, 8192);
      FAIL("no error");
    } catch (const ddo::io_error& e) {
      const std::string m = e.what();
      CHECK(m.find("at offset 8192 of '" + file.path + "'") != std::string::npos);
      CHECK(m.find(std::strerror(EIO)) != std::string::npos);
    }

    faults.reset();
    // 300000 - 204800 = 95200 bytes left from 204800: a whole-block read of 102400 ends early.
    CHECK(f.read_direct(204800, {out.data(), 102400}, 95200) == 95200);
    CHECK(std::memcmp(out.data(), file.bytes.data() + 204800, 95200) == 0);
    try {
      (void)f.read_direct(204800, {out.data(), 102400}, 102400);  // all of it required
      FAIL("no error");
    } catch (const ddo::io_error& e) {
      CHECK(std::string(e.what()).find("unexpected end of file at offset 300000") != std::string::npos);
      CHECK(std::string(e.what()).find(file.path) != std::string::npos);
    }
  }

  TEST_CASE("the read pool reports an O_DIRECT read's failure once no thread writes; it is usable afterwards") {
    using namespace direct_read_test;
    const build_dir_file file(1 << 20, 5);
    ddo::fault_injector faults;
    const ddo::file_reader f(file.path, ddo::safetensors_backend::pread, {.direct_io = true, .faults = &faults});
    say_path(f);
    ddo::parallel_reader pool(3, 64 * 1024);
    ddo::host_buffer out(1 << 20);
    ddo::read_task t;
    t.file = &f;
    t.dst = out.data();
    t.bytes = t.required = 1 << 20;
    t.direct = true;
    faults.fail_nth(ddo::fault_point::file_read, 7, {ddo::file_read_fault::kind::error, EIO});
    CHECK_THROWS_AS(pool.run(std::span<const ddo::read_task>(&t, 1)), ddo::io_error);
    faults.reset();
    std::memset(out.data(), 0, 1 << 20);
    CHECK_NOTHROW(pool.run(std::span<const ddo::read_task>(&t, 1)));
    CHECK(std::memcmp(out.data(), file.bytes.data(), 1 << 20) == 0);
  }
}
