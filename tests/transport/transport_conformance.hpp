// SPDX-License-Identifier: Apache-2.0
#pragma once
// The transport conformance suite, written once and instantiated for every transport
// (host_sim in tests/transport, linear in tests/gpu). A Traits type supplies:
//   using transport_type;
//   static std::string skip_reason();            // non-empty: print it and skip
//   static transport_type make(std::uint64_t device_limit_bytes);
//   static void delay(transport_type&, stream_view, int milliseconds);  // stalls the stream
// Nothing here knows which transport it drives: that is the point.

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/transport/allocation_ledger.hpp"
#include "ddo/transport/concepts.hpp"

namespace ddo_test {

/// Pinned host bytes freed on scope exit, filled with fresh random bytes.
template <class T>
struct pinned_bytes {
  T* t;
  std::byte* p;
  std::size_t n;
  pinned_bytes(T& tr, std::size_t bytes, std::uint32_t seed) : t(&tr), p(tr.allocate_pinned(bytes)), n(bytes) {
    std::mt19937 rng(seed);
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>(rng() & 0xff);
  }
  void fill(int value) { std::memset(p, value, n); }
  ~pinned_bytes() { t->free_pinned(p, n); }
  pinned_bytes(const pinned_bytes&) = delete;
  pinned_bytes& operator=(const pinned_bytes&) = delete;
};

template <class T>
struct device_bytes {
  T* t;
  std::byte* p;
  std::size_t n;
  device_bytes(T& tr, std::size_t bytes) : t(&tr), p(tr.allocate_device(bytes)), n(bytes) {}
  ~device_bytes() { t->free_device(p, n); }
  device_bytes(const device_bytes&) = delete;
  device_bytes& operator=(const device_bytes&) = delete;
};

inline bool same_bytes(const std::byte* a, const std::byte* b, std::size_t n) {
  return std::memcmp(a, b, n) == 0;
}

}  // namespace ddo_test

#define DDO_SKIP_UNLESS_AVAILABLE(Traits)            \
  do {                                               \
    const std::string ddo_skip_ = Traits::skip_reason(); \
    if (!ddo_skip_.empty()) {                        \
      MESSAGE("skipped: " << ddo_skip_);             \
      return;                                        \
    }                                                \
  } while (0)

TEST_CASE_TEMPLATE_DEFINE("transport conformance: a copy lands intact and reads back", Traits,
                          transport_copy_roundtrip) {
  DDO_SKIP_UNLESS_AVAILABLE(Traits);
  using namespace ddo_test;
  auto t = Traits::make(0);
  static_assert(ddo::transport<typename Traits::transport_type>);
  auto s = t.make_stream();
  auto v = decltype(t)::view(s);
  const std::size_t n = 3 * ddo::mib + 123;
  pinned_bytes src(t, n, 11);
  pinned_bytes back(t, n, 12);
  device_bytes dev(t, n);
  t.fill_device(dev.p, 0xA5, n, v);
  t.copy_to_device(dev.p, src.p, n, v);
  t.copy_to_host(back.p, dev.p, n, v);
  t.synchronize(v);
  CHECK(same_bytes(src.p, back.p, n));
}

TEST_CASE_TEMPLATE_DEFINE("transport conformance: work on one stream runs in order", Traits,
                          transport_stream_order) {
  DDO_SKIP_UNLESS_AVAILABLE(Traits);
  using namespace ddo_test;
  auto t = Traits::make(0);
  auto s = t.make_stream();
  auto v = decltype(t)::view(s);
  const std::size_t n = 1 * ddo::mib;
  pinned_bytes a(t, n, 1), b(t, n, 2), out(t, n, 3);
  device_bytes dev(t, n);
  // Later copies overwrite earlier ones: the last writer wins only if order is kept.
  Traits::delay(t, v, 20);
  t.copy_to_device(dev.p, a.p, n, v);
  t.copy_to_device(dev.p, b.p, n, v);
  t.copy_to_host(out.p, dev.p, n, v);
  t.synchronize(v);
  CHECK(same_bytes(out.p, b.p, n));
}

TEST_CASE_TEMPLATE_DEFINE("transport conformance: an event orders work across streams", Traits,
                          transport_event_order) {
  DDO_SKIP_UNLESS_AVAILABLE(Traits);
  using namespace ddo_test;
  auto t = Traits::make(0);
  auto producer = t.make_stream();
  auto consumer = t.make_stream();
  auto pv = decltype(t)::view(producer);
  auto cv = decltype(t)::view(consumer);
  const std::size_t n = 2 * ddo::mib;
  pinned_bytes src(t, n, 21), out(t, n, 22);
  device_bytes dev(t, n);
  t.fill_device(dev.p, 0x5A, n, pv);
  t.synchronize(pv);
  auto ready = t.make_event(false);
  Traits::delay(t, pv, 40);  // the copy is late: the consumer must wait for it
  t.copy_to_device(dev.p, src.p, n, pv);
  t.record(ready, pv);
  t.wait(cv, ready);
  t.copy_to_host(out.p, dev.p, n, cv);
  t.synchronize(cv);
  CHECK(same_bytes(out.p, src.p, n));
  CHECK(t.ready(ready));
}

TEST_CASE_TEMPLATE_DEFINE(
    "transport conformance: a slot is overwritten only after its consumer's release event",
    Traits, transport_slot_reuse) {
  DDO_SKIP_UNLESS_AVAILABLE(Traits);
  using namespace ddo_test;
  auto t = Traits::make(0);
  auto copy = t.make_stream();
  auto compute = t.make_stream();
  auto cp = decltype(t)::view(copy);
  auto co = decltype(t)::view(compute);
  const std::size_t n = 4 * ddo::mib;
  pinned_bytes first(t, n, 31), second(t, n, 32), seen(t, n, 33), final_bytes(t, n, 34);
  device_bytes slot(t, n);
  auto ready = t.make_event(false);
  auto release = t.make_event(false);
  t.copy_to_device(slot.p, first.p, n, cp);
  t.record(ready, cp);
  // The consumer reads the slot late (after a stall); its release event follows the read.
  t.wait(co, ready);
  Traits::delay(t, co, 40);
  t.copy_to_host(seen.p, slot.p, n, co);
  t.record(release, co);
  // The next occupant's copy waits for the release event, recorded before this wait.
  t.wait(cp, release);
  t.copy_to_device(slot.p, second.p, n, cp);
  t.record(ready, cp);
  t.wait(co, ready);
  t.copy_to_host(final_bytes.p, slot.p, n, co);
  t.synchronize(co);
  t.synchronize(cp);
  CHECK(same_bytes(seen.p, first.p, n));
  CHECK(same_bytes(final_bytes.p, second.p, n));
}

TEST_CASE_TEMPLATE_DEFINE("transport conformance: waiting on a never-recorded event is a no-op",
                          Traits, transport_unrecorded_event) {
  DDO_SKIP_UNLESS_AVAILABLE(Traits);
  auto t = Traits::make(0);
  auto s = t.make_stream();
  auto v = decltype(t)::view(s);
  auto e = t.make_event(false);
  CHECK(t.ready(e));
  t.wait(v, e);
  t.synchronize(v);
  t.synchronize(e);
  CHECK(t.ready(e));
}

TEST_CASE_TEMPLATE_DEFINE("transport conformance: timing events measure a stall", Traits,
                          transport_timing) {
  DDO_SKIP_UNLESS_AVAILABLE(Traits);
  auto t = Traits::make(0);
  auto s = t.make_stream();
  auto v = decltype(t)::view(s);
  auto a = t.make_event(true);
  auto b = t.make_event(true);
  t.record(a, v);
  Traits::delay(t, v, 30);
  t.record(b, v);
  t.synchronize(b);
  CHECK(t.ready(b));
  const double ms = t.elapsed_ms(a, b);
  CHECK(ms >= 25.0);
  CHECK(ms < 5000.0);
}

TEST_CASE_TEMPLATE_DEFINE(
    "transport conformance: a device budget is hard and the refusal names the numbers", Traits,
    transport_budget) {
  DDO_SKIP_UNLESS_AVAILABLE(Traits);
  auto t = Traits::make(8 * ddo::mib);
  const auto before = t.device_bytes_in_use();
  std::byte* p = t.allocate_device(6 * ddo::mib);
  try {
    (void)t.allocate_device(3 * ddo::mib);
    FAIL("allocation beyond the limit succeeded");
  } catch (const ddo::out_of_memory& e) {
    CHECK(e.tier() == ddo::memory_tier::device);
    CHECK(e.requested_bytes() == 3 * ddo::mib);
    CHECK(e.available_bytes() <= 2 * ddo::mib);
    CHECK(std::string(e.what()).find(std::to_string(3 * ddo::mib)) != std::string::npos);
  }
  t.free_device(p, 6 * ddo::mib);
  CHECK(t.device_bytes_in_use() == before);
  CHECK(t.device_memory().total_bytes <= 8 * ddo::mib);
}

TEST_CASE_TEMPLATE_DEFINE("transport conformance: misuse is a usage_error, not a crash", Traits,
                          transport_errors) {
  DDO_SKIP_UNLESS_AVAILABLE(Traits);
  using namespace ddo_test;
  auto t = Traits::make(0);
  auto s = t.make_stream();
  auto v = decltype(t)::view(s);
  pinned_bytes src(t, 2 * ddo::mib, 41);
  device_bytes dev(t, ddo::mib);
  if constexpr (ddo::ledger_checks_copies) {  // release builds skip the per-copy lookup
    CHECK_THROWS_AS(t.copy_to_device(dev.p, src.p, 2 * ddo::mib, v), ddo::usage_error);
    CHECK_THROWS_AS(t.copy_to_device(dev.p + 512, src.p, ddo::mib, v), ddo::usage_error);
    CHECK_THROWS_AS(t.copy_to_host(src.p, dev.p, 2 * ddo::mib, v), ddo::usage_error);
  }
  std::vector<std::byte> not_device(64);
  CHECK_THROWS_AS(t.free_device(not_device.data(), 64), ddo::usage_error);
  CHECK_THROWS_AS(t.free_device(dev.p, 17), ddo::usage_error);
  CHECK_THROWS_AS((void)t.allocate_device(0), ddo::usage_error);
  CHECK_THROWS_AS(t.unregister_host(not_device.data()), ddo::usage_error);
  t.synchronize(v);
}

TEST_CASE_TEMPLATE_DEFINE(
    "transport conformance: registering host memory is counted, refused twice, and undone",
    Traits, transport_register) {
  DDO_SKIP_UNLESS_AVAILABLE(Traits);
  using namespace ddo_test;
  auto t = Traits::make(0);
  auto s = t.make_stream();
  auto v = decltype(t)::view(s);
  const std::size_t n = 8 * 4096;
  auto* host = static_cast<std::byte*>(::operator new(n, std::align_val_t{4096}));
  std::mt19937 rng(51);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<std::byte>(rng() & 0xff);
  const auto pinned_before = t.pinned_bytes_in_use();
  REQUIRE(t.register_host(host, n));
  CHECK(t.pinned_bytes_in_use() == pinned_before + n);
  CHECK_FALSE(t.register_host(host, n));
  {
    device_bytes dev(t, n);
    pinned_bytes back(t, n, 52);
    t.copy_to_device(dev.p, host, n, v);
    t.copy_to_host(back.p, dev.p, n, v);
    t.synchronize(v);
    CHECK(same_bytes(back.p, host, n));
  }
  t.unregister_host(host);
  CHECK(t.pinned_bytes_in_use() == pinned_before);
  ::operator delete(host, std::align_val_t{4096});
}

/// Instantiates every conformance case for the given traits types.
#define DDO_TRANSPORT_CONFORMANCE(...)                                      \
  TEST_CASE_TEMPLATE_INVOKE(transport_copy_roundtrip, __VA_ARGS__);         \
  TEST_CASE_TEMPLATE_INVOKE(transport_stream_order, __VA_ARGS__);           \
  TEST_CASE_TEMPLATE_INVOKE(transport_event_order, __VA_ARGS__);            \
  TEST_CASE_TEMPLATE_INVOKE(transport_slot_reuse, __VA_ARGS__);             \
  TEST_CASE_TEMPLATE_INVOKE(transport_unrecorded_event, __VA_ARGS__);       \
  TEST_CASE_TEMPLATE_INVOKE(transport_timing, __VA_ARGS__);                 \
  TEST_CASE_TEMPLATE_INVOKE(transport_budget, __VA_ARGS__);                 \
  TEST_CASE_TEMPLATE_INVOKE(transport_errors, __VA_ARGS__);                 \
  TEST_CASE_TEMPLATE_INVOKE(transport_register, __VA_ARGS__)
