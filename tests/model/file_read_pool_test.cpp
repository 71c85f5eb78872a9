// SPDX-License-Identifier: Apache-2.0
// ddo::file_read_pool and read_fully (model/file_read_pool.hpp): many requests split over the
// reader threads land byte for byte; short reads continue; an error or an early end of file is
// an io_error naming the file and the offset; an O_DIRECT read may end at the end of the file
// only after the bytes it must deliver.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ddo/model/file_read_pool.hpp"
#include "ddo/transport/fault_injection.hpp"
#include "model_test_support.hpp"

namespace {

std::string random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

TEST_SUITE("model") {
  TEST_CASE("file_read_pool reads many split requests byte for byte, and again with the pool reused") {
    const ddo_test::temp_dir dir;
    const std::string path = dir.file("data.bin");
    const std::string bytes = random_bytes(3 * 1024 * 1024 + 777, 3);
    ddo_test::write_raw(path, bytes);
    const fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    REQUIRE(f.fd >= 0);
    ddo::file_read_pool reader(4, 64 * 1024);
    CHECK(reader.threads() == 4);
    for (int round = 0; round < 3; ++round) {
      std::vector<std::byte> out(bytes.size(), std::byte{0xCD});
      std::vector<ddo::file_read_request> reqs;
      // Uneven pieces, out of order.
      const std::uint64_t cuts[] = {0, 5, 100000, 1000001, 2500000, bytes.size()};
      for (int k = 4; k >= 0; --k) {
        ddo::file_read_request r;
        r.path = &path;
        r.fd = r.buffered_fd = f.fd;
        r.offset = cuts[k];
        r.dst = out.data() + cuts[k];
        r.bytes = r.required = cuts[k + 1] - cuts[k];
        reqs.push_back(r);
      }
      reader.read_all(reqs);
      CHECK(std::memcmp(out.data(), bytes.data(), bytes.size()) == 0);
    }
  }

  TEST_CASE("read_fully continues short reads and names file and offset on EIO and early end") {
    const ddo_test::temp_dir dir;
    const std::string path = dir.file("data.bin");
    const std::string bytes = random_bytes(300000, 4);
    ddo_test::write_raw(path, bytes);
    const fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    ddo::fault_injector faults;
    ddo::file_read_request r;
    r.path = &path;
    r.fd = r.buffered_fd = f.fd;
    r.offset = 1000;
    std::vector<std::byte> out(200000);
    r.dst = out.data();
    r.bytes = r.required = out.size();

    faults.fail_nth(ddo::fault_point::file_read, 1, {ddo::file_read_fault::kind::short_count, 0});
    ddo::read_fully(r, &faults);
    CHECK(faults.calls(ddo::fault_point::file_read) >= 2);  // the rest was read on
    CHECK(std::memcmp(out.data(), bytes.data() + 1000, out.size()) == 0);

    faults.reset();
    faults.fail_nth(ddo::fault_point::file_read, 1);
    try {
      ddo::read_fully(r, &faults);
      FAIL("no error");
    } catch (const ddo::io_error& e) {
      const std::string m = e.what();
      CHECK(m.find("at offset 1000 of '" + path + "'") != std::string::npos);
      CHECK(m.find(std::strerror(EIO)) != std::string::npos);
    }

    r.offset = 200000;  // 100000 bytes left in the file, 200000 asked
    try {
      ddo::read_fully(r, nullptr);
      FAIL("no error");
    } catch (const ddo::io_error& e) {
      CHECK(std::string(e.what()).find("unexpected end of file at offset 300000 of '" + path + "'") !=
            std::string::npos);
    }
    r.required = 100000;  // an O_DIRECT tail: only these bytes must arrive
    CHECK_NOTHROW(ddo::read_fully(r, nullptr));
    CHECK(std::memcmp(out.data(), bytes.data() + 200000, 100000) == 0);
  }

  TEST_CASE("file_read_pool reports the first failure after every read finished") {
    const ddo_test::temp_dir dir;
    const std::string path = dir.file("data.bin");
    ddo_test::write_raw(path, random_bytes(1 << 20, 5));
    const fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    ddo::fault_injector faults;
    ddo::file_read_pool reader(3, 64 * 1024, &faults);
    std::vector<std::byte> out(1 << 20);
    ddo::file_read_request r;
    r.path = &path;
    r.fd = r.buffered_fd = f.fd;
    r.dst = out.data();
    r.bytes = r.required = out.size();
    faults.fail_nth(ddo::fault_point::file_read, 7, {ddo::file_read_fault::kind::error, EIO});
    CHECK_THROWS_AS(reader.read_all({&r, 1}), ddo::io_error);
    CHECK(faults.calls(ddo::fault_point::file_read) == 16);  // every part was still read
    CHECK_NOTHROW(reader.read_all({&r, 1}));                  // the pool is usable afterwards
  }
}
