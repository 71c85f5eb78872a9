// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux (examples/flux/ddo_flux.cpp) without a GPU, or with --cpu or backend host_sim:
/// the CPU float forward (flux/flux_cpu.hpp) on ddo's host_sim transport, host memory standing
/// in for the device and the compute stream's thread running each stage; eager or --graph,
/// --check against the all-resident loop without ddo. Example code (docs/engine-walkthrough.md).

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo_flux/latents.hpp"
#include "ddo_flux/lora_option.hpp"
#include "ddo_flux/lora_switch.hpp"
#include "flux/flux_engine.hpp"
#include "flux/flux_modes.hpp"
#include "flux/flux_step_time.hpp"
#include "flux/flux_trace.hpp"
#include "runner/graph_launches.hpp"
#include "runner/program_main.hpp"

namespace ddo_flux {

/// What the CPU path is given: the model, its inputs, the settings and what to do.
struct cpu_run {
  const ddo::weight_table& table;
  const ddo::dynamic_offload_settings& settings;
  const ddo::resolve_inputs& inputs;
  const flux::config& c;
  const flux::inputs& in;
  int steps = 1;
  double vram_gib = 12.0;
  std::uint64_t activations = 0;  ///< what the engine states to ddo (reserve_device_bytes)
  flux::run_modes modes;
  std::string output, trace_path;
  std::vector<lora_choice> loras;  ///< --lora, attached after setup
};

/// Prints what the plan keeps and streams on the host_sim card, and refuses --graph where the
/// route or the transport cannot stream through a captured graph.
/// @throws ddo::usage_error for --graph on such a route.
template <class Prepared>
void print_cpu_plan(const Prepared& prepared, const cpu_run& r, std::uint64_t card_bytes) {
  using transport_type = typename Prepared::transport_type;
  const auto& setup = prepared.setup;
  const std::uint64_t resident = setup.plan.total_bytes(ddo::placement::gpu_resident);
  std::printf(
      "ddo: %s card (host_sim), preset %s, %s transport, route %s: %s resident, %s streamed per "
      "step; activations stated %s\n",
      ddo::format_bytes(card_bytes).c_str(), r.settings.effective_preset.c_str(),
      std::string(prepared.transport.name()).c_str(),
      std::string(ddo::to_string(setup.runtime.route)).c_str(),
      ddo::format_bytes(resident).c_str(),
      ddo::format_bytes(r.table.total_bytes() - resident).c_str(),
      ddo::format_bytes(r.activations).c_str());
  if (r.modes.graph && setup.runtime.native_vmm.enabled)
    throw ddo::usage_error(flux::native_vmm_graph);
  if constexpr (!ddo::graph_streaming_transport<transport_type>) {
    if (r.modes.graph)
      throw ddo::usage_error(
          "--graph runs on the linear route and the legacy VMM route; this "
          "run's transport is '" +
          std::string(prepared.transport.name()) +
          "', which cannot stream through a captured graph");
  }
}

/// The denoising loop streamed through the offloader @p prepared starts: eager (a forward per
/// step) or, with --graph, the first step captured and replayed. @p stages: the plan's stages,
/// for --check's resident loop. With --lora-switch, the switches and the loop again after the
/// loop (@p switch_differs: whether that loop's latents differ).
template <class Prepared>
std::vector<float> cpu_streamed_steps(Prepared& prepared, const cpu_run& r,
                                      std::uint64_t card_bytes, flux::run_trace* trace,
                                      std::vector<flux::stage>& stages, bool& switch_differs) {
  using transport_type = typename Prepared::transport_type;
  print_cpu_plan(prepared, r, card_bytes);
  const bool graph = r.modes.graph;
  flux::host_phases* const phases = trace;
  auto enabled = prepared.start();
  if (trace) trace->setup_finished();
  auto& off = *enabled.offloader;
  attach_loras(off, r.loras);
  auto compute = off.transport().make_stream();
  const auto view = transport_type::view(compute);
  stages = flux::plan_stages(r.table, off.plan());
  const auto s = flux::sigmas(r.steps, r.in.image_tokens);
  std::vector<double> step_ms;
  // --graph: the captured stage tasks hold the forward and the step's buffers by reference, so
  // both live across the steps (eager: a forward per step, as before).
  std::optional<flux::forward> graph_f;
  std::optional<flux::step_buffers> buffers;
  if (graph) {
    graph_f.emplace(r.c, r.in.image_tokens, r.in.text_tokens);
    buffers.emplace(flux::step_buffers{r.in, 0.f, {}});
  }
  flux::transport_capture<transport_type> capture{off.transport()};
  std::optional<typename transport_type::graph_exec> captured;
  const auto step = [&](const flux::inputs& x, float t) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<float> v;
        if constexpr (ddo::graph_streaming_transport<transport_type>) {
          if (graph) {
            buffers->in.latents = x.latents;
            buffers->timestep = t;
            v = flux::graph_forward(off, view, stages, *graph_f, *buffers, capture, captured);
          }
        }
        if (!graph) {
          flux::forward f(r.c, x.image_tokens, x.text_tokens);
          v = flux::streamed_forward(off, view, stages, f, x, t, phases);
        }
        step_ms.push_back(flux::ms_since(t0));
        const std::size_t k = (step_ms.size() - 1) % static_cast<std::size_t>(r.steps);
        std::printf("  step %zu: sigma %.4f, %.1f ms\n", k, static_cast<double>(s[k]),
                    step_ms.back());
        return v;
      };
  auto out = flux::denoise(r.in, r.steps, step, nullptr, phases);
  const auto metrics = off.metrics(true);
  std::printf("ddo: %s moved over %d steps\n", ddo::format_bytes(metrics.totals.bytes()).c_str(),
              r.steps);
  if (graph) ddo::runner::print_graph_launches(off);
  if (r.modes.lora_switch) {
    const double step_median = flux::steady_median(step_ms);
    // host_sim's copies and merges run on its stream threads: a switch ends when they are done.
    auto switched = time_lora_switches(off, r.loras, [&] { off.transport().synchronize(view); });
    switched.loop_again_equal = same_bits(flux::denoise(r.in, r.steps, step, nullptr, phases), out);
    switch_differs = print_lora_switches(switched, r.loras, step_median);
  }
  return out;
}

/// The CPU path: ddo's setup on a host_sim card of --vram-gb (one call,
/// ddo/setup/prepare_offload.hpp: the transport, the planner, the plan), the streamed loop,
/// --output, --trace, and --check's verdict (exit 1 unless bitwise equal).
inline int run_cpu(const cpu_run& r) {
  ddo::setup_options options;
  options.inputs = r.inputs;
  // --lora: the factors go to the device after setup, so the plan leaves their bytes free.
  options.reserve_device_bytes = r.activations + lora_device_bytes(r.loras);
  const ddo::host_sim_options sim{.device_capacity_bytes =
                                      static_cast<std::uint64_t>(r.vram_gib * double(ddo::gib))};
  options.host_sim = sim;
  std::optional<flux::run_trace> trace;  // --trace
  if (r.modes.trace) {
    trace.emplace();
    options.runtime = trace->runtime_options(options.runtime);
  }
  // host_sim stands in for the device on every route (simulated_routes::only), as in ddo-run
  // without a GPU: backend nvme is the file route (over host_sim's VMM mode with execution_mode
  // vmm_runtime), backend vmm host_sim's VMM mode (the legacy or native VMM route by
  // execution_mode), else the linear route.
  std::vector<flux::stage> stages;
  bool switch_differs = false;
  const auto run_on = [&](auto& prepared) {
    return cpu_streamed_steps(prepared, r, sim.device_capacity_bytes, trace ? &*trace : nullptr,
                              stages, switch_differs);
  };
  const std::vector<float> latents = ddo::with_prepared_offload<>(
      r.table, r.settings, options, run_on, ddo::routes_of<ddo::simulated_routes::only>{});
  if (!r.output.empty()) {
    write_latents(r.output, latents);
    std::printf("latents: %s (%zu x %d float32)\n", r.output.c_str(), r.in.image_tokens,
                r.c.in_channels);
  }
  if (trace) trace->write(r.trace_path);
  if (switch_differs) return ddo::runner::exit_failure;
  if (r.modes.check) {
    flux::host_weights host(r.table);
    host.merge(merge_list(r.loras), r.table);
    const auto resident_latents = flux::denoise(r.in, r.steps, [&](const flux::inputs& x, float t) {
      flux::forward f(r.c, x.image_tokens, x.text_tokens);
      return flux::resident_forward(host, stages, f, x, t);
    });
    const bool equal = same_bits(resident_latents, latents);
    std::printf("check: streamed through ddo vs all-resident without ddo: %s\n",
                equal ? "bitwise equal" : "DIFFERENT");
    if (!equal) return ddo::runner::exit_failure;
  }
  return 0;
}

}  // namespace ddo_flux
