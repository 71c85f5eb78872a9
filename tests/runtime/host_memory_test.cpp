// SPDX-License-Identifier: Apache-2.0
// Host memory and parallel reads on host_sim: pinned blocks are packed by positional reads (no
// file page is mapped into the process), and file pieces are staged by several read threads —
// right bytes under random orders, and a file cut short is an io_error, not a signal.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ddo/memory/process_memory.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/host_sim.hpp"
#include "runtime_fixtures.hpp"

#include "sanitizers.hpp"

namespace host_memory_test {

using sim_offloader = ddo::basic_offloader<ddo::host_sim_transport>;

/// A model of `groups` x `per_group` weights of `bytes` each, all in one file written in the
/// current directory (the build directory under meson test: a real file system, not a tmpfs),
/// every weight placed at @p where. Bytes come from a fast generator: the model is large.
struct file_model {
  ddo::weight_table table;
  ddo::offload_plan plan;
  std::filesystem::path path;
  std::uint64_t weight_bytes = 0;
  std::uint64_t data_offset = 4096;

  file_model(std::size_t groups, std::size_t per_group, std::uint64_t bytes, ddo::placement where,
             const std::string& name) {
    path = std::filesystem::current_path() /
           ("ddo_host_memory_" + name + "_" + std::to_string(::getpid()) + ".bin");
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    REQUIRE(out);
    std::vector<char> header(data_offset, 'h');
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    const std::size_t file = table.add_file(path.string());
    plan.groups.resize(groups);
    std::vector<std::uint64_t> chunk(bytes / 8);
    std::uint64_t offset = data_offset;
    for (std::size_t g = 0; g < groups; ++g)
      for (std::size_t i = 0; i < per_group; ++i) {
        const std::size_t w = g * per_group + i;
        fill_values(offset, chunk.data(), chunk.size());
        out.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(bytes));
        ddo::weight_info info;
        info.name = "blocks." + std::to_string(g) + ".w" + std::to_string(i) + ".weight";
        info.type = ddo::dtype::bf16;
        info.shape = {static_cast<std::int64_t>(bytes / 2)};
        info.bytes = bytes;
        info.source = ddo::file_source{file, offset};
        table.add(info);
        plan.decisions.push_back({where, g, "test"});
        plan.groups[g].name = "blocks." + std::to_string(g);
        plan.groups[g].weights.push_back(w);
        plan.groups[g].bytes_by_placement[static_cast<std::size_t>(where)] += bytes;
        offset += bytes;
        weight_bytes += bytes;
      }
    out.close();
    REQUIRE(out);
  }
  ~file_model() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  file_model(const file_model&) = delete;
  file_model& operator=(const file_model&) = delete;

  /// The 8 bytes at file offset @p at (a multiple of 8): never zero, different everywhere.
  static std::uint64_t value(std::uint64_t at) {
    std::uint64_t z = at + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) | 1;
  }
  /// The @p count words from file offset @p at into @p out. (Raw pointers and whole blocks here
  /// and below: the sanitizer builds run these unoptimised over hundreds of MiB.)
  static void fill_values(std::uint64_t at, std::uint64_t* out, std::size_t count) {
    for (std::size_t k = 0; k < count; ++k) out[k] = value(at + 8 * k);
  }
  /// Mismatching 8-byte words of weight @p w at @p p (device memory of host_sim is host memory):
  /// blocks of expected words compared with one memcmp each, a differing block word by word.
  [[nodiscard]] std::uint64_t wrong_words(std::size_t w, const std::byte* p) const {
    const auto& f = std::get<ddo::file_source>(table[w].source);
    const std::uint64_t words = table[w].bytes / 8;
    std::vector<std::uint64_t> expected(static_cast<std::size_t>(std::min<std::uint64_t>(words, 8192)));
    std::uint64_t wrong = 0;
    for (std::uint64_t first = 0; first < words; first += expected.size()) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(expected.size(), words - first));
      fill_values(f.offset + 8 * first, expected.data(), n);
      const std::byte* block = p + 8 * first;
      if (std::memcmp(block, expected.data(), 8 * n) == 0) continue;
      for (std::size_t k = 0; k < n; ++k) {
        std::uint64_t got = 0;
        std::memcpy(&got, block + 8 * k, 8);
        wrong += got != expected[k];
      }
    }
    return wrong;
  }
};

/// Counts wrong words of every leased weight when the engine's "kernel" runs.
struct checker {
  std::atomic<std::uint64_t> wrong{0}, checked{0};
  template <class Lease>
  void enqueue(ddo::host_sim_transport& sim, ddo::host_sim_transport::stream_view s,
               const file_model& m, const Lease& lease) {
    std::vector<std::pair<const std::byte*, std::size_t>> items;
    for (std::size_t i = 0; i < lease.size(); ++i) items.emplace_back(lease.data(i), lease.weight_index(i));
    sim.enqueue(s, [this, &m, items = std::move(items)] {
      for (const auto& [p, w] : items) {
        wrong += m.wrong_words(w, p);
        checked += m.table[w].bytes;
      }
    });
  }
};

}  // namespace host_memory_test

TEST_SUITE("runtime") {
  TEST_CASE("packing pinned weights from a file maps none of its pages: RSS grows by the blocks only") {
    using namespace host_memory_test;
    // 12 x 16 MiB: large enough that mapped file pages would show far above the kernel's noise.
    file_model m(6, 2, 16 * ddo::mib, ddo::placement::pinned_host, "pinned");
    ddo::host_sim_transport sim;
    auto s = sim.make_stream();
    ddo::runtime_options o;
    o.pin_workers = 3;
    o.slot_count = 2;
    const auto before = ddo::read_process_memory();
    checker check;
    {
      sim_offloader off(sim, m.table, m.plan, o);
      const auto after = ddo::read_process_memory();
      CHECK(off.metrics().pinned_bytes >= m.weight_bytes);
      if (before.rss_bytes == 0) {
        MESSAGE("skipped the RSS checks: /proc/self/status has no VmRSS here");
      } else {
        INFO("RSS " << before.rss_bytes << " -> " << after.rss_bytes << ", file pages "
                    << before.rss_file_bytes << " -> " << after.rss_file_bytes << ", weights "
                    << m.weight_bytes << ", ddo device bytes (host memory on host_sim) "
                    << off.device_bytes());
        // No file page is mapped: the file stays in the page cache, outside the process.
        CHECK(after.rss_file_bytes <= before.rss_file_bytes + m.weight_bytes / 20);
        // The packed blocks, touched once by the reads, plus host_sim's device memory (the ring:
        // host memory here, touched when malloc perturbs it, as under meson test's
        // MALLOC_PERTURB_). Under ThreadSanitizer every byte written also writes its shadow
        // memory (several times the bytes, counted in RSS), so only the file-page check holds.
#if DDO_TEST_UNDER_TSAN
        MESSAGE("ThreadSanitizer build: the RSS bound is not checked (shadow memory counts)");
#else
        CHECK(after.rss_bytes <=
              before.rss_bytes + off.device_bytes() + m.weight_bytes + m.weight_bytes / 10);
#endif
      }
      for (int step = 0; step < 2; ++step)
        for (std::size_t g = 0; g < off.group_count(); ++g) {
          auto lease = off.acquire(g, sim.view(s));
          check.enqueue(sim, sim.view(s), m, lease);
        }
      sim.synchronize(sim.view(s));
    }
    CHECK(check.wrong == 0);
    CHECK(check.checked == 2 * m.weight_bytes);
    CHECK(sim.pinned_bytes_in_use() == 0);
    CHECK(sim.registered_bytes_in_use() == 0);
  }

  // load_safetensors_backend in the runtime's reads: mmap copies out of a read-only mapping and
  // drops the pages behind it, so the bytes are pread's and no file page stays mapped.
  TEST_CASE("file_backend mmap: pread's bytes, pinned and staged, and no mapped page held") {
    using namespace host_memory_test;
    for (const auto where : {ddo::placement::pinned_host, ddo::placement::file}) {
      CAPTURE(static_cast<int>(where));
      file_model m(4, 2, 8 * ddo::mib, where, "backend");
      for (const auto backend : {ddo::safetensors_backend::pread, ddo::safetensors_backend::mmap}) {
        CAPTURE(static_cast<int>(backend));
        ddo::host_sim_transport sim;
        auto s = sim.make_stream();
        ddo::runtime_options o;
        o.slot_count = 2;
        o.staging_threads = 2;
        o.file_backend = backend;
        const auto before = ddo::read_process_memory();
        checker check;
        {
          sim_offloader off(sim, m.table, m.plan, o);
          for (int step = 0; step < 2; ++step)
            for (std::size_t g = 0; g < off.group_count(); ++g) {
              auto lease = off.acquire(g, sim.view(s));
              check.enqueue(sim, sim.view(s), m, lease);
            }
          sim.synchronize(sim.view(s));
          const auto after = ddo::read_process_memory();
          INFO("file pages " << before.rss_file_bytes << " -> " << after.rss_file_bytes);
          if (before.rss_bytes != 0)
            CHECK(after.rss_file_bytes <= before.rss_file_bytes + m.weight_bytes / 20);
        }
        CHECK(check.wrong == 0);
        CHECK(check.checked == 2 * m.weight_bytes);
      }
    }
  }

  TEST_CASE("file pieces staged by several read threads arrive intact under random orders") {
    using namespace host_memory_test;
    file_model m(5, 3, 3 * ddo::mib, ddo::placement::file, "staged");
    for (std::uint32_t seed : {3u, 4u}) {
      CAPTURE(seed);
      ddo::host_sim_transport sim;
      auto a = sim.make_stream();
      auto b = sim.make_stream();
      ddo::runtime_options o;
      o.staging_threads = 4;
      o.staging_buffer_bytes = 4 * ddo::mib + 4096 * seed;  // chunks cut weights at odd places
      o.slot_count = 2 + seed % 2;
      checker check;
      {
        sim_offloader off(sim, m.table, m.plan, o);
        std::mt19937 rng(seed);
        std::vector<sim_offloader::lease_type> held;
        for (int op = 0; op < 60; ++op) {
          if (!held.empty() && (held.size() >= off.slot_count() || rng() % 3 == 0)) {
            held.erase(held.begin() + static_cast<long>(rng() % held.size()));
            continue;
          }
          const auto v = rng() % 2 ? sim.view(a) : sim.view(b);
          auto lease = off.acquire(rng() % off.group_count(), v);
          check.enqueue(sim, v, m, lease);
          held.push_back(std::move(lease));
        }
        held.clear();
        sim.synchronize(sim.view(a));
        sim.synchronize(sim.view(b));
      }
      CHECK(check.wrong == 0);
      CHECK(check.checked > 0);
      CHECK(sim.pageable_direct_copies() == 0);
      CHECK(sim.pinned_bytes_in_use() == 0);
    }
  }

  TEST_CASE("a file cut short under the parallel staging reads is an io_error naming it") {
    using namespace host_memory_test;
    file_model m(4, 2, 3 * ddo::mib, ddo::placement::file, "truncated");
    ddo::host_sim_transport sim;
    auto s = sim.make_stream();
    ddo::runtime_options o;
    o.staging_threads = 4;
    o.staging_buffer_bytes = 8 * ddo::mib;
    {
      sim_offloader off(sim, m.table, m.plan, o);
      std::filesystem::resize_file(m.path, m.data_offset + 5 * ddo::mib);
      bool thrown = false;
      try {
        for (int step = 0; step < 2; ++step)
          for (std::size_t g = 0; g < off.group_count(); ++g) auto lease = off.acquire(g, sim.view(s));
      } catch (const ddo::io_error& e) {
        thrown = true;
        CHECK(e.path() == m.path.string());
        CHECK(std::string(e.what()).find("offset") != std::string::npos);
      }
      CHECK(thrown);
      CHECK(off.live_leases() == 0);
      sim.synchronize(sim.view(s));
    }
    CHECK(sim.pinned_bytes_in_use() == 0);
    CHECK(sim.device_bytes_in_use() == 0);
  }
}
