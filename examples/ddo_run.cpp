// SPDX-License-Identifier: Apache-2.0
// ddo-run: runs denoising-like steps of a synthetic transformer forward over a safetensors model
// whose weights ddo streams to the device.
//
// With no arguments it generates (once, cached) a synthetic DiT-like model, resolves settings
// (preset auto < --config FILE.toml < DDO_* environment < --ddo-* flags), plans where every weight
// lives, and runs steps: on a GPU through the linear transport with one cuBLAS GEMM per linear
// weight; without one on the host_sim transport with a CPU stand-in for the compute, saying so.
// See docs/runner.md.
//
// Exit status: 0 ok; 1 a run-time failure (also a --verify mismatch); 2 invalid input.
//
// This file reads the options and dispatches by mode; each mode is a file of examples/ddo_run/:
// steps_mode.hpp (the plain run, --graph, --calibrate), compare_mode.hpp (--compare and its
// sweep), devices_mode.hpp (--devices), pipeline_mode.hpp (--pipeline), phases_mode.hpp
// (--tokens T1,T2,...: the device budget following the activations), with report.hpp (what a
// run prints beside its steps) and common.hpp (the options and what every mode shares).

#include "ddo_run/arguments.hpp"
#include "ddo_run/cards.hpp"
#include "ddo_run/common.hpp"
#include "ddo_run/compare_mode.hpp"
#include "ddo_run/devices_mode.hpp"
#include "ddo_run/model_choice.hpp"
#include "ddo_run/phases_mode.hpp"
#include "ddo_run/pipeline_mode.hpp"
#include "ddo_run/report.hpp"
#include "ddo_run/settings_start.hpp"
#include "ddo_run/steps_mode.hpp"
#include "ddo_run/switch_mode.hpp"

namespace ddo_run {

/// Runs the mode the options chose on the context's card(s): --compare, --devices, or the plain
/// steps on the transport `backend` chooses.
int run_mode(run_context& ctx, bool file_route, std::uint64_t reserve) {
  const auto& opt = ctx.opt;
  const auto& table = ctx.table;
  const auto& settings = ctx.settings;
  const bool gpu = ctx.gpu;
  const bool vmm = settings.config.backend == ddo::offload_backend::vmm;
  if (opt.compare && (vmm || file_route))
    return fail(
        std::string("--compare runs ddo's linear transport (host_sim without a GPU); backend ") +
            (vmm ? "vmm" : "nvme") + " is not compared",
        exit_usage);
  // ddo's transport on one card: capped at the card minus the context (0: uncapped, the device).
  auto gpu_limit = [&](const ddo::runner::vram_budget& b) -> std::uint64_t {
    return ctx.emulated ? b.ddo_limit_bytes(ddo::runtime_device_reserve_bytes) : 0;
  };
  // --compare: the linear transport on the device execution_device names, uncapped for the
  // bound and the baselines, capped per card for ddo's rows (make_transport, as with_transport
  // makes it).
  if (gpu && opt.compare)
    return run_compare<gpu_engine>(
        ctx, ddo::make_transport<ddo::linear_transport>(settings),
        [&](const ddo::runner::vram_budget& b, const ddo::host_sim_options&) {
          return ddo::make_transport<ddo::linear_transport>(settings, {}, gpu_limit(b));
        });
  if (!gpu)
    ctx.setup.host_sim.device_capacity_bytes =
        ctx.budget.ddo_limit_bytes(ddo::runtime_device_reserve_bytes);
  if (opt.devices > 1) return run_devices(ctx, gpu, gpu_limit(ctx.budget));
  ctx.setup.simulate_device = !gpu;
  ctx.setup.device_limit_bytes = gpu ? gpu_limit(ctx.budget) : 0;
  if (!gpu && opt.compare) {
    // The uncapped stand-in for the real device: room for the whole model and the reserve.
    ddo::host_sim_options base = ctx.setup.host_sim;
    base.device_capacity_bytes = table.total_bytes() + reserve + ddo::gib;
    return run_compare<cpu_engine>(ctx, ddo::make_transport<ddo::host_sim_transport>(settings, base),
                                   [&](const ddo::runner::vram_budget&, const ddo::host_sim_options& sim) {
                                     return ddo::make_transport<ddo::host_sim_transport>(settings, sim);
                                   });
  }
  // The transport `backend` chooses (ddo::with_transport, the one switch of the one call):
  // on a GPU capped at the card, without one host_sim standing in for it on every route.
  return ddo::with_transport(settings, ctx.setup, [&](auto transport) {
    using engine = ddo::runner::engine_for<decltype(transport)>;
    if (!ctx.opt.token_phases.empty()) {
      // Phases move the budget: the linear and host_sim routes (basic_offloader::move_budget).
      if constexpr (ddo::transport_with_stable_addresses<decltype(transport)> ||
                    ddo::transport_with_file_staging<decltype(transport)>)
        return fail("--tokens T1,T2,...: the device budget moves on the linear route only; "
                    "this run's backend does not", exit_usage);
      else
        return run_phases<engine>(ctx, std::move(transport));
    }
    return run_steps<engine>(ctx, std::move(transport));
  });
}

int run(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // keep stdout and stderr lines in order in logs
  // Before any thread starts: SIGINT/SIGTERM remove this run's temporaries (model cache, trace).
  ddo::runner::interrupt_cleanup interrupts("ddo-run");
  run_options opt;
  option_set options;
  describe_options(options, opt);

  po::variables_map vm;
  if (const auto done = parse_arguments(argc, argv, options, vm)) return *done;
  if (const auto refused = read_options(opt, vm)) return *refused;

  run_inputs start;
  if (const auto refused = start_settings(opt, vm, interrupts, start)) return *refused;
  auto& inputs = start.inputs;
  const double helper_vmm_budget_gb = start.helper_vmm_budget_gb;
  const auto device = choose_device(opt, start.backend_sim);
  const auto& gpu_probe = device.probe;
  const bool gpu = device.gpu;
  const std::uint64_t context_bytes = device.context_bytes;

  if (opt.pipeline) return run_pipeline(opt, vm, std::move(inputs), gpu);
  if (!opt.switch_models.empty()) return run_switch_mode(opt, vm, start, device, interrupts);

  if (const auto refused = choose_synthetic(opt, vm, gpu)) return *refused;
  std::vector<std::string> paths = opt.models;
  if (paths.empty())
    if (const auto refused = synthetic_model_paths(opt, gpu, interrupts, paths)) return *refused;
  auto& synthetic = opt.synthetic;

  auto loaded = load_model(paths, inputs, opt, helper_vmm_budget_gb);
  const ddo::weight_table& table = loaded.table;
  const ddo::dynamic_offload_settings& settings = loaded.settings;

  // The file route reads the files while it streams (O_DIRECT where allowed): warming the page
  // cache first would measure the cache, and a model larger than RAM does not fit in it.
  const bool file_route = settings.config.backend == ddo::offload_backend::nvme;
  if (!file_route) load_files(table);
  const auto files = open_files(table);
  const std::int64_t tokens = opt.tokens ? opt.tokens : ddo::runner::default_tokens(gpu);
  const model_compute compute = describe_compute(table, files, tokens);
  if (compute.gemms == 0)
    return fail("the model has no 2-D weights of a supported dtype (bf16, F16, F32) to multiply",
                exit_usage);
  if (compute.skipped_other_dtype != 0)
    std::printf("model: %zu 2-D weight(s) of a dtype other than %s are streamed but not multiplied\n",
                compute.skipped_other_dtype, std::string(ddo::to_string(compute.type)).c_str());

  ddo::component_route requested_route = ddo::component_route::dynamic_offload;
  for (const auto& c : settings.components)
    if (c.name == ddo::runner::run_component) requested_route = c.route;

  run_context ctx{opt,   settings, table, files, compute, tokens, 0,  gpu, requested_route,
                  {},    {},       false, {},    {},      {}};
  ctx.steps = opt.steps ? opt.steps : 3;
  ctx.device_name = gpu ? gpu_probe.name + " (" + gb(gpu_probe.total_bytes) + ")"
                        : std::string("host_sim (no GPU: host memory and a CPU stand-in)");
  if (opt.models.empty()) {
    ctx.model_name = "synthetic " + ddo::runner::synthetic_model_key(synthetic);
  } else {
    for (const auto& m : opt.models) ctx.model_name += (ctx.model_name.empty() ? "" : " ") + m;
  }
  // The engine's reserve: the runner's two activation buffers and, on a GPU, its cuBLAS
  // workspace (ddo-plan --tokens computes the same).
  const std::uint64_t reserve =
      ddo::runner::engine_reserve_bytes(tokens, ddo::runner::compute_shape_of(table), gpu);
  ctx.setup = ddo::runner::run_setup_options(
      inputs, reserve,
      opt.ram_gb > 0.0 ? std::optional<std::uint64_t>(ddo::gib_to_bytes(opt.ram_gb)) : std::nullopt);

  set_cards(ctx, gpu_probe, context_bytes, reserve);

  return run_mode(ctx, file_route, reserve);
}

}  // namespace ddo_run

int main(int argc, char** argv) {
  return ddo::runner::run_program("ddo-run", ddo_run::run, argc, argv);
}
