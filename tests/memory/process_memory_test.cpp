// SPDX-License-Identifier: Apache-2.0
// process_memory: RSS, its peak, PSS and MemTotal − MemAvailable as the kernel reports them.
#include "ddo/memory/process_memory.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "ddo/memory/host_buffer.hpp"

namespace process_memory_test {

struct prepared {
  std::filesystem::path dir;
  ddo::process_memory_paths paths;
  prepared() {
    dir = std::filesystem::temp_directory_path() /
          ("ddo_process_memory_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    paths.status = (dir / "status").string();
    paths.smaps_rollup = (dir / "smaps_rollup").string();
    paths.meminfo = (dir / "meminfo").string();
    paths.clear_refs = (dir / "missing" / "clear_refs").string();
  }
  ~prepared() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  void write(const std::string& path, const std::string& text) const { std::ofstream(path) << text; }
};

}  // namespace process_memory_test

TEST_SUITE("memory") {
  TEST_CASE("process_memory reads the kernel's fields in bytes, and 0 for what is missing") {
    process_memory_test::prepared p;
    p.write(p.paths.status, "Name:\tddo\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nRssAnon:\t     768 kB\n"
                            "RssFile:\t     256 kB\n");
    p.write(p.paths.meminfo, "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    400 kB\n");
    auto m = ddo::read_process_memory(p.paths);
    CHECK(m.rss_bytes == 1024 * 1024);
    CHECK(m.peak_rss_bytes == 2048 * 1024);
    CHECK(m.rss_anon_bytes == 768 * 1024);
    CHECK(m.rss_file_bytes == 256 * 1024);
    CHECK_FALSE(m.has_pss);  // no smaps_rollup file
    CHECK(m.mem_used_bytes() == 600 * 1024);
    p.write(p.paths.smaps_rollup, "00400000-7fff [rollup]\nRss:   1024 kB\nPss:    900 kB\nPss_Anon:  700 kB\n");
    m = ddo::read_process_memory(p.paths);
    CHECK(m.has_pss);
    CHECK(m.pss_bytes == 900 * 1024);
    CHECK_FALSE(ddo::reset_peak_rss(p.paths));  // no such file: refused, not thrown

    ddo::memory_watch watch(p.paths);
    watch.start(true);
    CHECK_FALSE(watch.peak_reset());
    p.write(p.paths.meminfo, "MemTotal:       1000 kB\nMemAvailable:    100 kB\n");
    watch.sample();
    p.write(p.paths.meminfo, "MemTotal:       1000 kB\nMemAvailable:    300 kB\n");
    watch.sample();
    CHECK(watch.used_growth_bytes() == 300 * 1024);  // the largest growth seen, not the last
    CHECK(watch.last().mem_available_bytes == 300 * 1024);

    // sample_used reads meminfo alone (a loop between steps must not walk smaps_rollup): it
    // raises the growth peak and leaves the last full reading as it was.
    p.write(p.paths.meminfo, "MemTotal:       1000 kB\nMemAvailable:     50 kB\n");
    p.write(p.paths.smaps_rollup, "Pss:    123 kB\n");
    watch.sample_used();
    CHECK(watch.used_growth_bytes() == 350 * 1024);
    CHECK(watch.last().mem_available_bytes == 300 * 1024);
    CHECK(watch.last().pss_bytes == 900 * 1024);
    p.write(p.paths.meminfo, "MemTotal:       1000 kB\nMemAvailable:    500 kB\n");
    watch.sample_used();
    CHECK(watch.used_growth_bytes() == 350 * 1024);  // still the largest seen
  }

  TEST_CASE("touching 64 MiB of fresh memory shows in RSS and its peak; the peak can be reset") {
    const auto before = ddo::read_process_memory();
    if (before.rss_bytes == 0) {
      MESSAGE("skipped: /proc/self/status has no VmRSS here");
      return;
    }
    const std::uint64_t n = 64 * ddo::mib;
    {
      ddo::host_buffer b(n);
      std::memset(b.data(), 0x5A, n);
      const auto during = ddo::read_process_memory();
      CHECK(during.rss_bytes >= before.rss_bytes + n * 9 / 10);
      CHECK(during.rss_anon_bytes >= before.rss_anon_bytes + n * 9 / 10);
      CHECK(during.peak_rss_bytes >= during.rss_bytes);
    }
    const auto after = ddo::read_process_memory();
    CHECK(after.rss_bytes + n * 9 / 10 <= after.peak_rss_bytes);  // freed, the peak remembers it
    if (ddo::reset_peak_rss()) {
      const auto reset = ddo::read_process_memory();
      CHECK(reset.peak_rss_bytes < after.peak_rss_bytes);
    } else {
      MESSAGE("the kernel refused to reset the peak RSS (clear_refs 5)");
    }
  }
}
