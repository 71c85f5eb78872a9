// SPDX-License-Identifier: Apache-2.0
// The transport conformance suite on host_sim, plus host_sim's own policing of the contract.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"
#include "transport_conformance.hpp"

namespace {
struct host_sim_traits {
  using transport_type = ddo::host_sim_transport;
  static std::string skip_reason() { return {}; }
  static transport_type make(std::uint64_t limit) {
    ddo::host_sim_options o;
    if (limit != 0) o.device_capacity_bytes = limit;
    return transport_type(o);
  }
  static void delay(transport_type& t, transport_type::stream_view s, int ms) {
    t.enqueue(s, [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
  }
};
}  // namespace

namespace near_miss {
// host_sim's members without the opt-in tag: nothing models a transport by accident.
struct untagged : ddo::host_sim_transport {
  using transport_category = void;
};
// The tag, but no way to wait on an event.
struct no_wait {
  using transport_category = ddo::transport_tag;
  using stream = ddo::host_sim_transport::stream;
  using stream_view = ddo::host_sim_transport::stream_view;
  using event = ddo::host_sim_transport::event;
};
// The tag and every member, but the stream view is not copyable.
struct move_only_view : ddo::host_sim_transport {
  struct stream_view {
    stream_view() = default;
    stream_view(const stream_view&) = delete;
  };
};
}  // namespace near_miss

static_assert(ddo::transport<ddo::host_sim_transport>);
static_assert(!ddo::transport<near_miss::untagged>);
static_assert(!ddo::transport<near_miss::no_wait>);
static_assert(!ddo::transport<near_miss::move_only_view>);
static_assert(!ddo::transport_with_slot_binding<ddo::host_sim_transport>);
// host_sim binds ddo's threads too: their capture mode (issue 37).
static_assert(ddo::transport_with_thread_binding<ddo::host_sim_transport>);
static_assert(ddo::transport_with_thread_binding<ddo::linear_transport>);

TEST_SUITE_BEGIN("transport");

TEST_CASE("CUDA availability is reported without throwing, with a reason when absent") {
  const auto a = ddo::query_cuda_availability();
  if (a.available) {
    CHECK(a.device_count > 0);
    CHECK(a.reason.empty());
  } else {
    CHECK(a.device_count == 0);
    CHECK(a.reason.find("cudaGetDeviceCount") != std::string::npos);
  }
}


DDO_TRANSPORT_CONFORMANCE(host_sim_traits);

TEST_CASE("host_sim counts a copy from pageable memory as a contract breach") {
  ddo::host_sim_transport t;
  auto s = t.make_stream();
  std::vector<std::byte> pageable(4096, std::byte{7});
  std::byte* dev = t.allocate_device(4096);
  t.copy_to_device(dev, pageable.data(), 4096, t.view(s));
  t.synchronize(t.view(s));
  CHECK(t.pageable_direct_copies() == 1);
  std::byte* pinned = t.allocate_pinned(4096);
  t.copy_to_device(dev, pinned, 4096, t.view(s));
  t.synchronize(t.view(s));
  CHECK(t.pageable_direct_copies() == 1);
  t.free_pinned(pinned, 4096);
  t.free_device(dev, 4096);
}

TEST_CASE("host_sim bandwidth limit slows copies to the configured rate") {
  ddo::host_sim_options o;
  o.bandwidth_bytes_per_second = 100.0 * 1024 * 1024;  // 100 MiB/s: 10 MiB take 100 ms
  ddo::host_sim_transport t(o);
  auto s = t.make_stream();
  const std::size_t n = 10 * ddo::mib;
  std::byte* src = t.allocate_pinned(n);
  std::byte* dev = t.allocate_device(n);
  const auto start = std::chrono::steady_clock::now();
  t.copy_to_device(dev, src, n, t.view(s));
  t.synchronize(t.view(s));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  CHECK(ms >= 90.0);
  t.free_device(dev, n);
  t.free_pinned(src, n);
}

TEST_CASE("host_sim registration can be made to fail, for fallback tests") {
  ddo::host_sim_options o;
  o.registration_limit_bytes = 8192;
  ddo::host_sim_transport t(o);
  alignas(4096) static std::byte buffer[4 * 4096];
  CHECK(t.register_host(buffer, 8192));
  CHECK_FALSE(t.register_host(buffer + 8192, 4096));
  t.unregister_host(buffer);
  o.fail_host_registration = true;
  ddo::host_sim_transport refusing(o);
  CHECK_FALSE(refusing.register_host(buffer, 4096));
}

TEST_CASE("host_sim task failures surface at synchronize") {
  ddo::host_sim_transport t;
  auto s = t.make_stream();
  t.enqueue(t.view(s), [] { throw std::runtime_error("kernel failed"); });
  CHECK_THROWS_WITH_AS(t.synchronize(t.view(s)), "kernel failed", std::runtime_error);
  t.synchronize(t.view(s));  // the error is reported once
}

TEST_CASE("host_sim wait captures the record made before it, not later ones") {
  ddo::host_sim_transport t;
  auto a = t.make_stream();
  auto b = t.make_stream();
  auto e = t.make_event(false);
  std::atomic<int> stage{0};
  t.enqueue(t.view(a), [&] { stage = 1; });
  t.record(e, t.view(a));
  t.wait(t.view(b), e);
  t.enqueue(t.view(b), [&] { CHECK(stage.load() >= 1); });
  // A later record on a blocked stream must not hold back the earlier waiter.
  auto blocker = t.make_stream();
  auto gate = t.make_event(false);
  t.enqueue(t.view(blocker), [] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); });
  t.record(gate, t.view(blocker));
  t.wait(t.view(a), gate);
  t.record(e, t.view(a));
  t.synchronize(t.view(b));
  t.synchronize(t.view(a));
  CHECK(t.ready(e));
}

TEST_CASE("host_sim refuses synchronizing calls during a capture where CUDA's modes do") {
  // Issue 37: each call that CUDA refuses with cudaErrorStreamCaptureUnsupported while a capture
  // is open, on the capturing thread and (global mode) on any other; thread-local mode lets
  // another thread through, relaxed mode any thread, and nothing is refused once it ended.
  ddo::host_sim_transport t;
  auto a = t.make_stream();
  auto b = t.make_stream();
  auto e = t.make_event(true);
  auto f = t.make_event(true);
  std::byte* dev = t.allocate_device(64);
  std::byte* pinned = t.allocate_pinned(64);
  std::vector<std::byte> host(64);
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"cudaEventSynchronize", [&] { t.synchronize(e); }},
      {"cudaStreamSynchronize", [&] { t.synchronize(t.view(b)); }},
      {"cudaEventQuery", [&] { (void)t.ready(e); }},
      {"cudaEventElapsedTime", [&] { (void)t.elapsed_ms(e, f); }},
      {"cudaMalloc", [&] { t.free_device(t.allocate_device(16), 16); }},
      {"cudaFree", [&] { t.free_device(dev, 64); }},
      {"cudaHostAlloc", [&] { t.free_pinned(t.allocate_pinned(16), 16); }},
      {"cudaFreeHost", [&] { t.free_pinned(pinned, 64); }},
      {"cudaHostRegister", [&] {
         if (t.register_host(host.data(), host.size())) t.unregister_host(host.data());
       }},
  };
  t.record(e, t.view(b));
  t.record(f, t.view(b));
  t.begin_capture(t.view(a));
  for (const auto& item : calls) {
    const std::string& name = item.first;
    const std::function<void()>& call = item.second;  // not a binding: the threads capture it
    CAPTURE(name);
    CHECK_THROWS_WITH_AS(call(), doctest::Contains(name.c_str()), ddo::usage_error);
    std::string other_global, other_local;
    std::thread([&] {
      try {
        call();
      } catch (const ddo::usage_error& x) {
        other_global = x.what();
      }
    }).join();
    CHECK(other_global.find("another thread, in global mode") != std::string::npos);
    std::thread([&] {
      ddo::host_sim_transport::bind_thread();  // ddo's threads: thread-local mode
      try {
        call();
      } catch (const ddo::usage_error& x) {
        other_local = x.what();
      }
    }).join();
    CHECK(other_local.empty());
    auto relaxed = ddo::host_sim_transport::relaxed_capture();
    if (name == "cudaFree") dev = t.allocate_device(64);  // the call above freed it
    if (name == "cudaFreeHost") pinned = t.allocate_pinned(64);
  }
  {
    auto relaxed = ddo::host_sim_transport::relaxed_capture();
    t.synchronize(e);  // relaxed: let through on the capturing thread
  }
  CHECK_THROWS_AS(t.synchronize(e), ddo::usage_error);  // the mode is back to global
  (void)t.end_capture(t.view(a));
  for (const auto& item : calls) {
    CAPTURE(item.first);
    if (item.first == "cudaFree" || item.first == "cudaFreeHost") continue;
    CHECK_NOTHROW(item.second());
  }
  t.free_device(dev, 64);
  t.free_pinned(pinned, 64);
  ddo::host_sim_options off;
  off.refuse_unsafe_calls_in_capture = false;
  ddo::host_sim_transport lax(off);
  auto c = lax.make_stream();
  auto g = lax.make_event(false);
  lax.begin_capture(lax.view(c));
  CHECK_NOTHROW(lax.synchronize(g));
  (void)lax.end_capture(lax.view(c));
}

TEST_SUITE_END();
