// SPDX-License-Identifier: Apache-2.0
// Transfer bench: a stream of execution groups through ddo's linear transport (the offloader with
// its ring, prefetch and events, no compute) against raw cudaMemcpyAsync from the same host bytes,
// pinned and pageable, measured in one run on one device. Target: linear pinned >= 0.97 x raw.
//
//   transfer_bench [--groups 16] [--group-mib 128] [--steps 5] [--trials 5] [--slots 3] [--json FILE]
//
// Each figure is the median of --trials timed runs of --steps steps: one run moves ~10 GB in
// ~0.2 s, where the bus's run-to-run spread (a few %) is as large as the effect measured.
//
// Exit 77 (skip) where no CUDA device is usable.
#include <chrono>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "bench_arguments.hpp"
#include "bench_setup.hpp"
#include "ddo/core/atomic_file.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/core/standard_output.hpp"
#include "ddo/memory/host_buffer.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/platform/cuda_device.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/transport/linear.hpp"

namespace {

struct args_t {
  std::size_t groups = 16;
  std::uint64_t group_mib = 128;
  int steps = 5;
  int trials = 5;
  std::size_t slots = 3;
  std::string json;
};

constexpr const char* program = "transfer_bench";

args_t parse(int argc, char** argv) {
  namespace po = boost::program_options;
  args_t a;
  po::options_description desc("options");
  desc.add_options()("groups", po::value<std::string>()->value_name("N"), "groups per step (default 16)")(
      "group-mib", po::value<std::string>()->value_name("M"), "MiB per group (default 128)")(
      "steps", po::value<std::string>()->value_name("S"), "steps per trial (default 5)")(
      "trials", po::value<std::string>()->value_name("T"), "trials, median taken (default 5)")(
      "slots", po::value<std::string>()->value_name("K"), "ring slots (default 3)")(
      "json", po::value<std::string>(&a.json)->value_name("FILE"), "write the results as JSON");
  const auto vm = ddo_bench::parse_or_exit(
      program, argc, argv, desc,
      "[--groups N] [--group-mib M] [--steps S] [--trials T] [--slots K] [--json FILE]");
  a.groups = static_cast<std::size_t>(ddo_bench::number_or(program, vm, "groups", 16, 1, 4096));
  a.group_mib = static_cast<std::uint64_t>(ddo_bench::number_or(program, vm, "group-mib", 128, 1, 65536));
  a.steps = static_cast<int>(ddo_bench::number_or(program, vm, "steps", 5, 1, 100000));
  a.trials = static_cast<int>(ddo_bench::number_or(program, vm, "trials", 5, 1, 1000));
  a.slots = static_cast<std::size_t>(ddo_bench::number_or(program, vm, "slots", 3, 1, 64));
  return a;
}

struct events {
  cudaEvent_t a{}, b{};
  events() {
    DDO_CUDA_TRY(cudaEventCreate(&a));
    DDO_CUDA_TRY(cudaEventCreate(&b));
  }
  ~events() {
    DDO_CUDA_TRY_NOTHROW(cudaEventDestroy(a));
    DDO_CUDA_TRY_NOTHROW(cudaEventDestroy(b));
  }
  double ms() {
    float m = 0;
    DDO_CUDA_TRY(cudaEventSynchronize(b));
    DDO_CUDA_TRY(cudaEventElapsedTime(&m, a, b));
    return m;
  }
};

/// Median GB/s of @p trials timed calls of @p run, each moving @p bytes (after one warm-up call).
template <class Run>
double median_gbps(Run&& run, std::uint64_t bytes, int trials, cudaStream_t s) {
  events ev;
  run();  // warm-up
  std::vector<double> gbps;
  for (int t = 0; t < trials; ++t) {
    DDO_CUDA_TRY(cudaEventRecord(ev.a, s));
    run();
    DDO_CUDA_TRY(cudaEventRecord(ev.b, s));
    gbps.push_back(static_cast<double>(bytes) / (ev.ms() * 1e6));
  }
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

/// Raw baseline: each group one cudaMemcpyAsync into a ring of device slots, one stream.
double raw_gbps(const std::byte* host, std::size_t groups, std::uint64_t group_bytes, int steps,
                int trials, std::byte* slots, std::size_t slot_count, cudaStream_t s) {
  auto run = [&] {
    for (int step = 0; step < steps; ++step)
      for (std::size_t g = 0; g < groups; ++g)
        DDO_CUDA_TRY(cudaMemcpyAsync(slots + (g % slot_count) * group_bytes, host + g * group_bytes,
                                     group_bytes, cudaMemcpyHostToDevice, s));
  };
  return median_gbps(run, groups * group_bytes * static_cast<std::uint64_t>(steps), trials, s);
}

/// ddo: acquire every group in order on the compute stream and drop the lease at once. The
/// offloader comes from the one call (bench_setup.hpp), every weight streamed from @p where.
double ddo_gbps(const ddo::weight_table& table, const std::vector<ddo::execution_group>& groups,
                ddo::placement where, std::size_t slots, std::uint64_t bytes_per_step, int steps,
                int trials, cudaStream_t compute, std::string& note,
                std::size_t staging_threads = 4, bool pin_in_place = false) {
  auto options = ddo_bench::placement_setup(groups, where);
  options.inputs.overrides.emplace_back(ddo::field_id::pin_cpu_workers, std::int64_t{4});
  options.runtime.slot_count = slots;
  options.runtime.pin_in_place = pin_in_place;
  options.runtime.staging_threads = staging_threads;
  options.runtime.staging_buffer_bytes = 32 * ddo::mib;
  auto enabled = ddo_bench::offloader_for(table, options, ddo::linear_transport{}, where);
  auto& off = *enabled.offloader;
  auto run = [&] {
    for (int step = 0; step < steps; ++step)
      for (std::size_t g = 0; g < off.group_count(); ++g) auto lease = off.acquire(g, compute);
  };
  const double gbps =
      median_gbps(run, bytes_per_step * static_cast<std::uint64_t>(steps), trials, compute);
  const auto m = off.metrics(true);
  note = "pin fallback bytes " + std::to_string(m.pin_fallback_bytes);
  return gbps;
}

}  // namespace

int main(int argc, char** argv) {
  const args_t a = parse(argc, argv);
  const auto gpu = ddo::probe_cuda_device(0);
  if (!gpu.available) {
    std::printf("transfer_bench: skipped: %s\n", gpu.reason.c_str());
    return 77;
  }
  try {
    const std::string device = gpu.name;
    const std::uint64_t group_bytes = a.group_mib * ddo::mib;
    const std::uint64_t total = group_bytes * a.groups;
    std::string command;
    command = ddo_bench::command_line(argc, argv);
    std::printf("command: %s\n", command.c_str());
    std::printf("transfer_bench on %s: %zu groups x %llu MiB, %d steps, median of %d trials, %zu slots\n",
                device.c_str(), a.groups, static_cast<unsigned long long>(a.group_mib), a.steps,
                a.trials, a.slots);

    // The engine's weights: page-aligned host memory filled with non-zero bytes.
    ddo::host_buffer host(total);
    {
      auto* w = reinterpret_cast<std::uint64_t*>(host.data());
      std::uint64_t x = 0x9E3779B97F4A7C15ull;
      for (std::uint64_t i = 0; i < total / 8; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w[i] = x;
      }
    }
    cudaStream_t s{};
    DDO_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::byte* slots = nullptr;
    DDO_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&slots), group_bytes * a.slots));

    DDO_CUDA_TRY(cudaHostRegister(host.data(), total, cudaHostRegisterDefault));
    const double raw_pinned = raw_gbps(host.data(), a.groups, group_bytes, a.steps, a.trials, slots, a.slots, s);
    DDO_CUDA_TRY(cudaHostUnregister(host.data()));
    const int pageable_steps = a.steps > 2 ? 2 : a.steps;
    const double raw_pageable =
        raw_gbps(host.data(), a.groups, group_bytes, pageable_steps, 1, slots, a.slots, s);
    DDO_CUDA_TRY(cudaFree(slots));

    // The same bytes as a weight table: 4 weights per group, all pinned, then all pageable.
    ddo::weight_table table;
    std::vector<ddo::execution_group> groups;
    const std::uint64_t weight_bytes = group_bytes / 4;
    for (std::size_t g = 0; g < a.groups; ++g) {
      ddo::execution_group group;
      group.name = "blocks." + std::to_string(g);
      group.is_block = true;
      for (int i = 0; i < 4; ++i) {
        ddo::weight_info w;
        w.name = group.name + ".w" + std::to_string(i);
        w.module_name = group.name;
        w.kind = ddo::module_kind::linear;
        w.type = ddo::dtype::u8;
        w.shape = {static_cast<std::int64_t>(weight_bytes)};
        w.source = ddo::host_source{host.data() + g * group_bytes + i * weight_bytes};
        group.weights.push_back(table.add(w));
      }
      groups.push_back(std::move(group));
    }
    constexpr auto pinned = ddo::placement::pinned_host;
    constexpr auto pageable = ddo::placement::pageable_host;

    std::string note_pinned, note_pageable, note_one, note_in_place;
    const double ddo_pinned =
        ddo_gbps(table, groups, pinned, a.slots, total, a.steps, a.trials, s, note_pinned);
    const double ddo_pageable =
        ddo_gbps(table, groups, pageable, a.slots, total, pageable_steps, 3, s, note_pageable, 8);
    const double ddo_in_place = ddo_gbps(table, groups, pinned, a.slots, total, a.steps, a.trials,
                                         s, note_in_place, 4, true);
    const double ddo_pageable_one =
        ddo_gbps(table, groups, pageable, a.slots, total, pageable_steps, 1, s, note_one, 1);
    DDO_CUDA_TRY(cudaStreamDestroy(s));

    const double ratio = ddo_pinned / raw_pinned;
    const double ratio_pageable = ddo_pageable / raw_pageable;
    std::printf("\n| path | GB/s | ratio |\n|---|---|---|\n");
    std::printf("| raw cudaMemcpyAsync, pinned (registered) | %.2f | 1.000 |\n", raw_pinned);
    std::printf("| ddo linear, pinned groups | %.2f | %.3f of raw pinned |\n", ddo_pinned, ratio);
    std::printf("| ddo linear, pinned in place (4 copies per group) | %.2f | %.3f of raw pinned |\n",
                ddo_in_place, ddo_in_place / raw_pinned);
    std::printf("| raw cudaMemcpyAsync, pageable | %.2f | %.3f of raw pinned |\n", raw_pageable,
                raw_pageable / raw_pinned);
    std::printf("| ddo linear, pageable staged (2 x 32 MiB, 8 copy threads) | %.2f | %.3f of raw pageable |\n",
                ddo_pageable, ratio_pageable);
    std::printf("| ddo linear, pageable staged (2 x 32 MiB, 1 copy thread) | %.2f | %.3f of raw pageable |\n",
                ddo_pageable_one, ddo_pageable_one / raw_pageable);
    std::printf("\nlinear pinned / raw pinned = %.3f (target >= 0.97): %s\n", ratio,
                ratio >= 0.97 ? "PASS" : "MISS");
    std::printf("(%s; %s; in place: %s)\n", note_pinned.c_str(), note_pageable.c_str(),
                note_in_place.c_str());

    if (!a.json.empty()) {
      ddo::json_writer j;
      j.begin_object().member("bench", "transfer_bench").member("device", device);
      j.member("groups", a.groups).member("group_mib", a.group_mib).member("steps", a.steps);
      j.member("slots", a.slots).member("raw_pinned_gbps", raw_pinned);
      j.member("ddo_pinned_gbps", ddo_pinned).member("raw_pageable_gbps", raw_pageable);
      j.member("ddo_pageable_gbps", ddo_pageable).member("ddo_pageable_one_thread_gbps", ddo_pageable_one);
      j.member("ddo_pinned_in_place_gbps", ddo_in_place).key("summary").begin_array();
      j.begin_object().member("metric", "linear pinned / raw pinned").member("value", ratio);
      j.member("unit", "x").member("target", ">= 0.97").member("pass", ratio >= 0.97).end_object();
      j.begin_object().member("metric", "ddo staged pageable / raw pageable");
      j.member("value", ratio_pageable).member("unit", "x").member("target", "").end_object();
      j.end_array().end_object();
      // Written aside and renamed: no partial file on a full disk.
      ddo::write_file_atomically(a.json, j.take() + "\n");
    }
    ddo::flush_standard_output();  // a full disk is a failure, not success
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transfer_bench: %s\n", e.what());
    return 1;
  }
}
