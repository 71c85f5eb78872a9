// SPDX-License-Identifier: Apache-2.0
// Adapters on the GPU: the merge kernel against the host reference (bit for bit), and the linear
// route's streamed and resident weights merged with it against the same reference.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>

#include "adapter/adapter_model.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/linear.hpp"
#include "gpu/gpu_support.hpp"
#include "gpu/lora_merge_kernel.hpp"

namespace lora_merge_gpu_test {

using offloader = ddo::basic_offloader<ddo::linear_transport>;

/// Device copies of host vectors, freed at scope exit.
struct device_buffer {
  void* p = nullptr;
  explicit device_buffer(const void* host, std::size_t n) {
    DDO_CUDA_TRY(cudaMalloc(&p, n));
    DDO_CUDA_TRY(cudaMemcpy(p, host, n, cudaMemcpyHostToDevice));
  }
  ~device_buffer() { (void)cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

/// One weight, its terms' factors (host and device) and the host reference's merged bytes.
struct merge_case {
  std::int64_t rows = 0, cols = 0;
  ddo::dtype type = ddo::dtype::bf16;
  std::vector<std::byte> base, want;
  std::vector<std::vector<std::byte>> stored;
  std::vector<std::unique_ptr<device_buffer>> dev;
  ddo::lora_merge_job job;

  merge_case(std::int64_t r, std::int64_t c, ddo::dtype t, const std::vector<std::int64_t>& ranks,
             const std::vector<ddo::dtype>& factor_types, std::uint32_t seed)
      : rows(r), cols(c), type(t) {
    base = lora_test_support::encode(
        lora_test_support::random_values(static_cast<std::size_t>(rows * cols), seed), type);
    std::vector<ddo::lora_term> host_terms;
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      const std::int64_t rank = ranks[k];
      stored.push_back(lora_test_support::encode(
          lora_test_support::random_values(static_cast<std::size_t>(rank * cols), seed + 7),
          factor_types[k]));
      stored.push_back(lora_test_support::encode(
          lora_test_support::random_values(static_cast<std::size_t>(rows * rank), seed + 9),
          factor_types[k]));
      const float scale = (k % 2 == 0 ? 0.37f : -0.61f) * static_cast<float>(rank % 5 + 1);
      host_terms.push_back(
          {stored[2 * k].data(), stored[2 * k + 1].data(), rank, scale, factor_types[k]});
    }
    for (const auto& bytes : stored)
      dev.push_back(std::make_unique<device_buffer>(bytes.data(), bytes.size()));
    for (std::size_t k = 0; k < host_terms.size(); ++k) {
      job.terms[k] = host_terms[k];
      job.terms[k].down = dev[2 * k]->p;
      job.terms[k].up = dev[2 * k + 1]->p;
    }
    job.type = type;
    job.rows = rows;
    job.cols = cols;
    job.term_count = host_terms.size();
    want = base;
    ddo::merge_lora(want.data(), type, rows, cols, host_terms);
  }

  /// The weight merged on the device by @p launch (on the legacy stream).
  [[nodiscard]] std::vector<std::byte> run(ddo::lora_merge_launcher launch) const {
    device_buffer w(base.data(), base.size());
    auto j = job;
    j.weight = static_cast<std::byte*>(w.p);
    launch(j, nullptr);
    std::vector<std::byte> got(base.size());
    DDO_CUDA_TRY(cudaMemcpy(got.data(), w.p, got.size(), cudaMemcpyDeviceToHost));
    return got;
  }
};

/// Reads every lease of two steps back to the host on the compute stream and counts the weights
/// that differ from @p want.
inline std::size_t mismatches(offloader& off, cudaStream_t s,
                              const std::vector<std::vector<std::byte>>& want) {
  std::vector<std::pair<std::size_t, std::vector<std::byte>>> got;
  got.reserve(2 * want.size());
  for (int step = 0; step < 2; ++step) {
    off.begin_step();
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, s);
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const auto w = lease.weight_index(i);
        got.emplace_back(w, std::vector<std::byte>(want[w].size()));
        DDO_CUDA_TRY(cudaMemcpyAsync(got.back().second.data(), lease.data(i), want[w].size(),
                                     cudaMemcpyDeviceToHost, s));
      }
    }
  }
  DDO_CUDA_TRY(cudaStreamSynchronize(s));
  std::size_t bad = 0;
  for (const auto& [w, bytes] : got) bad += bytes != want[w] ? 1 : 0;
  return bad;
}

TEST_SUITE("gpu") {
  TEST_CASE("the merge kernels give the host reference's bits at the tiles' edges") {
    // Shapes around the tiled kernel's 128 x 128 tile and 16-rank chunks (rows and columns not
    // multiples, a single row or column), ranks 1, 3, 16, 17, 64, 128, one to three terms,
    // every weight type and factor type, a negative scale; both kernels.
    DDO_SKIP_WITHOUT_GPU();
    struct shape {
      std::int64_t rows, cols;
      std::vector<std::int64_t> ranks;
    };
    const std::vector<shape> shapes = {
        {37, 300, {64, 3, 128}}, {128, 128, {16}},         {129, 257, {17, 1}}, {1, 130, {3}},
        {200, 1, {64}},          {256, 384, {128, 64, 1}}, {5, 7, {1}}};
    const ddo::dtype types[] = {ddo::dtype::bf16, ddo::dtype::f16, ddo::dtype::f32};
    std::uint32_t seed = 1;
    for (const auto& sh : shapes)
      for (auto type : types)
        for (std::size_t f = 0; f < 3; ++f) {
          CAPTURE(sh.rows);
          CAPTURE(sh.cols);
          CAPTURE(ddo::to_string(type));
          // The factor types rotate over the terms (f32, bf16, f16 in turn).
          std::vector<ddo::dtype> factor_types;
          for (std::size_t t = 0; t < sh.ranks.size(); ++t)
            factor_types.push_back(types[(f + 2 + t) % 3]);
          const auto c = merge_case(sh.rows, sh.cols, type, sh.ranks, factor_types, ++seed);
          CHECK(c.run(ddo_test::lora_merge_launcher()) == c.want);
          CHECK(c.run(ddo_test::lora_merge_elementwise_launcher()) == c.want);
          CHECK(c.want != c.base);
        }
  }

  TEST_CASE("linear: streamed and resident weights with adapters equal the reference merge") {
    DDO_SKIP_WITHOUT_GPU();
    auto m = adapter_model::make_model(8, 21);
    const auto a = adapter_model::make_adapter(*m, 64, 700, 5);
    const auto b = adapter_model::make_adapter(*m, 16, 800, 4);
    cudaStream_t s = nullptr;
    DDO_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (bool resident : {false, true}) {
      CAPTURE(resident);
      ddo::runtime_options o;
      o.staging_buffer_bytes = 4096;
      offloader off(ddo::linear_transport{}, m->table, resident ? m->all_resident() : m->plan, o);
      CHECK_THROWS_WITH_AS(off.attach_adapter("a", a), doctest::Contains("set_lora_merge_launcher"),
                           ddo::usage_error);
      off.set_lora_merge_launcher(ddo_test::lora_merge_launcher());
      off.attach_adapter("a", a, 0.5f);
      off.attach_adapter("b", b, 2.0f);
      CHECK(mismatches(off, s, adapter_model::expected(*m, {{a.get(), 0.5f}, {b.get(), 2.0f}})) ==
            0);
      off.set_adapter_scale("b", -1.0f);
      CHECK(mismatches(off, s, adapter_model::expected(*m, {{a.get(), 0.5f}, {b.get(), -1.0f}})) ==
            0);
      off.detach_adapter("a");
      off.detach_adapter("b");
      CHECK(mismatches(off, s, m->base) == 0);
    }
    DDO_CUDA_TRY(cudaStreamDestroy(s));
  }

  TEST_CASE("linear: a captured step merges in its slots (graph streaming), bit for bit") {
    // 8 streamed groups over 3 slots: the first 3 positions merge on ddo's merge stream before
    // each launch, the others as kernel nodes on the graph's merge branch. Each replay's leases
    // are copied (device to device, captured) to a buffer read back after the replay.
    DDO_SKIP_WITHOUT_GPU();
    auto m = adapter_model::make_model(8, 22);
    const auto a = adapter_model::make_adapter(*m, 64, 900, 5, ddo::dtype::bf16);
    const auto b = adapter_model::make_adapter(*m, 16, 1000, 4);
    const auto want = adapter_model::expected(*m, {{a.get(), 0.75f}, {b.get(), -1.5f}});
    std::size_t total = 0;
    for (const auto& w : want) total += w.size();
    cudaStream_t s = nullptr;
    DDO_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::byte* out = nullptr;
    DDO_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&out), total));
    std::size_t bad = 0;
    {
      ddo::runtime_options o;
      o.slot_count = 3;
      o.poison_slots = true;
      o.poison_released_slots = true;
      offloader off(ddo::linear_transport{}, m->table, adapter_model::pinned_plan(*m), o);
      REQUIRE(off.slot_count() == 3);
      off.set_lora_merge_launcher(ddo_test::lora_merge_launcher());
      off.attach_adapter("a", a, 0.75f);
      off.attach_adapter("b", b, -1.5f);
      CHECK(mismatches(off, s, want) == 0);  // eager steps first
      std::vector<std::pair<std::size_t, std::size_t>> items;  // (offset in out, weight)
      DDO_CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      std::size_t used = 0;
      for (std::size_t g = 0; g < off.group_count(); ++g) {
        auto lease = off.acquire(g, s);
        for (std::size_t i = 0; i < lease.size(); ++i) {
          const auto w = lease.weight_index(i);
          DDO_CUDA_TRY(cudaMemcpyAsync(out + used, lease.data(i), want[w].size(),
                                       cudaMemcpyDeviceToDevice, s));
          items.emplace_back(used, w);
          used += want[w].size();
        }
      }
      cudaGraph_t graph = nullptr;
      DDO_CUDA_TRY(cudaStreamEndCapture(s, &graph));
      REQUIRE(off.graph_mode());
      cudaGraphExec_t exec = nullptr;
      DDO_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
      std::vector<std::byte> host(total);
      for (int r = 0; r < 5; ++r) {
        DDO_CUDA_TRY(cudaMemsetAsync(out, 0x5A, total, s));  // a replay that skips a copy fails
        off.launch_graph(exec, s);
        DDO_CUDA_TRY(cudaStreamSynchronize(s));
        DDO_CUDA_TRY(cudaMemcpy(host.data(), out, total, cudaMemcpyDeviceToHost));
        for (const auto& [at, w] : items)
          bad += std::memcmp(host.data() + at, want[w].data(), want[w].size()) != 0 ? 1 : 0;
      }
      off.release_device();  // leaves graph mode: ddo's graph-side work ends first
      DDO_CUDA_TRY(cudaGraphExecDestroy(exec));
      DDO_CUDA_TRY(cudaGraphDestroy(graph));
    }
    CHECK(bad == 0);
    DDO_CUDA_TRY(cudaFree(out));
    DDO_CUDA_TRY(cudaStreamDestroy(s));
  }
}

}  // namespace lora_merge_gpu_test
