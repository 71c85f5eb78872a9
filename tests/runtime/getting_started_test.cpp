// SPDX-License-Identifier: Apache-2.0
// The code of docs/getting-started.md, run on host_sim so the guide cannot drift from the API.
// (The guide's CUDA version differs only in the transport and in launching real kernels.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ddo/ddo.hpp"
#include "ddo/setup/enable_offload.hpp"
#include "ddo/transport/host_sim.hpp"

namespace {
// docs/policies.md, "Your own selector": the smallest candidates first, as many as fit.
struct smallest_first {
  using selector_category = ddo::weight_selector_tag;  // the opt-in: models ddo::weight_selector
  std::vector<std::size_t> select(std::span<const ddo::selection_candidate> candidates,
                                  std::uint64_t budget) const {
    std::vector<std::size_t> order(candidates.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return candidates[a].bytes < candidates[b].bytes;
    });
    std::vector<std::size_t> winners;
    std::uint64_t used = 0;
    for (std::size_t i : order)
      if (used + candidates[i].bytes <= budget) {
        used += candidates[i].bytes;
        winners.push_back(i);
      }
    std::sort(winners.begin(), winners.end());  // ascending, as the concept asks
    return winners;
  }
};
static_assert(ddo::weight_selector<smallest_first>);
}  // namespace

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
    options.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}},
                                {ddo::field_id::resident_module_budget_gb, 0.0}};
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

  // docs/getting-started.md, "The engine API" and docs/policies.md, "Your own selector".
  TEST_CASE("the guide's engine API: setup inputs, plan(), leases by name, a custom selector") {
    std::vector<std::vector<std::byte>> storage;
    ddo::weight_table model;
    for (int block = 0; block < 4; ++block)
      for (std::uint32_t rows : {64u, 128u}) {
        auto& bytes = storage.emplace_back(std::size_t{rows} * 256 * 2, std::byte{1});
        model.add(
            {.name = "blocks." + std::to_string(block) + ".w" + std::to_string(rows) + ".weight",
             .module_name = "",
             .kind = ddo::module_kind::linear,
             .type = ddo::dtype::bf16,
             .shape = {rows, 256},
             .bytes = 0,
             .source = ddo::host_source{bytes.data()}});
      }
    ddo::setup_options options;
    options.inputs.use_environment = false;    // resolution inputs: what resolve_settings takes
    options.inputs.component = "transformer";  // the component's route and policies
    options.inputs.overrides = {
        {ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}},
        {ddo::field_id::resident_module_budget_gb, 64.0 * 1024 / (1024.0 * 1024 * 1024)}};
    ddo::host_sim_transport transport({.device_capacity_bytes = 64 * ddo::mib});
    auto enabled = ddo::enable_offload<ddo::resident_selection<smallest_first>>(
        model, "low_ram_safe", options, transport);
    const ddo::offload_plan& plan = enabled->plan();  // what setup decided, weight by weight
    CHECK(plan.groups.size() == enabled->group_count());
    CHECK(plan.budgets.resident_selection == ddo::plan_selection::custom);
    CHECK(plan.total_bytes(ddo::placement::gpu_resident) <= plan.budgets.resident_budget_bytes);
    for (std::size_t w = 0; w < model.size(); ++w)
      if (plan.decisions[w].where == ddo::placement::gpu_resident)
        CHECK(model[w].bytes == 64 * 256 * 2);  // the smallest won
    auto compute = transport.make_stream();
    for (std::size_t g = 0; g < enabled->group_count(); ++g) {
      auto lease = enabled->acquire(g, transport.view(compute));
      CHECK(lease.group() == g);
      for (std::size_t i = 0; i < lease.size(); ++i)
        CHECK(lease.data(model[lease.weight_index(i)].name) == lease.data(i));
      lease.reset();  // release before the next acquire (dropping it does the same)
      CHECK_FALSE(lease);
    }
    transport.synchronize(transport.view(compute));
  }
}
