// SPDX-License-Identifier: Apache-2.0
// The file route end to end on host_sim (transport/nvme.hpp): weights read from files in the
// build directory (not /tmp, which may be a tmpfs that refuses O_DIRECT) into the transport's
// pinned staging slots, through the linear ring and through host_sim's VMM mode; short reads,
// an injected EIO and a file truncated mid-run; the planner's file placement from the
// settings and the refusal of staging too small for a group. Every byte is compared, and the
// pinned and device bytes are back at their start after each offloader.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/fault_injection.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/host_sim_vmm.hpp"
#include "ddo/transport/nvme.hpp"
#include "nvme_file_model.hpp"

namespace {

using ddo_test::file_model;
using nvme_sim = ddo::nvme_transport<ddo::host_sim_transport>;
using nvme_sim_vmm = ddo::nvme_transport<ddo::host_sim_vmm_transport>;

/// Six blocks of two 350 MiB bf16 linears (4.10 GiB, more than the simulated card) in a file
/// that does not exist: the staging-growth cases plan and size windows, never read.
ddo::weight_table blocks_of_700_mib() {
  ddo::weight_table table;
  const std::size_t file = table.add_file("/nonexistent/model.safetensors");
  std::uint64_t offset = 0;
  for (int b = 0; b < 6; ++b)
    for (int k = 0; k < 2; ++k) {
      ddo::weight_info w;
      w.name = "blocks." + std::to_string(b) + ".w" + std::to_string(k) + ".weight";
      w.shape = {175 * 1024, 1024};
      w.kind = ddo::module_kind::linear;
      w.source = ddo::file_source{file, offset};
      offset += 350 * ddo::mib;
      table.add(w);
    }
  return table;
}

/// transport_with_window_sizing's reference model: host_sim with a window that limits a group to
/// 100 MiB, reports its staging grown, and keeps one 64 MiB window slot of the resident budget.
/// It records the request setup sent (shared: the transport is copied).
struct sizing_sim : ddo::host_sim_transport {
  using host_sim_transport::host_sim_transport;
  std::shared_ptr<ddo::window_sizing_request> asked =
      std::make_shared<ddo::window_sizing_request>();
  ddo::window_sizing size_window(const ddo::window_sizing_request& r) {
    *asked = r;
    ddo::window_sizing a;
    a.group_limit_bytes = a.staging_bytes = 100 * ddo::mib;
    a.grown = true;
    a.shares_resident_budget = r.resident_budget_bytes != 0;
    a.window_slot_bytes = 64 * ddo::mib;
    return a;
  }
};
static_assert(ddo::transport_with_window_sizing<sizing_sim>);
static_assert(ddo::transport_with_window_sizing<nvme_sim>);
static_assert(ddo::transport_with_window_sizing<nvme_sim_vmm>);
static_assert(!ddo::transport_with_window_sizing<ddo::host_sim_transport>);

ddo::runtime_options route_options() {
  ddo::runtime_options o;
  o.poison_slots = true;
  o.staging_buffer_bytes = 64 * 1024;
  return o;
}

ddo::nvme_options small_staging(ddo::file_io_mode io = ddo::file_io_mode::automatic) {
  ddo::nvme_options o;
  o.staging_slot_bytes = 96 * 1024;  // smaller than some weights: pieces span several fills
  o.read_threads = 4;
  o.request_bytes = 64 * 1024;
  o.io = io;
  return o;
}

/// Runs @p steps steps (in order, then a random order), comparing every byte on the compute
/// stream; returns the bytes compared. Mismatches fail the test.
template <class T>
std::uint64_t run_and_compare(ddo::basic_offloader<T>& off, T& t, const file_model& m, int steps,
                              std::uint32_t seed) {
  auto compute = t.make_stream();
  const auto cv = T::view(compute);
  auto checked = std::make_shared<std::atomic<std::uint64_t>>(0);
  auto bad = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::mt19937 rng(seed);
  std::vector<std::size_t> order(off.group_count());
  for (int step = 0; step < steps; ++step) {
    for (std::size_t g = 0; g < order.size(); ++g) order[g] = g;
    if (step % 2 == 1) std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t g : order) {
      auto lease = off.acquire(g, cv);
      std::vector<std::pair<const std::byte*, const std::vector<std::byte>*>> items;
      for (std::size_t i = 0; i < lease.size(); ++i)
        items.emplace_back(lease.data(i), &m.expected[lease.weight_index(i)]);
      ddo::host_sim_device(t).enqueue(cv, [items = std::move(items), checked, bad] {
        for (const auto& [p, e] : items) {
          if (std::memcmp(p, e->data(), e->size()) != 0) ++*bad;
          *checked += e->size();
        }
      });
    }
  }
  t.synchronize(cv);
  CHECK(bad->load() == 0);
  return checked->load();
}

std::uint64_t model_bytes(const file_model& m) {
  std::uint64_t b = 0;
  for (const auto& e : m.expected) b += e.size();
  return b;
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("file route: every byte from sharded files in the build directory, linear ring") {
    const file_model m(11, 6, 5, 150000);
    ddo::host_sim_transport sim;
    nvme_sim t(sim, small_staging());
    const auto pinned0 = sim.ledger().in_use(ddo::ledger_kind::pinned);
    const auto device0 = sim.ledger().in_use(ddo::ledger_kind::device);
    {
      ddo::basic_offloader<nvme_sim> off(t, m.table, m.plan, route_options());
      const std::string mode = t.file_io_description();
      MESSAGE("file route exercised with " << mode << " on " << DDO_TEST_BUILD_DIR);
      CHECK(mode.find(t.direct_io() ? "O_DIRECT" : "buffered") == 0);
      // The transport's two slots are the only pinned staging: ddo's own buffers stay
      // unallocated when every staged byte comes from a file.
      CHECK(sim.ledger().in_use(ddo::ledger_kind::pinned) - pinned0 ==
            2 * ddo::round_up(small_staging().staging_slot_bytes, 4096));
      const std::uint64_t checked = run_and_compare(off, t, m, 3, 5);
      CHECK(checked == 3 * model_bytes(m));
      const auto stats = t.file_stats();
      CHECK(stats.bytes_delivered >= 3 * model_bytes(m));
      CHECK(stats.bytes_read >= stats.bytes_delivered);
      CHECK(sim.pageable_direct_copies() == 0);
    }
    CHECK(sim.ledger().in_use(ddo::ledger_kind::pinned) == pinned0);
    CHECK(sim.ledger().in_use(ddo::ledger_kind::device) == device0);
    CHECK(t.file_io_description().empty() == false);  // kept for the report after teardown
  }

  TEST_CASE("file route: a batch reads each piece's aligned range once, pieces packed into fills") {
    // What a step of the file tier costs the disk: each file piece its O_DIRECT range (at most
    // 2 x 4095 bytes more than the piece), read once, and a group's pieces share slot fills
    // (before, one fill per piece, with the disk's queue drained at every piece's end).
    const file_model m(29, 4, 7, 300000);
    ddo::host_sim_transport sim;
    auto o = small_staging();
    o.staging_slot_bytes = 4 * ddo::mib;
    nvme_sim t(sim, o);
    ddo::file_staging_request r;
    std::vector<std::string> paths;
    for (const auto& f : m.files) paths.push_back(f.string());
    r.paths = &paths;
    r.used.assign(paths.size(), 1);
    std::uint64_t bytes = 0, aligned = 0;
    r.largest_piece_bytes = 0;  // unknown: slots of the configured 4 MiB, a group's pieces in one
    t.prepare_file_reads(r);
    std::byte* device = t.allocate_device(m.table.total_bytes());
    std::vector<ddo::device_file_read> pieces;
    std::uint64_t at = 0;
    for (std::size_t w = 0; w < m.table.size(); ++w) {
      const auto& src = std::get<ddo::file_source>(m.table[w].source);
      pieces.push_back({device + at, &paths[src.file_index], src.offset, m.table[w].bytes});
      at += m.table[w].bytes;
      bytes += m.table[w].bytes;
      aligned += t.direct_io() ? ddo::align_range(src.offset, m.table[w].bytes).aligned_length
                               : m.table[w].bytes;
    }
    auto stream = t.make_stream();
    const auto v = nvme_sim::view(stream);
    for (std::size_t g = 0; g < 4; ++g)  // a group's pieces per batch, as the staging loop does
      t.read_files_to_device(std::span(pieces).subspan(7 * g, 7), v);
    t.synchronize(v);
    const auto stats = t.file_stats();
    MESSAGE(t.file_io_description()
            << ": " << pieces.size() << " pieces, " << bytes << " bytes, " << stats.bytes_read
            << " read in " << stats.slot_fills << " fills");
    CHECK(stats.bytes_delivered == bytes);
    CHECK(stats.bytes_read == aligned);
    CHECK(aligned - bytes <= pieces.size() * 2 * (ddo::direct_io_alignment - 1));
    CHECK(stats.slot_fills == 4);  // one fill per group (one per piece before)
    at = 0;
    std::size_t wrong = 0;
    for (std::size_t w = 0; w < m.table.size(); ++w) {
      wrong += std::memcmp(device + at, m.expected[w].data(), m.expected[w].size()) != 0;
      at += m.table[w].bytes;
    }
    CHECK(wrong == 0);  // host_sim's device memory is host memory
    t.release_file_reads();
    t.free_device(device, m.table.total_bytes());
  }

  TEST_CASE("file route: three tiers in every group, every byte right over the steps") {
    // Every third weight pinned, every fifth resident, the rest read from the files each step
    // (the default plan for a model larger than RAM): the staging loop hands a group's file
    // pieces to the transport as one batch after its pinned copies.
    file_model m(23, 8, 6, 300000);
    for (auto& g : m.plan.groups) g.bytes_by_placement = {};
    for (std::size_t w = 0; w < m.table.size(); ++w) {
      auto& d = m.plan.decisions[w];
      d.where = w % 3 == 0   ? ddo::placement::pinned_host
                : w % 5 == 1 ? ddo::placement::gpu_resident
                             : ddo::placement::file;
      m.plan.groups[d.group].bytes_by_placement[static_cast<std::size_t>(d.where)] +=
          m.table[w].bytes;
    }
    ddo::host_sim_transport sim;
    auto o = small_staging();
    o.staging_slot_bytes = 4 * ddo::mib;  // page-locked at the largest piece
    nvme_sim t(sim, o);
    {
      ddo::basic_offloader<nvme_sim> off(t, m.table, m.plan, route_options());
      CHECK(run_and_compare(off, t, m, 4, 9) == 4 * model_bytes(m));
      const auto stats = t.file_stats();
      CHECK(stats.bytes_read >= stats.bytes_delivered);
    }
    CHECK(sim.ledger().in_use(ddo::ledger_kind::device) == 0);
  }

  TEST_CASE("file route: pinned memory off a page boundary is realigned, every byte right") {
    // cudaHostAlloc returned a staging slot 256 bytes past a page on an H100 (CUDA 13); O_DIRECT
    // needs 4096. The slot is then allocated one alignment larger and read from its aligned start.
    const file_model m(13, 5, 4, 130000);
    ddo::host_sim_transport sim(ddo::host_sim_options{.pinned_misalignment_bytes = 256});
    std::byte* probe = sim.allocate_pinned(8192);
    CHECK(reinterpret_cast<std::uintptr_t>(probe) % 4096 == 256);
    sim.free_pinned(probe, 8192);
    const auto pinned0 = sim.ledger().in_use(ddo::ledger_kind::pinned);
    {
      nvme_sim t(sim, small_staging());
      ddo::basic_offloader<nvme_sim> off(t, m.table, m.plan, route_options());
      CHECK(sim.ledger().in_use(ddo::ledger_kind::pinned) - pinned0 ==
            2 * (ddo::round_up(small_staging().staging_slot_bytes, 4096) + 4096));
      CHECK(run_and_compare(off, t, m, 2, 3) == 2 * model_bytes(m));
    }
    CHECK(sim.ledger().in_use(ddo::ledger_kind::pinned) == pinned0);
    CHECK_THROWS_WITH_AS(
        ddo::host_sim_transport(ddo::host_sim_options{.pinned_misalignment_bytes = 4096}),
        doctest::Contains("pinned_misalignment_bytes must be a multiple of 16 below 4096, got 4096"),
        ddo::usage_error);
  }

  TEST_CASE("file route: buffered mode gives the same bytes") {
    const file_model m(12, 4, 3, 120000, 1);
    ddo::host_sim_transport sim;
    nvme_sim t(sim, small_staging(ddo::file_io_mode::buffered));
    ddo::basic_offloader<nvme_sim> off(t, m.table, m.plan, route_options());
    CHECK_FALSE(t.direct_io());
    CHECK(t.file_io_description().find("buffered reads") == 0);
    CHECK(run_and_compare(off, t, m, 2, 7) == 2 * model_bytes(m));
  }

  TEST_CASE("file route feeds the VMM transport (host_sim's VMM mode): stable addresses, every byte") {
    const file_model m(13, 5, 4, 100000);
    ddo::host_sim_vmm_options vo;
    vo.window.budget_bytes = 64 * ddo::mib;
    vo.window.handle_bytes = 2 * ddo::mib;
    ddo::host_sim_vmm_transport vmm(vo);
    nvme_sim_vmm t(vmm, small_staging());
    const auto pinned0 = vmm.ledger().in_use(ddo::ledger_kind::pinned);
    const auto device0 = vmm.ledger().in_use(ddo::ledger_kind::device);
    {
      auto o = route_options();
      o.slot_count = 2;
      ddo::basic_offloader<nvme_sim_vmm> off(t, m.table, m.plan, o);
      CHECK(run_and_compare(off, t, m, 3, 9) == 3 * model_bytes(m));
    }
    CHECK(vmm.ledger().in_use(ddo::ledger_kind::pinned) == pinned0);
    CHECK(vmm.ledger().in_use(ddo::ledger_kind::device) == device0);
  }

  TEST_CASE("file route: short reads are continued, the bytes stay right") {
    const file_model m(14, 4, 4, 90000);
    ddo::host_sim_transport sim;
    ddo::fault_injector faults;
    nvme_sim t(sim, small_staging());
    auto o = route_options();
    o.file_faults = &faults;
    ddo::basic_offloader<nvme_sim> off(t, m.table, m.plan, o);
    // Several reads, at setup-independent points of the run, return half of what was asked.
    const auto base = faults.calls(ddo::fault_point::file_read);
    for (std::uint64_t k : {1, 3, 8})
      faults.fail_nth(ddo::fault_point::file_read, base + k, {ddo::file_read_fault::kind::short_count, 0});
    CHECK(run_and_compare(off, t, m, 1, 3) == model_bytes(m));
    CHECK(faults.fired(ddo::fault_point::file_read) >= 1);
  }

  TEST_CASE("file route: an injected EIO is an io_error naming the file and the offset; nothing leaks") {
    const file_model m(15, 5, 3, 80000);
    ddo::host_sim_transport sim;
    ddo::fault_injector faults;
    nvme_sim t(sim, small_staging());
    const auto pinned0 = sim.ledger().in_use(ddo::ledger_kind::pinned);
    const auto device0 = sim.ledger().in_use(ddo::ledger_kind::device);
    {
      auto o = route_options();
      o.file_faults = &faults;
      ddo::basic_offloader<nvme_sim> off(t, m.table, m.plan, o);
      faults.fail_nth(ddo::fault_point::file_read, faults.calls(ddo::fault_point::file_read) + 4);
      auto compute = t.make_stream();
      std::string message;
      try {
        for (int step = 0; step < 2; ++step)
          for (std::size_t g = 0; g < off.group_count(); ++g) (void)off.acquire(g, nvme_sim::view(compute));
      } catch (const ddo::io_error& e) {
        message = e.what();
      }
      MESSAGE(message);
      CHECK(message.find("at offset") != std::string::npos);
      CHECK(message.find("ddo_nvme_") != std::string::npos);
      CHECK(message.find(std::strerror(EIO)) != std::string::npos);
      t.synchronize(nvme_sim::view(compute));
    }
    CHECK(sim.ledger().in_use(ddo::ledger_kind::pinned) == pinned0);
    CHECK(sim.ledger().in_use(ddo::ledger_kind::device) == device0);
  }

  TEST_CASE("file route: a file truncated mid-run is an io_error, not a signal; nothing leaks") {
    const file_model m(16, 6, 3, 80000, 1);
    ddo::host_sim_transport sim;
    nvme_sim t(sim, small_staging());
    const auto pinned0 = sim.ledger().in_use(ddo::ledger_kind::pinned);
    {
      auto o = route_options();
      o.prefetch_depth = 0;  // loads happen on acquire, after the truncation
      ddo::basic_offloader<nvme_sim> off(t, m.table, m.plan, o);
      auto compute = t.make_stream();
      (void)off.acquire(0, nvme_sim::view(compute));
      std::filesystem::resize_file(m.files[0], std::filesystem::file_size(m.files[0]) / 3);
      std::string message;
      try {
        for (std::size_t g = 1; g < off.group_count(); ++g) (void)off.acquire(g, nvme_sim::view(compute));
      } catch (const ddo::io_error& e) {
        message = e.what();
      }
      MESSAGE(message);
      CHECK(message.find("unexpected end of file at offset") != std::string::npos);
      CHECK(message.find(m.files[0].filename().string()) != std::string::npos);
      t.synchronize(nvme_sim::view(compute));
    }
    CHECK(sim.ledger().in_use(ddo::ledger_kind::pinned) == pinned0);
    CHECK(sim.ledger().in_use(ddo::ledger_kind::device) == 0);
  }

  TEST_CASE("nvme_baseline plans the file route and refuses staging smaller than a group") {
    const file_model m(17, 4, 3, 300000, 1);
    ddo::setup_options options;
    options.inputs.environment = std::map<std::string, std::string>{};
    options.inputs.preset = "nvme_baseline";
    // Nothing resident (the preset keeps what fits): every group streams from the file.
    options.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}},
                                {ddo::field_id::auto_budget_policy, ddo::budget_policy::off}};
    options.ram_bytes = 4 * ddo::gib;
    options.log = nullptr;
    std::vector<ddo::execution_group> groups;
    for (const auto& g : m.plan.groups) groups.push_back({g.name, g.weights, true});
    options.groups = groups;
    const auto settings = ddo::resolve_settings(options.inputs);
    REQUIRE(settings.config.backend == ddo::offload_backend::nvme);
    auto t = ddo::make_transport<nvme_sim>(settings);
    CHECK(t.staging_slot_bytes() == ddo::round_up(ddo::gib_to_bytes(settings.config.vmm_staging_buffer_gb), 4096));
    const auto setup = ddo::setup_offload(m.table, settings, ddo::component_for(settings, options.inputs), options, t);
    CHECK(setup.plan.total_bytes(ddo::placement::file) > 0);
    CHECK(setup.plan.total_bytes(ddo::placement::pageable_host) == 0);
    CHECK(setup.machine.capacity.max_group_bytes == t.staging_slot_bytes());

    // Staging that cannot hold the largest group: refused at setup, with the numbers.
    options.inputs.overrides.push_back({ddo::field_id::vmm_staging_buffer_gb, 100000.0 / double(ddo::gib)});
    const auto small = ddo::resolve_settings(options.inputs);
    auto ts = ddo::make_transport<nvme_sim>(small);
    std::string message;
    try {
      (void)ddo::setup_offload(m.table, small, ddo::component_for(small, options.inputs), options, ts);
    } catch (const ddo::out_of_memory& e) {
      message = e.what();
    }
    MESSAGE(message);
    CHECK(message.find("vmm_staging_buffer_gb") != std::string::npos);
    CHECK(message.find(std::to_string(ts.staging_slot_bytes())) != std::string::npos);
  }
}

TEST_SUITE("runtime") {
  TEST_CASE("a preset's staging slot grows to the largest streamed group; the plan says so") {
    // A group of 700 MiB on the file route (nothing is read: planning only).
    const ddo::weight_table table = blocks_of_700_mib();
    ddo::setup_options options;
    options.inputs.environment = std::map<std::string, std::string>{};
    options.inputs.preset = "nvme_baseline";
    options.ram_bytes = 4 * ddo::gib;
    options.log = nullptr;
    const auto settings = ddo::resolve_settings(options.inputs);
    ddo::host_sim_options sim;
    sim.device_capacity_bytes = 4 * ddo::gib + 512 * ddo::mib;  // a ring of 3 x 700 MiB, a block
    auto t = ddo::make_transport<nvme_sim>(settings, sim);
    REQUIRE(t.staging_slot_bytes() < 700 * ddo::mib);
    const auto setup = ddo::setup_offload(table, settings,
                                          ddo::component_for(settings, options.inputs), options, t);
    CHECK(t.staging_slot_bytes() >= 700 * ddo::mib);
    CHECK(setup.plan.budgets.max_group_bytes == t.staging_slot_bytes());
    CHECK(setup.plan.budgets.max_group_detail.find("grown to") != std::string::npos);
    CHECK(setup.plan.budgets.max_group_detail.find("nvme_baseline") != std::string::npos);
    // The file route uses the card: what fits stays resident.
    CHECK(setup.plan.total_bytes(ddo::placement::gpu_resident) > 0);
    CHECK(setup.plan.total_bytes(ddo::placement::file) > 0);
    // A size the user set is honoured, or refused naming the group and both sizes.
    options.inputs.overrides.push_back({ddo::field_id::vmm_staging_buffer_gb, 0.5});
    const auto given = ddo::resolve_settings(options.inputs);
    auto tg = ddo::make_transport<nvme_sim>(given, sim);
    try {
      (void)ddo::setup_offload(table, given, ddo::component_for(given, options.inputs), options,
                               tg);
      FAIL("no refusal");
    } catch (const ddo::out_of_memory& e) {
      const std::string what = e.what();
      CHECK(what.find("700.00 MiB") != std::string::npos);
      CHECK(what.find("honoured") != std::string::npos);
    }
  }
}

TEST_SUITE("runtime") {
  TEST_CASE("a grown staging slot over the legacy VMM route: the window's staging check follows it") {
    // FLUX.1's double blocks stage 648 MiB through the preset's 640 MiB: setup grows the file
    // route's slots, and the window must not refuse the group the slot now holds.
    ddo::host_sim_vmm_options vo;
    vo.window.budget_bytes = 2 * ddo::gib;
    vo.window.handle_bytes = 64 * ddo::mib;
    vo.window.staging_buffer_bytes = 640 * ddo::mib;
    ddo::nvme_options no;
    no.staging_slot_bytes = 640 * ddo::mib;
    ddo::stable_address_request r;
    r.group_bytes = {648 * ddo::mib, 648 * ddo::mib};
    r.slot_bytes = 648 * ddo::mib;
    r.largest_staged_bytes = 648 * ddo::mib;
    {
      nvme_sim_vmm t(ddo::host_sim_vmm_transport(vo), no);
      CHECK_THROWS_WITH_AS(t.prepare_stable_addresses(r),
                           doctest::Contains("vmm_staging_buffer_gb holds 671088640 bytes"),
                           ddo::config_error);
    }
    nvme_sim_vmm t(ddo::host_sim_vmm_transport(vo), no);
    t.grow_staging_slot(r.largest_staged_bytes);
    CHECK(t.staging_slot_bytes() == 648 * ddo::mib);
    CHECK(t.prepare_stable_addresses(r) >= 1);
    CHECK_THROWS_AS(t.grow_staging_slot(700 * ddo::mib), ddo::usage_error);  // prepared: too late
    t.release_stable_addresses();
  }
}

TEST_SUITE("runtime") {
  TEST_CASE("the legacy VMM route grows the default staging buffer to the largest group that may stream") {
    // ddo-run --ram-gb 24 --vram-gb 8 --ddo-execution-mode vmm_runtime on FLUX.1 (H200, 5 Dec):
    // pageable 648 MiB double blocks against the default 640 MiB buffer were refused by the
    // window. Groups of 700 MiB here; nothing is read (planning and the window's sizing only).
    const ddo::weight_table table = blocks_of_700_mib();
    ddo::setup_options options;
    options.inputs.environment = std::map<std::string, std::string>{};
    options.inputs.overrides.emplace_back(ddo::field_id::execution_mode, ddo::exec_mode::vmm_runtime);
    options.inputs.overrides.emplace_back(ddo::field_id::pin_cpu_memory, false);  // every streamed byte stages
    options.inputs.overrides.emplace_back(ddo::field_id::vmm_resident_weight_budget_gb, 4.0);
    options.ram_bytes = 64 * ddo::gib;
    // Resolution's auto preset reads the RAM too: this machine's available RAM (low under load)
    // chose another preset, whose plan never grew the buffer. Stated, as ram_bytes is.
    options.inputs.detected_ram_gb = 64.0;
    options.log = nullptr;
    const auto settings = ddo::resolve_settings(options.inputs);
    ddo::host_sim_options sim;
    sim.device_capacity_bytes = 4 * ddo::gib + 512 * ddo::mib;
    auto t = ddo::make_transport<ddo::host_sim_vmm_transport>(settings, sim);
    REQUIRE(t.staging_buffer_bytes() < 700 * ddo::mib);
    const auto setup = ddo::setup_offload(table, settings,
                                          ddo::component_for(settings, options.inputs), options, t);
    CHECK(t.staging_buffer_bytes() == 700 * ddo::mib);
    CHECK(setup.runtime.staging_buffer_bytes == 700 * ddo::mib);
    CHECK(setup.plan.budgets.max_group_detail.find("grown to 700.00 MiB") != std::string::npos);
    // A size the user set is honoured: the window then refuses the group with both numbers.
    options.inputs.overrides.emplace_back(ddo::field_id::vmm_staging_buffer_gb, 0.5);
    const auto given = ddo::resolve_settings(options.inputs);
    auto tg = ddo::make_transport<ddo::host_sim_vmm_transport>(given, sim);
    (void)ddo::setup_offload(table, given, ddo::component_for(given, options.inputs), options, tg);
    CHECK(tg.staging_buffer_bytes() == ddo::gib / 2);
  }

  TEST_CASE("setup asks a transport with a window how it sizes it, and plans inside the answer") {
    const ddo::weight_table table = blocks_of_700_mib();
    ddo::setup_options options;
    options.inputs.environment = std::map<std::string, std::string>{};
    options.inputs.overrides.emplace_back(ddo::field_id::vmm_resident_weight_budget_gb, 1.0);
    options.ram_bytes = 64 * ddo::gib;
    options.inputs.detected_ram_gb = 64.0;
    options.log = nullptr;
    const auto settings = ddo::resolve_settings(options.inputs);
    const auto groups =
        ddo::infer_execution_groups(table, settings.config.resident_module_patterns);
    const auto runtime = ddo::runtime_options_from(settings.config);
    sizing_sim t;
    const auto inputs =
        ddo::machine_inputs_for(settings, options, options.inputs.paths, table, runtime);
    const auto m = ddo::machine_for(t, table, groups, settings.config, inputs, runtime);
    // The request: the largest group that may stream (a block, 700 MiB), the ring's slot, the
    // budget, the setting as resolved.
    CHECK(t.asked->streams);
    CHECK_FALSE(t.asked->staging_stated);
    CHECK(t.asked->largest_group_bytes == 700 * ddo::mib);
    CHECK(t.asked->slot_bytes == m.slot_bytes);
    CHECK(t.asked->resident_budget_bytes == ddo::gib);
    CHECK(t.asked->staging_setting_bytes ==
          ddo::gib_to_bytes(settings.config.vmm_staging_buffer_gb));
    // The answer: the plan's per-group limit, the grown note naming the group, the budget's share.
    CHECK(m.capacity.max_group_bytes == 100 * ddo::mib);
    CHECK(m.capacity.max_group_detail.find("grown to 100.00 MiB for the largest group that may "
                                           "stream, 'blocks.0' (700.00 MiB)") != std::string::npos);
    // The window keeps the ring's depth (3 slots), so that loads overlap compute.
    REQUIRE(runtime.slot_count == 3);
    CHECK(m.capacity.resident_limit_bytes == ddo::gib - 3 * 64 * ddo::mib);
    CHECK(m.capacity.resident_limit_reason ==
          "vmm_resident_weight_budget_gb 1.00 GiB less the ring's 3 window slot(s) of 64.00 MiB");
    // Route none streams nothing: the request says so; the transport decides what that means.
    (void)ddo::machine_for(t, table, groups, settings.config, inputs, runtime, false);
    CHECK_FALSE(t.asked->streams);
    // The file route over the VMM window: its slot is the group limit, and the window still
    // shares the budget with the resident weights (one window slot: 64 MiB handles, 704 MiB for
    // a 700 MiB slot).
    auto nv = ddo::make_transport<nvme_sim_vmm>(settings, ddo::host_sim_options{});
    ddo::window_sizing_request r = *t.asked;
    r.streams = true;
    r.slot_bytes = 700 * ddo::mib;
    const ddo::window_sizing a = nv.size_window(r);
    CHECK(a.group_limit_bytes == nv.staging_slot_bytes());
    CHECK(a.group_limit_bytes >= 700 * ddo::mib);
    CHECK(a.shares_resident_budget);
    CHECK(a.window_slot_bytes == 704 * ddo::mib);
    r.native_route = true;  // the native route stages through its own windows: no share
    CHECK_FALSE(nv.size_window(r).shares_resident_budget);
  }
}
