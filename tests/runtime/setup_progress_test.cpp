// SPDX-License-Identifier: Apache-2.0
// Setup progress: reading, packing, pinning and uploading are reported monotonically and end at
// their totals, which are the bytes setup really reads, packs, page-locks and uploads.
#include <doctest/doctest.h>

#include <array>
#include <map>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "ddo/memory/pinned_weight_cache.hpp"
#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/detail/setup_meter.hpp"
#include "ddo/transport/host_sim.hpp"
#include "runtime_fixtures.hpp"

using ddo::setup_phase;

namespace {

struct progress_log {
  std::mutex mutex;
  std::map<setup_phase, std::vector<ddo::setup_progress>> by_phase;
  std::vector<std::thread::id> threads;
  ddo::setup_progress_callback callback() {
    return [this](const ddo::setup_progress& p) {
      std::lock_guard lock(mutex);
      by_phase[p.phase].push_back(p);
    };
  }
  /// Checks monotone progress with a fixed total, ending at it; returns the total (0: none).
  std::uint64_t check(setup_phase phase) {
    auto it = by_phase.find(phase);
    if (it == by_phase.end()) return 0;
    const auto& v = it->second;
    REQUIRE_FALSE(v.empty());
    for (std::size_t i = 0; i < v.size(); ++i) {
      CHECK(v[i].bytes_total == v.front().bytes_total);
      CHECK(v[i].bytes_done <= v[i].bytes_total);
      if (i > 0) CHECK(v[i].bytes_done >= v[i - 1].bytes_done);
    }
    CHECK(v.back().bytes_done == v.back().bytes_total);
    return v.back().bytes_total;
  }
};

struct expected_bytes {
  std::uint64_t reading = 0, packing = 0, uploading = 0;
};

expected_bytes expected_for(const ddo_test::synthetic_model& m, bool in_place) {
  expected_bytes e;
  for (std::size_t w = 0; w < m.table.size(); ++w) {
    const auto where = m.plan.decisions[w].where;
    const bool file = std::holds_alternative<ddo::file_source>(m.table[w].source);
    if (where == ddo::placement::gpu_resident) {
      e.uploading += m.table[w].bytes;
      if (file) e.reading += m.table[w].bytes;
    } else if (where == ddo::placement::pinned_host) {
      if (file)
        e.reading += m.table[w].bytes;
      else if (!in_place)
        e.packing += m.table[w].bytes;
    }
  }
  return e;
}

}  // namespace

TEST_SUITE_BEGIN("runtime");

TEST_CASE("setup reports reading, packing, pinning and uploading up to their totals") {
  for (int workers : {1, 3}) {
    for (bool in_place : {false, true}) {
      for (bool parallel : {false, true}) {  // pinning beside the residents' upload
        CAPTURE(parallel);
        ddo_test::model_spec spec;
        spec.groups = 9;
        spec.seed = 300 + static_cast<std::uint32_t>(workers);
        auto m = ddo_test::make_model(spec);
        ddo::host_sim_transport sim;
        progress_log log;
        ddo::runtime_options o;
        o.pin_workers = workers;
        o.pin_in_place = in_place;
        o.parallel_setup = parallel;
        o.staging_buffer_bytes = 64 * 1024;
        o.on_setup_progress = log.callback();
        ddo::basic_offloader<ddo::host_sim_transport> off(sim, m->table, m->plan, o);
        const auto e = expected_for(*m, in_place);
        CHECK(log.check(setup_phase::reading) == e.reading);
        CHECK(log.check(setup_phase::packing) == e.packing);
        CHECK(log.check(setup_phase::uploading) == e.uploading);
        const std::uint64_t pinning = log.check(setup_phase::pinning);
        CHECK(pinning == off.metrics().pinned_bytes);  // every byte page-locked was reported
        CHECK(pinning > 0);
        CHECK(e.reading > 0);
        CHECK(e.uploading > 0);
      }
    }
  }
}

TEST_CASE("blocks reused from the pinned-weight cache are not read, packed or pinned again") {
  ddo_test::model_spec spec;
  spec.seed = 808;
  auto m = ddo_test::make_model(spec);
  ddo::host_sim_transport sim;
  ddo::pinned_weight_cache cache;
  ddo::runtime_options o;
  o.pinned_cache = &cache;
  { ddo::basic_offloader<ddo::host_sim_transport> first(sim, m->table, m->plan, o); }
  progress_log log;
  o.on_setup_progress = log.callback();
  ddo::basic_offloader<ddo::host_sim_transport> second(sim, m->table, m->plan, o);
  CHECK(second.metrics().cached_blocks_reused > 0);
  CHECK(log.check(setup_phase::packing) == 0);
  CHECK(log.check(setup_phase::pinning) == 0);
  // only the residents are read and uploaded
  std::uint64_t resident_file = 0;
  for (std::size_t w = 0; w < m->table.size(); ++w)
    if (m->plan.decisions[w].where == ddo::placement::gpu_resident &&
        std::holds_alternative<ddo::file_source>(m->table[w].source))
      resident_file += m->table[w].bytes;
  CHECK(log.check(setup_phase::reading) == resident_file);
  CHECK(log.check(setup_phase::uploading) == expected_for(*m, false).uploading);
}

TEST_CASE("the setup meter clamps, skips empty phases and completes unfinished ones") {
  std::vector<ddo::setup_progress> seen;
  ddo::detail::setup_meter meter([&](const ddo::setup_progress& p) { seen.push_back(p); });
  meter.plan(setup_phase::packing, 100);
  meter.start(setup_phase::packing);
  meter.start(setup_phase::reading);  // nothing planned: not reported
  meter.advance(setup_phase::packing, 30);
  meter.advance(setup_phase::packing, 0);
  meter.advance(setup_phase::packing, 500);  // clamped
  meter.advance(setup_phase::packing, 1);    // already complete: not reported again
  meter.plan(setup_phase::pinning, 64);
  meter.advance(setup_phase::pinning, 10);
  meter.finish(setup_phase::pinning);
  meter.finish(setup_phase::pinning);
  REQUIRE(seen.size() == 5);
  CHECK(seen[0].bytes_done == 0);
  CHECK(seen[1].bytes_done == 30);
  CHECK(seen[2].bytes_done == 100);
  CHECK(seen[3].phase == setup_phase::pinning);
  CHECK(seen[4].bytes_done == 64);
  ddo::detail::setup_meter silent;
  silent.plan(setup_phase::reading, 5);
  silent.advance(setup_phase::reading, 5);  // no callback: nothing to do, no crash
  CHECK_FALSE(silent.active());
}

TEST_SUITE_END();
