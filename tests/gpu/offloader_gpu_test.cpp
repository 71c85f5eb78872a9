// SPDX-License-Identifier: Apache-2.0
// The runtime's correctness tests on a GPU, with real concurrency: the engine's "kernels" are a
// host-function stall followed by device→host copies of every leased byte on the compute stream
// (read at the time compute would read them), compared with the source afterwards. Also: peak
// device memory during a streamed run, sampled with cudaMemGetInfo by a thread.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "copy_kernel.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "gpu_support.hpp"
#include "vmm_support.hpp"
#include "runtime/runtime_fixtures.hpp"

using offloader = ddo::basic_offloader<ddo::linear_transport>;

namespace {

/// Pinned host memory the compute stream copies leased bytes into, checked after a sync.
struct readback {
  std::byte* host = nullptr;
  std::size_t capacity = 0;
  std::size_t used = 0;
  std::vector<std::pair<std::size_t, std::size_t>> items;  // (offset in host, weight)
  explicit readback(std::size_t bytes) : capacity(bytes) {
    DDO_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&host), bytes, cudaHostAllocDefault));
    std::memset(host, 0x3C, bytes);
  }
  ~readback() { DDO_CUDA_TRY_NOTHROW(cudaFreeHost(host)); }
  readback(const readback&) = delete;
  readback& operator=(const readback&) = delete;

  void enqueue(cudaStream_t s, const offloader::lease_type& lease, const ddo_test::synthetic_model& m,
               std::uintptr_t stall_us) {
    if (stall_us > 0) ddo_test::stall_stream(s, stall_us);
    for (std::size_t i = 0; i < lease.size(); ++i) {
      const std::size_t w = lease.weight_index(i);
      const std::size_t n = m.expected[w].size();
      REQUIRE(used + n <= capacity);
      DDO_CUDA_TRY(cudaMemcpyAsync(host + used, lease.data(i), n, cudaMemcpyDeviceToHost, s));
      items.emplace_back(used, w);
      used += n;
    }
  }
  std::size_t mismatches(const ddo_test::synthetic_model& m) const {
    std::size_t bad = 0;
    for (const auto& [off, w] : items)
      if (std::memcmp(host + off, m.expected[w].data(), m.expected[w].size()) != 0) ++bad;
    return bad;
  }
};

std::uint64_t model_bytes(const ddo_test::synthetic_model& m) {
  std::uint64_t b = 0;
  for (const auto& e : m.expected) b += e.size();
  return b;
}

struct cuda_stream {
  cudaStream_t s = nullptr;
  cuda_stream() { DDO_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~cuda_stream() { DDO_CUDA_TRY_NOTHROW(cudaStreamDestroy(s)); }
};

ddo::runtime_options gpu_options() {
  ddo::runtime_options o;
  o.poison_slots = true;
  o.staging_buffer_bytes = 1 * ddo::mib;
  return o;
}

}  // namespace

TEST_SUITE_BEGIN("gpu");

TEST_CASE("linear: in-order steps deliver every byte of every placement") {
  DDO_SKIP_WITHOUT_GPU();
  ddo_test::model_spec spec;
  spec.groups = 8;
  spec.min_bytes = 100000;
  spec.max_bytes = 3 * ddo::mib;
  spec.seed = 201;
  auto m = ddo_test::make_model(spec);
  cuda_stream compute;
  const int steps = 3;
  readback rb(steps * model_bytes(*m));
  {
    offloader off(ddo::linear_transport{}, m->table, m->plan, gpu_options());
    for (int step = 0; step < steps; ++step)
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, compute.s);
        rb.enqueue(compute.s, lease, *m, 300);
      }
    DDO_CUDA_TRY(cudaStreamSynchronize(compute.s));
    const auto metrics = off.metrics(true);
    CHECK(metrics.steps.size() == steps);
    CHECK(metrics.steps.back().misses == 0);
  }
  CHECK(rb.items.size() == steps * m->table.size());
  CHECK(rb.mismatches(*m) == 0);
}

TEST_CASE("linear: random acquisition orders on two streams never return wrong data") {
  DDO_SKIP_WITHOUT_GPU();
  ddo_test::model_spec spec;
  spec.groups = 7;
  spec.max_bytes = 1 * ddo::mib;
  spec.seed = 202;
  auto m = ddo_test::make_model(spec);
  cuda_stream a, b;
  readback rb(200 * model_bytes(*m) / spec.groups + 64 * ddo::mib);
  {
    auto opts = gpu_options();
    opts.slot_count = 3;
    offloader off(ddo::linear_transport{}, m->table, m->plan, opts);
    std::mt19937 rng(202);
    std::vector<offloader::lease_type> held;
    for (int op = 0; op < 200; ++op) {
      if (!held.empty() && (held.size() >= off.slot_count() || rng() % 3 == 0)) {
        held.erase(held.begin() + static_cast<long>(rng() % held.size()));
        continue;
      }
      const std::size_t g = rng() % off.group_count();
      cudaStream_t s = (rng() % 2) ? a.s : b.s;
      try {
        auto lease = off.acquire(g, s);
        rb.enqueue(s, lease, *m, rng() % 300);
        held.push_back(std::move(lease));
      } catch (const ddo::usage_error&) {
        CHECK(!held.empty());
      }
    }
    held.clear();
    DDO_CUDA_TRY(cudaDeviceSynchronize());
  }
  CHECK(rb.items.size() > 0);
  CHECK(rb.mismatches(*m) == 0);
}

TEST_CASE("linear: swap bindings see device addresses during the lease only") {
  DDO_SKIP_WITHOUT_GPU();
  ddo_test::model_spec spec;
  spec.groups = 4;
  spec.seed = 203;
  auto m = ddo_test::make_model(spec);
  cuda_stream compute;
  auto opts = gpu_options();
  opts.strategy = ddo::runtime_strategy::swap;
  std::vector<const void*> engine(m->table.size());
  for (std::size_t w = 0; w < engine.size(); ++w) engine[w] = m->expected[w].data();
  {
    offloader off(ddo::linear_transport{}, m->table, m->plan, opts);
    for (std::size_t w = 0; w < engine.size(); ++w) off.bind(m->table[w].name, engine[w]);
    try {
      auto lease = off.acquire(std::size_t{2}, compute.s);
      cudaPointerAttributes attr{};
      DDO_CUDA_TRY(cudaPointerGetAttributes(&attr, engine[lease.weight_index(0)]));
      CHECK(attr.type == cudaMemoryTypeDevice);
      throw std::runtime_error("engine failure");
    } catch (const std::runtime_error&) {
    }
    for (std::size_t w = 0; w < engine.size(); ++w) CHECK(engine[w] == m->expected[w].data());
    DDO_CUDA_TRY(cudaStreamSynchronize(compute.s));
  }
}

TEST_CASE("linear: peak device memory of a streamed run stays within resident + ring + 64 MiB") {
  DDO_SKIP_WITHOUT_GPU();
  ddo_test::model_spec spec;
  spec.groups = 16;
  spec.weights_per_group = 4;
  spec.min_bytes = 4 * ddo::mib;
  spec.max_bytes = 8 * ddo::mib;
  spec.seed = 204;
  spec.pinned_from_file = false;
  auto m = ddo_test::make_model(spec);
  cuda_stream compute;
  DDO_CUDA_TRY(cudaStreamSynchronize(compute.s));
  ddo::linear_transport t;
  const auto before = ddo::query_device_memory(0);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> min_free{before.free_bytes};
  std::thread sampler([&] {
    while (!stop.load()) {
      std::size_t f = 0, total = 0;
      if (cudaMemGetInfo(&f, &total) == cudaSuccess) {
        std::uint64_t cur = min_free.load();
        while (f < cur && !min_free.compare_exchange_weak(cur, f)) {
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::uint64_t budget = 0;
  {
    auto opts = gpu_options();
    opts.staging_buffer_bytes = 8 * ddo::mib;
    offloader off(t, m->table, m->plan, opts);
    budget = off.metrics().resident_bytes + off.slot_bytes() * off.slot_count() + 64 * ddo::mib;
    for (int step = 0; step < 3; ++step)
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, compute.s);
        ddo_test::stall_stream(compute.s, 500);
      }
    DDO_CUDA_TRY(cudaStreamSynchronize(compute.s));
    CHECK(t.device_bytes_in_use() == off.device_bytes());
  }
  stop = true;
  sampler.join();
  const std::uint64_t peak = before.free_bytes - min_free.load();
  MESSAGE("peak device bytes above start: " << peak << ", allowed " << budget);
  CHECK(peak <= budget);
  CHECK(t.device_bytes_in_use() == 0);
  const auto after = ddo::query_device_memory(0);
  CHECK(after.free_bytes + 2 * ddo::mib >= before.free_bytes);
}

TEST_CASE("linear: teardown returns pinned and device bytes to their start values") {
  DDO_SKIP_WITHOUT_GPU();
  ddo_test::model_spec spec;
  spec.seed = 205;
  auto m = ddo_test::make_model(spec);
  cuda_stream compute;
  ddo::linear_transport t;
  const auto pinned_before = t.pinned_bytes_in_use();
  readback rb(2 * model_bytes(*m));
  {
    offloader off(t, m->table, m->plan, gpu_options());
    CHECK(t.pinned_bytes_in_use() > pinned_before);
    for (int step = 0; step < 2; ++step)
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, compute.s);
        rb.enqueue(compute.s, lease, *m, 0);
      }
    DDO_CUDA_TRY(cudaStreamSynchronize(compute.s));
  }
  CHECK(rb.mismatches(*m) == 0);
  CHECK(t.pinned_bytes_in_use() == pinned_before);
  CHECK(t.device_bytes_in_use() == 0);
}

TEST_CASE("linear: metrics measure copy bandwidth and stalls") {
  DDO_SKIP_WITHOUT_GPU();
  ddo_test::model_spec spec;
  spec.groups = 6;
  spec.weights_per_group = 2;
  spec.min_bytes = 16 * ddo::mib;
  spec.max_bytes = 16 * ddo::mib;
  spec.where = [](std::size_t, std::size_t) { return ddo::placement::pinned_host; };
  spec.pinned_from_file = false;
  auto m = ddo_test::make_model(spec);
  cuda_stream compute;
  auto opts = gpu_options();
  opts.poison_slots = false;
  opts.metrics = true;
  offloader off(ddo::linear_transport{}, m->table, m->plan, opts);
  for (int step = 0; step < 3; ++step)
    for (std::size_t g = 0; g < off.group_count(); ++g) auto lease = off.acquire(g, compute.s);
  DDO_CUDA_TRY(cudaStreamSynchronize(compute.s));
  const auto metrics = off.metrics(true);
  REQUIRE(metrics.totals.timed);
  MESSAGE("achieved " << *metrics.totals.achieved_gbps() << " GB/s, stall "
                      << metrics.totals.stall_ms << " ms, overlap "
                      << *metrics.totals.overlap_ratio());
  CHECK(*metrics.totals.achieved_gbps() > 1.0);
  CHECK(metrics.totals.stall_ms > 0.0);  // nothing to overlap with: the engine waits on copies
}

// --- graph streaming (issue 29; docs/transports.md, "CUDA graphs") ------------------------------

namespace {

/// A captured step (graph and its instance), freed at scope end.
struct captured_graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~captured_graph() {
    if (exec != nullptr) DDO_CUDA_TRY_NOTHROW(cudaGraphExecDestroy(exec));
    if (graph != nullptr) DDO_CUDA_TRY_NOTHROW(cudaGraphDestroy(graph));
  }
};

/// Ends a capture still open when a failure leaves its scope (the graph is discarded): CUDA
/// calls of this thread would fail while it captures in global mode, the offloader's teardown
/// among them.
struct open_capture {
  explicit open_capture(cudaStream_t capturing) : s(capturing) {}
  cudaStream_t s;
  bool open = true;
  void end(cudaGraph_t& graph) {
    open = false;
    DDO_CUDA_TRY(cudaStreamEndCapture(s, &graph));
  }
  ~open_capture() {
    if (!open) return;
    cudaGraph_t discarded = nullptr;
    (void)cudaStreamEndCapture(s, &discarded);
    if (discarded != nullptr) (void)cudaGraphDestroy(discarded);
    (void)cudaGetLastError();
  }
  open_capture(const open_capture&) = delete;
  open_capture& operator=(const open_capture&) = delete;
};

/// The captured "kernel" reading a leased weight: a copy kernel where nvcc built one (the VMM
/// route needs it: copy_kernel.hpp), else a device copy (the linear route's slots are allocated
/// memory, which a memcpy node accepts).
cudaError_t read_weight(std::byte* dst, const std::byte* src, std::size_t n, cudaStream_t s) {
#ifdef DDO_TEST_COPY_KERNEL
  return ddo_test::copy_bytes_on_device(dst, src, n, s);
#else
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s);
#endif
}

/// Why the VMM graph-streaming cases skip: empty when they can run.
std::string vmm_graph_skip_reason() {
  std::string skip = ddo_test::vmm_skip_reason();
#ifndef DDO_TEST_COPY_KERNEL
  if (skip.empty()) skip = "built without nvcc: the captured step needs a copy kernel (copy_kernel.hpp)";
#endif
  return skip;
}

/// The watchdog: a deadlocked stream fails the run (the process exits, since teardown would wait
/// on it too) instead of hanging it.
void finish_or_fail(cudaStream_t s, int seconds, const char* what) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    const cudaError_t status = cudaStreamQuery(s);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) DDO_CUDA_TRY(status);
    if (std::chrono::steady_clock::now() > until) {
      std::fprintf(stderr, "ddo graph streaming: DEADLOCK: %s did not finish within %d s (the "
                           "watchdog ends the process)\n", what, seconds);
      std::fflush(stderr);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

/// Ends the process unless disarmed (destroyed) within @p seconds: a teardown that waits on a
/// deadlocked graph (the VMM route's binder waits for released flags) fails instead of hanging.
class watchdog {
 public:
  watchdog(int seconds, const char* what)
      : thread_([this, seconds, what] {
          std::unique_lock lock(mutex_);
          if (cv_.wait_for(lock, std::chrono::seconds(seconds), [&] { return done_; })) return;
          std::fprintf(stderr, "ddo graph streaming: DEADLOCK: %s did not end within %d s (the "
                       "watchdog ends the process)\n", what, seconds);
          std::fflush(stderr);
          std::_Exit(3);
        }) {}
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: started once the rest exists
};

/// The transport of a graph-streaming run: linear (slots the runtime owns) or the legacy VMM
/// route (stable addresses mapped by ddo's binder on a window of @p slots).
template <class Transport>
Transport graph_transport(const ddo_test::synthetic_model& m);
template <>
ddo::linear_transport graph_transport<ddo::linear_transport>(const ddo_test::synthetic_model&) {
  return ddo::linear_transport{};
}
template <>
ddo::vmm_transport graph_transport<ddo::vmm_transport>(const ddo_test::synthetic_model& m) {
  ddo::vmm_options o;
  o.window.budget_bytes = model_bytes(m) + 64 * ddo::mib;  // the slot count is runtime_options'
  return ddo::vmm_transport(o);
}

/// A step captured once (acquire, a 100 us stall, device copies of every leased weight into an
/// output buffer, the lease drop), replayed @p replays times through launch_graph with the
/// output copied to host after each replay and poisoned again; every weight of every replay is
/// compared with its source. Slots are poisoned before each load and after each release. On the
/// VMM route weight 3 of every group is norm-like (streamed through the slot's side image).
template <class Transport = ddo::linear_transport>
void graph_streaming_run(std::size_t groups, std::size_t slots, int replays, bool teardown_at_once,
                         std::uint32_t seed) {
  constexpr bool vmm = ddo::transport_with_stable_addresses<Transport>;
  CAPTURE(groups);
  CAPTURE(slots);
  CAPTURE(vmm);
  const watchdog dog(120, "a graph-streaming run (replays and teardown)");
  ddo_test::model_spec spec;
  spec.groups = groups;
  spec.seed = seed;
  spec.max_bytes = 48 * 1024;
  spec.where = [](std::size_t g, std::size_t) {
    return g % 3 == 1 ? ddo::placement::gpu_resident : ddo::placement::pinned_host;
  };
  if (vmm) spec.vmm_covered = [](std::size_t, std::size_t i) { return i != 3; };
  auto m = ddo_test::make_model(spec);
  const std::uint64_t total = model_bytes(*m);
  cuda_stream compute;
  std::byte* out = nullptr;
  std::byte* host = nullptr;
  DDO_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&out), total));
  DDO_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&host), total * replays, cudaHostAllocDefault));
  std::memset(host, 0x3C, total * replays);
  std::vector<std::pair<std::size_t, std::size_t>> items;  // (offset in the output, weight)
  {
    auto o = gpu_options();
    o.slot_count = slots;
    o.poison_released_slots = true;
    ddo::basic_offloader<Transport> off(graph_transport<Transport>(*m), m->table, m->plan, o);
    REQUIRE(off.slot_count() == slots);
    captured_graph g;
    DDO_CUDA_TRY(cudaStreamBeginCapture(compute.s, cudaStreamCaptureModeGlobal));
    open_capture capturing{compute.s};  // a failure inside the capture ends it before teardown
    std::size_t used = 0;
    for (std::size_t group = 0; group < off.group_count(); ++group) {
      auto lease = off.acquire(group, compute.s);
      ddo_test::stall_stream(compute.s, 100);
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::size_t w = lease.weight_index(i);
        const std::size_t n = m->expected[w].size();
        DDO_CUDA_TRY(read_weight(out + used, lease.data(i), n, compute.s));
        items.emplace_back(used, w);
        used += n;
      }
    }
    capturing.end(g.graph);
    REQUIRE(used == total);
    REQUIRE(off.graph_mode());
    DDO_CUDA_TRY(cudaGraphInstantiate(&g.exec, g.graph, 0));
    for (int r = 0; r < replays; ++r) {
      off.launch_graph(g.exec, compute.s);
      DDO_CUDA_TRY(cudaMemcpyAsync(host + static_cast<std::size_t>(r) * total, out, total,
                                   cudaMemcpyDeviceToHost, compute.s));
      DDO_CUDA_TRY(cudaMemsetAsync(out, 0x5A, total, compute.s));  // a replay that skips a copy fails
    }
    if (!teardown_at_once) {
      finish_or_fail(compute.s, 60, "the replays");
      const auto metrics = off.metrics();
      CHECK(metrics.totals.group_loads == static_cast<std::uint64_t>(replays) * (groups - groups / 3));
    }
  }  // teardown (right after the last launch when teardown_at_once)
  finish_or_fail(compute.s, 60, "the replays after teardown");
  std::size_t bad = 0;
  for (int r = 0; r < replays; ++r)
    for (const auto& [off_in_out, w] : items)
      if (std::memcmp(host + static_cast<std::size_t>(r) * total + off_in_out, m->expected[w].data(),
                      m->expected[w].size()) != 0)
        ++bad;
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  MESSAGE(std::string(vmm ? "VMM legacy route: " : "linear route: ")
          << replays << " replays of " << groups << " groups over " << slots << " slots (connections: "
          << std::string(connections != nullptr ? connections : "default") << "): "
          << items.size() * replays << " weights checked, " << bad << " mismatches");
  CHECK(bad == 0);
  DDO_CUDA_TRY(cudaFree(out));
  DDO_CUDA_TRY(cudaFreeHost(host));
}

/// Whether this process runs with one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1).
bool one_hardware_queue() {
  const char* c = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  return c != nullptr && std::string(c) == "1";
}

/// On one hardware queue the legacy VMM route refuses graph streaming (its loads follow the
/// launch whose memory waits consume them, so they would queue behind those waits): the refusal
/// names the variable, the capture ends cleanly and the offloader stays eager.
void vmm_refused_on_one_queue() {
  ddo_test::model_spec spec;
  spec.groups = 6;
  spec.seed = 515;
  spec.max_bytes = 48 * 1024;
  spec.where = [](std::size_t, std::size_t) { return ddo::placement::pinned_host; };
  auto m = ddo_test::make_model(spec);
  cuda_stream compute;
  auto o = gpu_options();
  o.slot_count = 2;
  ddo::basic_offloader<ddo::vmm_transport> off(graph_transport<ddo::vmm_transport>(*m), m->table,
                                               m->plan, o);
  DDO_CUDA_TRY(cudaStreamBeginCapture(compute.s, cudaStreamCaptureModeGlobal));
  open_capture capturing{compute.s};
  CHECK_THROWS_WITH_AS((void)off.acquire(std::size_t{0}, compute.s),
                       doctest::Contains("CUDA_DEVICE_MAX_CONNECTIONS=1"), ddo::usage_error);
  captured_graph g;
  capturing.end(g.graph);
  CHECK_FALSE(off.graph_mode());
  MESSAGE("VMM legacy route on one hardware queue: graph streaming refused, naming the variable");
}

}  // namespace

// tools/gpu-check and .gpu-carry run these again with CUDA_DEVICE_MAX_CONNECTIONS=1 (one
// hardware queue): the watchdog turns a deadlock into a failure.
TEST_CASE("linear graph streaming: 100 replays through a ring smaller than the model, every weight right") {
  DDO_SKIP_WITHOUT_GPU();
  graph_streaming_run(10, 3, 100, false, 501);  // 7 streamed over 3 slots: 7 mod 3 = 1
  graph_streaming_run(12, 3, 100, false, 502);  // 8 streamed over 3 slots
  graph_streaming_run(12, 2, 100, false, 503);  // 8 over 2 (a multiple, for contrast)
}

TEST_CASE("linear graph streaming: teardown right after a launch") {
  DDO_SKIP_WITHOUT_GPU();
  graph_streaming_run(10, 3, 3, true, 504);
}

// The legacy VMM route: the kernels read stable addresses; ddo's binder maps each position on
// slot p mod S once the graph's released flag of the slot's previous occupant is set. Whether the
// driver's map/unmap/set-access calls wait for a graph that waits on a memory flag (a deadlock)
// is what the watchdog reports. The captured reads are a kernel's (copy_kernel.hpp says why).
TEST_CASE("VMM legacy graph streaming: 100 replays through a window smaller than the model, every weight right") {
  const std::string skip = vmm_graph_skip_reason();
  if (!skip.empty()) {
    MESSAGE("skipped: " << skip);
    return;
  }
  if (one_hardware_queue()) return vmm_refused_on_one_queue();
  graph_streaming_run<ddo::vmm_transport>(10, 3, 100, false, 511);  // 7 over 3: 7 mod 3 = 1
  graph_streaming_run<ddo::vmm_transport>(12, 3, 100, false, 512);  // 8 over 3
}

TEST_CASE("VMM legacy graph streaming: teardown right after a launch") {
  const std::string skip = vmm_graph_skip_reason();
  if (!skip.empty()) {
    MESSAGE("skipped: " << skip);
    return;
  }
  if (one_hardware_queue()) return vmm_refused_on_one_queue();
  graph_streaming_run<ddo::vmm_transport>(10, 3, 3, true, 514);
}

TEST_SUITE_END();
