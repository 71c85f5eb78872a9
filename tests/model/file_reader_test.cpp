// SPDX-License-Identifier: Apache-2.0
#include "ddo/model/file_reader.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "model/model_test_support.hpp"

TEST_SUITE("model") {
  TEST_CASE("file_reader reads the same bytes through mmap, pread and the library default") {
    ddo_test::temp_dir dir;
    const auto path = dir.file("data.bin");
    const std::string content = ddo_test::random_data(1 << 20, 7);
    ddo_test::write_raw(path, content);
    for (auto backend : {ddo::safetensors_backend::mmap, ddo::safetensors_backend::pread,
                         ddo::safetensors_backend::library_default}) {
      const ddo::file_reader reader(path, backend);
      CHECK(reader.size() == content.size());
      CHECK(reader.backend() != ddo::safetensors_backend::library_default);
      CHECK((reader.mapped_data() != nullptr) ==
            (reader.backend() == ddo::safetensors_backend::mmap));
      for (std::uint64_t offset : {0ull, 1ull, 4095ull, 12345ull, (1ull << 20) - 17}) {
        std::vector<std::byte> dst(17, std::byte{0xAB});
        reader.read(offset, dst);
        CHECK(std::memcmp(dst.data(), content.data() + offset, dst.size()) == 0);
      }
      std::vector<std::byte> whole(content.size());
      reader.read(0, whole);
      CHECK(std::memcmp(whole.data(), content.data(), whole.size()) == 0);
    }
  }

  TEST_CASE("the library default is mmap and falls back to pread for an empty file") {
    ddo_test::temp_dir dir;
    ddo_test::write_raw(dir.file("some"), "abcdefgh");
    ddo_test::write_raw(dir.file("empty"), "");
    CHECK(ddo::file_reader(dir.file("some")).backend() == ddo::safetensors_backend::mmap);
    CHECK(ddo::file_reader(dir.file("empty")).backend() == ddo::safetensors_backend::pread);
    CHECK_THROWS_AS(ddo::file_reader(dir.file("empty"), ddo::safetensors_backend::mmap),
                    ddo::io_error);
  }

  TEST_CASE("a read outside the file is an io_error naming the path, for both backends") {
    ddo_test::temp_dir dir;
    const auto path = dir.file("small.bin");
    ddo_test::write_raw(path, ddo_test::random_data(100, 3));
    for (auto backend : {ddo::safetensors_backend::mmap, ddo::safetensors_backend::pread}) {
      const ddo::file_reader reader(path, backend);
      std::vector<std::byte> dst(10);
      try {
        reader.read(95, dst);
        FAIL("no error");
      } catch (const ddo::io_error& e) {
        CHECK(e.path() == path);
        CHECK(std::string(e.what()).find(path) != std::string::npos);
      }
      CHECK_THROWS_AS(reader.read(UINT64_MAX - 2, dst), ddo::io_error);
      CHECK_NOTHROW(reader.read(100, std::span<std::byte>()));
    }
  }

  TEST_CASE("opening a missing file is an io_error with the path and ENOENT") {
    ddo_test::temp_dir dir;
    try {
      ddo::file_reader reader(dir.file("missing.safetensors"));
      FAIL("no error");
    } catch (const ddo::io_error& e) {
      CHECK(e.error_number() == ENOENT);
      CHECK(e.path() == dir.file("missing.safetensors"));
      CHECK(std::string(e.what()).find("missing.safetensors") != std::string::npos);
    }
  }

  TEST_CASE("align_range widens a range to whole aligned blocks") {
    const auto r = ddo::align_range(5000, 100);
    CHECK(r.aligned_offset == 4096);
    CHECK(r.head == 904);
    CHECK(r.aligned_length == 4096);
    const auto s = ddo::align_range(4095, 2);
    CHECK(s.aligned_offset == 0);
    CHECK(s.head == 4095);
    CHECK(s.aligned_length == 8192);
    const auto t = ddo::align_range(8192, 8192);
    CHECK(t.aligned_offset == 8192);
    CHECK(t.head == 0);
    CHECK(t.aligned_length == 8192);
    CHECK(ddo::align_range(0, 0).aligned_length == 0);
    CHECK_THROWS_AS((void)ddo::align_range(0, 10, 3000), ddo::usage_error);
    CHECK_THROWS_AS((void)ddo::align_range(UINT64_MAX - 10, 100), ddo::usage_error);
  }

  TEST_CASE("read_direct reads aligned blocks and returns a short count at end of file") {
    ddo_test::temp_dir dir;
    const auto path = dir.file("direct.bin");
    const std::string content = ddo_test::random_data(10000, 11);
    ddo_test::write_raw(path, content);
    const ddo::file_reader reader(path, ddo::safetensors_backend::pread, {.direct_io = true});
    const auto range = ddo::align_range(5000, 4000);  // [4096, 12288) covers [5000, 9000)
    auto* raw =
        static_cast<std::byte*>(std::aligned_alloc(ddo::direct_io_alignment, range.aligned_length));
    std::unique_ptr<std::byte, decltype(&std::free)> buffer(raw, &std::free);
    std::memset(raw, 0xEE, range.aligned_length);
    const auto got = reader.read_direct(range.aligned_offset, {raw, range.aligned_length});
    CHECK(got == 10000 - 4096);
    CHECK(std::memcmp(raw + range.head, content.data() + 5000, 4000) == 0);
    // Misaligned requests are the caller's bug.
    CHECK_THROWS_AS((void)reader.read_direct(100, {raw, 4096}), ddo::usage_error);
    const ddo::file_reader plain(path);
    CHECK_THROWS_AS((void)plain.read_direct(0, {raw, 4096}), ddo::usage_error);
  }

  TEST_CASE("a moved-from reader leaves the file open in the new owner") {
    ddo_test::temp_dir dir;
    const auto path = dir.file("m.bin");
    const std::string content = ddo_test::random_data(64, 5);
    ddo_test::write_raw(path, content);
    ddo::file_reader a(path);
    ddo::file_reader b(std::move(a));
    std::vector<std::byte> dst(64);
    b.read(0, dst);
    CHECK(std::memcmp(dst.data(), content.data(), 64) == 0);
    a = std::move(b);
    a.read(0, dst);
    CHECK(a.size() == 64);
  }

  TEST_CASE("a file cut short after open is an io_error naming the offset, never SIGBUS") {
    ddo_test::temp_dir dir;
    const auto path = dir.file("shrinks.bin");
    const std::string content = ddo_test::random_data(256 * 1024, 11);
    for (auto backend : {ddo::safetensors_backend::mmap, ddo::safetensors_backend::pread,
                         ddo::safetensors_backend::library_default}) {
      ddo_test::write_raw(path, content);
      const ddo::file_reader reader(path, backend);
      std::vector<std::byte> head(4096);
      reader.read(0, head);  // touch the first page through the mapping
      std::filesystem::resize_file(path, 8192);
      std::vector<std::byte> dst(64 * 1024);
      try {
        reader.read(100000, dst);
        FAIL("a read past the new end of the file succeeded");
      } catch (const ddo::io_error& e) {
        CHECK(e.path() == path);
        const std::string what = e.what();
        CHECK(what.find(path) != std::string::npos);
        CHECK(what.find("100000") != std::string::npos);
      }
      // A range straddling the new end: the bytes before it are real, the rest is an error.
      std::vector<std::byte> straddle(8192);
      CHECK_THROWS_WITH_AS(reader.read(4096, straddle), doctest::Contains("8192"), ddo::io_error);
      reader.read(0, head);  // what is still there still reads
      CHECK(std::memcmp(head.data(), content.data(), head.size()) == 0);
    }
  }

  TEST_CASE("special files are refused at open without blocking: FIFO, device, directory") {
    ddo_test::temp_dir dir;
    const auto fifo = dir.file("pipe");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    for (auto backend : {ddo::safetensors_backend::mmap, ddo::safetensors_backend::pread}) {
      // Without a writer, a blocking open of the FIFO would hang this test forever.
      CHECK_THROWS_WITH_AS(ddo::file_reader(fifo, backend), doctest::Contains("FIFO"),
                           ddo::io_error);
      CHECK_THROWS_WITH_AS(ddo::file_reader("/dev/zero", backend),
                           doctest::Contains("character device"), ddo::io_error);
      CHECK_THROWS_WITH_AS(ddo::file_reader(dir.file("."), backend), doctest::Contains("directory"),
                           ddo::io_error);
    }
    ddo::file_reader_options direct;
    direct.direct_io = true;
    CHECK_THROWS_AS(ddo::file_reader(fifo, ddo::safetensors_backend::pread, direct),
                    ddo::io_error);
  }

  TEST_CASE("injected read faults: EIO and an early end are errors, a short count is retried") {
    struct nth_read_fails : ddo::file_fault_hook {
      std::atomic<int> calls{0};
      int fail_at = 0;
      ddo::file_read_fault fault;
      ddo::file_read_fault before_read(const std::string&, std::uint64_t, std::uint64_t) override {
        return ++calls == fail_at ? fault : ddo::file_read_fault{};
      }
    };
    ddo_test::temp_dir dir;
    const auto path = dir.file("faulty.bin");
    const std::string content = ddo_test::random_data(300000, 13);
    ddo_test::write_raw(path, content);
    for (auto backend : {ddo::safetensors_backend::mmap, ddo::safetensors_backend::pread}) {
      nth_read_fails hook;
      ddo::file_reader_options o;
      o.faults = &hook;
      const ddo::file_reader reader(path, backend, o);
      std::vector<std::byte> dst(200000);
      hook.fail_at = 2;
      hook.fault.what = ddo::file_read_fault::kind::error;
      reader.read(0, dst);  // call 1
      CHECK_THROWS_WITH_AS(reader.read(777, dst), doctest::Contains("offset 777"), ddo::io_error);
      hook.calls = 0;
      hook.fault.what = ddo::file_read_fault::kind::end_of_file;
      CHECK_THROWS_WITH_AS((reader.read(0, dst), reader.read(5, dst)),
                           doctest::Contains("unexpected end of file at offset 5"), ddo::io_error);
      hook.calls = 0;
      hook.fail_at = 1;
      hook.fault.what = ddo::file_read_fault::kind::short_count;
      reader.read(99, dst);
      CHECK(hook.calls >= 2);  // the short read was continued
      CHECK(std::memcmp(dst.data(), content.data() + 99, dst.size()) == 0);
    }
  }
}
