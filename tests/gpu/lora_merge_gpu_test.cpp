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
  TEST_CASE("the merge kernel gives the host reference's bits") {
    DDO_SKIP_WITHOUT_GPU();
    const std::int64_t rows = 37, cols = 300;
    for (auto type : {ddo::dtype::bf16, ddo::dtype::f16, ddo::dtype::f32}) {
      CAPTURE(ddo::to_string(type));
      const auto base = lora_test_support::encode(
          lora_test_support::random_values(static_cast<std::size_t>(rows * cols), 1), type);
      std::vector<std::vector<float>> factors;
      std::vector<ddo::lora_term> host_terms;
      for (std::int64_t rank : {64, 3, 128}) {
        factors.push_back(
            lora_test_support::random_values(static_cast<std::size_t>(rank * cols), 7));
        factors.push_back(
            lora_test_support::random_values(static_cast<std::size_t>(rows * rank), 9));
        host_terms.push_back({nullptr, nullptr, rank, 0.37f * static_cast<float>(rank % 5 + 1)});
      }
      std::vector<std::unique_ptr<device_buffer>> dev;
      ddo::lora_merge_job job;
      // The second term's factors kept in bf16 (lora_term::factor_type), the others in f32.
      std::vector<std::vector<std::byte>> stored;
      for (std::size_t t = 0; t < host_terms.size(); ++t) {
        const auto type = t == 1 ? ddo::dtype::bf16 : ddo::dtype::f32;
        for (std::size_t f = 0; f < 2; ++f)
          stored.push_back(lora_test_support::encode(factors[2 * t + f], type));
        host_terms[t].down = stored[2 * t].data();
        host_terms[t].up = stored[2 * t + 1].data();
        host_terms[t].factor_type = type;
        for (std::size_t f = 0; f < 2; ++f)
          dev.push_back(std::make_unique<device_buffer>(stored[2 * t + f].data(),
                                                        stored[2 * t + f].size()));
        job.terms[t] = host_terms[t];
        job.terms[t].down = dev[2 * t]->p;
        job.terms[t].up = dev[2 * t + 1]->p;
      }
      device_buffer w(base.data(), base.size());
      job.weight = static_cast<std::byte*>(w.p);
      job.type = type;
      job.rows = rows;
      job.cols = cols;
      job.term_count = host_terms.size();
      ddo_test::lora_merge_launcher()(job, nullptr);
      std::vector<std::byte> got(base.size());
      DDO_CUDA_TRY(cudaMemcpy(got.data(), w.p, got.size(), cudaMemcpyDeviceToHost));
      auto want = base;
      ddo::merge_lora(want.data(), type, rows, cols, host_terms);
      CHECK(got == want);
      CHECK(got != base);
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
