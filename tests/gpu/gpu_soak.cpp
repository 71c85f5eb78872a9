// SPDX-License-Identifier: Apache-2.0
// The GPU soak (issue 13): two offloaders — one on the linear transport, one on the VMM transport
// (linear again where the device has no VMM) — each driven by its own thread on its own streams
// for a given time, in rounds: build the offloader, run in-order steps with prefetch and random
// acquisition orders with several leases held, copy every leased byte back on the lease's stream
// and compare it with the source, tear the offloader down. Between rounds it samples what would
// show a leak — RSS and heap in use (after malloc_trim), device memory in use, threads, open
// files — and at the end it requires that none grew from the first round's level and that no byte
// was wrong. The models and readback buffers live for the whole soak: only offloaders come and go.
//
//   gpu_soak [--seconds N] [--round-seconds R] [--json FILE]
//
// It is its own program (not a meson test) because it runs for minutes: tools/gpu-soak runs it.
// Without a GPU it says why and exits 0, like the GPU suite.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <malloc.h>
#include <memory>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "ddo/core/json_writer.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/vmm.hpp"
#include "gpu_support.hpp"
#include "runtime/runtime_fixtures.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

/// What a leak would show, sampled with every offloader torn down.
struct leak_sample {
  std::uint64_t rss_kib = 0;
  std::uint64_t heap_kib = 0;  ///< malloc'd and not freed (mallinfo2)
  std::uint64_t device_used_mib = 0;
  std::size_t threads = 0;
  std::size_t open_files = 0;
};

std::uint64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::size_t n = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, n, key) == 0) return std::stoull(line.substr(n + 1));
  return 0;
}

std::size_t entries(const char* dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

leak_sample sample() {
  DDO_CUDA_TRY(cudaDeviceSynchronize());  // settle asynchronous frees before reading free memory
  // Give freed heap back to the kernel first: glibc keeps freed chunks (the offloader's per-round
  // buffers, the threads' arenas) mapped, which shows in RSS as steps that are not leaks.
  ::malloc_trim(0);
  const struct mallinfo2 heap = ::mallinfo2();
  std::size_t free = 0, total = 0;
  DDO_CUDA_TRY(cudaMemGetInfo(&free, &total));
  return {status_kib("VmRSS:"), (heap.uordblks + heap.hblkhd) / 1024, (total - free) / ddo::mib,
          entries("/proc/self/task"), entries("/proc/self/fd")};
}

/// One worker's tallies, read by the main thread after the join.
struct worker_result {
  std::string transport;
  std::uint64_t rounds = 0, acquires = 0, weights_checked = 0, bytes_checked = 0, mismatches = 0;
  std::string error;
};

/// Pinned host memory the lease's stream copies leased bytes into; compared after a sync.
class readback {
 public:
  explicit readback(std::size_t bytes) : capacity_(bytes) {
    DDO_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&host_), bytes, cudaHostAllocDefault));
  }
  ~readback() { DDO_CUDA_TRY_NOTHROW(cudaFreeHost(host_)); }
  readback(const readback&) = delete;
  readback& operator=(const readback&) = delete;

  bool fits(std::uint64_t bytes) const { return used_ + bytes <= capacity_; }
  void enqueue(cudaStream_t s, const void* device, std::size_t weight, std::size_t bytes) {
    DDO_CUDA_TRY(cudaMemcpyAsync(host_ + used_, device, bytes, cudaMemcpyDeviceToHost, s));
    items_.emplace_back(used_, weight);
    used_ += bytes;
  }
  /// Compares what was copied (the caller synchronized the streams) and empties the buffer.
  void check(const ddo_test::synthetic_model& m, worker_result& r) {
    for (const auto& [off, w] : items_) {
      ++r.weights_checked;
      r.bytes_checked += m.expected[w].size();
      if (std::memcmp(host_ + off, m.expected[w].data(), m.expected[w].size()) != 0) ++r.mismatches;
    }
    items_.clear();
    used_ = 0;
  }

 private:
  std::byte* host_ = nullptr;
  std::size_t capacity_ = 0, used_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> items_;  // (offset in host_, weight)
};

ddo_test::model_spec soak_spec(std::uint32_t seed) {
  ddo_test::model_spec spec;  // every placement: resident, pinned, pageable, file, pinned-from-file
  spec.groups = 10;
  spec.weights_per_group = 4;
  spec.min_bytes = 64 * 1024;
  spec.max_bytes = 6 * ddo::mib;
  spec.seed = seed;
  return spec;
}

std::uint64_t max_group_bytes(const ddo_test::synthetic_model& m) {
  std::uint64_t best = 0;
  for (const auto& g : m.plan.groups) {
    std::uint64_t b = 0;
    for (const std::size_t w : g.weights) b += m.table[w].bytes;
    best = std::max(best, b);
  }
  return best;
}

ddo::runtime_options soak_options(std::size_t slots) {
  ddo::runtime_options o;
  o.poison_slots = true;  // a slot read before its copy shows as a mismatch, not stale right bytes
  o.staging_buffer_bytes = 2 * ddo::mib;
  o.slot_count = slots;
  return o;
}

/// What a worker keeps for the whole soak, so that only the offloaders come and go between
/// samples: the model (sources, expected bytes, its file) and the readback buffer.
struct worker_state {
  std::unique_ptr<ddo_test::synthetic_model> model;
  readback rb{256 * ddo::mib};
  std::mt19937 rng;
  explicit worker_state(std::uint32_t seed) : model(ddo_test::make_model(soak_spec(seed))), rng(seed) {}
};

/// Runs rounds of offloader<T> until @p deadline; @p make builds the round's transport.
template <class T, class Make>
void run_worker(worker_state& state, clock_type::time_point deadline, std::chrono::seconds round, Make make,
                worker_result& r) {
  try {
    auto& m = state.model;
    auto& rb = state.rb;
    auto& rng = state.rng;
    const std::size_t slots = 3;
    while (clock_type::now() < deadline) {
      T t = make(*m);
      auto a = t.make_stream();
      auto b = t.make_stream();
      const auto va = T::view(a);
      const auto vb = T::view(b);
      const auto sync = [&] {
        t.synchronize(va);
        t.synchronize(vb);
        rb.check(*m, r);
      };
      const auto enqueue = [&](const auto& lease, cudaStream_t s) {
        for (std::size_t i = 0; i < lease.size(); ++i) {
          const std::size_t w = lease.weight_index(i);
          rb.enqueue(s, lease.data(i), w, m->expected[w].size());
        }
      };
      {
        ddo::basic_offloader<T> off(t, m->table, m->plan, soak_options(slots));
        const auto round_end = std::min(deadline, clock_type::now() + round);
        while (clock_type::now() < round_end) {
          // In order, prefetch ahead: the engine's loop.
          for (std::size_t g = 0; g < off.group_count(); ++g) {
            if (!rb.fits(max_group_bytes(*m))) sync();
            auto lease = off.acquire(g, va);
            ddo_test::stall_stream(va.handle, rng() % 200);
            enqueue(lease, va.handle);
            ++r.acquires;
          }
          // Random orders on two streams, up to slots - 1 leases held.
          std::vector<typename ddo::basic_offloader<T>::lease_type> held;
          for (int op = 0; op < 40; ++op) {
            if (!held.empty() && (held.size() + 1 >= slots || rng() % 3 == 0)) {
              held.erase(held.begin() + static_cast<long>(rng() % held.size()));
              continue;
            }
            if (!rb.fits(max_group_bytes(*m))) {
              held.clear();
              sync();
            }
            const auto v = (rng() & 1u) ? va : vb;
            held.push_back(off.acquire(rng() % off.group_count(), v));
            ddo_test::stall_stream(v.handle, rng() % 300);
            enqueue(held.back(), v.handle);
            ++r.acquires;
          }
          held.clear();
        }
        sync();
      }
      ++r.rounds;
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
}

std::string arg_value(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return argv[i + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  // Every option but --help takes a value: step over option and value together.
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::puts("gpu_soak [--seconds N] [--round-seconds R] [--json FILE]\n"
                "Two offloaders (linear and VMM) on their own threads and streams for N seconds "
                "(default 300),\nrebuilt every R seconds (default 30, at most N); every leased byte compared; "
                "RSS, device memory, threads\nand open files sampled between rounds must not grow.");
      return 0;
    }
    if (a != "--seconds" && a != "--round-seconds" && a != "--json") {
      std::fprintf(stderr, "gpu_soak: unknown argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  long seconds = 0, round_seconds = 0;
  try {
    seconds = std::stol(arg_value(argc, argv, "--seconds", "300"));
    round_seconds = std::stol(arg_value(argc, argv, "--round-seconds", "0"));
    if (round_seconds == 0) round_seconds = std::min(seconds, 30L);
  } catch (const std::exception&) {
    seconds = -1;
  }
  if (seconds < 1 || seconds > 86400 || round_seconds < 1 || round_seconds > seconds) {
    std::fprintf(stderr, "gpu_soak: --seconds must be 1..86400 and --round-seconds 1..seconds\n");
    return 2;
  }
  const std::string json = arg_value(argc, argv, "--json", "");
  const std::string skip = ddo_test::gpu_skip_reason();
  if (!skip.empty()) {
    std::printf("gpu_soak: skipped: %s\n", skip.c_str());
    return 0;
  }
  bool have_vmm = true;
  try {
    ddo::detail::cuda_vmm_driver probe(0);
  } catch (const std::exception& e) {
    have_vmm = false;
    std::printf("gpu_soak: no usable VMM (%s): the second offloader is linear too\n", e.what());
  }

  // Let CUDA and the allocators reach their working size before the first sample: one short
  // round of each worker (its own results are checked too).
  const auto round = std::chrono::seconds(round_seconds);
  const auto linear_make = [](const ddo_test::synthetic_model&) { return ddo::linear_transport{}; };
  const auto vmm_make = [](const ddo_test::synthetic_model& m) {
    ddo::vmm_options o;
    std::uint64_t all = 0;
    for (const auto& e : m.expected) all += e.size();
    // Room for every group's handles: the window rotates through the slots' ranges each step.
    o.window.budget_bytes = all + 64 * ddo::mib + 4 * ((max_group_bytes(m) + 2 * ddo::mib - 1) / (2 * ddo::mib)) * 2 * ddo::mib;
    return ddo::vmm_transport(o);
  };
  worker_state state_a(1301), state_b(1302);
  const auto run_both = [&](clock_type::duration length, worker_result& lin, worker_result& second) {
    const auto deadline = clock_type::now() + length;
    std::thread ta([&] { run_worker<ddo::linear_transport>(state_a, deadline, round, linear_make, lin); });
    std::thread tb([&] {
      if (have_vmm)
        run_worker<ddo::vmm_transport>(state_b, deadline, round, vmm_make, second);
      else
        run_worker<ddo::linear_transport>(state_b, deadline, round, linear_make, second);
    });
    ta.join();
    tb.join();
  };
  worker_result lin, second;
  lin.transport = "linear";
  second.transport = have_vmm ? "vmm" : "linear";
  const auto start = clock_type::now();
  run_both(std::chrono::seconds(std::min<long>(round_seconds, 10)), lin, second);
  const leak_sample first = sample();
  std::printf("gpu_soak: warm-up done; RSS %llu KiB, heap in use %llu KiB, device used %llu MiB, threads %zu, "
              "open files %zu\n",
              static_cast<unsigned long long>(first.rss_kib), static_cast<unsigned long long>(first.heap_kib),
              static_cast<unsigned long long>(first.device_used_mib), first.threads, first.open_files);
  std::fflush(stdout);

  leak_sample last = first, peak = first;
  const auto end = start + std::chrono::seconds(seconds);
  while (clock_type::now() < end && lin.error.empty() && second.error.empty()) {
    const auto left = end - clock_type::now();
    run_both(std::min<clock_type::duration>(left, round), lin, second);
    last = sample();
    peak.rss_kib = std::max(peak.rss_kib, last.rss_kib);
    peak.heap_kib = std::max(peak.heap_kib, last.heap_kib);
    peak.device_used_mib = std::max(peak.device_used_mib, last.device_used_mib);
    peak.threads = std::max(peak.threads, last.threads);
    peak.open_files = std::max(peak.open_files, last.open_files);
    const double t = std::chrono::duration<double>(clock_type::now() - start).count();
    std::printf("gpu_soak: %6.0f s  acquires %llu+%llu  checked %.1f GB  mismatches %llu  RSS %llu KiB  "
                "heap %llu KiB  device %llu MiB  threads %zu  files %zu\n",
                t, static_cast<unsigned long long>(lin.acquires), static_cast<unsigned long long>(second.acquires),
                static_cast<double>(lin.bytes_checked + second.bytes_checked) / 1e9,
                static_cast<unsigned long long>(lin.mismatches + second.mismatches),
                static_cast<unsigned long long>(last.rss_kib), static_cast<unsigned long long>(last.heap_kib),
                static_cast<unsigned long long>(last.device_used_mib), last.threads, last.open_files);
    std::fflush(stdout);
  }
  const double elapsed = std::chrono::duration<double>(clock_type::now() - start).count();

  // A leak grows with every round, so the last sample is compared with the warm-up one: the heap
  // in use within 4 MiB, RSS (after the trim; pinned memory counts in it) within 32 MiB, device
  // memory at its peak within 4 MiB, threads and open files exactly back.
  const auto growth = [](std::uint64_t now, std::uint64_t before) {
    return static_cast<std::int64_t>(now) - static_cast<std::int64_t>(before);
  };
  const std::int64_t rss_growth_kib = growth(last.rss_kib, first.rss_kib);
  const std::int64_t heap_growth_kib = growth(last.heap_kib, first.heap_kib);
  const std::int64_t device_growth_mib =
      static_cast<std::int64_t>(peak.device_used_mib) - static_cast<std::int64_t>(first.device_used_mib);
  std::vector<std::string> failures;
  for (const auto* r : {&lin, &second}) {
    if (!r->error.empty()) failures.push_back(r->transport + " worker failed: " + r->error);
    if (r->mismatches != 0) failures.push_back(r->transport + ": " + std::to_string(r->mismatches) + " wrong weights");
    if (r->weights_checked == 0) failures.push_back(r->transport + ": nothing was checked");
  }
  if (rss_growth_kib > 32 * 1024) failures.push_back("RSS grew by " + std::to_string(rss_growth_kib) + " KiB");
  if (heap_growth_kib > 4 * 1024) failures.push_back("heap in use grew by " + std::to_string(heap_growth_kib) + " KiB");
  if (device_growth_mib > 4) failures.push_back("device memory grew by " + std::to_string(device_growth_mib) + " MiB");
  if (last.threads != first.threads) failures.push_back("threads " + std::to_string(first.threads) + " -> " + std::to_string(last.threads));
  if (last.open_files != first.open_files)
    failures.push_back("open files " + std::to_string(first.open_files) + " -> " + std::to_string(last.open_files));

  std::printf("\ngpu_soak summary (%.0f s)\n", elapsed);
  std::printf("| offloader | rounds | acquires | weights checked | GB checked | mismatches |\n|---|---|---|---|---|---|\n");
  for (const auto* r : {&lin, &second})
    std::printf("| %s | %llu | %llu | %llu | %.1f | %llu |\n", r->transport.c_str(),
                static_cast<unsigned long long>(r->rounds), static_cast<unsigned long long>(r->acquires),
                static_cast<unsigned long long>(r->weights_checked), static_cast<double>(r->bytes_checked) / 1e9,
                static_cast<unsigned long long>(r->mismatches));
  std::printf("growth from the warm-up sample to the last: RSS %+lld KiB (peak %+lld), heap in use %+lld KiB (peak "
              "%+lld), device %+lld MiB (peak), threads %zu -> %zu, open files %zu -> %zu\n",
              static_cast<long long>(rss_growth_kib), static_cast<long long>(growth(peak.rss_kib, first.rss_kib)),
              static_cast<long long>(heap_growth_kib), static_cast<long long>(growth(peak.heap_kib, first.heap_kib)),
              static_cast<long long>(device_growth_mib), first.threads,
              last.threads, first.open_files, last.open_files);
  for (const auto& f : failures) std::printf("FAIL: %s\n", f.c_str());
  std::printf("gpu_soak: %s\n", failures.empty() ? "PASS" : "FAIL");

  if (!json.empty()) {
    ddo::json_writer j;
    j.begin_object().member("seconds", elapsed).member("pass", failures.empty());
    for (const auto* r : {&lin, &second}) {
      j.key(r->transport + (r == &lin ? "_a" : "_b")).begin_object().member("rounds", r->rounds);
      j.member("acquires", r->acquires).member("weights_checked", r->weights_checked);
      j.member("bytes_checked", r->bytes_checked).member("mismatches", r->mismatches).end_object();
    }
    j.member("rss_growth_kib", rss_growth_kib).member("heap_growth_kib", heap_growth_kib);
    j.member("device_growth_mib", device_growth_mib);
    j.key("threads").begin_array().value(first.threads).value(last.threads).end_array();
    j.key("open_files").begin_array().value(first.open_files).value(last.open_files).end_array();
    std::ofstream out(json);
    out << j.end_object().take() << "\n";
  }
  return failures.empty() ? 0 : 1;
}
