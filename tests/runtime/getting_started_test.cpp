// SPDX-License-Identifier: Apache-2.0
// The code of docs/getting-started.md, run on host_sim so the guide cannot drift from the API.
// (The guide's CUDA version differs only in the transport and in launching real kernels.)
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ddo/ddo.hpp"
#include "ddo/runtime/enable_offload.hpp"
#include "ddo/transport/host_sim.hpp"

TEST_SUITE("runtime") {
  TEST_CASE("the getting-started guide's engine loop runs and sees the right bytes") {
    // 1. Describe the model: the engine's own host tensors (here: random bf16 bytes).
    std::mt19937 rng(std::random_device{}());
    std::vector<std::vector<std::byte>> storage;
    storage.reserve(4 * 6);
    ddo::weight_table model;
    for (int block = 0; block < 6; ++block)
      for (const char* proj : {"attn.to_q", "attn.to_k", "ff.up", "ff.down"}) {
        auto& bytes = storage.emplace_back(256 * 256 * 2);
        for (auto& b : bytes) b = static_cast<std::byte>(rng() | 1);
        model.add({.name = "blocks." + std::to_string(block) + "." + proj + ".weight",
                   .module_name = "",
                   .kind = ddo::module_kind::linear,
                   .type = ddo::dtype::bf16,
                   .shape = {256, 256},
                   .bytes = 0,
                   .source = ddo::host_source{bytes.data()}});
      }

    // 2. Enable offloading with a preset (settings resolved preset -> config -> DDO_* env).
    ddo::setup_options options;
    options.inputs.use_environment = false;  // the guide's code reads DDO_*; tests stay hermetic
    options.inputs.overrides = {{"small_tensor_threshold_bytes", std::int64_t{1024}},
                                {"resident_module_budget_gb", 0.0}};
    // The guide uses ddo::linear_transport on a GPU. A simulated 4 MiB device: the 3 MiB model
    // does not fit beside the ring, so "auto" has to stream it.
    ddo::host_sim_transport transport({.device_capacity_bytes = 4 * ddo::mib});
    auto enabled = ddo::enable_offload(model, std::nullopt, options, transport);  // DDO_PRESET, else auto
    auto& offloader = *enabled.offloader;
    CHECK(offloader.group_count() == 6);

    // 3. Each step: acquire the groups in order on the compute stream; kernels read lease.data(i);
    //    dropping the lease releases the group after that work (no host sync).
    auto compute = transport.make_stream();
    int wrong = 0;
    for (int step = 0; step < 3; ++step)
      for (std::size_t g = 0; g < offloader.group_count(); ++g) {
        auto lease = offloader.acquire(g, transport.view(compute));
        for (std::size_t i = 0; i < lease.size(); ++i) {
          const std::byte* weight = lease.data(i);
          const auto& source = storage[lease.weight_index(i)];
          transport.enqueue(transport.view(compute), [weight, &source, &wrong] {
            if (std::memcmp(weight, source.data(), source.size()) != 0) ++wrong;
          });
        }
      }
    transport.synchronize(transport.view(compute));
    CHECK(wrong == 0);
    const auto metrics = offloader.metrics(true);
    CHECK(metrics.totals.bytes() >= 3 * model.total_bytes() / 2);  // most of it streamed, 3 steps
  }
}
