// SPDX-License-Identifier: Apache-2.0
// Acquire bench: host time of acquire + release for a group whose weights are already on the
// device — resident groups (no copy, no event) and streamed groups already in the ring (an event
// wait and an event record) — on host_sim and, where a GPU is usable, on linear. Target: <= 5 us.
//
//   acquire_bench [--iterations 200000] [--json FILE]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_arguments.hpp"
#include "bench_setup.hpp"
#include "ddo/core/atomic_file.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/core/standard_output.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/platform/cuda_device.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"

namespace {

struct model {
  ddo::weight_table table;
  std::vector<ddo::execution_group> groups;
  std::vector<std::vector<std::byte>> storage;
  ddo::placement where = ddo::placement::gpu_resident;
};

/// @p groups groups of 4 weights of 64 KiB, all resident or all pinned.
model make(std::size_t groups, ddo::placement where) {
  model m;
  m.where = where;
  m.storage.reserve(groups * 4);
  for (std::size_t g = 0; g < groups; ++g) {
    ddo::execution_group group;
    group.name = "blocks." + std::to_string(g);
    group.is_block = true;
    for (int i = 0; i < 4; ++i) {
      m.storage.emplace_back(64 * 1024, std::byte{static_cast<unsigned char>(g * 4 + i + 1)});
      ddo::weight_info w;
      w.name = group.name + ".w" + std::to_string(i);
      w.module_name = group.name;
      w.kind = ddo::module_kind::linear;
      w.type = ddo::dtype::u8;
      w.shape = {64 * 1024};
      w.source = ddo::host_source{m.storage.back().data()};
      group.weights.push_back(m.table.add(w));
    }
    m.groups.push_back(std::move(group));
  }
  return m;
}

template <class Transport, class View>
double per_pair_us(Transport t, const model& m, View stream, std::size_t iterations,
                   std::size_t slots) {
  // Through the one call (bench_setup.hpp): the planner chooses the placement measured.
  auto options = ddo_bench::placement_setup(m.groups, m.where);
  options.runtime.slot_count = slots;
  auto enabled = ddo_bench::offloader_for(m.table, options, t, m.where);
  auto& off = *enabled.offloader;
  const std::size_t groups = off.group_count();
  for (std::size_t i = 0; i < 2 * groups; ++i) auto lease = off.acquire(i % groups, stream);
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < iterations; ++i) {
    auto lease = off.acquire(i % groups, stream);
  }
  const auto end = std::chrono::steady_clock::now();
  t.synchronize(stream);
  return std::chrono::duration<double, std::micro>(end - start).count() / static_cast<double>(iterations);
}

struct row {
  std::string transport, kind;
  double us;
};

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  constexpr const char* program = "acquire_bench";
  std::string json;
  po::options_description desc("options");
  desc.add_options()("iterations", po::value<std::string>()->value_name("N"),
                     "acquire/release pairs per measurement, at least 16 (default 200000)")(
      "json", po::value<std::string>(&json)->value_name("FILE"), "write the results as JSON");
  const auto vm = ddo_bench::parse_or_exit(program, argc, argv, desc, "[--iterations N] [--json FILE]");
  const auto iterations = static_cast<std::size_t>(
      ddo_bench::number_or(program, vm, "iterations", 200000, 16, std::int64_t{1} << 40));
  try {
    std::vector<row> rows;
    const model resident = make(32, ddo::placement::gpu_resident);
    const model streamed = make(4, ddo::placement::pinned_host);  // 4 slots: all stay loaded
    {
      ddo::host_sim_transport sim;
      auto s = sim.make_stream();
      rows.push_back({"host_sim", "resident group", per_pair_us(sim, resident, sim.view(s), iterations, 3)});
      rows.push_back({"host_sim", "streamed group already in a slot",
                      per_pair_us(sim, streamed, sim.view(s), iterations / 4, 4)});
    }
    const auto gpu = ddo::probe_cuda_device(0);
    std::string device = "none (" + gpu.reason + ")";
    if (gpu.available) {
      device = gpu.name;
      ddo::linear_transport lin;
      auto s = lin.make_stream();
      rows.push_back({"linear", "resident group", per_pair_us(lin, resident, lin.view(s), iterations, 3)});
      rows.push_back({"linear", "streamed group already in a slot",
                      per_pair_us(lin, streamed, lin.view(s), iterations / 10, 4)});
    }
    std::string command;
    command = ddo_bench::command_line(argc, argv);
    std::printf("command: %s\n", command.c_str());
    std::printf("acquire_bench: %zu iterations, groups of 4 x 64 KiB, device: %s\n\n", iterations,
                device.c_str());
    std::printf("| transport | group | acquire + release, host us | target |\n|---|---|---|---|\n");
    for (const auto& r : rows)
      std::printf("| %s | %s | %.3f | <= 5 (%s) |\n", r.transport.c_str(), r.kind.c_str(), r.us,
                  r.us <= 5.0 ? "PASS" : "MISS");
    if (!json.empty()) {
      ddo::json_writer j;
      j.begin_object().member("bench", "acquire_bench").member("device", device);
      j.member("iterations", iterations).key("summary").begin_array();
      for (const auto& r : rows) {
        j.begin_object().member("metric", "acquire+release " + r.transport + ", " + r.kind);
        j.member("value", r.us).member("unit", "us").member("target", "<= 5");
        j.member("pass", r.us <= 5.0).end_object();
      }
      j.end_array().end_object();
      // Written aside and renamed: no partial file on a full disk.
      ddo::write_file_atomically(json, j.take() + "\n");
    }
    ddo::flush_standard_output();  // a full disk is a failure, not success
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "acquire_bench: %s\n", e.what());
    return 1;
  }
}
