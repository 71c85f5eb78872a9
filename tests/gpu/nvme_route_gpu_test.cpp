// SPDX-License-Identifier: Apache-2.0
// The file route on the GPU (transport/nvme.hpp): weights read from files in the build
// directory into the transport's pinned staging slots and copied to the device, through the
// linear ring and through the VMM transport (nvme_baseline's route); every byte read back and
// compared; pinned and device bytes back at their start after teardown. Skips without a GPU.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../runtime/nvme_file_model.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/transport/linear.hpp"
#include "ddo/transport/nvme.hpp"
#include "ddo/transport/vmm.hpp"
#include "gpu_support.hpp"

namespace {

struct cuda_stream {
  cudaStream_t s = nullptr;
  cuda_stream() { DDO_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~cuda_stream() { DDO_CUDA_TRY_NOTHROW(cudaStreamDestroy(s)); }
};

ddo::nvme_options gpu_nvme_options() {
  ddo::nvme_options o;
  o.staging_slot_bytes = 8 * ddo::mib;  // smaller than the largest weight: pieces span fills
  o.read_threads = 8;
  o.request_bytes = 1 * ddo::mib;
  return o;
}

/// Runs three steps (in order, reversed, shuffled), reading every weight of every lease back
/// to pinned host memory on the compute stream; returns the mismatching weights.
template <class T>
std::size_t run_and_compare(ddo::basic_offloader<T>& off, const ddo_test::file_model& m,
                            std::uint64_t* compared) {
  cuda_stream compute;
  std::uint64_t largest = 0;
  for (const auto& e : m.expected) largest = std::max<std::uint64_t>(largest, e.size());
  std::byte* host = nullptr;
  const std::size_t per_group = m.plan.groups.front().weights.size();
  const std::uint64_t capacity = largest * per_group;
  DDO_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&host), capacity, cudaHostAllocDefault));
  std::size_t bad = 0;
  std::mt19937 rng(29);
  for (int step = 0; step < 3; ++step) {
    std::vector<std::size_t> order(off.group_count());
    for (std::size_t g = 0; g < order.size(); ++g) order[g] = g;
    if (step == 1) std::reverse(order.begin(), order.end());
    if (step == 2) std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t g : order) {
      std::memset(host, 0x3C, capacity);
      std::vector<std::pair<std::uint64_t, std::size_t>> items;
      {
        auto lease = off.acquire(g, compute.s);
        std::uint64_t used = 0;
        for (std::size_t i = 0; i < lease.size(); ++i) {
          const std::size_t w = lease.weight_index(i);
          const std::size_t n = m.expected[w].size();
          DDO_CUDA_TRY(cudaMemcpyAsync(host + used, lease.data(i), n, cudaMemcpyDeviceToHost, compute.s));
          items.emplace_back(used, w);
          used += n;
        }
      }
      DDO_CUDA_TRY(cudaStreamSynchronize(compute.s));
      for (const auto& [at, w] : items) {
        if (std::memcmp(host + at, m.expected[w].data(), m.expected[w].size()) != 0) ++bad;
        *compared += m.expected[w].size();
      }
    }
  }
  DDO_CUDA_TRY(cudaFreeHost(host));
  return bad;
}

std::uint64_t model_bytes(const ddo_test::file_model& m) {
  std::uint64_t b = 0;
  for (const auto& e : m.expected) b += e.size();
  return b;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("file route on the GPU, linear ring: every byte from sharded files") {
    DDO_SKIP_WITHOUT_GPU();
    const ddo_test::file_model m(41, 8, 6, 6 * ddo::mib);  // ~30 MiB groups, 8 groups, 2 shards
    ddo::nvme_transport<ddo::linear_transport> t(ddo::linear_transport{}, gpu_nvme_options());
    const auto pinned0 = t.ledger().in_use(ddo::ledger_kind::pinned);
    const auto device0 = t.ledger().in_use(ddo::ledger_kind::device);
    std::uint64_t compared = 0;
    {
      ddo::runtime_options o;
      o.poison_slots = true;
      ddo::basic_offloader<ddo::nvme_transport<ddo::linear_transport>> off(t, m.table, m.plan, o);
      MESSAGE("file route: " << t.file_io_description());
      CHECK(run_and_compare(off, m, &compared) == 0);
      const auto s = t.file_stats();
      MESSAGE("read " << s.bytes_read << " bytes in " << s.read_seconds << " s; delivered "
                      << s.bytes_delivered << " bytes in " << s.slot_fills << " slot fills");
    }
    CHECK(compared == 3 * model_bytes(m));
    CHECK(t.ledger().in_use(ddo::ledger_kind::pinned) == pinned0);
    CHECK(t.ledger().in_use(ddo::ledger_kind::device) == device0);
  }

  TEST_CASE("file route on the GPU feeds the VMM transport (nvme_baseline): every byte") {
    DDO_SKIP_WITHOUT_GPU();
    const ddo_test::file_model m(42, 6, 5, 4 * ddo::mib);
    ddo::vmm_options vo;
    vo.window.budget_bytes = 256 * ddo::mib;
    ddo::nvme_transport<ddo::vmm_transport> t(ddo::vmm_transport(vo), gpu_nvme_options());
    const auto pinned0 = t.ledger().in_use(ddo::ledger_kind::pinned);
    std::uint64_t compared = 0;
    {
      ddo::runtime_options o;
      o.poison_slots = true;
      o.slot_count = 2;
      ddo::basic_offloader<ddo::nvme_transport<ddo::vmm_transport>> off(t, m.table, m.plan, o);
      MESSAGE("file route over VMM: " << t.file_io_description());
      CHECK(run_and_compare(off, m, &compared) == 0);
    }
    CHECK(compared == 3 * model_bytes(m));
    CHECK(t.ledger().in_use(ddo::ledger_kind::pinned) == pinned0);
    CHECK(t.upstream().live_handles() == 0);
  }
}
