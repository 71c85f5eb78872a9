// SPDX-License-Identifier: Apache-2.0
// Config source objects into a running offloader: resolve_from_sources, then the one call
// (prepare_offload(...).start(), what the offloader's config-source constructor did before
// issue 39 left five ways in).
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/transport/host_sim.hpp"

TEST_SUITE("runtime") {
  TEST_CASE("config sources resolve, plan and stream the right bytes through prepare_offload") {
    std::mt19937 rng(std::random_device{}());
    std::vector<std::vector<std::byte>> storage;
    storage.reserve(8);
    ddo::weight_table table;
    for (int block = 0; block < 4; ++block)
      for (const char* proj : {"attn.to_q", "ff.up"}) {
        auto& bytes = storage.emplace_back(128 * 128 * 2);
        for (auto& b : bytes) b = static_cast<std::byte>(rng() | 1);
        table.add({.name = "blocks." + std::to_string(block) + "." + proj + ".weight",
                   .module_name = "",
                   .kind = ddo::module_kind::linear,
                   .type = ddo::dtype::bf16,
                   .shape = {128, 128},
                   .bytes = 0,
                   .source = ddo::host_source{bytes.data()}});
      }
    ddo::explicit_source code;
    code.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}},
                      {ddo::field_id::resident_module_budget_gb, 0.0},
                      {ddo::field_id::skip_modules_pattern, std::vector<std::string>{R"(^blocks\.3\.ff\.up$)"}}};
    ddo::resolve_context context;
    context.running_on_wsl = false;
    context.detected_ram_gb = 64.0;
    auto enabled = ddo::prepare_offload(table, ddo::resolve_from_sources(context, code),
                                        ddo::setup_options{}, ddo::host_sim_transport{})
                       .start();
    auto& offloader = *enabled;
    CHECK(enabled.settings.config.small_tensor_threshold_bytes == 1024);
    CHECK(enabled.settings.provenance.of(ddo::field_id::small_tensor_threshold_bytes).source ==
          ddo::origin::config);
    CHECK(offloader.group_count() == 4);
    CHECK(offloader.plan().decisions[*table.find("blocks.3.ff.up.weight")].where ==
          ddo::placement::gpu_resident);
    auto& transport = offloader.transport();
    auto compute = transport.make_stream();
    std::size_t checked = 0;
    int wrong = 0;
    for (std::size_t g = 0; g < offloader.group_count(); ++g) {
      auto lease = offloader.acquire(g, transport.view(compute));
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::byte* weight = lease.data(i);
        const auto& source = storage[lease.weight_index(i)];
        transport.enqueue(transport.view(compute), [weight, &source, &wrong] {
          if (std::memcmp(weight, source.data(), source.size()) != 0) ++wrong;
        });
        ++checked;
      }
    }
    transport.synchronize(transport.view(compute));
    CHECK(checked == 8);
    CHECK(wrong == 0);
  }
}
