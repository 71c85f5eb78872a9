// SPDX-License-Identifier: Apache-2.0
#pragma once
// The fault-injection suite, written once and run over host_sim (tests/reliability) and linear
// (tests/gpu): every injected fault — pinned allocation, host registration, device allocation at
// setup, a file read mid-run (EIO, an early end, a short count), a copy on the staging thread —
// gives a clear error, and afterwards pinned host bytes, device bytes, threads and open files are
// back where they started and every bound engine pointer is restored.
//
// A Traits type provides: `using transport_type`, `static transport_type make()`, and
// `static std::string skip_reason()` (empty to run).

#include <doctest/doctest.h>

#include <dirent.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ddo/core/units.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/fault_injection.hpp"
#include "runtime/runtime_fixtures.hpp"

namespace ddo_test {

/// Entries of a /proc/self directory (threads: task, open files: fd).
inline std::size_t count_proc_entries(const char* dir) {
  std::size_t n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

/// Threads of the process once the kernel has reaped the ones that exited: a joined std::thread
/// can stay in /proc/self/task for a moment after join() returns (the joiner is woken before the
/// task is released), so a count taken right after a join may still include it. Waits (at most
/// @p limit) until @p wanted is seen, or the count holds still for 20 ms when nothing is wanted.
inline std::size_t settled_thread_count(std::size_t wanted = 0,
                                        std::chrono::milliseconds limit = std::chrono::seconds(2)) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + limit;
  std::size_t n = count_proc_entries("/proc/self/task");
  auto stable_since = clock::now();
  while (clock::now() < deadline) {
    if (wanted != 0 && n == wanted) return n;
    if (wanted == 0 && clock::now() - stable_since >= std::chrono::milliseconds(20)) return n;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const std::size_t now = count_proc_entries("/proc/self/task");
    if (now != n) stable_since = clock::now();
    n = now;
  }
  return n;
}

/// What must come back after a failure.
struct resource_snapshot {
  std::uint64_t device = 0;
  std::uint64_t pinned = 0;
  std::uint64_t registered = 0;
  std::size_t threads = 0;
  std::size_t files = 0;
  template <class T>
  static resource_snapshot take(const T& t) {
    resource_snapshot s;
    s.device = t.device_bytes_in_use();
    s.pinned = t.pinned_bytes_in_use();
    s.registered = t.registered_bytes_in_use();
    s.threads = settled_thread_count();
    s.files = count_proc_entries("/proc/self/fd") - 1;  // minus opendir's own descriptor
    return s;
  }
};

inline void check_restored(const resource_snapshot& before, const resource_snapshot& after,
                           const std::string& what) {
  INFO("after " << what);
  CHECK(after.device == before.device);
  CHECK(after.pinned == before.pinned);
  CHECK(after.registered == before.registered);
  // A thread left running never matches; one that exited only has to be reaped first.
  const std::size_t threads =
      after.threads == before.threads ? after.threads : settled_thread_count(before.threads);
  CHECK(threads == before.threads);
  CHECK(after.files == before.files);
}

/// Every placement, file weights read through the staging thread, small staging buffers so a
/// group takes several reads and copies.
inline model_spec fault_model_spec(std::uint32_t seed) {
  model_spec spec;
  spec.groups = 5;
  spec.weights_per_group = 4;
  spec.max_bytes = 60000;
  spec.seed = seed;
  return spec;
}

/// Changes the suite's runtime options (e.g. the parallel-read variant); empty: none.
using options_tweak = std::function<void(ddo::runtime_options&)>;

inline ddo::runtime_options fault_options(ddo::fault_injector& faults, const options_tweak& tweak = {}) {
  ddo::runtime_options o;
  o.staging_buffer_bytes = 16 * 1024;
  o.strategy = ddo::runtime_strategy::swap;
  o.allow_pin_fallback = false;
  o.file_faults = &faults;
  if (tweak) tweak(o);
  return o;
}

/// One run: setup, engine pointers bound, @p steps passes over every group with the bytes
/// checked (copied back to the host). Returns normally or throws what the runtime threw; the
/// engine pointers are checked to be restored either way.
template <class T>
void run_model(T& t, const synthetic_model& m, const ddo::runtime_options& options, int steps,
               std::uint64_t& mismatches) {
  std::vector<std::uint16_t> dummy(m.table.size());
  std::vector<std::uint16_t*> engine(m.table.size());
  for (std::size_t w = 0; w < engine.size(); ++w) engine[w] = &dummy[w];
  struct restored_check {
    std::vector<std::uint16_t>& dummy;
    std::vector<std::uint16_t*>& engine;
    ~restored_check() {
      std::size_t wrong = 0;
      for (std::size_t w = 0; w < engine.size(); ++w) wrong += engine[w] != &dummy[w];
      CHECK_MESSAGE(wrong == 0, "bound engine pointers not restored");
    }
  } check_on_exit{dummy, engine};
  auto s = t.make_stream();
  ddo::basic_offloader<T> off(t, m.table, m.plan, options);
  for (std::size_t w = 0; w < engine.size(); ++w) off.bind(m.table[w].name, engine[w]);
  std::vector<std::byte> back;
  for (int step = 0; step < steps; ++step)
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, T::view(s));
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const auto& e = m.expected[lease.weight_index(i)];
        back.assign(e.size(), std::byte{0x5a});
        t.copy_to_host(back.data(), lease.data(i), e.size(), T::view(s));
        t.synchronize(T::view(s));
        if (std::memcmp(back.data(), e.data(), e.size()) != 0) ++mismatches;
      }
    }
  t.synchronize(T::view(s));
}

/// Counts the calls of each fault point in a clean run (setup alone, and setup plus one step).
struct call_counts {
  std::uint64_t setup[ddo::fault_point_count] = {};
  std::uint64_t one_step[ddo::fault_point_count] = {};
};

template <class Traits>
call_counts count_calls(const synthetic_model& m, const options_tweak& tweak = {}) {
  auto faults = std::make_shared<ddo::fault_injector>();
  ddo::fault_injection_transport<typename Traits::transport_type> t(Traits::make(), faults);
  const auto options = fault_options(*faults, tweak);
  call_counts c;
  {
    ddo::basic_offloader<decltype(t)> off(t, m.table, m.plan, options);
    for (std::size_t p = 0; p < ddo::fault_point_count; ++p)
      c.setup[p] = faults->calls(static_cast<ddo::fault_point>(p));
  }
  faults->reset();
  std::uint64_t mismatches = 0;
  run_model(t, m, options, 1, mismatches);
  CHECK(mismatches == 0);
  for (std::size_t p = 0; p < ddo::fault_point_count; ++p)
    c.one_step[p] = faults->calls(static_cast<ddo::fault_point>(p));
  return c;
}

/// Arms @p point at call @p n and runs two steps: the run must fail with @p Expected whose message
/// contains @p needle, and everything must be back afterwards.
template <class Traits, class Expected>
void expect_fault(const synthetic_model& m, ddo::fault_point point, std::uint64_t n,
                  const std::string& needle,
                  ddo::file_read_fault read_fault = {ddo::file_read_fault::kind::error, EIO},
                  const options_tweak& tweak = {}) {
  auto faults = std::make_shared<ddo::fault_injector>();
  ddo::fault_injection_transport<typename Traits::transport_type> t(Traits::make(), faults);
  const std::string what_case =
      std::string(ddo::fault_point_name(point)) + " call #" + std::to_string(n);
  INFO(what_case);
  const auto before = resource_snapshot::take(t.upstream());
  faults->fail_nth(point, n, read_fault);
  std::uint64_t mismatches = 0;
  bool thrown = false;
  try {
    run_model(t, m, fault_options(*faults, tweak), 2, mismatches);
  } catch (const Expected& e) {
    thrown = true;
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  } catch (const std::exception& e) {
    FAIL_CHECK("unexpected exception type: " << e.what());
  }
  CHECK(faults->fired(point) == 1);
  CHECK_MESSAGE(thrown, "the injected fault did not surface as an error");
  CHECK(mismatches == 0);  // nothing wrong was delivered before the failure
  check_restored(before, resource_snapshot::take(t.upstream()), what_case);
}

template <class Traits>
void fault_injection_suite(std::uint32_t seed) {
  if (const auto why = Traits::skip_reason(); !why.empty()) {
    MESSAGE("skipped: " << why);
    return;
  }
  auto m = make_model(fault_model_spec(seed));
  const auto calls = count_calls<Traits>(*m);
  using ddo::fault_point;
  const auto at = [](fault_point p) { return static_cast<std::size_t>(p); };
  REQUIRE(calls.setup[at(fault_point::allocate_device)] > 0);
  REQUIRE(calls.setup[at(fault_point::allocate_pinned)] > 0);
  REQUIRE(calls.setup[at(fault_point::register_host)] > 0);
  REQUIRE(calls.one_step[at(fault_point::file_read)] > calls.setup[at(fault_point::file_read)]);
  REQUIRE(calls.one_step[at(fault_point::copy_to_device)] > 0);

  SUBCASE("every device allocation at setup") {
    for (std::uint64_t n = 1; n <= calls.setup[at(fault_point::allocate_device)]; ++n)
      expect_fault<Traits, ddo::out_of_memory>(*m, fault_point::allocate_device, n,
                                               "fault injection: allocate_device");
  }
  SUBCASE("every pinned allocation at setup") {
    for (std::uint64_t n = 1; n <= calls.setup[at(fault_point::allocate_pinned)]; ++n)
      expect_fault<Traits, ddo::out_of_memory>(*m, fault_point::allocate_pinned, n,
                                               "fault injection: allocate_pinned");
  }
  SUBCASE("every host registration at setup, without pin fallback") {
    for (std::uint64_t n = 1; n <= calls.setup[at(fault_point::register_host)]; ++n)
      expect_fault<Traits, ddo::out_of_memory>(*m, fault_point::register_host, n,
                                               "allow_pin_memory_fallback");
  }
  SUBCASE("file reads fail with EIO, at setup and mid-run") {
    for (std::uint64_t n = 1; n <= calls.one_step[at(fault_point::file_read)]; ++n)
      expect_fault<Traits, ddo::io_error>(*m, fault_point::file_read, n, "Input/output error");
  }
  SUBCASE("file reads end early mid-run") {
    const auto first = calls.setup[at(fault_point::file_read)] + 1;
    for (std::uint64_t n = first; n <= calls.one_step[at(fault_point::file_read)]; ++n)
      expect_fault<Traits, ddo::io_error>(*m, fault_point::file_read, n, "unexpected end of file",
                                          {ddo::file_read_fault::kind::end_of_file, 0});
  }
  SUBCASE("a copy fails (on the staging or the engine thread) mid-run") {
    for (std::uint64_t n = 1; n <= calls.one_step[at(fault_point::copy_to_device)]; ++n)
      expect_fault<Traits, ddo::cuda_error>(*m, fault_point::copy_to_device, n,
                                            "fault injection: copy_to_device");
  }
  SUBCASE("a short read count is continued and delivers the right bytes") {
    for (std::uint64_t n = 1; n <= calls.one_step[at(fault_point::file_read)]; ++n) {
      auto faults = std::make_shared<ddo::fault_injector>();
      ddo::fault_injection_transport<typename Traits::transport_type> t(Traits::make(), faults);
      const auto before = resource_snapshot::take(t.upstream());
      faults->fail_nth(fault_point::file_read, n, {ddo::file_read_fault::kind::short_count, 0});
      std::uint64_t mismatches = 0;
      run_model(t, *m, fault_options(*faults), 2, mismatches);
      CHECK(faults->fired(fault_point::file_read) == 1);
      CHECK(mismatches == 0);
      check_restored(before, resource_snapshot::take(t.upstream()),
                     "short read #" + std::to_string(n));
    }
  }
}

/// The same file faults where several threads read: pinned blocks packed by 3 pin workers (the
/// thread completing a group registers its block), file pieces staged through 4 MiB buffers by
/// 4 read threads (weights of 1-3 MiB, so every chunk is split between the threads). A read
/// failing on a helper thread must surface on the engine's thread as the same clear error, after
/// every helper stopped writing; nothing stays behind.
template <class Traits>
void parallel_read_fault_suite(std::uint32_t seed) {
  if (const auto why = Traits::skip_reason(); !why.empty()) {
    MESSAGE("skipped: " << why);
    return;
  }
  auto spec = fault_model_spec(seed);
  spec.min_bytes = 1 * ddo::mib;
  spec.max_bytes = 3 * ddo::mib;
  auto m = make_model(spec);
  const options_tweak parallel = [](ddo::runtime_options& o) {
    o.staging_buffer_bytes = 4 * ddo::mib;
    o.staging_threads = 4;
    o.pin_workers = 3;
  };
  using ddo::fault_point;
  const auto calls = count_calls<Traits>(*m, parallel);
  const std::uint64_t setup = calls.setup[static_cast<std::size_t>(fault_point::file_read)];
  const std::uint64_t total = calls.one_step[static_cast<std::size_t>(fault_point::file_read)];
  REQUIRE(setup > 0);
  REQUIRE(total > setup + 4);
  // A sample of calls: the first at setup, the first, middle and last mid-run.
  for (const std::uint64_t n : {std::uint64_t{1}, setup + 1, (setup + total) / 2, total}) {
    expect_fault<Traits, ddo::io_error>(*m, fault_point::file_read, n, "Input/output error",
                                        {ddo::file_read_fault::kind::error, EIO}, parallel);
    expect_fault<Traits, ddo::io_error>(*m, fault_point::file_read, n, "unexpected end of file",
                                        {ddo::file_read_fault::kind::end_of_file, 0}, parallel);
  }
}

}  // namespace ddo_test
