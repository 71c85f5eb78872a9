// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux (examples/flux/ddo_flux.cpp) on a GPU: the GPU forward (flux/flux_gpu.hpp:
/// cuBLASLt bf16 GEMMs with float accumulation, the kernels of flux_kernels.cu) on ddo's CUDA
/// transport on an emulated card of --vram-gb — the card measured, then the streamed run
/// (gpu_steps.hpp), --smallest-card's sweep (flux/flux_gpu_runs.hpp) or the report and the
/// all-resident loop (gpu_report.hpp). Needs a GPU and nvcc (DDO_FLUX_GPU). Example code
/// (docs/engine-walkthrough.md).

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "ddo/core/atomic_file.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/platform/cuda_device.hpp"
#include "ddo/profile/profile_store.hpp"
#include "ddo/runtime/transport_setup.hpp"
#include "ddo_flux/gpu_report.hpp"
#include "ddo_flux/gpu_steps.hpp"
#include "ddo_flux/latents.hpp"
#include "ddo_flux/lora_option.hpp"
#include "flux/flux_gpu_runs.hpp"
#include "flux/flux_trace.hpp"
#include "runner/compare_run.hpp"
#include "runner/program_main.hpp"
#include "runner/vram_budget.hpp"

namespace ddo_flux {

/// The emulated card: ddo's transport is capped at the card minus the CUDA context (measured at
/// start), and the plan leaves free the engine's reserve, measured as the device memory the
/// forward's buffers and the cuBLASLt workspace took.
struct gpu_card {
  std::uint64_t context = 0, reserve = 0;
  ddo::runner::vram_budget budget;
  std::uint64_t limit = 0;  ///< ddo's transport's cap
};

/// Measures @p card from the device memory free before the engine's buffers (@p before) and
/// now, and prints it.
inline gpu_card measure_card(const gpu_run& r, const ddo::cuda_device_probe& probe,
                             const ddo::device_memory_info& before, const gpu_engine& e) {
  const std::uint64_t context = before.total_bytes - before.free_bytes;
  const auto after = ddo::query_device_memory(0);
  const std::uint64_t reserve = before.free_bytes - after.free_bytes;
  const ddo::runner::vram_budget card{static_cast<std::uint64_t>(r.vram_gib * double(ddo::gib)),
                                      context, reserve};
  const std::uint64_t limit = card.ddo_limit_bytes(ddo::runtime_device_reserve_bytes);
  std::printf(
      "device: %s; emulating a %s card: ddo's transport capped at %s (the card minus the %s CUDA "
      "context); engine reserve measured %s (activations %s + cuBLASLt workspace %s)\n",
      probe.name.c_str(), ddo::format_bytes(card.vram_bytes).c_str(),
      ddo::format_bytes(limit).c_str(), ddo::format_bytes(context).c_str(),
      ddo::format_bytes(reserve).c_str(),
      ddo::format_bytes(e.f.device_bytes() + (e.f_low ? e.f_low->device_bytes() : 0)).c_str(),
      ddo::format_bytes(e.gemms.device_bytes()).c_str());
  return {context, reserve, card, limit};
}

/// The GPU forward on ddo's CUDA transport the settings choose, on an emulated card of
/// --vram-gb (measure_card). The plan is prepare_offload's: with --capacity-profile, the
/// overlap-aware planner's over the stored profile (its predicted step printed against the
/// measured median), with --calibrate the zero-resident calibration plan, after whose steps
/// ddo::calibrate times the forward at a quarter of the image tokens and at all of them and the
/// profile is saved.
inline int run_gpu(const gpu_run& r, const ddo::cuda_device_probe& probe) {
  // A calibration saves its profile after a minute of setup and steps: an unwritable directory
  // is said now.
  if (r.modes.calibrate)
    ddo::check_output_directory(ddo::profile_store(r.settings.profile_dir).directory(),
                                "profile directory");
  const auto memory = ddo::query_device_memory(0);
  gpu_engine e(r);
  const gpu_card card = measure_card(r, probe, memory, e);
  ddo::setup_options options;
  options.inputs = r.inputs;
  // --lora: the factors go to the device after setup, so the plan leaves their bytes free.
  options.reserve_device_bytes = card.reserve + lora_device_bytes(r.loras);
  options.tokens = r.in.image_tokens;  // a stored profile's timings at this run's image tokens
  if (r.modes.smallest_card)
    return flux::smallest_card_run({r.table, r.inputs, options, r.modes, r.in, r.steps, probe.name,
                                    card.context, card.reserve, card.budget.vram_bytes, r.json},
                                   e.f);
  // --trace: the runtime's spans into the trace; under --calibrate through the recorder, which
  // times every group's compute and loads and forwards each span.
  std::optional<flux::run_trace> trace;
  if (!r.trace.empty()) {
    trace.emplace();
    options.runtime = trace->runtime_options(options.runtime);
  }
  ddo::calibration_recorder recorder(trace ? &trace->sink() : nullptr);
  if (r.modes.calibrate) options.runtime = recorder.runtime_options(options.runtime);
  // B of the bound, measured before ddo's setup on an uncapped linear transport (the pinned
  // host-to-device rate the streamed bytes cannot beat).
  ddo::runner::pinned_rates pinned_rates;
  if (r.modes.profile) {
    auto probe_transport = ddo::make_transport<ddo::linear_transport>(r.settings);
    pinned_rates = ddo::runner::measure_pinned_rates(probe_transport, 512ull << 20);
  }
  gpu_results res;
  const gpu_streaming streaming{r, options, e, recorder, trace ? &*trace : nullptr, card.reserve};
  const std::vector<float> latents = flux::on_card_transport(
      r.settings, card.limit,
      [&](auto transport) { return gpu_streamed_run(std::move(transport), streaming, res); });
  if (!r.output.empty()) {
    write_latents(r.output, latents);
    std::printf("latents: %s (%zu x %d float32)\n", r.output.c_str(), r.in.image_tokens,
                r.c.in_channels);
  }
  if (trace) trace->write(r.trace);
  const bool graph_differs = print_gpu_summary(r, latents, res);
  const bool switch_differs =
      res.lora_switch &&
      print_lora_switches(*res.lora_switch, r.loras, flux::steady_median(res.streamed_ms));
  ddo::json_writer o;  // --json: the figures of whatever ran
  begin_gpu_json(o, r, probe.name, res, graph_differs);
  const bool resident_differs = (r.modes.check || r.modes.profile) &&
                                gpu_resident_run(r, e, res, latents, pinned_rates, o);
  if (!r.json.empty()) {
    o.member("steps", r.steps).end_object();
    ddo::write_file_atomically(r.json, o.take() + "\n");
  }
  return resident_differs || graph_differs || switch_differs ? ddo::runner::exit_failure : 0;
}

}  // namespace ddo_flux
