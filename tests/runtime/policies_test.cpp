// SPDX-License-Identifier: Apache-2.0
// Selections fixed at compile time through ddo::offloader's template arguments, the three types
// docs/policies.md shows, and the transport choice: a fixed transport refuses another `backend`,
// with_offload_backend chooses it.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <type_traits>

#include "ddo/setup/enable_offload.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/runtime/transport_backend.hpp"
#include "ddo/transport/fault_injection.hpp"
#include "ddo/transport/host_sim.hpp"
#include "random_bytes.hpp"

namespace policies_test {
/// A host_sim under another name: names must not decide the backend.
struct renamed_sim : ddo::host_sim_transport {
  [[nodiscard]] std::string_view name() const noexcept { return "linear"; }
};
/// An engine's own transport (a host_sim here) that says it serves the linear backend.
struct own_transport : ddo::host_sim_transport {
  [[nodiscard]] std::string_view name() const noexcept { return "own"; }
};
}  // namespace policies_test

template <>
struct ddo::transport_backend<policies_test::own_transport> {
  static constexpr ddo::offload_backend value = ddo::offload_backend::linear;
};

namespace {

// The types of docs/policies.md (tests/compile_fail/offloader_policies_reference_ok.cpp too).
using config_driven = ddo::offloader<ddo::linear_transport>;
using spread_first = ddo::offloader<ddo::linear_transport, ddo::resident_selection<ddo::spread_selector>,
                                    ddo::pin_selection<ddo::first_selector>>;
using largest_sim = ddo::offloader<ddo::host_sim_transport, ddo::largest_selector>;

/// Twelve blocks of differently sized linear weights. The sizes are fixed (a pattern that puts the
/// largest weights in the later blocks, so largest, spread and first pick different sets); only the
/// bytes are random. Random sizes made the selections agree now and then, and the test flaky.
struct model {
  ddo::weight_table table;
  std::vector<std::vector<std::byte>> bytes;
  explicit model(std::uint32_t seed) {
    std::mt19937 rng(seed);
    bytes.reserve(64);
    for (int b = 0; b < 12; ++b)
      for (const char* m : {"attn", "ff"}) {
        const std::int64_t step = (b * 5 + (m[0] == 'f' ? 3 : 0)) % 8 + b / 3;
        const std::int64_t elems = 4096 * (1 + step);
        auto& v = bytes.emplace_back(static_cast<std::size_t>(elems * 2));
        ddo_test::fill_random_bytes(v, rng);
        ddo::weight_info w;
        w.name = "blocks." + std::to_string(b) + "." + m + ".weight";
        w.module_name = "blocks." + std::to_string(b) + "." + m;
        w.kind = ddo::module_kind::linear;
        w.type = ddo::dtype::bf16;
        w.shape = {elems};
        w.source = ddo::host_source{v.data()};
        table.add(w);
      }
  }
};

ddo::setup_options quiet(const std::vector<ddo::field_override>& overrides) {
  ddo::setup_options o;
  o.inputs.use_environment = false;
  o.inputs.overrides = overrides;
  o.ram_bytes = 2 * ddo::gib;
  return o;
}

std::vector<ddo::placement> placements(const ddo::offload_plan& p) {
  std::vector<ddo::placement> out;
  for (const auto& d : p.decisions) out.push_back(d.where);
  return out;
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("a bare selector fixes both selections; resident_selection and pin_selection one each") {
    static_assert(std::is_same_v<
                  largest_sim::planner_type,
                  ddo::by_profile_planner<ddo::basic_residency_planner<ddo::largest_selector>>>);
    static_assert(std::is_same_v<
                  spread_first::planner_type,
                  ddo::by_profile_planner<ddo::basic_residency_planner<ddo::spread_selector>>>);
    static_assert(std::is_same_v<spread_first::pin_selector_type, ddo::basic_pin_selector<ddo::first_selector>>);
    static_assert(std::is_same_v<config_driven::planner_type, ddo::default_offload_planner>);
    static_assert(std::is_same_v<ddo::offloader<ddo::host_sim_transport, ddo::first_selector>::pin_selector_type,
                                 ddo::basic_pin_selector<ddo::first_selector>>);
    CHECK(true);
  }

  TEST_CASE("a compiled-in selection wins over the config and plans as the config would") {
    const model m(std::random_device{}());
    const std::uint64_t third = m.table.total_bytes() / 3;
    // Budgets that make the selectors disagree; the config asks for "largest" everywhere.
    const std::vector<ddo::field_override> largest = {
        {ddo::field_id::resident_module_budget_gb, ddo::bytes_to_gib(third)},
        {ddo::field_id::pin_weight_budget_gb, ddo::bytes_to_gib(third)},
        {ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}},
        {ddo::field_id::resident_module_selection, ddo::selection::largest},
        {ddo::field_id::pin_weight_selection, ddo::selection::largest},
        {ddo::field_id::pin_cpu_memory, true}};
    auto spread_first_config = largest;
    spread_first_config[3] = {ddo::field_id::resident_module_selection, ddo::selection::spread};
    spread_first_config[4] = {ddo::field_id::pin_weight_selection, ddo::selection::first};

    ddo::host_sim_transport sim({.device_capacity_bytes = 256 * ddo::mib});
    using compiled = ddo::offloader<ddo::host_sim_transport, ddo::resident_selection<ddo::spread_selector>,
                                    ddo::pin_selection<ddo::first_selector>>;
    auto fixed = ddo::enable_offload<ddo::resident_selection<ddo::spread_selector>,
                                     ddo::pin_selection<ddo::first_selector>>(m.table, "auto", quiet(largest), sim);
    static_assert(std::is_same_v<decltype(fixed)::offloader_type, compiled>);
    auto by_config = ddo::enable_offload(m.table, "auto", quiet(spread_first_config), sim);
    auto config_largest = ddo::enable_offload(m.table, "auto", quiet(largest), sim);

    CHECK(fixed->plan().budgets.resident_selection == ddo::plan_selection::spread);
    CHECK(fixed->plan().budgets.pin_selection == ddo::plan_selection::first);
    CHECK(config_largest->plan().budgets.resident_selection == ddo::plan_selection::largest);
    CHECK(placements(fixed->plan()) == placements(by_config->plan()));
    CHECK(placements(fixed->plan()) != placements(config_largest->plan()));
  }

  TEST_CASE("a transport fixed at compile time refuses another backend; unset backend is fine") {
    const model m(std::random_device{}());
    ddo::host_sim_transport sim;
    CHECK_NOTHROW((void)ddo::enable_offload(m.table, "auto", quiet({}), sim));
    CHECK_NOTHROW((void)ddo::enable_offload(m.table, "auto", quiet({{ddo::field_id::backend, ddo::offload_backend::host_sim}}), sim));
    CHECK_THROWS_WITH_AS((void)ddo::enable_offload(m.table, "auto",
                                                   quiet({{ddo::field_id::backend, ddo::offload_backend::linear}}), sim),
                         doctest::Contains("fixed the host_sim transport"), ddo::config_error);
  }

  TEST_CASE("the backend a transport serves is a trait, not its name") {
    using ddo::offload_backend;
    static_assert(ddo::backend_served_by<ddo::linear_transport>() == offload_backend::linear);
    static_assert(ddo::backend_served_by<ddo::host_sim_transport>() == offload_backend::host_sim);
    static_assert(ddo::backend_served_by<ddo::vmm_transport>() == offload_backend::vmm);
    static_assert(ddo::backend_served_by<ddo::nvme_transport<ddo::host_sim_transport>>() ==
                  offload_backend::nvme);
    static_assert(ddo::backend_served_by<ddo::nvme_transport<ddo::linear_transport>>() ==
                  offload_backend::nvme);
    static_assert(ddo::backend_served_by<policies_test::renamed_sim>() == offload_backend::host_sim);
    static_assert(ddo::backend_served_by<policies_test::own_transport>() == offload_backend::linear);
    static_assert(!ddo::backend_served_by<ddo::fault_injection_transport<ddo::host_sim_transport>>());
#if defined(__linux__)
    // host_sim's VMM mode: the vmm backend simulated, not host_sim's copies.
    static_assert(ddo::transport_serves_backend<ddo::host_sim_vmm_transport>(offload_backend::vmm));
    static_assert(!ddo::transport_serves_backend<ddo::host_sim_vmm_transport>(offload_backend::host_sim));
#endif
    static_assert(!ddo::transport_serves_backend<ddo::host_sim_transport>(offload_backend::vmm));

    // A host_sim that calls itself "linear": the trait decides, so backend host_sim is honoured
    // and backend linear refused (by name it was the other way round).
    const model m(std::random_device{}());
    policies_test::renamed_sim renamed;
    CHECK_NOTHROW((void)ddo::enable_offload(
        m.table, "auto", quiet({{ddo::field_id::backend, offload_backend::host_sim}}), renamed));
    CHECK_THROWS_WITH_AS((void)ddo::enable_offload(
                             m.table, "auto",
                             quiet({{ddo::field_id::backend, offload_backend::linear}}), renamed),
                         doctest::Contains("fixed the linear transport"), ddo::config_error);
    // An engine's transport says what it serves by specialising ddo::transport_backend.
    policies_test::own_transport own;
    CHECK_NOTHROW((void)ddo::enable_offload(
        m.table, "auto", quiet({{ddo::field_id::backend, offload_backend::linear}}), own));
    CHECK_THROWS_WITH_AS((void)ddo::enable_offload(
                             m.table, "auto",
                             quiet({{ddo::field_id::backend, offload_backend::host_sim}}), own),
                         doctest::Contains("fixed the own transport"), ddo::config_error);
  }

  TEST_CASE("with_offload_backend calls the engine back with the transport backend names") {
    const model m(std::random_device{}());
    auto options = quiet({{ddo::field_id::backend, ddo::offload_backend::host_sim}});
    options.host_sim.device_capacity_bytes = 128 * ddo::mib;
    const std::string name = ddo::with_offload_backend<ddo::first_selector>(
        m.table, std::nullopt, options, [&](auto& enabled) {
          using offloader_type = typename std::remove_reference_t<decltype(enabled)>::offloader_type;
          static_assert(std::is_same_v<typename offloader_type::pin_selector_type,
                                       ddo::basic_pin_selector<ddo::first_selector>>);
          // Run it: every group's bytes arrive.
          auto& t = enabled->transport();
          auto s = t.make_stream();
          int wrong = 0;
          for (std::size_t g = 0; g < enabled->group_count(); ++g) {
            auto lease = enabled->acquire(g, t.view(s));
            for (std::size_t i = 0; i < lease.size(); ++i) {
              std::vector<std::byte> back(m.table[lease.weight_index(i)].bytes);
              t.copy_to_host(back.data(), lease.data(i), back.size(), t.view(s));
              t.synchronize(t.view(s));
              if (std::memcmp(back.data(), m.bytes[lease.weight_index(i)].data(), back.size()) != 0) ++wrong;
            }
          }
          CHECK(wrong == 0);
          return std::string(t.name());
        });
    CHECK(name == "host_sim");
    // backend nvme: the file route over a CUDA transport (nvme_transport<vmm_transport> under
    // nvme_baseline); without a GPU making that transport fails with the CUDA call named.
    if (!ddo::query_cuda_availability().available)
      CHECK_THROWS_AS((void)ddo::with_offload_backend(m.table, std::nullopt,
                                                      quiet({{ddo::field_id::backend, ddo::offload_backend::nvme}}),
                                                      [](auto& e) { return e->group_count(); }),
                      ddo::cuda_error);
  }
}
