// SPDX-License-Identifier: Apache-2.0
#include "ddo/model/parallel_reader.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include <chrono>

#include "model/model_test_support.hpp"

namespace parallel_reader_test {

/// Fails the n-th read (counted from 1, any thread) the way the hook says; thread-safe.
class nth_read_fault final : public ddo::file_fault_hook {
 public:
  nth_read_fault(std::uint64_t n, ddo::file_read_fault f) : n_(n), fault_(f) {}
  ddo::file_read_fault before_read(const std::string&, std::uint64_t, std::uint64_t) override {
    const std::uint64_t call = ++calls_;
    if (fault_.what == ddo::file_read_fault::kind::short_count) return fault_;  // every read short
    return call == n_ ? fault_ : ddo::file_read_fault{};
  }
  std::atomic<std::uint64_t> calls_{0};

 private:
  std::uint64_t n_;
  ddo::file_read_fault fault_;
};

/// Random tasks covering @p dst: pieces of random size from the file or from @p host, shuffled.
std::vector<ddo::read_task> random_tasks(std::vector<std::byte>& dst, const std::vector<std::byte>& host,
                                         const ddo::file_reader* file, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ddo::read_task> tasks;
  std::uint64_t at = 0;
  while (at < dst.size()) {
    const std::uint64_t n = std::min<std::uint64_t>(dst.size() - at, 1 + rng() % (3 * ddo::mib));
    ddo::read_task t;
    t.dst = dst.data() + at;
    t.bytes = n;
    if (file != nullptr && rng() % 3 != 0) {
      t.file = file;
      t.file_offset = at;  // the file holds the expected bytes at the same offsets
    } else {
      t.src = host.data() + at;
    }
    tasks.push_back(t);
    at += n;
  }
  std::shuffle(tasks.begin(), tasks.end(), rng);
  return tasks;
}

}  // namespace parallel_reader_test

TEST_SUITE("model") {
  TEST_CASE("parallel_reader fills every byte from files and host memory, in any task order") {
    using namespace parallel_reader_test;
    ddo_test::temp_dir dir;
    const auto path = dir.file("weights.bin");
    const auto expected = ddo_test::random_bytes(24 * ddo::mib + 123, 11);
    ddo_test::write_raw(path, std::string_view(reinterpret_cast<const char*>(expected.data()), expected.size()));
    const ddo::file_reader file(path, ddo::safetensors_backend::pread);
    for (std::size_t threads : {1u, 3u, 8u}) {
      CAPTURE(threads);
      ddo::parallel_reader pool(threads);
      CHECK(pool.threads() == threads);
      for (std::uint64_t seed = 1; seed <= 4; ++seed) {  // the same pool, run after run
        std::vector<std::byte> dst(expected.size(), std::byte{0xCD});
        const auto tasks = random_tasks(dst, expected, seed % 2 ? &file : nullptr, seed * 7 + threads);
        pool.run(tasks);
        CHECK(std::memcmp(dst.data(), expected.data(), dst.size()) == 0);
      }
      std::vector<std::byte> small(1000, std::byte{0});  // below the parallel threshold
      pool.run(std::vector<ddo::read_task>{{small.data(), small.size(), nullptr, &file, 500, 0}});
      CHECK(std::memcmp(small.data(), expected.data() + 500, small.size()) == 0);
      pool.run({});  // nothing to do is fine
    }
  }

  TEST_CASE("parallel_reader calls each batch's callback once, after its bytes are in place") {
    using namespace parallel_reader_test;
    ddo_test::temp_dir dir;
    const auto path = dir.file("weights.bin");
    const auto expected = ddo_test::random_bytes(12 * ddo::mib, 12);
    ddo_test::write_raw(path, std::string_view(reinterpret_cast<const char*>(expected.data()), expected.size()));
    const ddo::file_reader file(path, ddo::safetensors_backend::pread);
    std::vector<std::byte> dst(expected.size(), std::byte{0});
    auto tasks = random_tasks(dst, expected, &file, 5);
    const std::size_t batches = 6;  // batch 5 has no task: called anyway
    for (std::size_t i = 0; i < tasks.size(); ++i) tasks[i].batch = i % 5;
    std::vector<int> calls(batches, 0);
    std::mutex mutex;
    std::size_t wrong = 0;
    ddo::parallel_reader pool(4);
    pool.run(tasks, batches, [&](std::size_t b) {
      std::lock_guard lock(mutex);
      ++calls[b];
      for (const auto& t : tasks)
        if (t.batch == b && std::memcmp(t.dst, expected.data() + (t.dst - dst.data()), t.bytes) != 0) ++wrong;
    });
    CHECK(wrong == 0);
    for (std::size_t b = 0; b < batches; ++b) CHECK(calls[b] == 1);
    CHECK_THROWS_AS(pool.run(tasks, 2, [](std::size_t) {}), ddo::usage_error);
  }

  TEST_CASE("parallel_reader reports a file that shrank, and a failed read, as io_error; the pool goes on") {
    using namespace parallel_reader_test;
    ddo_test::temp_dir dir;
    const auto path = dir.file("weights.bin");
    const auto expected = ddo_test::random_bytes(16 * ddo::mib, 13);
    ddo_test::write_raw(path, std::string_view(reinterpret_cast<const char*>(expected.data()), expected.size()));
    ddo::parallel_reader pool(4);
    std::vector<std::byte> dst(expected.size());
    SUBCASE("truncated while open: an error naming the file and offset, never a signal") {
      for (auto backend : {ddo::safetensors_backend::pread, ddo::safetensors_backend::mmap}) {
        ddo_test::write_raw(path, std::string_view(reinterpret_cast<const char*>(expected.data()), expected.size()));
        const ddo::file_reader file(path, backend);
        std::filesystem::resize_file(path, 3 * ddo::mib);
        const auto tasks = random_tasks(dst, expected, &file, 21);
        try {
          pool.run(tasks);
          FAIL("no error for a truncated file");
        } catch (const ddo::io_error& e) {
          CHECK(e.path() == path);
          CHECK(std::string(e.what()).find("offset") != std::string::npos);
        }
      }
    }
    SUBCASE("EIO in the middle of a run") {
      nth_read_fault hook(5, {ddo::file_read_fault::kind::error, EIO});
      const ddo::file_reader file(path, ddo::safetensors_backend::pread, {.direct_io = false, .faults = &hook});
      std::vector<ddo::read_task> tasks{{dst.data(), dst.size(), nullptr, &file, 0, 0}};
      CHECK_THROWS_AS(pool.run(tasks), ddo::io_error);
    }
    SUBCASE("short reads are continued, the bytes are right") {
      nth_read_fault hook(0, {ddo::file_read_fault::kind::short_count, 0});
      const ddo::file_reader file(path, ddo::safetensors_backend::pread, {.direct_io = false, .faults = &hook});
      std::vector<ddo::read_task> tasks{{dst.data(), dst.size(), nullptr, &file, 0, 0}};
      pool.run(tasks);
      CHECK(std::memcmp(dst.data(), expected.data(), dst.size()) == 0);
      CHECK(hook.calls_.load() > 4);
    }
    // After a failure the pool still works.
    const ddo::file_reader file(path, ddo::safetensors_backend::pread);
    if (file.size() == expected.size()) {
      std::fill(dst.begin(), dst.end(), std::byte{0});
      pool.run(random_tasks(dst, expected, &file, 22));
      CHECK(std::memcmp(dst.data(), expected.data(), dst.size()) == 0);
    }
  }

  TEST_CASE("a gated run writes a batch only after it was opened, and reports each as it completes") {
    const auto host = ddo_test::random_bytes(6 * ddo::mib + 77, 31);
    std::vector<std::byte> dst(host.size(), std::byte{0xCD});
    std::vector<ddo::read_task> tasks;
    const std::uint64_t batch_bytes = ddo::mib + 13;  // six batches, two tasks each
    for (std::uint64_t at = 0, b = 0; at < host.size(); at += batch_bytes, ++b) {
      const std::uint64_t n = std::min<std::uint64_t>(batch_bytes, host.size() - at);
      tasks.push_back({dst.data() + at, n / 3, host.data() + at, nullptr, 0, b});
      tasks.push_back({dst.data() + at + n / 3, n - n / 3, host.data() + at + n / 3, nullptr, 0, b});
    }
    const std::size_t batches = tasks.back().batch + 1;
    auto batch_is = [&](std::size_t b, bool written) {
      const std::uint64_t at = b * batch_bytes, n = std::min<std::uint64_t>(batch_bytes, host.size() - at);
      if (written) return std::memcmp(dst.data() + at, host.data() + at, n) == 0;
      return std::all_of(dst.begin() + static_cast<std::ptrdiff_t>(at),
                         dst.begin() + static_cast<std::ptrdiff_t>(at + n),
                         [](std::byte x) { return x == std::byte{0xCD}; });
    };
    ddo::parallel_reader pool(4);
    for (int round = 0; round < 2; ++round) {  // the pool is reusable
      std::fill(dst.begin(), dst.end(), std::byte{0xCD});
      pool.start_gated(tasks, batches);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (std::size_t b = 0; b < batches; ++b) CHECK(batch_is(b, false));
      pool.open_through(1);
      CHECK(pool.wait_batch(0));
      CHECK(pool.wait_batch(1));
      CHECK(batch_is(0, true));
      CHECK(batch_is(1, true));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      CHECK(batch_is(2, false));
      pool.open_through(batches - 1);
      for (std::size_t b = 0; b < batches; ++b) CHECK(pool.wait_batch(b));
      pool.finish();
      CHECK(std::memcmp(dst.data(), host.data(), host.size()) == 0);
    }
    SUBCASE("cancelled before anything opened: nothing written, no error") {
      std::fill(dst.begin(), dst.end(), std::byte{0xCD});
      pool.start_gated(tasks, batches);
      pool.finish(true);
      for (std::size_t b = 0; b < batches; ++b) CHECK(batch_is(b, false));
    }
    SUBCASE("batches out of order are refused") {
      std::vector<ddo::read_task> bad{tasks[2], tasks[0]};
      CHECK_THROWS_AS(pool.start_gated(bad, batches), ddo::usage_error);
      CHECK_THROWS_AS(ddo::parallel_reader(1).start_gated(tasks, batches), ddo::usage_error);
    }
  }

  TEST_CASE("a gated run's failed read stops the waiter and is thrown by finish, naming the file") {
    ddo_test::temp_dir dir;
    const auto path = dir.file("gated.bin");
    const auto expected = ddo_test::random_bytes(4 * ddo::mib, 17);
    ddo_test::write_raw(path, std::string_view(reinterpret_cast<const char*>(expected.data()), expected.size()));
    const ddo::file_reader file(path, ddo::safetensors_backend::pread);
    std::filesystem::resize_file(path, ddo::mib);
    std::vector<std::byte> dst(expected.size());
    std::vector<ddo::read_task> tasks{{dst.data(), ddo::mib, nullptr, &file, 0, 0},
                                      {dst.data() + ddo::mib, 3 * ddo::mib, nullptr, &file, ddo::mib, 1}};
    ddo::parallel_reader pool(3);
    pool.start_gated(tasks, 2);
    // Batch 0 alone first: with both open, batch 1's failure may stop the wait for batch 0
    // before batch 0 is complete (a failure stops every waiter), which is not what this checks.
    pool.open_through(0);
    CHECK(pool.wait_batch(0));
    pool.open_through(1);
    CHECK_FALSE(pool.wait_batch(1));
    try {
      pool.finish();
      FAIL("no error for a truncated file");
    } catch (const ddo::io_error& e) {
      CHECK(e.path() == path);
      CHECK(std::string(e.what()).find("offset") != std::string::npos);
    }
    std::vector<ddo::read_task> ok{{dst.data(), ddo::mib, nullptr, &file, 0, 0}};
    pool.run(ok);
    CHECK(std::memcmp(dst.data(), expected.data(), ddo::mib) == 0);
  }

  TEST_CASE("parallel_reader refuses a task without a source or destination") {
    ddo::parallel_reader pool(2);
    std::vector<std::byte> dst(10);
    CHECK_THROWS_AS(pool.run(std::vector<ddo::read_task>{{dst.data(), 10, nullptr, nullptr, 0, 0}}),
                    ddo::usage_error);
    CHECK_THROWS_AS(pool.run(std::vector<ddo::read_task>{{nullptr, 10, dst.data(), nullptr, 0, 0}}),
                    ddo::usage_error);
  }
}
