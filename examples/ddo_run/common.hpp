// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp): what every mode shares: the parsed options, the exit codes, short
/// formatters, an NVTX scope, the failure report.
/// Example code (docs/runner.md).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <boost/program_options.hpp>

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define DDO_RUN_HAS_NVTX 1
#else
#define DDO_RUN_HAS_NVTX 0
#endif

#include "ddo/cli/dynamic_offload_arguments.hpp"
#include "ddo/config/resolve.hpp"
#include "ddo/config/settings_toml.hpp"
#include "ddo/config/toml_source.hpp"
#include "ddo/core/atomic_file.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/text.hpp"
#include "ddo/memory/process_memory.hpp"
#include "ddo/memory/system_probe.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/model/synthetic_model.hpp"
#include "ddo/plan/plan_format.hpp"
#include "ddo/plan/planner.hpp"
#include "ddo/platform/cuda_driver.hpp"
#include "ddo/profile/profile_lookup.hpp"
#include "ddo/runtime/calibration.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/linear.hpp"
#include "ddo/transport/nvme.hpp"
#include "runner/calibration_report.hpp"
#include "runner/chrome_trace.hpp"
#include "runner/compare.hpp"
#include "runner/count_options.hpp"
#include "runner/graph_launches.hpp"
#include "runner/compare_run.hpp"
#include "runner/device_memory_sampler.hpp"
#include "runner/devices_run.hpp"
#include "runner/interrupt_cleanup.hpp"
#include "runner/model_cache.hpp"
#include "runner/overlap_report.hpp"
#include "runner/pipeline_run.hpp"
#include "runner/program_main.hpp"
#include "runner/progress.hpp"
#include "runner/run_model.hpp"
#include "runner/run_setup.hpp"
#include "runner/setup_floor.hpp"
#include "runner/setup_progress_printer.hpp"
#include "runner/step_summary.hpp"
#include "runner/synthetic_forward.hpp"
#include "runner/synthetic_options.hpp"
#include "runner/trace_adapter.hpp"
#include "runner/vram_budget.hpp"

namespace ddo_run {

namespace po = boost::program_options;
using ddo::runner::chrome_trace;
using ddo::runner::trace_adapter;
using ddo::runner::cpu_engine;
using ddo::runner::cpu_vmm_engine;
using ddo::runner::cpu_nvme_engine;
using ddo::runner::cpu_nvme_vmm_engine;
using ddo::runner::describe_compute;
using ddo::runner::gpu_engine;
using ddo::runner::gpu_vmm_engine;
using ddo::runner::gpu_nvme_engine;
using ddo::runner::gpu_nvme_vmm_engine;
using ddo::runner::model_compute;
using ddo::runner::open_files;
using ddo::runner::progress_bar;
using ddo::runner::read_source;

static_assert(ddo::runner::cublas_workspace_bytes == ddo::runner::gpu_workspace_reserve_bytes,
              "ddo-plan's reserve must be the GPU engine's workspace");


using ddo::runner::exit_failure;
using ddo::runner::exit_usage;

struct run_options {
  std::vector<std::string> models;
  int steps = 0;              // 0: the default for the device
  int warmup = 1;             // --warmup: untimed-for-the-median steps before the steady ones
  bool bound = true;          // --no-bound: skip measuring C and B (scripts that check the plan)
  bool setup_floor = false;   // --setup-floor: measure the setup's floor before the setup
  bool parallel_setup = false;  // --parallel-setup: runtime_options::parallel_setup
  std::int64_t tokens = 0;    // 0: the default for the device
  std::vector<std::int64_t> token_phases;  // --tokens T1,T2,...: one phase each (phases_mode)
  bool verify = false;
  std::string trace_path;
  std::string config_path;
  bool use_environment = true;
  bool force_cpu = false;
  bool print_settings = false;
  std::vector<double> vram_gib;  // empty: the default card (GPU 12 GiB; host_sim: see run_setup.hpp)
  bool vram_device = false;      // --vram-gb device: the whole real device, no emulation
  double ram_gb = 0.0;           // 0: probe available RAM
  bool compare = false;
  std::string json_path;         // --json: the compare report
  std::string cache_dir;
  std::string expect_model;      // --expect-model KEY: refuse any other synthetic model
  ddo::synthetic_model_options synthetic;
  bool synthetic_given = false;  // any of --blocks, --hidden, ... given
  std::string profile_name;      // --profile
  bool calibrate = false;        // --calibrate
  bool pipeline = false;         // --pipeline: text encoder -> transformer steps -> VAE
  int images = 0;                // --images (pipeline; 0: the default)
  int devices = 1;               // --devices: offloaders sharing one weight store
  bool shard_layers = false;     // --shard layers: each device its range of the groups
  bool graph = false;            // --graph: capture the first step, replay it for the rest
  std::vector<std::string> switch_models;  // --models / --experts: the models switched between
  bool experts = false;          // --experts: A the first half of each generation, B the rest
  int switch_every = 1;          // --switch-every: generations per model before switching
  int generations = 0;           // --generations (0: the default for the mode)
};

// Short names for ddo's byte formatter (core/format_bytes.hpp), used on nearly every line printed.
inline std::string gb(std::uint64_t bytes) { return ddo::format_decimal_gb(bytes); }
inline std::string gib_text(std::uint64_t bytes) { return ddo::format_size(bytes, ddo::size_unit::gib); }

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// NVTX range for the runner's own phases (steps), so Nsight Systems shows them beside ddo's.
class nvtx_scope {
 public:
  nvtx_scope(bool on, const char* name) : on_(on && DDO_RUN_HAS_NVTX) {
#if DDO_RUN_HAS_NVTX
    if (on_) nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  nvtx_scope(const nvtx_scope&) = delete;
  nvtx_scope& operator=(const nvtx_scope&) = delete;
  ~nvtx_scope() {
#if DDO_RUN_HAS_NVTX
    if (on_) nvtxRangePop();
#endif
  }

 private:
  bool on_;
};

/// Reads every model file once, front to back, with a progress bar: the loading phase. It also
/// brings the files into the page cache, so ddo's packing at setup reads memory, not the disk.
inline void load_files(const ddo::weight_table& table) {
  std::uint64_t total = 0;
  for (const auto& path : table.files()) total += std::filesystem::file_size(path);
  progress_bar bar("loading model files", total);
  std::vector<std::byte> buffer(16 * ddo::mib);
  std::uint64_t done = 0;
  for (const auto& path : table.files()) {
    const ddo::file_reader reader(path, ddo::safetensors_backend::pread);
    const std::uint64_t size = std::filesystem::file_size(path);
    for (std::uint64_t off = 0; off < size; off += buffer.size()) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - off));
      reader.read(off, std::span(buffer.data(), n));
      done += n;
      bar.update(done);
    }
  }
  bar.finish();
}


inline std::optional<ddo::dtype> parse_model_dtype(const std::string& text) {
  if (text == "bf16" || text == "BF16") return ddo::dtype::bf16;
  if (text == "fp16" || text == "f16" || text == "F16") return ddo::dtype::f16;
  if (text == "fp32" || text == "f32" || text == "F32") return ddo::dtype::f32;
  return std::nullopt;
}

inline int fail(const std::string& message, int code) {
  return ddo::runner::report_failure("ddo-run", message, code);
}

}  // namespace ddo_run
