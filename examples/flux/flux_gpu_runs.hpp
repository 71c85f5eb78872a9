// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-flux's GPU runs on emulated cards: the transport the settings choose capped at a
/// card (on_card_transport), the timed Euler loop through ddo (timed_denoise), the all-resident
/// step without ddo (resident_median), and --smallest-card (smallest_card_run): per rule a fresh
/// offloader per card, one at a time, each released (its pinned host memory too) before the
/// next is set up. Needs a GPU and nvcc (DDO_FLUX_GPU). Example code (examples/flux/).

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/core/atomic_file.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/json_writer.hpp"
#include "ddo/profile/profile_lookup.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/linear.hpp"
#include "ddo/transport/nvme.hpp"
#include "ddo/transport/vmm.hpp"
#include "flux/flux_calibration.hpp"
#include "flux/flux_card_sweep.hpp"
#include "flux/flux_engine.hpp"
#include "flux/flux_gpu.hpp"
#include "flux/flux_modes.hpp"
#include "flux/flux_step_time.hpp"
#include "runner/overlap_report.hpp"
#include "runner/vram_budget.hpp"

namespace flux {

/// @brief Calls @p use with the CUDA transport the settings choose (make_transport), capped at
/// @p limit_bytes (an emulated card less its CUDA context); returns what it returns.
template <class Use>
decltype(auto) on_card_transport(const ddo::dynamic_offload_settings& settings,
                                 std::uint64_t limit_bytes, Use&& use) {
  const bool file_route = settings.config.backend == ddo::offload_backend::nvme;
  const bool vmm = settings.config.backend == ddo::offload_backend::vmm;
  const bool vmm_mode = settings.config.execution_mode == ddo::exec_mode::vmm_runtime;
  if (file_route && vmm_mode)
    return use(
        ddo::make_transport<ddo::nvme_transport<ddo::vmm_transport>>(settings, {}, limit_bytes));
  if (file_route)
    return use(
        ddo::make_transport<ddo::nvme_transport<ddo::linear_transport>>(settings, {}, limit_bytes));
  if (vmm) return use(ddo::make_transport<ddo::vmm_transport>(settings, {}, limit_bytes));
  return use(ddo::make_transport<ddo::linear_transport>(settings, {}, limit_bytes));
}

/// @brief The Euler loop of @p steps through @p off: each step's time (the interval to the next
/// step's start, flux_step_time.hpp) into @p ms, its forward's span into @p spans when set
/// (printed when @p print), its host phases to @p phases when set (--trace); the final latents.
template <class Offloader>
std::vector<float> timed_denoise(Offloader& off, typename Offloader::stream_view view,
                                 const std::vector<stage>& stages, gpu::device_forward& f,
                                 const inputs& in, int steps, std::vector<double>& ms, bool print,
                                 host_phases* phases = nullptr,
                                 std::vector<double>* spans = nullptr) {
  ddo::runner::step_clock clock;
  auto out = denoise(
      in, steps,
      [&](const inputs& x, float t) {
        clock.start();
        auto v = streamed_forward(off, view, stages, f, x, t, phases);
        clock.end();
        if (print) std::printf("  step %zu: span %.2f ms\n", clock.started() - 1, clock.last_span_ms());
        return v;
      },
      nullptr, phases);
  clock.close();
  auto times = clock.times();
  ms = std::move(times.interval_ms);
  if (spans != nullptr) *spans = std::move(times.span_ms);
  return out;
}

/// @brief The all-resident loop's median step (every weight copied once to the device, no ddo;
/// the same forward, its own stream), everything it allocated freed on return.
[[nodiscard]] inline double resident_median(const ddo::weight_table& table,
                                            const std::vector<stage>& stages,
                                            gpu::device_forward& f, const inputs& in, int steps) {
  std::optional<gpu::device_weights> weights;
  {
    const host_weights host(table);  // freed once uploaded
    weights.emplace(host.refs());
  }
  cudaStream_t stream = nullptr;
  DDO_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  f.bind(stream);
  ddo::runner::step_clock clock;
  try {
    (void)denoise(in, steps, clocked(clock, [&](const inputs& x, float t) {
                    return resident_forward(*weights, stages, f, x, t);
                  }));
    clock.close();
  } catch (...) {
    DDO_CUDA_TRY_NOTHROW(cudaStreamDestroy(stream));
    throw;
  }
  DDO_CUDA_TRY(cudaStreamDestroy(stream));
  return steady_median(clock.times().interval_ms);
}

/// @brief What --smallest-card needs from ddo-flux's GPU run.
struct smallest_card_inputs {
  const ddo::weight_table& table;
  const ddo::resolve_inputs& inputs;  ///< the run's, without profile_name
  const ddo::setup_options& options;  ///< the engine's reserve and token count
  const run_modes& modes;
  const flux::inputs& in;
  int steps = 4;
  std::string device_name;
  std::uint64_t context_bytes = 0;         ///< the CUDA context, measured at start
  std::uint64_t reserve_bytes = 0;         ///< the engine's, measured
  std::uint64_t reference_card_bytes = 0;  ///< --vram-gb: where the fixed part is measured
  std::string json;
};

/// @brief --smallest-card (see flux_card_sweep.hpp): the fixed part of a card and the stages
/// from a plan on the --vram-gb card (nothing pinned), the predicted budgets from the stored
/// profile, the all-resident step, then the bisection per rule. @return 0.
/// @throws ddo::usage_error for a route other than linear, or no stored profile with timings.
inline int smallest_card_run(const smallest_card_inputs& s, gpu::device_forward& f) {
  const auto settings_for = [&](const std::string& rule, std::uint64_t budget) {
    ddo::resolve_inputs i = s.inputs;
    for (auto& o : card_overrides(rule, budget, s.modes.capacity_profile))
      i.overrides.push_back(std::move(o));
    return ddo::resolve_settings(i);
  };
  const auto limit_of = [&](std::uint64_t card) {
    return ddo::runner::vram_budget{card, s.context_bytes, s.reserve_bytes}.ddo_limit_bytes(
        ddo::runtime_device_reserve_bytes);
  };
  const auto base = settings_for("spread", 0);
  if (base.config.backend == ddo::offload_backend::vmm ||
      base.config.backend == ddo::offload_backend::nvme)
    throw ddo::usage_error(
        "--smallest-card sizes resident_module_budget_gb, the linear route's "
        "budget: run it with backend linear or auto (not " +
        std::string(ddo::enum_name(base.config.backend)) + ")");
  // The reference plan: nothing resident beyond the rules on the --vram-gb card.
  card_sweep_inputs sweep;
  std::vector<stage> stages;
  ddo::ring_shape ring;
  on_card_transport(base, limit_of(s.reference_card_bytes), [&](auto transport) {
    const auto prepared = ddo::prepare_offload<>(s.table, base, s.options, std::move(transport));
    const auto reference = card_reference_of(prepared, s.reference_card_bytes);
    sweep.fixed_bytes = reference.fixed_bytes;
    sweep.streamable_bytes = reference.streamable_bytes;
    ring = reference.ring;
    stages = plan_stages(s.table, prepared.setup.plan);
    return 0;
  });
  sweep.step_bytes = static_cast<std::uint64_t>(s.modes.card_step_gib * double(ddo::gib));
  sweep.max_slowdown = s.modes.max_slowdown;
  const auto found = ddo::find_group_timings(base.profile_dir, s.modes.capacity_profile, s.table,
                                             s.device_name, s.in.image_tokens);
  const auto& timings = require_profile_timings(found, s.modes.capacity_profile, base.profile_dir);
  const auto predicted = ddo::runner::predicted_smallest_budgets(timings, ring, sweep.max_slowdown);
  std::printf(
      "smallest card: a card holds %s besides its resident budget (context %s, engine "
      "reserve %s, ring %zu slot(s), ddo's reserve, the rules' resident weights); %s "
      "can be resident\n",
      ddo::format_bytes(sweep.fixed_bytes).c_str(), ddo::format_bytes(s.context_bytes).c_str(),
      ddo::format_bytes(s.reserve_bytes).c_str(), ring.slots,
      ddo::format_bytes(sweep.streamable_bytes).c_str());
  sweep.resident_ms = resident_median(s.table, stages, f, s.in, s.steps);
  std::printf("resident: median %.2f ms/step (all %zu weights on the device, no ddo)\n",
              sweep.resident_ms, s.table.size());
  const std::vector<card_rule> rules = {{"overlap", predicted.overlap.budget_bytes},
                                        {"spread", predicted.spread},
                                        {"first", predicted.first}};
  const auto rows = sweep_cards(
      sweep, rules, [&](const std::string& rule, std::uint64_t card, std::uint64_t budget) {
        const auto settings = settings_for(rule, budget);
        return on_card_transport(settings, limit_of(card), [&](auto transport) {
          using transport_type = decltype(transport);
          auto prepared =
              ddo::prepare_offload<>(s.table, settings, s.options, std::move(transport));
          const std::uint64_t resident =
              prepared.setup.plan.total_bytes(ddo::placement::gpu_resident);
          // The profile predicts any plan (first and spread too): predicted against measured
          // on every card measured.
          const double predicted = ddo::predict_plan(prepared.setup.plan, timings.timings,
                                                     ddo::runner::ring_of(prepared.setup.runtime))
                                       .step_ms;
          auto enabled = prepared.start();
          auto& off = *enabled.offloader;
          auto compute = off.transport().make_stream();
          const auto view = transport_type::view(compute);
          f.bind(view.handle);
          std::vector<double> ms;
          (void)timed_denoise(off, view, plan_stages(s.table, off.plan()), f, s.in, s.steps, ms,
                              false);
          const double median = steady_median(ms);
          std::printf(
              "  %-7s card %s: %s resident, %s streamed per step; median %.2f ms/step = "
              "%.3fx resident; predicted %.2f ms (%+.1f%%)\n",
              rule.c_str(), ddo::format_bytes(card).c_str(), ddo::format_bytes(resident).c_str(),
              ddo::format_bytes(s.table.total_bytes() - resident).c_str(), median,
              median / sweep.resident_ms, predicted, 100.0 * (predicted - median) / median);
          std::fflush(stdout);
          return card_step{median, predicted};
        });
      });
  print_card_sweep(rows, sweep);
  if (!s.json.empty()) {
    ddo::json_writer o;
    o.begin_object(ddo::json_layout::lines).member("device", s.device_name);
    o.member("image_tokens", s.in.image_tokens).member("text_tokens", s.in.text_tokens);
    o.member("capacity_profile", s.modes.capacity_profile).member("steps", s.steps);
    write_card_sweep_json(o, rows, sweep);
    o.end_object();
    ddo::write_file_atomically(s.json, o.take() + "\n");
  }
  return 0;
}

}  // namespace flux
