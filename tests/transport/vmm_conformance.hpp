// SPDX-License-Identifier: Apache-2.0
#pragma once
// The VMM conformance suite, written once: run on host_sim's VMM mode in tests/transport and on
// the CUDA VMM transport in tests/gpu. A Traits type supplies:
//   using transport_type;                              // models transport_with_stable_addresses
//   static std::string skip_reason();                  // non-empty: print it and skip
//   static transport_type make(const ddo::vmm_window_options&);
//   static void delay(transport_type&, stream_view, int microseconds);  // a slow "kernel"
//   static std::size_t cycles();                       // map/unmap cycles of the leak test
//   static std::uint64_t device_used(transport_type&); // device bytes in use (sampled or ledger)
//   static std::uint64_t tolerance();                  // slack of device_used (driver bookkeeping)
// Engine "kernels" are device→host copies of every leased byte on the compute stream after a
// stall, compared with the source at the end: a remap before the kernel read gives wrong bytes
// (or a fault on host_sim).

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/poison_byte.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/detail/vmm_window.hpp"
#include "runtime/runtime_fixtures.hpp"

namespace ddo_vmm_test {

/// |a − b| ≤ tolerance: device memory is "back to its starting level".
inline bool back_to(std::uint64_t now, std::uint64_t before, std::uint64_t tolerance) {
  return (now > before ? now - before : before - now) <= tolerance;
}

template <class T>
struct readback {
  T* t;
  std::byte* host;
  std::size_t capacity;
  std::size_t used = 0;
  std::vector<std::pair<std::size_t, std::size_t>> items;  // (offset, weight)
  readback(T& tr, std::size_t bytes) : t(&tr), host(tr.allocate_pinned(bytes)), capacity(bytes) {
    std::memset(host, 0x3C, bytes);
  }
  ~readback() { t->free_pinned(host, capacity); }
  readback(const readback&) = delete;
  readback& operator=(const readback&) = delete;

  template <class Lease>
  void enqueue(typename T::stream_view s, const Lease& lease, const ddo_test::synthetic_model& m) {
    for (std::size_t i = 0; i < lease.size(); ++i) {
      const std::size_t w = lease.weight_index(i);
      const std::size_t n = m.expected[w].size();
      REQUIRE(used + n <= capacity);
      t->copy_to_host(host + used, lease.data(i), n, s);
      items.emplace_back(used, w);
      used += n;
    }
  }
  [[nodiscard]] std::size_t mismatches(const ddo_test::synthetic_model& m) const {
    std::size_t bad = 0;
    for (const auto& [off, w] : items)
      if (std::memcmp(host + off, m.expected[w].data(), m.expected[w].size()) != 0) ++bad;
    return bad;
  }
};

inline std::uint64_t model_bytes(const ddo_test::synthetic_model& m) {
  std::uint64_t b = 0;
  for (const auto& e : m.expected) b += e.size();
  return b;
}

/// A budget that holds the whole model resident plus @p slots groups of @p slot bytes rounded to
/// @p handle (the slot count is then bounded by runtime_options::slot_count).
inline std::uint64_t roomy_budget(const ddo_test::synthetic_model& m, std::uint64_t max_group) {
  return model_bytes(m) + 64 * ddo::mib + 64 * ((max_group + 2 * ddo::mib - 1) / (2 * ddo::mib)) * 2 * ddo::mib;
}

inline ddo::runtime_options vmm_runtime_options(std::size_t slots) {
  ddo::runtime_options o;
  o.poison_slots = true;
  o.staging_buffer_bytes = 256 * 1024;
  o.slot_count = slots;
  return o;
}

inline ddo_test::model_spec vmm_spec(std::uint32_t seed, std::size_t groups, std::uint64_t max_bytes) {
  ddo_test::model_spec spec;
  spec.groups = groups;
  spec.min_bytes = 1000;
  spec.max_bytes = max_bytes;
  spec.seed = seed;
  return spec;
}

}  // namespace ddo_vmm_test

#define DDO_VMM_SKIP(Traits)                               \
  do {                                                     \
    const std::string ddo_skip_ = Traits::skip_reason();   \
    if (!ddo_skip_.empty()) {                              \
      MESSAGE("skipped: " << ddo_skip_);                   \
      return;                                              \
    }                                                      \
  } while (0)

TEST_CASE_TEMPLATE_DEFINE("vmm conformance: every weight reads back at its stable address under prefetch",
                          Traits, vmm_prefetch_readback) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  static_assert(ddo::transport_with_stable_addresses<T>);
  auto m = ddo_test::make_model(vmm_spec(301, 8, 3 * ddo::mib));
  ddo::vmm_window_options w;
  w.budget_bytes = roomy_budget(*m, 3 * ddo::mib);
  auto t = Traits::make(w);
  const int steps = 3;
  auto compute = t.make_stream();
  const auto v = T::view(compute);
  readback<T> rb(t, steps * model_bytes(*m) + 1024);
  {
    ddo::basic_offloader<T> off(t, m->table, m->plan, vmm_runtime_options(3));
    CHECK(off.slot_count() == 3);
    // Every weight's address is known at setup and never changes.
    std::vector<std::byte*> stable(m->table.size());
    for (std::size_t i = 0; i < m->table.size(); ++i) stable[i] = off.stable_data(i);
    for (int step = 0; step < steps; ++step) {
      off.begin_step();
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, v);
        for (std::size_t i = 0; i < lease.size(); ++i) CHECK(lease.data(i) == stable[lease.weight_index(i)]);
        Traits::delay(t, v, 300);
        rb.enqueue(v, lease, *m);
      }
    }
    t.synchronize(v);
    const auto stats = t.vmm_stats();
    CHECK(stats.binds > 0);
    CHECK(stats.slots == 3);
    CHECK(stats.handle_count * stats.handle_bytes <= w.budget_bytes);
  }
  CHECK(rb.items.size() == steps * m->table.size());
  CHECK(rb.mismatches(*m) == 0);
}

TEST_CASE_TEMPLATE_DEFINE("vmm conformance: random acquisition orders never return wrong bytes", Traits,
                          vmm_random_orders) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  auto m = ddo_test::make_model(vmm_spec(302, 7, 1 * ddo::mib));
  ddo::vmm_window_options w;
  w.budget_bytes = roomy_budget(*m, 1 * ddo::mib);
  auto t = Traits::make(w);
  auto a = t.make_stream();
  auto b = t.make_stream();
  const std::size_t acquires = 120;
  readback<T> rb(t, acquires * 4 * ddo::mib);
  {
    ddo::basic_offloader<T> off(t, m->table, m->plan, vmm_runtime_options(3));
    std::mt19937 rng(302);
    std::vector<typename ddo::basic_offloader<T>::lease_type> held;
    for (std::size_t k = 0; k < acquires; ++k) {
      const std::size_t g = rng() % off.group_count();
      const auto v = (rng() & 1u) ? T::view(a) : T::view(b);
      if (held.size() >= 2) held.erase(held.begin() + static_cast<long>(rng() % held.size()));
      held.push_back(off.acquire(g, v));
      Traits::delay(t, v, 100);
      rb.enqueue(v, held.back(), *m);
    }
    held.clear();
    t.synchronize(T::view(a));
    t.synchronize(T::view(b));
  }
  CHECK(rb.mismatches(*m) == 0);
}

TEST_CASE_TEMPLATE_DEFINE("vmm conformance: no handle or address leak over many map/unmap cycles",
                          Traits, vmm_leak_cycles) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  auto spec = vmm_spec(303, 4, 200000);
  spec.where = [](std::size_t, std::size_t) { return ddo::placement::pinned_host; };
  auto m = ddo_test::make_model(spec);
  ddo::vmm_window_options w;
  w.budget_bytes = roomy_budget(*m, 1 * ddo::mib);
  auto t = Traits::make(w);
  const std::uint64_t before = Traits::device_used(t);
  auto compute = t.make_stream();
  const auto v = T::view(compute);
  readback<T> rb(t, 64 * ddo::mib);
  {
    // One slot: every acquire of another group unmaps the previous one and maps the next.
    auto opts = vmm_runtime_options(1);
    opts.poison_slots = false;
    ddo::basic_offloader<T> off(t, m->table, m->plan, opts);
    CHECK(off.slot_count() == 1);
    const std::size_t cycles = Traits::cycles();
    for (std::size_t k = 0; k < cycles; ++k) {
      auto lease = off.acquire(k % off.group_count(), v);
      if (k % 97 == 0) {
        rb.used = 0;
        rb.items.clear();
        rb.enqueue(v, lease, *m);
        t.synchronize(v);
        REQUIRE(rb.mismatches(*m) == 0);
      }
    }
    t.synchronize(v);
    const auto stats = t.vmm_stats();
    CHECK(stats.binds >= cycles);
    CHECK(stats.unmaps + 1 >= stats.binds);
    CHECK(Traits::device_used(t) <= before + stats.handle_count * stats.handle_bytes + 64 * ddo::mib);
  }
  CHECK(Traits::live_handles(t) == 0);
  CHECK(Traits::live_mappings(t) == 0);
  CHECK(back_to(Traits::device_used(t), before, Traits::tolerance()));
}

TEST_CASE_TEMPLATE_DEFINE("vmm conformance: setup failure and teardown give every byte back", Traits,
                          vmm_setup_failure) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  auto m = ddo_test::make_model(vmm_spec(304, 6, 1 * ddo::mib));
  ddo::vmm_window_options w;
  w.budget_bytes = roomy_budget(*m, 1 * ddo::mib);
  w.fail_create_after = 2;  // the third physical handle fails like CUDA_ERROR_OUT_OF_MEMORY
  auto t = Traits::make(w);
  const std::uint64_t before = Traits::device_used(t);
  CHECK_THROWS_AS(ddo::basic_offloader<T>(t, m->table, m->plan, vmm_runtime_options(4)), ddo::cuda_error);
  CHECK(Traits::live_handles(t) == 0);
  CHECK(Traits::live_mappings(t) == 0);
  CHECK(back_to(Traits::device_used(t), before, Traits::tolerance()));
}

TEST_CASE_TEMPLATE_DEFINE("vmm conformance: budgets, staging and page sizes are refused with the numbers",
                          Traits, vmm_refusals) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  auto m = ddo_test::make_model(vmm_spec(305, 4, 1 * ddo::mib));
  auto refused = [&](ddo::vmm_window_options w, const char* key) {
    auto t = Traits::make(w);
    const std::uint64_t before = Traits::device_used(t);
    try {
      ddo::basic_offloader<T> off(t, m->table, m->plan, vmm_runtime_options(3));
      FAIL("setup was not refused for " << key);
    } catch (const ddo::config_error& e) {
      CHECK(e.key() == key);
      CHECK(std::string(e.what()).find("bytes") != std::string::npos);
    }
    CHECK(back_to(Traits::device_used(t), before, Traits::tolerance()));
    CHECK(Traits::live_handles(t) == 0);
  };
  ddo::vmm_window_options w;
  w.budget_bytes = 0;
  refused(w, "vmm_resident_weight_budget_gb");
  w.budget_bytes = 1 * ddo::mib;  // smaller than the resident set plus one group
  refused(w, "vmm_resident_weight_budget_gb");
  w.budget_bytes = roomy_budget(*m, 1 * ddo::mib);
  w.staging_buffer_bytes = 1000;  // cannot hold the largest group's staged bytes
  refused(w, "vmm_staging_buffer_gb");
  w.staging_buffer_bytes = 0;
  w.handle_bytes = 3 * ddo::mib + 4096;  // not a granularity multiple
  refused(w, "vmm_page_mb");
}

TEST_CASE_TEMPLATE_DEFINE("vmm conformance: weights the route does not cover keep their placement in a linear side image",
                          Traits, vmm_uncovered_side_image) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  // Position 3 of every group is norm-like (1-D, kind other); group 4 has nothing the route
  // covers, so it streams through its side image alone and has no mapped range.
  auto spec = vmm_spec(309, 6, 1 * ddo::mib);
  spec.vmm_covered = [](std::size_t g, std::size_t i) { return g != 4 && i != 3; };
  auto m = ddo_test::make_model(spec);
  ddo::vmm_window_options w;
  w.budget_bytes = roomy_budget(*m, 1 * ddo::mib) + 4 * ddo::mib;
  auto t = Traits::make(w);
  auto compute = t.make_stream();
  const auto v = T::view(compute);
  const int steps = 3;
  readback<T> rb(t, steps * model_bytes(*m) + 1024);
  const auto covered = [&](std::size_t w) { return m->table[w].shape.size() == 2; };
  {
    ddo::basic_offloader<T> off(t, m->table, m->plan, vmm_runtime_options(3));
    REQUIRE(off.slot_count() == 3);
    // Covered or resident: an address for the whole run; streamed and uncovered: refused, naming
    // the weight and what to use instead.
    std::vector<std::byte*> stable(m->table.size(), nullptr);
    const std::byte* lo = nullptr;
    const std::byte* hi = nullptr;
    std::size_t uncovered_streamed = 0;
    for (std::size_t i = 0; i < m->table.size(); ++i) {
      const bool resident = m->plan.decisions[i].where == ddo::placement::gpu_resident;
      if (resident || covered(i)) {
        stable[i] = off.stable_data(i);
        REQUIRE(stable[i] != nullptr);
        if (!resident) {
          if (lo == nullptr || stable[i] < lo) lo = stable[i];
          if (hi == nullptr || stable[i] + m->table[i].bytes > hi) hi = stable[i] + m->table[i].bytes;
        }
        continue;
      }
      ++uncovered_streamed;
      try {
        (void)off.stable_data(i);
        FAIL("stable_data gave an address for uncovered weight " << m->table[i].name);
      } catch (const ddo::usage_error& e) {
        const std::string what = e.what();
        CHECK(what.find(m->table[i].name) != std::string::npos);
        CHECK(what.find("lease") != std::string::npos);
      }
    }
    REQUIRE(uncovered_streamed >= 6);
    REQUIRE(lo != nullptr);
    for (int step = 0; step < steps; ++step) {
      off.begin_step();
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, v);
        for (std::size_t i = 0; i < lease.size(); ++i) {
          const std::size_t wi = lease.weight_index(i);
          if (stable[wi] != nullptr) {
            CHECK(lease.data(i) == stable[wi]);
          } else {
            // The side image is linear device memory outside the window's reservation.
            CHECK(lease.data(i) != nullptr);
            CHECK((lease.data(i) + m->table[wi].bytes <= lo || lease.data(i) >= hi));
          }
        }
        Traits::delay(t, v, 200);
        rb.enqueue(v, lease, *m);
      }
    }
    t.synchronize(v);
    // ddo's device bytes: the residents, the window's handles and the side images, all inside
    // the mapped budget.
    const auto metrics = off.metrics();
    CHECK(metrics.device_bytes <= w.budget_bytes);
    CHECK(metrics.device_bytes > t.vmm_physical_bytes());
  }
  CHECK(rb.items.size() == steps * m->table.size());
  CHECK(rb.mismatches(*m) == 0);
  CHECK(Traits::live_handles(t) == 0);
  CHECK(Traits::live_mappings(t) == 0);

  // A budget that holds one slot's handles but not its side image is refused with both numbers.
  ddo::vmm_window_options tight;
  tight.budget_bytes = 1;
  auto t2 = Traits::make(tight);
  try {
    ddo::basic_offloader<T> off(t2, m->table, m->plan, vmm_runtime_options(3));
    FAIL("a one-byte budget was accepted");
  } catch (const ddo::config_error& e) {
    CHECK(e.key() == "vmm_resident_weight_budget_gb");
    CHECK(std::string(e.what()).find("linear side image") != std::string::npos);
  }
}

TEST_CASE_TEMPLATE_DEFINE(
    "vmm conformance: poisoning at release shows a pointer kept past its lease", Traits,
    vmm_poison_released) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  // issue 30 item 7 on the stable-address routes: the engine keeps lease.data() past its lease.
  // Without the debug mode it reads the group's bytes still mapped there (the bug is silent);
  // with it, both the mapped range and the side image (position 3: not covered) read 0xCD.
  auto spec = vmm_spec(313, 3, 200000);
  spec.where = [](std::size_t, std::size_t) { return ddo::placement::pinned_host; };
  spec.vmm_covered = [](std::size_t, std::size_t i) { return i != 3; };
  auto m = ddo_test::make_model(spec);
  for (const bool poison : {false, true}) {
    CAPTURE(poison);
    ddo::vmm_window_options w;
    w.budget_bytes = roomy_budget(*m, 1 * ddo::mib) + 4 * ddo::mib;
    auto t = Traits::make(w);
    auto compute = t.make_stream();
    const auto v = T::view(compute);
    auto o = vmm_runtime_options(2);
    o.poison_slots = false;
    o.prefetch_depth = 0;  // nothing rebinds the slot after the release: the read is deterministic
    o.poison_released_slots = poison;
    readback<T> kept_rb(t, model_bytes(*m));
    readback<T> again_rb(t, model_bytes(*m));
    {
      ddo::basic_offloader<T> off(t, m->table, m->plan, o);
      std::vector<std::pair<const std::byte*, std::size_t>> kept;  // (pointer, weight)
      {
        auto lease = off.acquire(0, v);
        for (std::size_t i = 0; i < lease.size(); ++i)
          kept.emplace_back(lease.data(i), lease.weight_index(i));
        Traits::delay(t, v, 200);  // the lease's own work, which the fill must follow
      }  // released; the engine's next "kernel" on the same stream reads through the kept pointers
      for (const auto& [p, wi] : kept) {
        const std::size_t n = m->expected[wi].size();
        t.copy_to_host(kept_rb.host + kept_rb.used, p, n, v);
        kept_rb.items.emplace_back(kept_rb.used, wi);
        kept_rb.used += n;
      }
      t.synchronize(v);
      REQUIRE(kept.size() == 4);
      std::size_t poisoned = 0;
      for (std::size_t b = 0; b < kept_rb.used; ++b)
        poisoned += std::to_integer<int>(kept_rb.host[b]) == ddo::poison_byte ? 1 : 0;
      if (poison) {
        // Caught: the pattern in the mapped range and in the side image.
        CHECK(poisoned == kept_rb.used);
      } else {
        CHECK(kept_rb.mismatches(*m) == 0);  // silent: the old bytes are still mapped there
      }
      // The group is loaded again at its next acquire, and the others are intact.
      for (std::size_t g : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{0}}) {
        auto lease = off.acquire(g, v);
        again_rb.used = 0;
        again_rb.items.clear();
        again_rb.enqueue(v, lease, *m);
        t.synchronize(v);
        CHECK(again_rb.mismatches(*m) == 0);
      }
    }
    CHECK(Traits::live_mappings(t) == 0);
  }
}

TEST_CASE_TEMPLATE_DEFINE("vmm conformance: CUDA_ERROR_NOT_READY is retried, then reported", Traits,
                          vmm_not_ready) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  auto m = ddo_test::make_model(vmm_spec(306, 5, 500000));
  {
    ddo::vmm_window_options w;
    w.budget_bytes = roomy_budget(*m, 1 * ddo::mib);
    w.not_ready_every = 3;
    auto t = Traits::make(w);
    auto compute = t.make_stream();
    const auto v = T::view(compute);
    readback<T> rb(t, 2 * model_bytes(*m) + 1024);
    {
      ddo::basic_offloader<T> off(t, m->table, m->plan, vmm_runtime_options(2));
      for (int step = 0; step < 2; ++step)
        for (std::size_t g = 0; g < off.group_count(); ++g) {
          auto lease = off.acquire(g, v);
          rb.enqueue(v, lease, *m);
        }
      t.synchronize(v);
      CHECK(t.vmm_stats().retries > 0);
    }
    CHECK(rb.mismatches(*m) == 0);
  }
  {
    ddo::vmm_window_options w;
    w.budget_bytes = roomy_budget(*m, 1 * ddo::mib);
    w.not_ready_every = 1;  // never succeeds: reported after max_attempts
    w.max_attempts = 3;
    auto t = Traits::make(w);
    try {
      ddo::basic_offloader<T> off(t, m->table, m->plan, vmm_runtime_options(2));
      FAIL("setup did not report the persistent CUDA_ERROR_NOT_READY");
    } catch (const ddo::cuda_error& e) {
      CHECK(std::string(e.what()).find("NOT_READY") != std::string::npos);
    }
    CHECK(Traits::live_handles(t) == 0);
  }
}

// --- the native route (vmm_fast_runtime): registered windows, retained sources, micro-cache ---

namespace ddo_vmm_test {

/// Native settings sized for the test models: 4 windows of 256 KiB (the total rounds down),
/// retained storage of @p retained bytes with its first 256 KiB segment registered, a
/// micro-cache of 16 slots of 256 KiB.
inline ddo::runtime_options native_runtime_options(std::size_t slots, std::uint64_t retained) {
  auto o = vmm_runtime_options(slots);
  auto& n = o.native_vmm;
  n.enabled = true;
  n.window_bytes = 256 * 1024;
  n.staging_total_bytes = 4 * 256 * 1024 + 100000;
  n.segment_bytes = 256 * 1024;
  n.source_cache_bytes = retained;
  n.source_registered_bytes = retained >= 256 * 1024 ? 256 * 1024 : 0;
  n.micro_cache_slot_bytes = 256 * 1024;
  n.micro_cache_slots = 16;
  return o;
}

/// Bytes of file-sourced weights the plan streams.
inline std::uint64_t streamed_file_bytes(const ddo_test::synthetic_model& m) {
  std::uint64_t b = 0;
  for (std::size_t w = 0; w < m.table.size(); ++w)
    if (std::holds_alternative<ddo::file_source>(m.table[w].source) &&
        m.plan.decisions[w].where != ddo::placement::gpu_resident &&
        m.plan.decisions[w].where != ddo::placement::pinned_host)
      b += m.expected[w].size();
  return b;
}

}  // namespace ddo_vmm_test

TEST_CASE_TEMPLATE_DEFINE("vmm native: every weight reads back through windows, retained sources and the micro-cache",
                          Traits, vmm_native_readback) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  auto m = ddo_test::make_model(vmm_spec(311, 8, 600000));
  const std::uint64_t file_bytes = streamed_file_bytes(*m);
  REQUIRE(file_bytes > 512 * 1024);
  ddo::vmm_window_options w;
  w.budget_bytes = roomy_budget(*m, 3 * ddo::mib);
  auto t = Traits::make(w);
  const std::uint64_t registered_before = t.ledger().in_use(ddo::ledger_kind::registered);
  const int steps = 3;
  auto compute = t.make_stream();
  const auto v = T::view(compute);
  readback<T> rb(t, steps * model_bytes(*m) + 1024);
  {
    // Retain about half the streamed file bytes: some retained registered, some retained
    // unregistered, some read from the file every time.
    ddo::basic_offloader<T> off(t, m->table, m->plan, native_runtime_options(3, file_bytes / 2));
    std::vector<std::byte*> stable(m->table.size());
    for (std::size_t i = 0; i < m->table.size(); ++i) stable[i] = off.stable_data(i);
    for (int step = 0; step < steps; ++step) {
      off.begin_step();
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, v);
        for (std::size_t i = 0; i < lease.size(); ++i) CHECK(lease.data(i) == stable[lease.weight_index(i)]);
        Traits::delay(t, v, 200);
        rb.enqueue(v, lease, *m);
      }
    }
    t.synchronize(v);
    const auto n = off.metrics().native;
    CHECK(n.enabled);
    CHECK(n.windows == 4);
    CHECK(n.retained_capacity <= file_bytes / 2);
    CHECK(n.retained_registered == 256 * 1024);
    CHECK(n.retained_direct_bytes > 0);
    CHECK(n.retained_staged_bytes > 0);
    CHECK(n.window_bytes_staged > 0);
    CHECK(n.micro_cache_hits > 0);
    CHECK(t.ledger().in_use(ddo::ledger_kind::registered) > registered_before);
  }
  CHECK(rb.items.size() == steps * m->table.size());
  CHECK(rb.mismatches(*m) == 0);
  CHECK(t.ledger().in_use(ddo::ledger_kind::registered) == registered_before);
}

TEST_CASE_TEMPLATE_DEFINE("vmm native: random acquisition orders never return wrong bytes", Traits,
                          vmm_native_random_orders) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  auto m = ddo_test::make_model(vmm_spec(312, 7, 400000));
  ddo::vmm_window_options w;
  w.budget_bytes = roomy_budget(*m, 1 * ddo::mib);
  auto t = Traits::make(w);
  auto a = t.make_stream();
  auto b = t.make_stream();
  const std::size_t acquires = 120;
  readback<T> rb(t, acquires * 2 * ddo::mib);
  {
    auto opts = native_runtime_options(3, streamed_file_bytes(*m) / 2);
    opts.native_vmm.micro_cache_slots = 3;  // fewer slots than pieces: slots are reused
    ddo::basic_offloader<T> off(t, m->table, m->plan, opts);
    std::mt19937 rng(312);
    std::vector<typename ddo::basic_offloader<T>::lease_type> held;
    for (std::size_t k = 0; k < acquires; ++k) {
      const std::size_t g = rng() % off.group_count();
      const auto v = (rng() & 1u) ? T::view(a) : T::view(b);
      if (held.size() >= 2) held.erase(held.begin() + static_cast<long>(rng() % held.size()));
      held.push_back(off.acquire(g, v));
      Traits::delay(t, v, 100);
      rb.enqueue(v, held.back(), *m);
    }
    held.clear();
    t.synchronize(T::view(a));
    t.synchronize(T::view(b));
    CHECK(off.metrics().native.micro_cache_misses > 3);
  }
  CHECK(rb.mismatches(*m) == 0);
  CHECK(t.ledger().in_use(ddo::ledger_kind::registered) == 0);
}

TEST_CASE_TEMPLATE_DEFINE("vmm native: a setup failure after registration gives every byte back", Traits,
                          vmm_native_setup_failure) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  auto m = ddo_test::make_model(vmm_spec(313, 6, 400000));
  ddo::vmm_window_options w;
  w.budget_bytes = roomy_budget(*m, 1 * ddo::mib);
  w.fail_create_after = 2;  // the windows and storage are registered; the third handle fails
  auto t = Traits::make(w);
  const std::uint64_t before = Traits::device_used(t);
  const std::uint64_t registered_before = t.ledger().in_use(ddo::ledger_kind::registered);
  CHECK_THROWS_AS(ddo::basic_offloader<T>(t, m->table, m->plan,
                                          native_runtime_options(4, streamed_file_bytes(*m))),
                  ddo::cuda_error);
  CHECK(t.ledger().in_use(ddo::ledger_kind::registered) == registered_before);
  CHECK(Traits::live_handles(t) == 0);
  CHECK(Traits::live_mappings(t) == 0);
  CHECK(back_to(Traits::device_used(t), before, Traits::tolerance()));
}

TEST_CASE_TEMPLATE_DEFINE("vmm native: window totals and registered segments are refused with the numbers",
                          Traits, vmm_native_refusals) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  auto m = ddo_test::make_model(vmm_spec(314, 4, 400000));
  auto refused = [&](const ddo::runtime_options& o, const char* key) {
    ddo::vmm_window_options w;
    w.budget_bytes = roomy_budget(*m, 1 * ddo::mib);
    auto t = Traits::make(w);
    const std::uint64_t before = Traits::device_used(t);
    const std::uint64_t registered_before = t.ledger().in_use(ddo::ledger_kind::registered);
    try {
      ddo::basic_offloader<T> off(t, m->table, m->plan, o);
      FAIL("setup was not refused for " << key);
    } catch (const ddo::config_error& e) {
      CHECK(e.key() == key);
      CHECK(std::string(e.what()).find("bytes") != std::string::npos);
    }
    CHECK(t.ledger().in_use(ddo::ledger_kind::registered) == registered_before);
    CHECK(back_to(Traits::device_used(t), before, Traits::tolerance()));
    CHECK(Traits::live_handles(t) == 0);
  };
  auto o = native_runtime_options(3, 1 * ddo::mib);
  o.native_vmm.staging_total_bytes = o.native_vmm.window_bytes + 1;  // one whole window only
  refused(o, "vmm_staging_buffer_gb");
  o = native_runtime_options(3, 1 * ddo::mib);
  o.native_vmm.source_registered_bytes = 256 * 1024 + 4096;  // not whole segments
  refused(o, "vmm_source_registered_gb");
  o = native_runtime_options(3, 1 * ddo::mib);
  o.native_vmm.source_registered_bytes = 2 * ddo::mib;  // beyond the storage ceiling
  refused(o, "vmm_source_registered_gb");
}

TEST_CASE_TEMPLATE_DEFINE(
    "vmm conformance: compute-only mode maps groups at their addresses, copies nothing, and "
    "leaving it loads every byte again",
    Traits, vmm_compute_only) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  auto m = ddo_test::make_model(vmm_spec(303, 8, 600000));
  for (const bool native : {false, true}) {
    CAPTURE(native);
    ddo::vmm_window_options w;
    w.budget_bytes = roomy_budget(*m, 3 * ddo::mib);
    auto t = Traits::make(w);
    auto compute = t.make_stream();
    const auto v = T::view(compute);
    readback<T> rb(t, 3 * model_bytes(*m) + 1024);
    {
      ddo::basic_offloader<T> off(
          t, m->table, m->plan,
          native ? native_runtime_options(3, streamed_file_bytes(*m) / 2) : vmm_runtime_options(3));
      REQUIRE(off.slot_count() < off.group_count());
      const auto step = [&](bool read_back) {
        off.begin_step();
        for (std::size_t g = 0; g < off.group_count(); ++g) {
          auto lease = off.acquire(g, v);
          for (std::size_t i = 0; i < lease.size(); ++i)
            CHECK(lease.data(i) == off.stable_data(lease.weight_index(i)));
          Traits::delay(t, v, 100);
          if (read_back) rb.enqueue(v, lease, *m);
        }
      };
      step(true);
      off.set_compute_only(true);
      off.synchronize();
      const auto binds = t.vmm_stats().binds;
      step(false);
      step(false);
      off.synchronize();
      CHECK(t.vmm_stats().binds > binds);  // mapped as the groups cycled through the slots
      off.set_compute_only(false);
      step(true);
      step(true);
      t.synchronize(v);
    }
    CHECK(rb.items.size() == 3 * m->table.size());
    CHECK(rb.mismatches(*m) == 0);
  }
}

TEST_CASE_TEMPLATE_DEFINE("vmm conformance: pinned staging is sized from the plan, none kept when nothing is staged",
                          Traits, vmm_staging_from_plan) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  const std::uint64_t setting = 8 * ddo::mib;  // vmm_staging_buffer_gb: far above what is staged
  // Runs two steps of every group, reading every byte back; returns the offloader's metrics
  // after setup and the pinned ledger's bytes in use then and at its peak during setup.
  // Ledger kinds: `pinned` is memory ddo allocated page-locked (the staging buffers),
  // `registered` the packed blocks it page-locked with cudaHostRegister.
  struct seen {
    ddo::offload_metrics metrics;
    std::uint64_t pinned_in_use = 0, pinned_peak = 0, registered_in_use = 0;
    std::size_t mismatches = 0;
  };
  auto run = [&](const ddo_test::synthetic_model& m) {
    ddo::vmm_window_options w;
    w.budget_bytes = roomy_budget(m, 1 * ddo::mib);
    w.staging_buffer_bytes = setting;
    auto t = Traits::make(w);
    auto compute = t.make_stream();
    const auto v = T::view(compute);
    seen r;
    readback<T> rb(t, 2 * model_bytes(m) + 1024);
    const std::uint64_t pinned_before = t.ledger().in_use(ddo::ledger_kind::pinned);
    {
      auto o = vmm_runtime_options(2);
      o.staging_buffer_bytes = setting;
      ddo::basic_offloader<T> off(t, m.table, m.plan, o);
      r.metrics = off.metrics();
      r.pinned_in_use = t.ledger().in_use(ddo::ledger_kind::pinned) - pinned_before;
      r.pinned_peak = t.ledger().peak(ddo::ledger_kind::pinned) - pinned_before;
      r.registered_in_use = t.ledger().in_use(ddo::ledger_kind::registered);
      for (int step = 0; step < 2; ++step) {
        off.begin_step();
        for (std::size_t g = 0; g < off.group_count(); ++g) {
          auto lease = off.acquire(g, v);
          rb.enqueue(v, lease, m);
        }
      }
      t.synchronize(v);
    }
    r.mismatches = rb.mismatches(m);
    return r;
  };
  SUBCASE("everything streamed is pinned, residents uploaded at setup: no staging kept") {
    auto spec = vmm_spec(320, 5, 300000);
    spec.pinned_from_file = false;
    spec.where = [](std::size_t, std::size_t i) {
      return i == 0 ? ddo::placement::gpu_resident : ddo::placement::pinned_host;
    };
    auto m = ddo_test::make_model(spec);
    const auto r = run(*m);
    CHECK(r.metrics.resident_bytes > 0);
    CHECK(r.metrics.staging_bytes == 0);
    // By the ledger: after setup only the packed blocks are page-locked (no staging buffer) ...
    CHECK(r.pinned_in_use == 0);
    CHECK(r.registered_in_use == r.metrics.pinned_bytes);
    // ... and the residents' upload borrowed buffers of their span, not of the setting.
    CHECK(r.pinned_peak > 0);
    CHECK(r.pinned_peak <= 2 * ddo::round_up(r.metrics.resident_bytes, 4096));
    CHECK(r.pinned_peak < 2 * setting);
    CHECK(r.mismatches == 0);
  }
  SUBCASE("one pageable weight per group: buffers of the largest staged group, not of the setting") {
    auto spec = vmm_spec(321, 5, 300000);
    spec.pinned_from_file = false;
    spec.where = [](std::size_t, std::size_t i) {
      return i == 1 ? ddo::placement::pageable_host : ddo::placement::pinned_host;
    };
    auto m = ddo_test::make_model(spec);
    std::uint64_t largest = 0;
    for (std::size_t w = 0; w < m->table.size(); ++w)
      if (m->plan.decisions[w].where == ddo::placement::pageable_host)
        largest = std::max(largest, m->table[w].bytes);
    const auto r = run(*m);
    CHECK(r.metrics.staging_bytes == 2 * ddo::round_up(largest, 4096));
    CHECK(r.pinned_in_use == r.metrics.staging_bytes);
    CHECK(r.registered_in_use == r.metrics.pinned_bytes);
    CHECK(r.mismatches == 0);
  }
}

TEST_CASE_TEMPLATE_DEFINE("vmm conformance: metrics carry the window's driver calls, their host time and ddo's device bytes",
                          Traits, vmm_metrics) {
  DDO_VMM_SKIP(Traits);
  using namespace ddo_vmm_test;
  using T = typename Traits::transport_type;
  auto spec = vmm_spec(323, 4, 1 * ddo::mib);
  spec.where = [](std::size_t, std::size_t) { return ddo::placement::pinned_host; };
  auto m = ddo_test::make_model(spec);
  ddo::vmm_window_options w;
  w.budget_bytes = roomy_budget(*m, 1 * ddo::mib);
  auto t = Traits::make(w);
  auto compute = t.make_stream();
  const auto v = T::view(compute);
  ddo::basic_offloader<T> off(t, m->table, m->plan, vmm_runtime_options(1));  // every acquire remaps
  // Setup's page-table warm-up is not counted.
  CHECK(off.metrics().vmm.maps == 0);
  const int steps = 3;
  for (int step = 0; step < steps; ++step)
    for (std::size_t g = 0; g < off.group_count(); ++g) (void)off.acquire(g, v);
  off.synchronize();
  const auto metrics = off.metrics();
  const auto& vmm = metrics.vmm;
  // One bind per acquire, plus the prefetch of the next step's first group after the last one.
  const std::uint64_t acquires = static_cast<std::uint64_t>(steps) * off.group_count();
  CHECK(vmm.binds >= acquires);
  CHECK(vmm.binds <= acquires + 1);
  CHECK(vmm.maps >= vmm.binds);
  CHECK(vmm.unmaps >= vmm.binds - 1);
  CHECK(vmm.access_calls == vmm.binds);
  CHECK(vmm.map_ms > 0);
  CHECK(vmm.access_ms > 0);
  CHECK(vmm.unmap_ms > 0);
  CHECK(vmm.host_ms_per_gb(metrics.totals.bytes()) > 0);
  CHECK(vmm.slots == 1);
  // ddo's device bytes: the resident arena plus the window's physical handles.
  CHECK(metrics.device_bytes == metrics.resident_bytes + vmm.physical_bytes());
  CHECK(vmm.physical_bytes() <= w.budget_bytes);
  MESSAGE("map/access/unmap host time " << vmm.host_ms_per_gb(metrics.totals.bytes()) << " ms per GB loaded ("
                                        << vmm.binds << " binds of " << vmm.handle_bytes << "-byte handles)");
}
