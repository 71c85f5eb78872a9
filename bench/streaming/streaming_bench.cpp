// SPDX-License-Identifier: Apache-2.0
// The streaming benchmark: a synthetic Flux-sized transformer (24 blocks, hidden 3072, MLP 12288,
// bf16, 16 tensors per block, ~5.4 GB) run step after step while its weights stream from host
// memory, at an image-sized (copy-bound) and a video-sized (compute-bound) token count.
//
// Every figure is a ratio measured in this run: a variant's step time over
//   bound = max(C, W / B)
// where C is the step time with every weight resident, W the bytes the variant streams per step
// and B the raw pinned host→device bandwidth measured here — pageable and file variants too.
// Host memory per variant: the peak RSS above the variant's start (VmHWM reset through
// /proc/self/clear_refs when it starts), PSS, and the largest growth of MemTotal − MemAvailable
// sampled after setup and after the steps. The file route's setup is compared with a plain
// parallel pread of the same file, with the same threads, in the same run.
//
// Variants: everything resident (C); a hand-written 3-slot ring (one pinned buffer per block, one
// copy per block, event ordering only: the bar ddo is judged against); naive synchronous copy then
// compute (pageable and pinned sources); ddo's linear transport with zero, 25% and 50% of the
// weights resident (the planner choosing which blocks under a resident budget) and with pageable
// sources staged through pinned buffers; the same model read from a file (written once beside the
// bench, page cache warm): pinned blocks packed by reads (ddo_file_pinned) and nothing pinned,
// file pieces staged by parallel reads (ddo_file_pageable); ddo's VMM transport (execution_mode vmm_runtime: stable
// addresses, a mapped budget of the resident set plus a window of 3 groups' handles) with zero,
// 25% and 50% resident, judged against the same pinned bound; the native VMM route
// (vmm_fast_runtime) from pageable sources through its registered windows, judged against the
// pinned bound too.
//
// Output: a Markdown table on stdout and, with --json FILE, the same numbers as JSON.
// Exit status: 0 ok, 1 failure, 77 no GPU (skipped).

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bench_arguments.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/atomic_file.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/standard_output.hpp"
#include "ddo/core/units.hpp"
#include "ddo/memory/process_memory.hpp"
#include "ddo/memory/system_probe.hpp"
#include "ddo/model/module_kind_inference.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/planner.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/linear.hpp"
#include "ddo/transport/vmm.hpp"
#include "runner/device_memory_sampler.hpp"
#include "runner/synthetic_forward.hpp"
#include "streaming_report.hpp"

namespace {

using ddo::bench::bandwidths;
using ddo::bench::median;
using ddo::bench::token_run;
using ddo::bench::variant_result;
using ddo::runner::gpu_synthetic_forward;


// ---------------------------------------------------------------------------------------------
// Options

struct options {
  int blocks = 24;
  std::int64_t hidden = 3072;
  std::int64_t mlp = 12288;
  std::vector<std::int64_t> tokens = {4608, 32768};
  int steps = 7;   // measured steps (median taken)
  int warmup = 2;  // steps run before measuring
  std::string json_path;
  std::string only;  // comma-separated variant names to run (empty: all)
  unsigned threads = 0;
  std::string file_dir;  // where the model file of the file variants is written
  std::int64_t native_staging_mib = 1280;  // the native variant's vmm_staging_buffer_gb, in MiB
  std::string command;
};

constexpr const char* program = "streaming_bench";

options parse_options(int argc, char** argv) {
  namespace po = boost::program_options;
  options opt;
  opt.command = ddo_bench::command_line(argc, argv);
  po::options_description desc("options");
  desc.add_options()("blocks", po::value<std::string>()->value_name("N"), "transformer blocks (default 24)")(
      "hidden", po::value<std::string>()->value_name("H"), "hidden size, at least 128 (default 3072)")(
      "mlp", po::value<std::string>()->value_name("M"), "MLP width (default 12288)")(
      "tokens", po::value<std::string>()->value_name("T[,T...]"),
      "activation rows per GEMM, one run each (default 4608,32768)")(
      "steps", po::value<std::string>()->value_name("N"), "measured steps, median taken (default 7)")(
      "warmup", po::value<std::string>()->value_name("N"), "steps run before measuring (default 2)")(
      "only", po::value<std::string>(&opt.only)->value_name("NAME[,NAME...]"),
      "variants to run (default: all)")(
      "json", po::value<std::string>(&opt.json_path)->value_name("FILE"), "write the results as JSON")(
      "threads", po::value<std::string>()->value_name("N"),
      "pinning threads (default: the hardware threads)")(
      "file-dir", po::value<std::string>(&opt.file_dir)->value_name("DIR"),
      "directory for the file variants' model file, removed at exit (default: the bench's own "
      "directory, i.e. the build directory: a real disk, not a tmpfs)")(
      "native-staging-mib", po::value<std::string>()->value_name("MIB"),
      "vmm_native_pageable's total host staging (vmm_staging_buffer_gb) in MiB, whole 64 MiB "
      "windows, at least 2 (default 1280, the preset's 1.25 GiB; ddo registers at most two)")(
      "quick", "a small model and few steps (4 blocks, hidden 1024, 1024 tokens, 3 steps)");
  const auto vm = ddo_bench::parse_or_exit(
      program, argc, argv, desc,
      "[--blocks N] [--hidden H] [--mlp M] [--tokens T[,T...]] [--steps N] [--warmup N] "
      "[--only NAME[,NAME...]] [--json FILE] [--threads N] [--file-dir DIR] [--native-staging-mib MIB] "
      "[--quick]");
  if (vm.count("quick") != 0) {
    opt.blocks = 4;
    opt.hidden = 1024;
    opt.mlp = 4096;
    opt.tokens = {1024};
    opt.steps = 3;
    opt.warmup = 1;
  }
  constexpr std::int64_t big = std::int64_t{1} << 20;
  opt.blocks = static_cast<int>(ddo_bench::number_or(program, vm, "blocks", opt.blocks, 1, 4096));
  opt.hidden = ddo_bench::number_or(program, vm, "hidden", opt.hidden, 128, big);
  opt.mlp = ddo_bench::number_or(program, vm, "mlp", opt.mlp, 1, big);
  if (vm.count("tokens") != 0)
    opt.tokens = ddo_bench::whole_numbers(program, "tokens", vm["tokens"].as<std::string>(), 1, big);
  opt.steps = static_cast<int>(ddo_bench::number_or(program, vm, "steps", opt.steps, 1, 100000));
  opt.warmup = static_cast<int>(ddo_bench::number_or(program, vm, "warmup", opt.warmup, 1, 100000));
  opt.threads = static_cast<unsigned>(ddo_bench::number_or(
      program, vm, "threads", std::max(1u, std::thread::hardware_concurrency()), 1, 1024));
  opt.native_staging_mib = ddo_bench::number_or(program, vm, "native-staging-mib", opt.native_staging_mib, 128, big);
  return opt;
}

// ---------------------------------------------------------------------------------------------
// Small CUDA owners (the bench's own; ddo's are not used so the baselines stay independent)

struct device_buffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  explicit device_buffer(std::size_t n) : bytes(n) { DDO_CUDA_TRY(cudaMalloc(&ptr, n)); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { DDO_CUDA_TRY_NOTHROW(cudaFree(ptr)); }
  [[nodiscard]] std::byte* data() const { return static_cast<std::byte*>(ptr); }
};

struct pinned_buffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  explicit pinned_buffer(std::size_t n) : bytes(n) {
    DDO_CUDA_TRY(cudaHostAlloc(&ptr, n, cudaHostAllocDefault));
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer() { DDO_CUDA_TRY_NOTHROW(cudaFreeHost(ptr)); }
  [[nodiscard]] std::byte* data() const { return static_cast<std::byte*>(ptr); }
};

/// Page-locks existing host memory for its lifetime (what the ring baseline pins).
struct host_registration {
  void* ptr = nullptr;
  explicit host_registration(void* p, std::size_t n) : ptr(p) {
    DDO_CUDA_TRY(cudaHostRegister(p, n, cudaHostRegisterDefault));
  }
  host_registration(const host_registration&) = delete;
  host_registration& operator=(const host_registration&) = delete;
  ~host_registration() { DDO_CUDA_TRY_NOTHROW(cudaHostUnregister(ptr)); }
};

struct stream_owner {
  cudaStream_t stream = nullptr;
  stream_owner() { DDO_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  stream_owner(const stream_owner&) = delete;
  stream_owner& operator=(const stream_owner&) = delete;
  ~stream_owner() { DDO_CUDA_TRY_NOTHROW(cudaStreamDestroy(stream)); }
};

struct event_owner {
  cudaEvent_t event = nullptr;
  explicit event_owner(bool timing = true) {
    DDO_CUDA_TRY(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  event_owner(const event_owner&) = delete;
  event_owner& operator=(const event_owner&) = delete;
  event_owner(event_owner&& other) noexcept : event(std::exchange(other.event, nullptr)) {}
  ~event_owner() {
    if (event) DDO_CUDA_TRY_NOTHROW(cudaEventDestroy(event));
  }
};

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  DDO_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

using memory_sampler = ddo::runner::device_memory_sampler;

// ---------------------------------------------------------------------------------------------
// The model: weights built directly in host memory, block after block, never zeros.

struct tensor_desc {
  std::string name;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;
  std::uint64_t offset = 0;  // within the block
  bool is_linear = false;
};

struct linear_op {
  std::size_t tensor = 0;  // index into model::tensors (per block)
  std::int64_t out = 0, in = 0;
};

struct model {
  int blocks = 0;
  std::int64_t hidden = 0, mlp = 0;
  std::vector<tensor_desc> tensors;  // of one block
  std::vector<linear_op> ops;        // the GEMMs of one block, in execution order
  std::uint64_t block_bytes = 0;
  std::uint64_t block_stride = 0;    // block_bytes rounded up to 2 MiB (page-aligned blocks)
  std::byte* host = nullptr;         // blocks × block_stride bytes, pageable
  std::vector<float> alpha;          // per block × op: GEMM scales
  std::uint64_t total_bytes() const { return block_bytes * static_cast<std::uint64_t>(blocks); }
  std::byte* block(int b) const { return host + block_stride * static_cast<std::uint64_t>(b); }
};

struct host_memory_deleter {
  void operator()(std::byte* p) const { std::free(p); }
};

/// Fills [p, p+bytes) with random bf16 values of magnitude 2^-7 .. 2^-5 and random sign (about
/// the scale of a trained 3072-wide layer), in parallel. splitmix64 per 64-bit word: fast enough
/// that the first touch of the pages, not the generator, sets the pace.
void fill_random_bf16(std::byte* p, std::size_t bytes, std::uint64_t seed, unsigned threads) {
  const std::size_t words = bytes / 8;
  auto* w = reinterpret_cast<std::uint64_t*>(p);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([=] {
      const std::size_t begin = words * t / threads, end = words * (t + 1) / threads;
      std::uint64_t state = seed ^ (0x9e3779b97f4a7c15ull * (t + 1));
      for (std::size_t i = begin; i < end; ++i) {
        std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        // Per 16-bit lane: keep sign and 7 mantissa bits random, exponent 120 or 121.
        const std::uint64_t lanes = (z & 0x807f807f807f807full) |
                                    (0x3c003c003c003c00ull) |  // exponent 120 << 7
                                    ((z >> 7) & 0x0080008000800080ull);  // +1 on exponent bit 0
        w[i] = lanes;
      }
    });
  }
  for (auto& th : pool) th.join();
  for (std::size_t i = words * 8; i < bytes; ++i) p[i] = std::byte{0x3c};
}

model build_model(const options& opt, std::unique_ptr<std::byte, host_memory_deleter>& storage) {
  model m;
  m.blocks = opt.blocks;
  m.hidden = opt.hidden;
  m.mlp = opt.mlp;
  const std::int64_t h = opt.hidden, f = opt.mlp, head = 128;
  auto add = [&](std::string name, std::vector<std::int64_t> shape, bool linear) {
    tensor_desc t;
    t.name = std::move(name);
    std::uint64_t elements = 1;
    for (auto d : shape) elements *= static_cast<std::uint64_t>(d);
    t.bytes = elements * 2;
    t.shape = std::move(shape);
    t.offset = m.block_bytes;
    t.is_linear = linear;
    m.block_bytes += ddo::round_up(t.bytes, 256);
    m.tensors.push_back(std::move(t));
    return m.tensors.size() - 1;
  };
  // 16 tensors per block, as a Flux/DiT block with biases and QK norms.
  const auto q = add("attn.to_q.weight", {h, h}, true);
  add("attn.to_q.bias", {h}, false);
  const auto k = add("attn.to_k.weight", {h, h}, true);
  add("attn.to_k.bias", {h}, false);
  const auto v = add("attn.to_v.weight", {h, h}, true);
  add("attn.to_v.bias", {h}, false);
  const auto o = add("attn.to_out.0.weight", {h, h}, true);
  add("attn.to_out.0.bias", {h}, false);
  add("attn.norm_q.weight", {head}, false);
  add("attn.norm_k.weight", {head}, false);
  const auto up = add("ff.net.0.proj.weight", {f, h}, true);
  add("ff.net.0.proj.bias", {f}, false);
  const auto down = add("ff.net.2.weight", {h, f}, true);
  add("ff.net.2.bias", {h}, false);
  add("norm1.weight", {h}, false);
  add("norm2.weight", {h}, false);
  m.ops = {{q, h, h}, {k, h, h}, {v, h, h}, {o, h, h}, {up, f, h}, {down, h, f}};
  m.block_stride = ddo::round_up(m.block_bytes, 2 * ddo::mib);
  const std::size_t total = m.block_stride * static_cast<std::size_t>(m.blocks);
  storage.reset(static_cast<std::byte*>(std::aligned_alloc(2 * ddo::mib, total)));
  if (!storage) {
    throw ddo::out_of_memory(ddo::memory_tier::host, total, 0,
                             "streaming_bench: cannot allocate " + std::to_string(total) +
                                 " bytes of host memory for the model");
  }
  m.host = storage.get();
  fill_random_bf16(m.host, total, 0x0dd0'5eedull, opt.threads);
  for (int b = 0; b < m.blocks; ++b)
    for (const auto& op : m.ops)
      m.alpha.push_back(ddo::runner::variance_preserving_alpha(
          m.block(b) + m.tensors[op.tensor].offset, ddo::dtype::bf16, op.out, op.in));
  return m;
}

/// Enqueues block @p b's GEMMs on the forward's stream, its weights at @p device_block.
void compute_block(gpu_synthetic_forward& fwd, const model& m, int b, const std::byte* device_block) {
  for (std::size_t i = 0; i < m.ops.size(); ++i) {
    const auto& op = m.ops[i];
    fwd.linear(device_block + m.tensors[op.tensor].offset, op.out, op.in,
               m.alpha[static_cast<std::size_t>(b) * m.ops.size() + i]);
  }
}

// ---------------------------------------------------------------------------------------------
// Bandwidths, measured in this run

/// Pageable → device through two pinned 64 MiB staging buffers: @p threads host threads split
/// each chunk's memcpy while the DMA engine uploads the other buffer. The plain hand-written
/// staging loop, with a persistent pool so thread start-up is not measured.
double staged_rate(const model& m, std::size_t span, cudaStream_t s, std::byte* dev,
                   unsigned threads) {
  const std::size_t stage = 64 * ddo::mib;
  pinned_buffer staging0(stage), staging1(stage);
  std::byte* staging[2] = {staging0.data(), staging1.data()};
  event_owner done[2] = {event_owner(false), event_owner(false)};
  DDO_CUDA_TRY(cudaEventRecord(done[0].event, s));
  DDO_CUDA_TRY(cudaEventRecord(done[1].event, s));
  DDO_CUDA_TRY(cudaStreamSynchronize(s));
  const std::byte* src = nullptr;
  std::byte* dst = nullptr;
  bool quit = false;
  std::barrier sync(static_cast<std::ptrdiff_t>(threads));
  auto slice = [&](unsigned t) {
    const std::size_t from = stage * t / threads, to = stage * (t + 1) / threads;
    std::memcpy(dst + from, src + from, to - from);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (;;) {
        sync.arrive_and_wait();  // a chunk is ready (or quit)
        if (quit) return;
        slice(t);
        sync.arrive_and_wait();  // slice copied
      }
    });
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t moved = 0;
  for (std::size_t off = 0, i = 0; off + stage <= span; off += stage, ++i) {
    const std::size_t k = i % 2;
    DDO_CUDA_TRY(cudaEventSynchronize(done[k].event));  // the staging buffer is free again
    src = m.host + off;
    dst = staging[k];
    sync.arrive_and_wait();
    slice(0);
    sync.arrive_and_wait();
    DDO_CUDA_TRY(cudaMemcpyAsync(dev + (i % 4) * stage, staging[k], stage, cudaMemcpyHostToDevice, s));
    DDO_CUDA_TRY(cudaEventRecord(done[k].event, s));
    moved += stage;
  }
  DDO_CUDA_TRY(cudaStreamSynchronize(s));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  quit = true;
  sync.arrive_and_wait();
  for (auto& th : pool) th.join();
  return static_cast<double>(moved) / seconds;
}

/// The pageable routes' own ceiling: @p threads threads fill a pinned region of @p region bytes
/// (the linear route's staging ring is 64 MiB; the native route's registered windows 128 MiB) in 4 MiB
/// grains with @p fill (source offset, destination, bytes; over [0, @p span) of the source,
/// round robin), first alone for 200 ms, then while a stream runs back-to-back 256 MiB pinned
/// host→device copies (~0.25 s at PCIe Gen5 rate). A staged route needs both at once and they
/// share the host's memory bandwidth, so the slower of the two side by side bounds it.
ddo::bench::concurrent_fill measure_fill(
    unsigned threads, std::uint64_t span, std::uint64_t region,
    const std::function<void(std::uint64_t, std::byte*, std::uint64_t)>& fill) {
  constexpr std::uint64_t grain = 4 * ddo::mib;
  constexpr std::uint64_t chunk = 256 * ddo::mib;  // each pinned H2D copy
  constexpr int copies = 48;
  ddo::bench::concurrent_fill result;
  const std::uint64_t grains = span / grain;
  if (grains == 0 || threads == 0) return result;
  pinned_buffer dst(region), src(chunk);
  fill_random_bf16(src.data(), chunk, 11, 4);
  device_buffer dev(chunk);
  stream_owner s;
  event_owner a, b;
  std::atomic<std::uint64_t> next{0}, filled{0};
  std::atomic<int> phase{0};  // 0 wait, 1 fill, 2 stop
  std::atomic<bool> failed{false};
  std::string failure;
  std::mutex failure_mutex;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      while (phase.load() == 0) std::this_thread::yield();
      while (phase.load() == 1) {
        const std::uint64_t i = next.fetch_add(1);
        try {
          fill((i % grains) * grain, dst.data() + (i % (region / grain)) * grain, grain);
        } catch (const std::exception& e) {
          std::lock_guard lock(failure_mutex);
          if (!failed.exchange(true)) failure = e.what();
          return;
        }
        filled.fetch_add(grain);
      }
    });
  auto rate_over = [&](auto&& wait) {
    const std::uint64_t b0 = filled.load();
    const auto t0 = std::chrono::steady_clock::now();
    wait();
    const std::uint64_t b1 = filled.load();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(b1 - b0) / seconds;
  };
  phase.store(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // every thread filling
  result.alone = rate_over([] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
  result.beside_dma = rate_over([&] {
    DDO_CUDA_TRY(cudaEventRecord(a.event, s.stream));
    for (int i = 0; i < copies; ++i)
      DDO_CUDA_TRY(cudaMemcpyAsync(dev.ptr, src.ptr, chunk, cudaMemcpyHostToDevice, s.stream));
    DDO_CUDA_TRY(cudaEventRecord(b.event, s.stream));
    // Polled, not synchronized: this thread only watches while the fill threads work.
    while (cudaEventQuery(b.event) == cudaErrorNotReady)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  });
  phase.store(2);
  for (auto& th : pool) th.join();
  DDO_CUDA_TRY(cudaEventSynchronize(b.event));
  if (failed.load()) throw std::runtime_error("streaming_bench: a host fill failed: " + failure);
  result.dma_beside = copies * static_cast<double>(chunk) / (elapsed_ms(a.event, b.event) * 1e-3);
  result.threads = threads;
  result.region_bytes = region;
  return result;
}

/// The linear route's staging ring (2 x 32 MiB by default), the destination of the ceilings.
constexpr std::uint64_t ring_region = 64 * ddo::mib;

/// measure_fill for pageable memory → pinned (memcpy from the model's own pages).
ddo::bench::concurrent_fill measure_host_copy_fill(const model& m, unsigned threads,
                                                   std::uint64_t region = ring_region) {
  return measure_fill(threads, m.block_stride * static_cast<std::uint64_t>(m.blocks), region,
                      [&](std::uint64_t off, std::byte* dst, std::uint64_t n) {
                        std::memcpy(dst, m.host + off, static_cast<std::size_t>(n));
                      });
}

bandwidths measure_bandwidths(const model& m, std::uint64_t native_windows_bytes) {
  bandwidths result;
  const std::size_t chunk = 256 * ddo::mib;
  device_buffer dev(chunk);
  stream_owner s;
  event_owner a, b;
  {  // pinned: batches of 8 back-to-back 256 MiB copies (as a streamed step issues them) after
     // one warm-up batch, then long single copies of 1 GiB each waited for; B is the best rate of
     // any pattern (runner/step_timing.hpp), pinned_h2d the batches' median for reference
    pinned_buffer src(chunk);
    fill_random_bf16(src.data(), chunk, 7, 4);
    std::vector<double> rates;
    for (int batch = 0; batch < 4; ++batch) {
      DDO_CUDA_TRY(cudaEventRecord(a.event, s.stream));
      for (int i = 0; i < 8; ++i)
        DDO_CUDA_TRY(cudaMemcpyAsync(dev.ptr, src.ptr, chunk, cudaMemcpyHostToDevice, s.stream));
      DDO_CUDA_TRY(cudaEventRecord(b.event, s.stream));
      DDO_CUDA_TRY(cudaEventSynchronize(b.event));
      if (batch > 0) rates.push_back(8.0 * static_cast<double>(chunk) / (elapsed_ms(a.event, b.event) * 1e-3));
    }
    result.pinned_h2d = median(rates);
    result.pinned.add("batches of 8 x 256 MiB", *std::max_element(rates.begin(), rates.end()) / 1e9);
  }
  {
    const std::size_t long_copy = ddo::gib;
    pinned_buffer src(long_copy);
    fill_random_bf16(src.data(), long_copy, 9, 4);
    device_buffer target(long_copy);
    double best = 0;
    for (int i = 0; i < 3; ++i) {
      DDO_CUDA_TRY(cudaEventRecord(a.event, s.stream));
      DDO_CUDA_TRY(cudaMemcpyAsync(target.ptr, src.ptr, long_copy, cudaMemcpyHostToDevice, s.stream));
      DDO_CUDA_TRY(cudaEventRecord(b.event, s.stream));
      DDO_CUDA_TRY(cudaEventSynchronize(b.event));
      best = std::max(best, static_cast<double>(long_copy) / (elapsed_ms(a.event, b.event) * 1e-3));
    }
    result.pinned.add("single 1 GiB copies", best / 1e9);
  }
  // The model's own pageable memory is the source for the pageable measurements: it is touched,
  // not registered, and larger than any cache.
  const std::size_t span = std::min<std::size_t>(m.block_stride * static_cast<std::size_t>(m.blocks),
                                                 2 * ddo::gib);
  {  // pageable, direct
    std::vector<double> rates;
    for (std::size_t off = 0; off + chunk <= span; off += chunk) {
      DDO_CUDA_TRY(cudaEventRecord(a.event, s.stream));
      DDO_CUDA_TRY(cudaMemcpyAsync(dev.ptr, m.host + off, chunk, cudaMemcpyHostToDevice, s.stream));
      DDO_CUDA_TRY(cudaEventRecord(b.event, s.stream));
      DDO_CUDA_TRY(cudaEventSynchronize(b.event));
      rates.push_back(static_cast<double>(chunk) / (elapsed_ms(a.event, b.event) * 1e-3));
    }
    result.pageable_h2d = median(rates);
  }
  // Staged, with 1, 2, 4 and 8 copy threads; the bound of the staged variants uses the best.
  for (const unsigned threads : {1u, 2u, 4u, 8u}) {
    const double rate = staged_rate(m, span, s.stream, dev.data(), threads);
    result.staging_by_threads.emplace_back(threads, rate);
    result.pageable_staging = std::max(result.pageable_staging, rate);
  }
  // With as many threads as ddo's staging uses by default.
  result.host_copy =
      measure_host_copy_fill(m, static_cast<unsigned>(ddo::default_staging_threads()));
  result.host_copy_windows = measure_host_copy_fill(
      m, static_cast<unsigned>(ddo::default_staging_threads()), native_windows_bytes);
  return result;
}

// ---------------------------------------------------------------------------------------------
// Variants

// Host memory of the variant that runs now: attempt() starts the watch, time_steps() and run_ddo()
// sample it while the variant's memory is still held (a variant frees everything before it
// returns). A pointer at namespace scope because the variants' signatures stay those of their
// bodies; the bench runs one variant at a time on one thread.
ddo::memory_watch* variant_memory = nullptr;
std::uint64_t variant_pss = 0;

void sample_variant_memory() {
  if (variant_memory == nullptr) return;
  const auto& m = variant_memory->sample();
  variant_pss = std::max(variant_pss, m.pss_bytes);
}

/// The measured steps of one variant: intervals between step starts and spans (start to end).
struct timed_steps {
  std::vector<double> interval_ms, span_ms;
};

/// Runs warmup + steps of @p enqueue_step (which enqueues one step; the harness records an event
/// on the compute stream before and after each) and returns, per measured step, the interval
/// from its start to the next step's (runner/step_timing.hpp: steady-state step time, any
/// prefetch that wraps into the next step included; the last step's closing mark is its end)
/// and its span apart.
timed_steps time_steps(const options& opt, cudaStream_t compute,
                       const std::function<void(int)>& enqueue_step) {
  const int total = opt.warmup + opt.steps;
  std::vector<event_owner> starts, ends;
  starts.reserve(static_cast<std::size_t>(total));
  ends.reserve(static_cast<std::size_t>(total));
  for (int i = 0; i < total; ++i) {
    starts.emplace_back(true);
    ends.emplace_back(true);
  }
  for (int i = 0; i < total; ++i) {
    DDO_CUDA_TRY(cudaEventRecord(starts[static_cast<std::size_t>(i)].event, compute));
    enqueue_step(i);
    DDO_CUDA_TRY(cudaEventRecord(ends[static_cast<std::size_t>(i)].event, compute));
  }
  DDO_CUDA_TRY(cudaStreamSynchronize(compute));
  DDO_CUDA_TRY(cudaDeviceSynchronize());
  sample_variant_memory();
  std::vector<double> start_ms, end_ms;
  const cudaEvent_t origin = starts[static_cast<std::size_t>(opt.warmup)].event;
  for (int i = opt.warmup; i < total; ++i) {
    start_ms.push_back(elapsed_ms(origin, starts[static_cast<std::size_t>(i)].event));
    end_ms.push_back(elapsed_ms(origin, ends[static_cast<std::size_t>(i)].event));
  }
  start_ms.push_back(end_ms.back());  // the closing mark: where a next step would start
  auto t = ddo::runner::step_times_from(start_ms, end_ms);
  return {std::move(t.interval_ms), std::move(t.span_ms)};
}

/// Fills @p r's steps from @p t.
void take_steps(variant_result& r, timed_steps t) {
  r.step_ms = std::move(t.interval_ms);
  r.span_ms = std::move(t.span_ms);
}

variant_result run_resident(const options& opt, const model& m, std::int64_t tokens) {
  variant_result r;
  r.name = "resident";
  r.description = "every weight on the device (C)";
  memory_sampler mem;
  {
    device_buffer weights(m.block_stride * static_cast<std::size_t>(m.blocks));
    // Setup, not timed: one synchronous upload from pageable memory.
    DDO_CUDA_TRY(cudaMemcpy(weights.ptr, m.host, weights.bytes, cudaMemcpyHostToDevice));
    stream_owner compute;
    gpu_synthetic_forward fwd(tokens, std::max(m.hidden, m.mlp), ddo::dtype::bf16, compute.stream);
    take_steps(r, time_steps(opt, compute.stream, [&](int) {
      for (int b = 0; b < m.blocks; ++b)
        compute_block(fwd, m, b, weights.data() + m.block_stride * static_cast<std::size_t>(b));
    }));
  }
  mem.stop();
  r.resident_bytes = m.total_bytes();
  r.peak_device_bytes = mem.peak_above_baseline();
  return r;
}

/// The bar: a plain ring of 3 device slots, one pinned buffer (a registered block) and one copy
/// per block on a copy stream, the compute stream waiting on the copy's event and the copy into a
/// slot waiting on the event recorded after the compute that last read it. Prefetch runs two
/// blocks ahead and wraps into the next step. No host synchronisation anywhere in a step.
variant_result run_ring(const options& opt, const model& m, std::int64_t tokens) {
  constexpr int slots = 3;
  variant_result r;
  r.name = "ring_baseline";
  r.description = "hand-written 3-slot ring, pinned, one copy per block";
  memory_sampler mem;
  {
    std::vector<std::unique_ptr<host_registration>> pins;
    for (int b = 0; b < m.blocks; ++b)
      pins.push_back(std::make_unique<host_registration>(m.block(b), m.block_stride));
    r.pinned_host_bytes = m.total_bytes();
    std::vector<std::unique_ptr<device_buffer>> slot;
    for (int i = 0; i < slots; ++i) slot.push_back(std::make_unique<device_buffer>(m.block_bytes));
    std::vector<event_owner> copied, consumed;
    for (int i = 0; i < slots; ++i) {
      copied.emplace_back(false);
      consumed.emplace_back(false);
    }
    stream_owner compute, copy;
    gpu_synthetic_forward fwd(tokens, std::max(m.hidden, m.mlp), ddo::dtype::bf16, compute.stream);
    long issued = 0;  // global block index (across steps) of the next copy to issue
    auto issue = [&](long g) {
      const int s = static_cast<int>(g % slots);
      const int b = static_cast<int>(g % m.blocks);
      if (g >= slots) DDO_CUDA_TRY(cudaStreamWaitEvent(copy.stream, consumed[s].event, 0));
      DDO_CUDA_TRY(cudaMemcpyAsync(slot[s]->ptr, m.block(b), m.block_bytes,
                                   cudaMemcpyHostToDevice, copy.stream));
      DDO_CUDA_TRY(cudaEventRecord(copied[s].event, copy.stream));
    };
    take_steps(r, time_steps(opt, compute.stream, [&](int step) {
      for (int b = 0; b < m.blocks; ++b) {
        const long g = static_cast<long>(step) * m.blocks + b;
        // Keep slots-1 blocks in flight ahead of the one computed: the copy for g+2 reuses the
        // slot of g-1, whose consumer event was recorded in the previous iteration.
        while (issued <= g + slots - 1) issue(issued++);
        const int s = static_cast<int>(g % slots);
        DDO_CUDA_TRY(cudaStreamWaitEvent(compute.stream, copied[s].event, 0));
        compute_block(fwd, m, b, slot[s]->data());
        DDO_CUDA_TRY(cudaEventRecord(consumed[s].event, compute.stream));
      }
    }));
    DDO_CUDA_TRY(cudaStreamSynchronize(copy.stream));
  }
  mem.stop();
  r.streamed_bytes = m.total_bytes();
  r.peak_device_bytes = mem.peak_above_baseline();
  return r;
}

/// What an engine without ddo does: copy a block synchronously, compute it, wait, next block.
variant_result run_naive(const options& opt, const model& m, std::int64_t tokens, bool pinned) {
  variant_result r;
  r.name = pinned ? "naive_sync_pinned" : "naive_sync_pageable";
  r.description = std::string("synchronous per-block copy then compute, ") +
                  (pinned ? "pinned source" : "pageable source");
  memory_sampler mem;
  {
    std::vector<std::unique_ptr<host_registration>> pins;
    if (pinned) {
      for (int b = 0; b < m.blocks; ++b)
        pins.push_back(std::make_unique<host_registration>(m.block(b), m.block_stride));
      r.pinned_host_bytes = m.total_bytes();
    }
    device_buffer block(m.block_bytes);
    stream_owner compute;
    gpu_synthetic_forward fwd(tokens, std::max(m.hidden, m.mlp), ddo::dtype::bf16, compute.stream);
    take_steps(r, time_steps(opt, compute.stream, [&](int) {
      for (int b = 0; b < m.blocks; ++b) {
        DDO_CUDA_TRY(cudaMemcpyAsync(block.ptr, m.block(b), m.block_bytes, cudaMemcpyHostToDevice,
                                     compute.stream));
        compute_block(fwd, m, b, block.data());
        // The buffer is reused by the next block: the engine waits for the compute to finish.
        DDO_CUDA_TRY(cudaStreamSynchronize(compute.stream));
      }
    }));
  }
  mem.stop();
  r.streamed_bytes = m.total_bytes();
  r.peak_device_bytes = mem.peak_above_baseline();
  return r;
}

// ---------------------------------------------------------------------------------------------
// ddo

/// The bench's weights as ddo sees them: a weight table of host sources into the model's memory
/// (names as a Flux/diffusers transformer has them, kinds inferred the way ddo infers them), and
/// the GEMM scale of every 2-D weight by table index.
struct ddo_model {
  ddo::weight_table table;
  std::vector<float> alpha;  // by table index; 0 for weights that are not GEMMs
};

ddo_model build_table(const model& m, const std::string& file = {}) {
  ddo_model d;
  // With a file: every weight is read from it at the offset it has in host memory.
  const std::size_t file_index = file.empty() ? 0 : d.table.add_file(file);
  for (int b = 0; b < m.blocks; ++b) {
    for (std::size_t t = 0; t < m.tensors.size(); ++t) {
      const auto& desc = m.tensors[t];
      ddo::weight_info w;
      w.name = "transformer_blocks." + std::to_string(b) + "." + desc.name;
      w.module_name = ddo::module_name_of(w.name);
      w.kind = ddo::infer_module_kind(w.module_name, desc.shape.size());
      w.type = ddo::dtype::bf16;
      w.shape = desc.shape;
      w.bytes = desc.bytes;
      if (file.empty())
        w.source = ddo::host_source{m.block(b) + desc.offset};
      else
        w.source = ddo::file_source{file_index, static_cast<std::uint64_t>(m.block(b) - m.host) + desc.offset};
      d.table.add(std::move(w));
      d.alpha.push_back(0.0f);
    }
    for (std::size_t i = 0; i < m.ops.size(); ++i)
      d.alpha[static_cast<std::size_t>(b) * m.tensors.size() + m.ops[i].tensor] =
          m.alpha[static_cast<std::size_t>(b) * m.ops.size() + i];
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// The model in a file (the file variants)

/// The model's host bytes written once to a file (each weight at the offset it has in host
/// memory), removed when the bench ends. Written back before any measurement (fsync), so no
/// writeback runs under them; its pages stay in the page cache: the file variants read it warm.
class model_file {
 public:
  model_file(const model& m, const std::string& dir) {
    path_ = (std::filesystem::path(dir) /
             ("streaming_bench_model_" + std::to_string(::getpid()) + ".bin")).string();
    bytes_ = m.block_stride * static_cast<std::uint64_t>(m.blocks);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail(errno, "cannot create");
    std::uint64_t done = 0;
    while (done < bytes_) {
      const ssize_t n = ::write(fd, m.host + done, std::min<std::uint64_t>(bytes_ - done, ddo::gib));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = n < 0 ? errno : EIO;
        ::close(fd);
        ::unlink(path_.c_str());
        fail(e, "cannot write");
      }
      done += static_cast<std::uint64_t>(n);
    }
    if (::fsync(fd) != 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(path_.c_str());
      fail(e, "cannot fsync");
    }
    ::close(fd);
  }
  model_file(const model_file&) = delete;
  model_file& operator=(const model_file&) = delete;
  ~model_file() { ::unlink(path_.c_str()); }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  [[noreturn]] void fail(int e, const char* what) const {
    throw ddo::io_error(path_, e, std::string("streaming_bench: ") + what + " the model file '" +
                                      path_ + "': " + std::strerror(e) + " (--file-dir DIR to move it)");
  }
  std::string path_;
  std::uint64_t bytes_ = 0;
};

/// The yardstick of the file route's setup: the whole file read by @p threads threads with 4 MiB
/// preads (each claims the next 4 MiB) into fresh anonymous memory (the read is its first touch,
/// as in ddo's packing), median of 3 passes; then cudaHostRegister of that memory, timed.
/// measure_fill for the cached model file → pinned (pread, as ddo's read pool does).
ddo::bench::concurrent_fill measure_file_fill(const model_file& f, unsigned threads) {
  struct descriptor {
    int fd;
    ~descriptor() { ::close(fd); }
  } file{::open(f.path().c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw ddo::io_error(f.path(), errno, "streaming_bench: cannot open " + f.path());
  return measure_fill(threads, f.bytes(), ring_region, [&](std::uint64_t off, std::byte* dst, std::uint64_t n) {
    for (std::uint64_t at = 0; at < n;) {
      const ssize_t got = ::pread(file.fd, dst + at, n - at, static_cast<off_t>(off + at));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw ddo::io_error(f.path(), got < 0 ? errno : EIO,
                            "streaming_bench: pread of " + f.path() + " at " + std::to_string(off + at) +
                                " failed");
      at += static_cast<std::uint64_t>(got);
    }
  });
}

ddo::bench::file_baseline measure_file_baseline(const model_file& f, unsigned threads) {
  ddo::bench::file_baseline b;
  b.bytes = f.bytes();
  b.threads = threads;
  const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw ddo::io_error(f.path(), errno, "streaming_bench: cannot open " + f.path());
  std::vector<double> passes;
  for (int pass = 0; pass < 3; ++pass) {
    void* raw = ::mmap(nullptr, b.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
      ::close(fd);
      throw ddo::out_of_memory(ddo::memory_tier::host, b.bytes, 0,
                               "streaming_bench: no memory for the pread baseline");
    }
    auto* dst = static_cast<std::byte*>(raw);
    std::atomic<std::uint64_t> next{0};
    std::atomic<int> error{0};
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        for (;;) {
          const std::uint64_t off = next.fetch_add(4 * ddo::mib);
          if (off >= b.bytes || error.load() != 0) return;
          const std::uint64_t end = std::min<std::uint64_t>(b.bytes, off + 4 * ddo::mib);
          for (std::uint64_t at = off; at < end;) {
            const ssize_t n = ::pread(fd, dst + at, end - at, static_cast<off_t>(at));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
              error.store(n < 0 ? errno : EIO);
              return;
            }
            at += static_cast<std::uint64_t>(n);
          }
        }
      });
    for (auto& th : pool) th.join();
    passes.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (pass == 2 && error.load() == 0) {
      const auto r0 = std::chrono::steady_clock::now();
      DDO_CUDA_TRY(cudaHostRegister(raw, b.bytes, cudaHostRegisterDefault));
      b.register_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
      DDO_CUDA_TRY(cudaHostUnregister(raw));
    }
    ::munmap(raw, b.bytes);
    if (const int e = error.load(); e != 0) {
      ::close(fd);
      throw ddo::io_error(f.path(), e, "streaming_bench: pread of the model file failed: " +
                                           std::string(std::strerror(e)));
    }
  }
  ::close(fd);
  b.read_s = median(passes);
  return b;
}

/// A ddo variant: plan with @p config against this machine, set up an offloader over @p Transport
/// (linear or VMM, made from the settings as ddo-run makes it), then per step acquire every group in order on the compute stream and run its
/// GEMMs on the lease's pointers; leases drop at the end of each group (no host sync anywhere).
/// @p staging_bytes: each staging buffer's size (0: ddo's default).
template <class Transport = ddo::linear_transport>
variant_result run_ddo(const options& opt, const model& m, const ddo_model& d, std::int64_t tokens,
                       std::string name, std::string description,
                       const ddo::dynamic_offload_config& config, std::uint64_t staging_bytes = 0) {
  variant_result r;
  r.name = std::move(name);
  r.description = std::move(description);
  memory_sampler mem;
  {
    // The one call (ddo/setup/prepare_offload.hpp), as ddo-run and enable_offload take it: the
    // plan sees device memory minus the ring, the forward's activations and ddo's reserve.
    ddo::resolve_inputs inputs;
    inputs.config = config;
    inputs.use_environment = false;
    const auto t0 = std::chrono::steady_clock::now();
    const auto settings = ddo::resolve_settings(inputs);
    ddo::setup_options setup_options;
    setup_options.inputs = inputs;
    setup_options.reserve_device_bytes =
        2 * static_cast<std::uint64_t>(tokens) * static_cast<std::uint64_t>(std::max(m.hidden, m.mlp)) *
        ddo::size_of(ddo::dtype::bf16);
    auto prepared =
        ddo::prepare_offload<>(d.table, settings, setup_options,
                               ddo::make_transport<Transport>(settings, setup_options.host_sim));
    auto& setup = prepared.setup;
    for (const auto& g : setup.plan.groups) r.streamed_bytes += g.streamed_bytes();
    r.resident_bytes = setup.plan.total_bytes(ddo::placement::gpu_resident);
    if (staging_bytes != 0) setup.runtime.staging_buffer_bytes = staging_bytes;
    const auto setup_t0 = std::chrono::steady_clock::now();
    auto enabled = prepared.start();
    auto& offloader = *enabled.offloader;
    auto& transport = offloader.transport();
    const double setup_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The offloader's own setup (pack + pin, residents, ring): what the file route's setup
    // target compares with a plain parallel pread.
    r.setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_t0).count();
    sample_variant_memory();
    stream_owner compute;
    gpu_synthetic_forward fwd(tokens, std::max(m.hidden, m.mlp), ddo::dtype::bf16, compute.stream);
    const std::size_t groups = offloader.group_count();
    take_steps(r, time_steps(opt, compute.stream, [&](int) {
      for (std::size_t g = 0; g < groups; ++g) {
        auto lease = offloader.acquire(g, compute.stream);
        for (std::size_t i = 0; i < lease.size(); ++i) {
          const std::size_t w = lease.weight_index(i);
          if (d.alpha[w] == 0.0f) continue;
          const auto& info = d.table[w];
          fwd.linear(lease.data(i), info.shape[0], info.shape[1], d.alpha[w]);
        }
      }
    }));
    const auto metrics = offloader.metrics(true);
    r.pinned_host_bytes = metrics.pinned_bytes + metrics.staging_bytes;
    if constexpr (std::is_same_v<Transport, ddo::vmm_transport>) {
      // Issue 10: the window's map/access/unmap host time per loaded GB, and ddo's device bytes
      // (cudaMalloc'd residents and any device staging at their ledger peak, plus the handles)
      // against the mapped budget.
      r.vmm.measured = true;
      r.vmm.map_ms = metrics.vmm.map_ms;
      r.vmm.access_ms = metrics.vmm.access_ms;
      r.vmm.unmap_ms = metrics.vmm.unmap_ms;
      r.vmm.binds = metrics.vmm.binds;
      r.vmm.loaded_bytes = metrics.totals.bytes();
      r.vmm.budget_bytes = ddo::gib_to_bytes(config.vmm_resident_weight_budget_gb);
      r.vmm.ledger_device_bytes =
          transport.ledger().peak(ddo::ledger_kind::device) + transport.vmm_physical_bytes();
      r.vmm.activation_bytes = fwd.device_bytes();
    }
    const double steps = static_cast<double>(std::max<std::size_t>(1, metrics.steps.size()));
    char note[256];
    std::snprintf(note, sizeof note,
                  "setup %.1f s (plan, pack + pin, residents, ring of %llu x %.0f MB); "
                  "%.2f GB moved per step; %llu of %llu acquires prefetched",
                  setup_s, static_cast<unsigned long long>(offloader.slot_count()),
                  static_cast<double>(offloader.slot_bytes()) / 1e6,
                  static_cast<double>(metrics.totals.bytes()) / steps / 1e9,
                  static_cast<unsigned long long>(metrics.totals.hits),
                  static_cast<unsigned long long>(metrics.totals.acquires));
    r.note = note;
  }
  mem.stop();
  r.peak_device_bytes = mem.peak_above_baseline();
  return r;
}

/// The planning config of the ddo variants: the linear runtime, blocks as residency candidates,
/// @p resident_fraction of the weights as an explicit resident budget, pinned or pageable.
ddo::dynamic_offload_config ddo_config(const options& opt, const model& m, double resident_fraction,
                                       bool pinned) {
  ddo::dynamic_offload_config c;
  c.pin_cpu_workers = static_cast<int>(opt.threads);
  c.execution_mode = ddo::exec_mode::linear_runtime;
  c.resident_module_patterns = {"auto"};
  c.resident_module_selection = ddo::selection::spread;
  c.resident_module_budget_gb =
      resident_fraction * static_cast<double>(m.total_bytes()) / static_cast<double>(ddo::gib);
  c.max_resident_module_budget_gb = 0.0;
  c.pin_cpu_memory = pinned;
  c.allow_pin_memory_fallback = true;
  return c;
}

/// The VMM variants' config: as ddo_config's, on the VMM route, with a mapped budget of the
/// resident set plus a window of three blocks (rounded up to the 2 MiB handle granularity per
/// tensor, so rounding never shrinks the window below three groups).
ddo::dynamic_offload_config vmm_config(const options& opt, const model& m, double resident_fraction) {
  ddo::dynamic_offload_config c = ddo_config(opt, m, resident_fraction, true);
  c.execution_mode = ddo::exec_mode::vmm_runtime;
  // Three slots, each as many whole 64 MiB handles (vmm_page_mb 0) as a block's span with its
  // alignment gaps needs, plus one handle for the small tensors the planner keeps resident
  // (they come out of the mapped budget too): the window holds whole slots only, and a budget
  // of three unrounded blocks, or of three slots exactly, gave two slots (H200 runs of 3 Dec).
  const std::uint64_t handle = 64 * ddo::mib;
  const std::uint64_t slot = (m.block_bytes + m.tensors.size() * 2 * ddo::mib + handle - 1) / handle * handle;
  const double window = 3.0 * static_cast<double>(slot) + static_cast<double>(handle);
  c.vmm_resident_weight_budget_gb =
      (resident_fraction * static_cast<double>(m.total_bytes()) + window) / static_cast<double>(ddo::gib);
  c.vmm_staging_buffer_gb = static_cast<double>(2 * m.block_stride) / static_cast<double>(ddo::gib);
  return c;
}

bool wanted(const options& opt, const std::string& name);

/// Whether a file variant runs (only then is the model file written).
bool wanted_file(const options& opt) {
  return wanted(opt, "ddo_file_pinned") || wanted(opt, "ddo_file_pageable") ||
         wanted(opt, "ddo_file_pageable_64m");
}

/// The native VMM variant's config (vmm_fast_runtime): nothing resident, nothing pinned, a window
/// of three blocks; pageable sources staged through the route's registered 64 MiB windows
/// (vmm_staging_buffer_gb is their TOTAL, a ceiling: of the preset's 1.25 GiB ddo registers two
/// windows, native_vmm_options::window_cap_bytes, and cycles them in 16 MiB chunks).
ddo::dynamic_offload_config vmm_native_config(const options& opt, const model& m) {
  ddo::dynamic_offload_config c = vmm_config(opt, m, 0.0);
  c.pin_cpu_memory = false;
  c.vmm_native_transport = true;
  c.vmm_staging_buffer_gb = static_cast<double>(opt.native_staging_mib) / 1024.0;
  return c;
}

bool wanted(const options& opt, const std::string& name) {
  if (opt.only.empty() || name == "resident") return true;  // C is always needed
  std::stringstream stream(opt.only);
  std::string item;
  while (std::getline(stream, item, ','))
    if (item == name) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse_options(argc, argv);
  const auto gpu = ddo::runner::probe_gpu(0);
  if (!gpu.available) {
    std::printf("streaming_bench: skipped: %s\n", gpu.reason.c_str());
    return 77;
  }
  try {
    DDO_CUDA_TRY(cudaSetDevice(0));
    std::unique_ptr<std::byte, host_memory_deleter> storage;
    const auto t0 = std::chrono::steady_clock::now();
    const model m = build_model(opt, storage);
    std::fprintf(stderr, "streaming_bench: %s GB of random bf16 weights built in %.1f s\n",
                 ddo::format_size_number(m.total_bytes(), ddo::size_unit::gb).c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    // The native route's ceiling: its registered windows (the total, capped as ddo caps it).
    bandwidths bw = measure_bandwidths(
        m, std::min(static_cast<std::uint64_t>(opt.native_staging_mib) * ddo::mib,
                    ddo::native_vmm_options{}.window_cap_bytes));
    const ddo_model d = build_table(m);
    std::fprintf(stderr, "streaming_bench: pinned %.1f GB/s, pageable %.1f GB/s, staging %.1f GB/s"
                 " (best of 1/2/4/8 threads); %u threads memcpy pageable->pinned %.1f GB/s alone,"
                 " %.1f GB/s beside the pinned copies (which meanwhile ran at %.1f GB/s)\n",
                 bw.pinned_h2d / 1e9, bw.pageable_h2d / 1e9, bw.pageable_staging / 1e9,
                 bw.host_copy.threads, bw.host_copy.alone / 1e9, bw.host_copy.beside_dma / 1e9,
                 bw.host_copy.dma_beside / 1e9);
    // The file variants' model file, its yardstick, and its weight table.
    std::optional<model_file> file;
    std::optional<ddo_model> file_table;
    ddo::bench::file_baseline file_base;
    if (wanted_file(opt)) {
      const std::string dir = opt.file_dir.empty()
                                  ? std::filesystem::read_symlink("/proc/self/exe").parent_path().string()
                                  : opt.file_dir;
      const auto f0 = std::chrono::steady_clock::now();
      file.emplace(m, dir);
      file_base = measure_file_baseline(*file, opt.threads);
      bw.file_read = measure_file_fill(*file, static_cast<unsigned>(ddo::default_staging_threads()));
      file_table.emplace(build_table(m, file->path()));
      std::fprintf(stderr,
                   "streaming_bench: model file %s written in %.1f s; plain pread with %u threads "
                   "%.2f s (%.1f GB/s), cudaHostRegister %.2f s\n",
                   file->path().c_str(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count(),
                   file_base.threads, file_base.read_s,
                   static_cast<double>(file_base.bytes) / file_base.read_s / 1e9, file_base.register_s);
    }
    std::vector<token_run> runs;
    int failures = 0;
    for (const auto tokens : opt.tokens) {
      token_run run;
      run.tokens = tokens;
      auto add = [&](variant_result r, double target, ddo::bench::staged_source staged) {
        r.target = target;
        r.staged = staged;
        ddo::bench::finish(r, run.compute_ms, bw);
        // Provisional: the report's B also takes the ring's rate (add_ring_rates).
        std::fprintf(stderr, "streaming_bench: %lld tokens, %-26s %8.1f ms/step  %.3fx bound "
                     "(provisional B)\n",
                     static_cast<long long>(tokens), r.name.c_str(), r.ms, r.ratio);
        run.variants.push_back(std::move(r));
      };
      {
        variant_result r = run_resident(opt, m, tokens);
        run.compute_ms = median(r.step_ms);
        add(std::move(r), 0, ddo::bench::staged_source::none);
      }
      // A variant that throws is reported (and fails the run) without hiding the others.
      // staged: where a non-pinned variant's bytes come from (its fill ceiling, measured above).
      auto attempt = [&](const std::string& name, double target, auto&& body,
                         ddo::bench::staged_source staged = ddo::bench::staged_source::none) {
        if (!wanted(opt, name)) return;
        ddo::memory_watch watch;
        watch.start(true);
        variant_memory = &watch;
        variant_pss = 0;
        try {
          variant_result r = body();
          variant_memory = nullptr;
          const auto& end = watch.sample();
          r.host.measured = true;
          r.host.rss_start_bytes = watch.at_start().rss_bytes;
          r.host.peak_rss_bytes = end.peak_rss_bytes;
          r.host.peak_reset = watch.peak_reset();
          r.host.pss_bytes = variant_pss;
          r.host.used_growth_bytes = watch.used_growth_bytes();
          add(std::move(r), target, staged);
        } catch (const std::exception& e) {
          variant_result r;
          r.name = name;
          r.note = std::string("error: ") + e.what();
          r.ms = r.ratio = std::numeric_limits<double>::quiet_NaN();
          r.target = target;
          variant_memory = nullptr;
          std::fprintf(stderr, "streaming_bench: %lld tokens, %s failed: %s\n",
                       static_cast<long long>(tokens), name.c_str(), e.what());
          run.variants.push_back(std::move(r));
          failures++;
        }
      };
      attempt("ring_baseline", 1.05, [&] { return run_ring(opt, m, tokens); });
      attempt("naive_sync_pinned", 0, [&] { return run_naive(opt, m, tokens, true); });
      attempt("naive_sync_pageable", 0, [&] { return run_naive(opt, m, tokens, false); });
      attempt("ddo_zero_resident", 1.05, [&] {
        return run_ddo(opt, m, d, tokens, "ddo_zero_resident", "ddo linear, nothing resident, pinned",
                       ddo_config(opt, m, 0.0, true));
      });
      attempt("ddo_resident_25", 1.05, [&] {
        return run_ddo(opt, m, d, tokens, "ddo_resident_25",
                       "ddo linear, 25% resident budget (planner picks blocks), rest pinned",
                       ddo_config(opt, m, 0.25, true));
      });
      attempt("ddo_resident_50", 1.05, [&] {
        return run_ddo(opt, m, d, tokens, "ddo_resident_50",
                       "ddo linear, 50% resident budget (planner picks blocks), rest pinned",
                       ddo_config(opt, m, 0.50, true));
      });
      for (const auto& variant :  // not structured bindings: clang < 16 cannot capture them
           {std::pair<const char*, double>{"vmm_zero_resident", 0.0}, {"vmm_resident_25", 0.25},
            {"vmm_resident_50", 0.50}})
        attempt(variant.first, 1.03, [&, vmm_name = variant.first, fraction = variant.second] {
          return run_ddo<ddo::vmm_transport>(
              opt, m, d, tokens, vmm_name,
              "ddo VMM route, " + std::to_string(static_cast<int>(fraction * 100)) +
                  "% resident in the mapped budget, window of 3 blocks, pinned",
              vmm_config(opt, m, fraction));
        });
      // The native route from pageable sources, judged (like ddo_pageable_staged) against the
      // pinned bound max(C, W/B) of this run: the PCIe bound, not a staging loop's.
      attempt("vmm_native_pageable", 1.10, [&] {
        return run_ddo<ddo::vmm_transport>(
            opt, m, d, tokens, "vmm_native_pageable",
            "ddo VMM native route (vmm_fast_runtime), nothing resident or pinned: pageable sources "
            "through the route's registered 64 MiB windows",
            vmm_native_config(opt, m));
      }, ddo::bench::staged_source::host_memory);
      attempt("ddo_pageable_staged", 1.10, [&] {
        return run_ddo(opt, m, d, tokens, "ddo_pageable_staged",
                       "ddo linear, nothing pinned: pageable sources staged by the copy threads",
                       ddo_config(opt, m, 0.0, false));
      }, ddo::bench::staged_source::host_memory);
      if (file_table) {
        attempt("ddo_file_pinned", 1.05, [&] {
          return run_ddo(opt, m, *file_table, tokens, "ddo_file_pinned",
                         "ddo linear, nothing resident, pinned blocks packed by parallel preads "
                         "from the cached model file",
                         ddo_config(opt, m, 0.0, true));
        });
        attempt("ddo_file_pageable", 1.25, [&] {
          return run_ddo(opt, m, *file_table, tokens, "ddo_file_pageable",
                         "ddo linear, nothing pinned: file pieces staged by parallel preads "
                         "from the cached model file",
                         ddo_config(opt, m, 0.0, false));
        }, ddo::bench::staged_source::file);
        // The same with 64 MiB staging buffers (default 16 MiB): fewer fork-joins of the read
        // threads per group, to tell whether the buffer size or the read rate is the limit.
        attempt("ddo_file_pageable_64m", 1.25, [&] {
          return run_ddo(opt, m, *file_table, tokens, "ddo_file_pageable_64m",
                         "as ddo_file_pageable, with two 64 MiB staging buffers",
                         ddo_config(opt, m, 0.0, false), 64 * ddo::mib);
        }, ddo::bench::staged_source::file);
      }
      runs.push_back(std::move(run));
    }
    ddo::bench::add_ring_rates(bw, runs);
    ddo::bench::report_context ctx;
    ctx.device = gpu.name;
    ctx.command = opt.command;
    ctx.blocks = m.blocks;
    ctx.hidden = m.hidden;
    ctx.mlp = m.mlp;
    ctx.tensors_per_block = m.tensors.size();
    ctx.weight_bytes = m.total_bytes();
    ctx.steps = opt.steps;
    ctx.warmup = opt.warmup;
    ctx.bw = bw;
    ctx.file = file_base;
    std::fputs(ddo::bench::markdown(ctx, runs).c_str(), stdout);
    if (!opt.json_path.empty()) {
      ddo::write_file_atomically(opt.json_path, ddo::bench::json(ctx, runs));
    }
    ddo::flush_standard_output();  // a full disk is a failure, not success
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streaming_bench: error: %s\n", e.what());
    return 1;
  }
}
