// SPDX-License-Identifier: Apache-2.0
// host_sim's VMM mode: the VMM conformance suite (vmm_conformance.hpp) on the simulated driver,
// plus the simulated driver's own ordering rules.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "ddo/model/file_fault_hook.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/host_sim_vmm.hpp"
#include "vmm_conformance.hpp"

namespace {

struct host_sim_vmm_traits {
  using transport_type = ddo::host_sim_vmm_transport;
  static std::string skip_reason() { return {}; }
  static transport_type make(const ddo::vmm_window_options& w) {
    ddo::host_sim_vmm_options o;
    o.window = w;
    return transport_type(o);
  }
  static void delay(transport_type& t, transport_type::stream_view s, int microseconds) {
    t.upstream().enqueue(
        s, [us = microseconds] { std::this_thread::sleep_for(std::chrono::microseconds(us)); });
  }
  static std::size_t cycles() { return 2000; }
  static std::uint64_t device_used(transport_type& t) { return t.ledger().in_use(ddo::ledger_kind::device); }
  static std::uint64_t tolerance() { return 0; }
  static std::size_t live_handles(transport_type& t) { return t.live_handles(); }
  static std::size_t live_mappings(transport_type& t) { return t.live_mappings() + t.live_reservations(); }
};

}  // namespace

TEST_SUITE_BEGIN("transport");

TEST_CASE_TEMPLATE_INVOKE(vmm_prefetch_readback, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_random_orders, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_compute_only, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_leak_cycles, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_setup_failure, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_refusals, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_uncovered_side_image, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_poison_released, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_not_ready, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_staging_from_plan, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_metrics, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_native_readback, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_native_random_orders, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_native_setup_failure, host_sim_vmm_traits);
TEST_CASE_TEMPLATE_INVOKE(vmm_native_refusals, host_sim_vmm_traits);

TEST_CASE("host_sim vmm: the simulated driver enforces the mapping order") {
  ddo::host_sim_vmm_transport t;
  auto& d = t.driver();
  const std::uint64_t g = d.granularity();
  std::byte* base = nullptr;
  REQUIRE(d.reserve(&base, 4 * g, g) == 0);
  std::uint64_t h1 = 0, h2 = 0;
  REQUIRE(d.create(&h1, g) == 0);
  REQUIRE(d.create(&h2, g) == 0);
  CHECK(t.ledger().in_use(ddo::ledger_kind::device) == 2 * g);
  REQUIRE(d.map(base, g, h1) == 0);
  // A handle still mapped (its range not unmapped) cannot back another range.
  CHECK_THROWS_AS((void)d.map(base + g, g, h1), ddo::usage_error);
  // A mapped range cannot be mapped over.
  CHECK_THROWS_AS((void)d.map(base, g, h2), ddo::usage_error);
  // Access needs the whole range mapped.
  CHECK_THROWS_AS((void)d.set_access(base, 2 * g), ddo::usage_error);
  CHECK_FALSE(d.accessible(base, g));
  REQUIRE(d.set_access(base, g) == 0);
  CHECK(d.accessible(base, g));
  std::memset(base, 0x5A, g);
  // A mapped handle cannot be released; a reservation with mappings cannot be freed.
  CHECK_THROWS_AS((void)d.release(h1, g), ddo::usage_error);
  CHECK_THROWS_AS((void)d.free_reservation(base, 4 * g), ddo::usage_error);
  // Unmapping is by whole mapping.
  CHECK_THROWS_AS((void)d.unmap(base, g / 2), ddo::usage_error);
  REQUIRE(d.unmap(base, g) == 0);
  CHECK_FALSE(d.accessible(base, g));
  // The bytes live in the handle: mapped elsewhere, they are still there.
  REQUIRE(d.map(base + 2 * g, g, h1) == 0);
  REQUIRE(d.set_access(base + 2 * g, g) == 0);
  CHECK(static_cast<unsigned char>(base[2 * g + 17]) == 0x5A);
  REQUIRE(d.unmap(base + 2 * g, g) == 0);
  // Outside a reservation, off the granularity.
  CHECK_THROWS_AS((void)d.map(base + 8 * g, g, h2), ddo::usage_error);
  CHECK_THROWS_AS((void)d.map(base + 4096, g, h2), ddo::usage_error);
  REQUIRE(d.release(h1, g) == 0);
  REQUIRE(d.release(h2, g) == 0);
  REQUIRE(d.free_reservation(base, 4 * g) == 0);
  CHECK(t.ledger().in_use(ddo::ledger_kind::device) == 0);
  CHECK(t.live_handles() == 0);
  CHECK(t.live_reservations() == 0);
}

TEST_CASE("host_sim vmm: the binder maps the next group while the current one is still filling") {
  // Only group 1 reads the model file, and its reads wait at a gate: the staging worker is held
  // inside group 1's fill. The groups queued behind it (prefetch) must be mapped meanwhile —
  // the binder's job; with the bind on the worker's own thread they would wait for the fill.
  struct gate final : ddo::file_fault_hook {
    std::mutex m;
    std::condition_variable cv;
    bool open = false;
    ddo::file_read_fault before_read(const std::string&, std::uint64_t, std::uint64_t) override {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return open; });
      return {};
    }
    void release() {
      {
        std::lock_guard lock(m);
        open = true;
      }
      cv.notify_all();
    }
  } g;
  ddo_test::model_spec spec;
  spec.groups = 5;
  spec.min_bytes = 20000;
  spec.max_bytes = 60000;
  spec.seed = 711;
  spec.pinned_from_file = false;
  spec.where = [](std::size_t group, std::size_t) {
    return group == 1 ? ddo::placement::file : ddo::placement::pinned_host;
  };
  auto m = ddo_test::make_model(spec);
  ddo::host_sim_vmm_options o;
  o.window.budget_bytes = 256 * ddo::mib;
  ddo::host_sim_vmm_transport t(o);
  auto options = ddo_vmm_test::vmm_runtime_options(4);
  options.file_faults = &g;
  options.prefetch_depth = 3;
  bool mapped_ahead = false;
  {
    ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, m->plan, options);
    auto compute = t.make_stream();
    const auto v = ddo::host_sim_vmm_transport::view(compute);
    {
      auto lease = off.acquire(0, v);  // group 0 (pinned); prefetches 1 (gated), 2 and 3
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (std::chrono::steady_clock::now() < until && !mapped_ahead) {
        mapped_ahead = t.vmm_stats().binds >= 4;  // groups 0, 1, 2 and 3
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      g.release();
    }
    for (std::size_t k = 1; k < off.group_count(); ++k) auto lease = off.acquire(k, v);
    t.synchronize(v);
  }
  CHECK(mapped_ahead);
}

TEST_CASE("host_sim vmm: side images and the window go at release_device and come back at restore_device") {
  // A pipeline's phase switch on a model with uncovered weights (position 2 of every group,
  // norm-like): everything ddo holds on the device goes, then comes back with the same stable
  // addresses and the right bytes in the side images.
  auto spec = ddo_vmm_test::vmm_spec(712, 5, 200000);
  spec.vmm_covered = [](std::size_t, std::size_t i) { return i != 2; };
  auto m = ddo_test::make_model(spec);
  ddo::host_sim_vmm_options o;
  o.window.budget_bytes = 64 * ddo::mib;
  ddo::host_sim_vmm_transport t(o);
  const auto device_in_use = [&] { return t.ledger().in_use(ddo::ledger_kind::device); };
  ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, m->plan, ddo_vmm_test::vmm_runtime_options(3));
  std::vector<std::byte*> stable(m->table.size(), nullptr);
  for (std::size_t w = 0; w < m->table.size(); ++w)
    if (m->table[w].shape.size() == 2 && m->plan.decisions[w].where != ddo::placement::gpu_resident)
      stable[w] = off.stable_data(w);
  auto compute = t.make_stream();
  const auto v = ddo::host_sim_vmm_transport::view(compute);
  // One step, every leased byte read back (vmm_conformance.hpp's readback).
  const auto step_mismatches = [&] {
    ddo_vmm_test::readback<ddo::host_sim_vmm_transport> rb(t, ddo_vmm_test::model_bytes(*m) + 1024);
    off.begin_step();
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, v);
      for (std::size_t i = 0; i < lease.size(); ++i)
        if (stable[lease.weight_index(i)] != nullptr) CHECK(lease.data(i) == stable[lease.weight_index(i)]);
      rb.enqueue(v, lease, *m);
    }
    t.synchronize(v);
    return rb.mismatches(*m);
  };
  CHECK(step_mismatches() == 0);
  REQUIRE(off.metrics().device_bytes > t.vmm_physical_bytes());  // side images beside the handles
  off.release_device();
  CHECK(device_in_use() == 0);
  CHECK(t.live_handles() == 0);
  CHECK(t.live_mappings() + t.live_reservations() == 0);
  off.restore_device();
  CHECK(off.metrics().device_bytes > t.vmm_physical_bytes());
  for (std::size_t w = 0; w < m->table.size(); ++w)
    if (stable[w] != nullptr) CHECK(off.stable_data(w) != nullptr);
  // Addresses may differ after a restore (a new reservation): the leases are checked against
  // what stable_data says now.
  for (std::size_t w = 0; w < m->table.size(); ++w)
    if (stable[w] != nullptr) stable[w] = off.stable_data(w);
  CHECK(step_mismatches() == 0);
  CHECK(step_mismatches() == 0);
}

TEST_CASE("host_sim vmm: physical handles count against the simulated device capacity") {
  ddo::host_sim_vmm_options o;
  o.device.device_capacity_bytes = 3 * o.granularity;
  ddo::host_sim_vmm_transport t(o);
  auto& d = t.driver();
  std::uint64_t h[4] = {};
  for (int i = 0; i < 3; ++i) REQUIRE(d.create(&h[i], o.granularity) == 0);
  CHECK(d.create(&h[3], o.granularity) == 2);  // CUDA_ERROR_OUT_OF_MEMORY
  for (int i = 0; i < 3; ++i) REQUIRE(d.release(h[i], o.granularity) == 0);
}

TEST_CASE("host_sim vmm: a device without VMM support is refused clearly") {
  ddo::host_sim_vmm_options o;
  o.vmm_supported = false;
  CHECK_THROWS_WITH_AS((void)ddo::host_sim_vmm_transport{o}, doctest::Contains("no virtual-memory-management"),
                       ddo::usage_error);
}

TEST_CASE("host_sim vmm: a copy into an unmapped part of the reservation is refused") {
  auto m = ddo_test::make_model(ddo_vmm_test::vmm_spec(310, 4, 100000));
  ddo::host_sim_vmm_options o;
  o.window.budget_bytes = ddo_vmm_test::roomy_budget(*m, ddo::mib);
  ddo::host_sim_vmm_transport t(o);
  ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, m->plan, ddo_vmm_test::vmm_runtime_options(1));
  auto s = t.make_stream();
  const auto v = ddo::host_sim_vmm_transport::view(s);
  std::size_t streamed_w = m->table.size();
  for (std::size_t w = 0; w < m->table.size() && streamed_w == m->table.size(); ++w)
    if (m->plan.decisions[w].where != ddo::placement::gpu_resident) streamed_w = w;
  REQUIRE(streamed_w < m->table.size());
  std::byte* p = off.stable_data(streamed_w);
  std::vector<std::byte> host(16);
  // Before any acquire nothing of the window is mapped (setup warmed and unmapped every range).
  CHECK_THROWS_AS(t.copy_to_host(host.data(), p, host.size(), v), ddo::usage_error);
}

TEST_CASE("staging buffers: a setting smaller than a group's staged span caps them, bytes still right") {
  // Any transport (here host_sim's linear mode): the setting is a cap; a larger span is chunked.
  auto spec = ddo_vmm_test::vmm_spec(322, 4, 200000);
  spec.pinned_from_file = false;
  spec.where = [](std::size_t, std::size_t i) {
    return i % 2 == 0 ? ddo::placement::pageable_host : ddo::placement::pinned_host;
  };
  auto m = ddo_test::make_model(spec);
  ddo::host_sim_transport t;
  auto compute = t.make_stream();
  const auto v = ddo::host_sim_transport::view(compute);
  ddo_vmm_test::readback<ddo::host_sim_transport> rb(t, 2 * ddo_vmm_test::model_bytes(*m) + 1024);
  {
    auto o = ddo_vmm_test::vmm_runtime_options(2);
    o.staging_buffer_bytes = 8192;
    ddo::basic_offloader<ddo::host_sim_transport> off(t, m->table, m->plan, o);
    CHECK(off.metrics().staging_bytes == 2 * 8192);
    for (int step = 0; step < 2; ++step)
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, v);
        rb.enqueue(v, lease, *m);
      }
    t.synchronize(v);
    CHECK(off.metrics().totals.bytes(ddo::transfer_source::pageable_staged) > 0);
  }
  CHECK(rb.mismatches(*m) == 0);
  CHECK(t.pageable_direct_copies() == 0);
}

TEST_SUITE_END();
