// SPDX-License-Identifier: Apache-2.0
// The native VMM route (vmm_fast_runtime) on host_sim's VMM mode, one test per field: each fails
// if the field it names is ignored. The conformance cases (every byte, random orders, setup
// failure, refusals) are in vmm_conformance.hpp and run here through vmm_host_sim_test.cpp.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <variant>

#include "ddo/config/validate.hpp"
#include "ddo/model/file_fault_hook.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/component_ownership.hpp"
#include "ddo/runtime/native_vmm_options.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/host_sim_vmm.hpp"
#include "runtime/runtime_fixtures.hpp"

namespace vmm_native_test {

/// Counts the bytes ddo reads from model files.
struct counting_reads final : ddo::file_fault_hook {
  std::atomic<std::uint64_t> bytes{0};
  ddo::file_read_fault before_read(const std::string&, std::uint64_t, std::uint64_t length) override {
    bytes += length;
    return {};
  }
};

constexpr std::uint64_t window = 256 * 1024;

inline ddo::host_sim_vmm_transport roomy_transport() {
  ddo::host_sim_vmm_options o;
  o.window.budget_bytes = 256 * ddo::mib;
  return ddo::host_sim_vmm_transport(o);
}

/// Native options with nothing but the windows (each test turns on the part it checks).
inline ddo::runtime_options windows_only(std::uint64_t total = 4 * window) {
  ddo::runtime_options o;
  o.slot_count = 2;
  o.poison_slots = true;
  o.native_vmm.enabled = true;
  o.native_vmm.window_bytes = window;
  o.native_vmm.segment_bytes = window;
  o.native_vmm.staging_total_bytes = total;
  return o;
}

/// A model whose streamed weights all have one placement.
inline std::unique_ptr<ddo_test::synthetic_model> model_of(ddo::placement where, std::uint32_t seed,
                                                           std::uint64_t max_bytes = 200000) {
  ddo_test::model_spec spec;
  spec.groups = 5;
  spec.min_bytes = 20000;
  spec.max_bytes = max_bytes;
  spec.seed = seed;
  spec.where = [where](std::size_t, std::size_t) { return where; };
  return ddo_test::make_model(spec);
}

/// Runs @p steps steps of every group, reading every byte back; returns the mismatches.
template <class Off>
std::size_t run_and_compare(Off& off, ddo::host_sim_vmm_transport& t, const ddo_test::synthetic_model& m,
                            int steps) {
  auto compute = t.make_stream();
  const auto v = ddo::host_sim_vmm_transport::view(compute);
  std::vector<std::vector<std::byte>> back;
  std::vector<std::size_t> which;
  for (int s = 0; s < steps; ++s) {
    off.begin_step();
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, v);
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::size_t w = lease.weight_index(i);
        auto& out = back.emplace_back(m.expected[w].size());
        which.push_back(w);
        t.copy_to_host(out.data(), lease.data(i), out.size(), v);
      }
      t.synchronize(v);  // test-only: the host vectors are not registered memory
    }
  }
  std::size_t bad = 0;
  for (std::size_t k = 0; k < back.size(); ++k)
    if (back[k] != m.expected[which[k]]) ++bad;
  return bad;
}

inline std::uint64_t registered(const ddo::host_sim_vmm_transport& t) {
  return t.ledger().in_use(ddo::ledger_kind::registered);
}

}  // namespace vmm_native_test

TEST_SUITE("transport") {
  using namespace vmm_native_test;

  TEST_CASE("native vmm_staging_buffer_gb: the TOTAL staging is cut into whole registered windows") {
    auto m = model_of(ddo::placement::pageable_host, 401);
    // Named elements, not a structured binding: doctest's CAPTURE captures in a lambda,
    // which clang before 16 cannot do for a binding.
    for (const auto& row : {std::pair<std::uint64_t, std::size_t>{2 * window, 2},
                                        {5 * window + window / 2, 5}, {9 * window, 9}}) {
      const auto& total = std::get<0>(row);
      const auto& windows = std::get<1>(row);
      CAPTURE(total);
      auto t = roomy_transport();
      {
        ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, m->plan, windows_only(total));
        const auto metrics = off.metrics();
        CHECK(metrics.native.windows == windows);
        CHECK(metrics.staging_bytes == windows * window);
        // The windows are registered once: they are the route's registered host memory.
        CHECK(registered(t) == windows * window);
        CHECK(run_and_compare(off, t, *m, 2) == 0);
        CHECK(off.metrics().native.window_bytes_staged > 0);
      }
      CHECK(registered(t) == 0);
    }
    // The total is a ceiling: ddo registers and cycles at most window_cap_bytes of it (whole
    // windows, at least two), a ring small enough to stay in the CPU's cache.
    for (const auto& row : {std::pair<std::uint64_t, std::size_t>{3 * window, 3}, {window, 2}}) {
      const auto& cap = std::get<0>(row);
      const auto& windows = std::get<1>(row);
      CAPTURE(cap);
      auto t = roomy_transport();
      auto o = windows_only(9 * window);
      o.native_vmm.window_cap_bytes = cap;
      {
        ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, m->plan, o);
        const auto metrics = off.metrics();
        CHECK(metrics.native.windows == windows);
        CHECK(metrics.native.windows_allowed == 9);
        CHECK(metrics.staging_bytes == windows * window);
        CHECK(registered(t) == windows * window);
        CHECK(run_and_compare(off, t, *m, 2) == 0);
      }
      CHECK(registered(t) == 0);
    }
    // Windows larger than a ring chunk (16 MiB) are cut into chunks: the bytes still arrive.
    {
      auto t = roomy_transport();
      auto o = windows_only(2 * 32 * ddo::mib);
      o.native_vmm.window_bytes = 32 * ddo::mib;
      {
        ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, m->plan, o);
        CHECK(off.metrics().native.windows == 2);
        CHECK(run_and_compare(off, t, *m, 2) == 0);
      }
      CHECK(registered(t) == 0);
    }
    // From the config: 0.625 GiB of total staging is ten 64 MiB windows, not two buffers of it.
    ddo::dynamic_offload_config c;
    c.execution_mode = ddo::exec_mode::vmm_runtime;
    c.vmm_native_transport = true;
    c.vmm_staging_buffer_gb = 0.625;
    const auto n = ddo::native_vmm_options_from(c);
    CHECK(n.enabled);
    CHECK(n.staging_total_bytes / n.window_bytes == 10);
    CHECK(n.window_cap_bytes == 2 * ddo::native_window_bytes);
  }

  TEST_CASE("native vmm_source_cache_gb: file weights are read once and retained up to the ceiling") {
    auto m = model_of(ddo::placement::file, 402);
    std::uint64_t file_bytes = 0;
    for (const auto& e : m->expected) file_bytes += e.size();
    for (const bool retain : {false, true}) {
      CAPTURE(retain);
      auto t = roomy_transport();
      counting_reads reads;
      auto o = windows_only();
      o.slot_count = 1;      // one slot, no prefetch: every acquire loads its group, so the
      o.prefetch_depth = 0;  // file reads per step are exact
      o.file_faults = &reads;
      o.native_vmm.source_cache_bytes = retain ? 4 * ddo::mib : 0;
      ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, m->plan, o);
      CHECK(run_and_compare(off, t, *m, 1) == 0);
      const std::uint64_t first = reads.bytes.load();
      CHECK(first == file_bytes);
      CHECK(run_and_compare(off, t, *m, 2) == 0);
      const auto n = off.metrics().native;
      if (retain) {
        CHECK(reads.bytes.load() == first);  // steps 2 and 3 read nothing from the file
        CHECK(n.retained_bytes == file_bytes);
        CHECK(n.retained_capacity <= 4 * ddo::mib);
      } else {
        CHECK(reads.bytes.load() == 3 * file_bytes);
        CHECK(n.retained_bytes == 0);
        CHECK(n.retained_capacity == 0);
      }
    }
    // The ceiling bounds the storage: a small one retains some weights, the rest are re-read.
    auto t = roomy_transport();
    counting_reads reads;
    auto o = windows_only();
    o.slot_count = 1;
    o.prefetch_depth = 0;
    o.file_faults = &reads;
    o.native_vmm.source_cache_bytes = file_bytes / 3;
    ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, m->plan, o);
    CHECK(run_and_compare(off, t, *m, 2) == 0);
    const auto n = off.metrics().native;
    CHECK(n.retained_capacity <= file_bytes / 3);
    CHECK(n.retained_bytes > 0);
    CHECK(reads.bytes.load() == 2 * file_bytes - n.retained_bytes);
  }

  TEST_CASE("native vmm_source_registered_gb: registered segments copy straight, the rest via windows") {
    auto m = model_of(ddo::placement::file, 403);
    for (const std::uint64_t segments : {std::uint64_t{0}, std::uint64_t{1}}) {
      CAPTURE(segments);
      auto t = roomy_transport();
      auto o = windows_only();
      o.native_vmm.source_cache_bytes = 4 * ddo::mib;
      o.native_vmm.source_registered_bytes = segments * window;
      ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, m->plan, o);
      CHECK(run_and_compare(off, t, *m, 2) == 0);
      const auto n = off.metrics().native;
      if (segments == 0) {  // 0: the whole storage is registered; nothing goes through a window
        CHECK(n.retained_registered == n.retained_capacity);
        CHECK(n.retained_staged_bytes == 0);
        CHECK(n.window_bytes_staged == 0);
        CHECK(registered(t) == 4 * window + n.retained_capacity);
      } else {
        CHECK(n.retained_registered == window);
        CHECK(n.retained_direct_bytes > 0);
        CHECK(n.retained_staged_bytes > 0);
        CHECK(n.window_bytes_staged == n.retained_staged_bytes);
        CHECK(registered(t) == 5 * window);
      }
    }
    // A registration the driver refuses leaves the segment staged when fallback is allowed.
    ddo::host_sim_vmm_options so;
    so.window.budget_bytes = 256 * ddo::mib;
    so.device.registration_limit_bytes = 5 * window;  // the windows and one segment
    ddo::host_sim_vmm_transport t(so);
    auto o = windows_only();
    o.native_vmm.source_cache_bytes = 4 * ddo::mib;
    {
      ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, m->plan, o);
      CHECK(run_and_compare(off, t, *m, 1) == 0);
      CHECK(off.metrics().native.registration_fallbacks > 0);
      CHECK(off.metrics().native.retained_registered == window);
    }
    o.allow_pin_fallback = false;
    CHECK_THROWS_AS(ddo::basic_offloader<ddo::host_sim_vmm_transport>(t, m->table, m->plan, o),
                    ddo::out_of_memory);
    CHECK(registered(t) == 0);
  }

  TEST_CASE("native micro-cache: vmm_native_source_cache_slot_mb x _slots keep staged pieces") {
    auto m = model_of(ddo::placement::pageable_host, 404, 100000);
    for (const bool on : {false, true}) {
      CAPTURE(on);
      auto t = roomy_transport();
      auto o = windows_only();
      if (on) {
        o.native_vmm.micro_cache_slot_bytes = window;
        o.native_vmm.micro_cache_slots = 32;  // more than the model's pieces
      }
      ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, m->plan, o);
      CHECK(registered(t) == 4 * window + (on ? 32 * window : 0));
      CHECK(run_and_compare(off, t, *m, 3) == 0);
      const auto n = off.metrics().native;
      if (on) {
        CHECK(n.micro_cache_misses == m->table.size());  // each piece copied in once
        CHECK(n.micro_cache_hits > 0);
        CHECK(n.window_bytes_staged == 0);
      } else {
        CHECK(n.micro_cache_hits + n.micro_cache_misses == 0);
        CHECK(n.window_bytes_staged > 0);
      }
    }
    // Pieces above and below the slot size in one group: cached pieces are copied straight while
    // a window chunk is open with the others' bytes (neither may disturb the other).
    {
      auto mixed = model_of(ddo::placement::pageable_host, 406, 600000);
      auto t = roomy_transport();
      auto o = windows_only();
      o.native_vmm.micro_cache_slot_bytes = window;
      o.native_vmm.micro_cache_slots = 32;
      ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, mixed->table, mixed->plan, o);
      CHECK(run_and_compare(off, t, *mixed, 3) == 0);
      CHECK(off.metrics().native.micro_cache_hits > 0);
      CHECK(off.metrics().native.window_bytes_staged > 0);
    }
    // Only the pair turns it on: one without the other is refused, naming the field.
    ddo::dynamic_offload_config c;
    c.vmm_native_source_cache_slot_mb = 8;
    ddo::config_provenance p;
    std::vector<std::string> warnings;
    try {
      ddo::validate(c, p, warnings);
      FAIL("a slot size without a slot count was accepted");
    } catch (const ddo::config_error& e) {
      CHECK(e.key() == "vmm_native_source_cache_slot_mb");
      CHECK(std::string(e.what()).find("set both or neither") != std::string::npos);
    }
  }

  TEST_CASE("native vmm_component_tensor_ownership and vmm_component_buffer_limit_mb rewrite the plan") {
    // Two linear weights, a norm, a bias and an embedding; everything streamed from host memory.
    ddo::weight_table table;
    std::vector<std::vector<std::byte>> bytes;
    bytes.reserve(5);
    auto add = [&](const char* name, ddo::module_kind kind, std::vector<std::int64_t> shape) {
      std::int64_t elems = 1;
      for (auto d : shape) elems *= d;
      auto& b = bytes.emplace_back(static_cast<std::size_t>(elems * 2), std::byte{1});
      ddo::weight_info w;
      w.name = name;
      w.kind = kind;
      w.type = ddo::dtype::bf16;
      w.shape = std::move(shape);
      w.source = ddo::host_source{b.data()};
      return table.add(w);
    };
    add("blocks.0.attn.weight", ddo::module_kind::linear, {256, 256});  // 128 KiB
    add("blocks.0.norm.weight", ddo::module_kind::norm, {1024});        // 2 KiB
    add("blocks.0.attn.bias", ddo::module_kind::linear, {4096});        // 8 KiB (1-D: not covered)
    add("blocks.0.embed.weight", ddo::module_kind::embedding, {64, 512});  // 64 KiB
    add("blocks.0.ff.weight", ddo::module_kind::linear, {512, 256});    // 256 KiB
    ddo::offload_plan plan;
    plan.groups.resize(1);
    plan.groups[0].name = "blocks.0";
    for (std::size_t w = 0; w < table.size(); ++w) {
      plan.groups[0].weights.push_back(w);
      plan.groups[0].bytes_by_placement[static_cast<std::size_t>(ddo::placement::pageable_host)] += table[w].bytes;
      plan.decisions.push_back({ddo::placement::pageable_host, 0, "test"});
    }
    auto where = [](const ddo::offload_plan& p, std::size_t w) { return p.decisions[w].where; };
    const auto total = plan.groups[0].bytes_by_placement;

    // The limit is a ceiling on the once-copied payload, smallest tensors first.
    auto p = plan;
    auto r = ddo::apply_component_ownership(p, table, 10 * 1024);
    CHECK(r.once_copied == 2);  // norm (2 KiB) and bias (8 KiB) fit 10 KiB
    CHECK(r.once_copied_bytes == 10 * 1024);
    CHECK(where(p, 1) == ddo::placement::gpu_resident);
    CHECK(where(p, 2) == ddo::placement::gpu_resident);
    CHECK(where(p, 3) == ddo::placement::pageable_host);  // beyond the limit: mapped and streamed
    CHECK(r.mapped == 1);
    CHECK(where(p, 0) == ddo::placement::pageable_host);  // linear weights are not touched
    CHECK(where(p, 4) == ddo::placement::pageable_host);
    CHECK(p.groups[0].bytes(ddo::placement::gpu_resident) == 10 * 1024);
    std::uint64_t sum = 0, before = 0;
    for (std::size_t i = 0; i < ddo::placement_count; ++i) {
      sum += p.groups[0].bytes_by_placement[i];
      before += total[i];
    }
    CHECK(sum == before);
    // A zero limit copies nothing once; a large one takes every non-linear tensor.
    p = plan;
    CHECK(ddo::apply_component_ownership(p, table, 0).once_copied == 0);
    p = plan;
    CHECK(ddo::apply_component_ownership(p, table, 1 * ddo::mib).once_copied == 3);

    // Through setup: the native route applies it only when ownership is on; off the native
    // route it is refused, naming the field.
    auto settings_with = [&](bool ownership, std::uint64_t limit_mb, bool native) {
      ddo::setup_options o;
      o.inputs.environment = std::map<std::string, std::string>{};
      o.inputs.overrides = {{ddo::field_id::execution_mode, std::string(native ? "vmm_runtime" : "linear_runtime")},
                            {ddo::field_id::vmm_native_transport, native},
                            {ddo::field_id::vmm_resident_weight_budget_gb, 1.0},
                            {ddo::field_id::vmm_component_tensor_ownership, ownership},
                            {ddo::field_id::vmm_component_buffer_limit_mb, static_cast<std::int64_t>(limit_mb)},
                            {ddo::field_id::resident_module_budget_gb, 0.0},
                            {ddo::field_id::small_tensor_threshold_bytes, std::int64_t{0}},
                            {ddo::field_id::always_resident_modules_pattern, std::vector<std::string>{}},
                            {ddo::field_id::pin_cpu_memory, false}};
      o.ram_bytes = 4 * ddo::gib;
      o.groups = std::vector<ddo::execution_group>{{"blocks.0", {0, 1, 2, 3, 4}, true}};
      return o;
    };
    auto t = roomy_transport();
    // The planner keeps the norm resident; owned with a zero limit it is mapped and streamed,
    // with a 1 MiB limit it is copied once.
    for (const auto& row :
         {std::tuple{false, 0, ddo::placement::gpu_resident}, std::tuple{true, 0, ddo::placement::pageable_host},
          std::tuple{true, 1, ddo::placement::gpu_resident}}) {
      const auto& ownership = std::get<0>(row);
      const auto& limit_mb = std::get<1>(row);
      const auto& norm = std::get<2>(row);
      CAPTURE(ownership);
      CAPTURE(limit_mb);
      const auto o = settings_with(ownership, static_cast<std::uint64_t>(limit_mb), true);
      const auto s = ddo::resolve_settings(o.inputs);
      const auto setup = ddo::setup_offload(table, s, ddo::component_for(s, o.inputs), o, t);
      CHECK(setup.runtime.native_vmm.component_tensor_ownership == ownership);
      CHECK(setup.plan.decisions[1].where == norm);
      if (ownership) CHECK(setup.plan.decisions[3].where == (limit_mb == 0 ? ddo::placement::pageable_host
                                                                           : ddo::placement::gpu_resident));
    }
    const auto refused = settings_with(true, 1, false);
    try {
      (void)ddo::resolve_settings(refused.inputs);
      FAIL("ownership off the native route was accepted");
    } catch (const ddo::config_error& e) {
      CHECK(e.key() == "vmm_component_tensor_ownership");
    }
  }

  TEST_CASE("vmm_module_pattern: only the selected linear weights are mapped, the others keep their placement") {
    // Two blocks of two linear weights and a norm, all streamed from host memory.
    ddo::weight_table table;
    std::vector<std::vector<std::byte>> bytes;
    bytes.reserve(6);
    std::vector<ddo::execution_group> groups(2);
    for (int b = 0; b < 2; ++b) {
      groups[b].name = "blocks." + std::to_string(b);
      groups[b].is_block = true;
      for (const auto& [leaf, kind, shape] :
           {std::tuple{"attn.to_q", ddo::module_kind::linear, std::vector<std::int64_t>{128, 256}},
            std::tuple{"ff.proj", ddo::module_kind::linear, std::vector<std::int64_t>{256, 256}},
            std::tuple{"norm", ddo::module_kind::norm, std::vector<std::int64_t>{4096}}}) {
        std::int64_t elems = 1;
        for (auto d : shape) elems *= d;
        auto& data = bytes.emplace_back(static_cast<std::size_t>(elems * 2));
        for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i * 7 + b * 3 + data.size()) & 0xFF);
        ddo::weight_info w;
        w.name = groups[b].name + "." + leaf + ".weight";
        w.module_name = groups[b].name + "." + leaf;
        w.kind = kind;
        w.type = ddo::dtype::bf16;
        w.shape = shape;
        w.source = ddo::host_source{data.data()};
        groups[b].weights.push_back(table.add(w));
      }
    }
    auto setup_with = [&](std::string units, bool native, auto& t) {
      ddo::setup_options o;
      o.inputs.environment = std::map<std::string, std::string>{};
      o.inputs.overrides = {{ddo::field_id::execution_mode, ddo::exec_mode::vmm_runtime},
                            {ddo::field_id::vmm_native_transport, native},
                            {ddo::field_id::vmm_module_pattern, std::move(units)},
                            {ddo::field_id::vmm_resident_weight_budget_gb, 1.0},
                            {ddo::field_id::resident_module_budget_gb, 1e-9},  // ~1 byte: stream all
                            {ddo::field_id::small_tensor_threshold_bytes, std::int64_t{0}},
                            {ddo::field_id::always_resident_modules_pattern, std::vector<std::string>{}},
                            {ddo::field_id::pin_cpu_memory, false}};
      o.ram_bytes = 4 * ddo::gib;
      o.groups = groups;
      const auto s = ddo::resolve_settings(o.inputs);
      return ddo::setup_offload(table, s, ddo::component_for(s, o.inputs), o, t);
    };
    ddo_test::synthetic_model expect;  // run_and_compare reads the expected bytes from here
    for (const auto& b : bytes) expect.expected.push_back(b);
    for (const bool native : {false, true}) {
      CAPTURE(native);
      auto t = roomy_transport();
      auto setup = setup_with("attn", native, t);
      REQUIRE(setup.runtime.vmm_covered.size() == table.size());
      bool noted = false;
      for (const auto& n : setup.notes) noted = noted || n.find("vmm_module_pattern 'attn': 2 of 4") != std::string::npos;
      CHECK(noted);
      ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, table, setup.plan, setup.runtime);
      for (std::size_t w = 0; w < table.size(); ++w) {
        CAPTURE(table[w].name);
        const bool resident = setup.plan.decisions[w].where == ddo::placement::gpu_resident;
        if (table[w].kind == ddo::module_kind::linear) CHECK_FALSE(resident);  // the budget is ~1 byte
        if (resident || table[w].name.find("attn") != std::string::npos)
          CHECK(off.stable_data(w) != nullptr);  // the arena's address, or the mapped one
        else
          CHECK_THROWS_AS((void)off.stable_data(w), ddo::usage_error);  // ff.proj: the side image
      }
      CHECK(run_and_compare(off, t, expect, 2) == 0);
      // The default ".*" maps every linear weight (and leaves the vector empty).
      auto t2 = roomy_transport();
      const auto all = setup_with(".*", native, t2);
      CHECK(all.runtime.vmm_covered.empty());
      ddo::basic_offloader<ddo::host_sim_vmm_transport> off2(t2, table, all.plan, all.runtime);
      for (std::size_t w : groups[1].weights) CHECK(off2.stable_data(w) != nullptr);  // the norm: resident
    }
    // Outside the dialect: refused at resolve, naming the field.
    ddo::setup_options bad;
    bad.inputs.environment = std::map<std::string, std::string>{};
    bad.inputs.overrides = {{ddo::field_id::vmm_module_pattern, std::string("attn(")}};
    try {
      (void)ddo::resolve_settings(bad.inputs);
      FAIL("an unbalanced vmm_module_pattern was accepted");
    } catch (const ddo::config_error& e) {
      CHECK(e.key() == "vmm_module_pattern");
    }
  }

  TEST_CASE("native route selection: vmm_native_transport or a source cache runs vmm_fast_runtime, reported") {
    auto m = model_of(ddo::placement::pageable_host, 405);
    auto setup_for = [&](bool native, double cache_gb, auto& transport) {
      ddo::setup_options o;
      o.inputs.environment = std::map<std::string, std::string>{};
      o.inputs.overrides = {{ddo::field_id::execution_mode, ddo::exec_mode::vmm_runtime},
                            {ddo::field_id::vmm_native_transport, native},
                            {ddo::field_id::vmm_source_cache_gb, cache_gb},
                            {ddo::field_id::vmm_resident_weight_budget_gb, 1.0},
                            {ddo::field_id::resident_module_budget_gb, 0.0},
                            {ddo::field_id::pin_cpu_memory, false}};
      o.ram_bytes = 4 * ddo::gib;
      const auto s = ddo::resolve_settings(o.inputs);
      return ddo::setup_offload(m->table, s, ddo::component_for(s, o.inputs), o, transport);
    };
    auto t = roomy_transport();
    const auto native = setup_for(true, 0.0, t);
    CHECK(native.runtime.route == ddo::executed_route::vmm_fast_runtime);
    CHECK(native.runtime.native_vmm.enabled);
    const auto retained = setup_for(false, 0.5, t);  // source retention selects it too
    CHECK(retained.runtime.route == ddo::executed_route::vmm_fast_runtime);
    CHECK(retained.runtime.native_vmm.source_cache_bytes == ddo::gib / 2);
    const auto legacy = setup_for(false, 0.0, t);
    CHECK(legacy.runtime.route == ddo::executed_route::vmm_runtime);
    CHECK_FALSE(legacy.runtime.native_vmm.enabled);
    {
      // The executed route is what the metrics report.
      ddo::basic_offloader<ddo::host_sim_vmm_transport> off(t, m->table, native.plan, native.runtime);
      CHECK(off.metrics().route == ddo::executed_route::vmm_fast_runtime);
      CHECK(off.metrics().native.enabled);
    }
    // An engine that fixed a transport without stable addresses runs the linear route: reported.
    ddo::host_sim_transport linear;
    const auto fallback = setup_for(true, 0.0, linear);
    CHECK_FALSE(fallback.runtime.native_vmm.enabled);
    bool noted = false;
    for (const auto& n : fallback.notes) noted = noted || n.find("vmm_fast_runtime") != std::string::npos;
    CHECK(noted);
  }
}
