// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief `ddo-run --pipeline`: a synthetic text encoder → N transformer steps → VAE decode
/// pipeline (runner/pipeline_model.hpp) run for several images under one device budget and one
/// pinned-host budget, two ways in the same run:
///  - shared: enable_pipeline_offload with the budgets shared by phase; the engine calls
///    enter_phase() before each component, so ddo's device peak is the largest phase;
///  - proportional: the same total device budget split between the components in proportion to
///    their weight bytes, every component set up once with its share and kept up (the baseline
///    the target names). The 64 MiB runtime reserve is outside both splits: each share is of
///    budget − 64 MiB.
/// Both pin the same bytes (the pinned budget's split). Per phase it prints time, streamed and
/// re-uploaded bytes, ddo's device bytes (its ledger; on a GPU also the sampled device memory
/// minus the engine's activations), then both end-to-end times and their ratio, and checks
/// ddo's device bytes against the budget + 64 MiB. Example code (examples/runner/).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddo/core/format_bytes.hpp"
#include "ddo/setup/pipeline_offload.hpp"
#include "ddo/transport/allocation_ledger.hpp"
#include "runner/device_memory_sampler.hpp"
#include "runner/pipeline_model.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief What `ddo-run --pipeline` runs.
struct pipeline_run_options {
  pipeline_shape shape;
  int images = 2;
  bool verify = false;
  bool gpu = false;
  /// Settings inputs (component set per component). The budgets come from the pipeline's
  /// settings (pipeline_device_budget_gb / pipeline_pinned_budget_gb: TOML, DDO_*, --ddo-*) or
  /// setup.pipeline_*_bytes (pipeline_budgets_from); where neither sets one, the runner's
  /// defaults: 40% of the weights + 64 MiB of device, every weight pinned.
  setup_options setup;
};

/// @brief One phase of one image, measured.
struct phase_record {
  std::string component;
  double ms = 0.0;                    ///< enter_phase (if any) + passes, host wall time, synchronized
  std::uint64_t streamed_bytes = 0;   ///< bytes ddo streamed during the phase
  std::uint64_t restored_bytes = 0;   ///< resident bytes uploaded again by the phase switch
  std::uint64_t ledger_peak = 0;      ///< ddo's device bytes at most during the phase (ledger)
  std::uint64_t sampled_peak = 0;     ///< sampled device memory above the run's start (GPU)
  std::uint64_t mismatches = 0;       ///< --verify: weights whose device bytes differ
};

/// @brief One way of sharing the budget, run for every image.
struct pipeline_variant_result {
  std::string name;
  std::vector<phase_record> phases;  ///< image-major
  double total_ms = 0.0;
  std::uint64_t ledger_peak = 0;
  std::uint64_t sampled_peak = 0;
  std::uint64_t mismatches = 0;
  std::vector<std::string> plans;    ///< one line per component: route, resident, pinned
};

namespace internal {

/// Runs every group of @p c once per pass through @p off; with @p verify, copies each leased
/// weight back and compares it with the host bytes. Returns the mismatches.
template <class Engine, class Offloader>
std::uint64_t run_component(Engine& engine, Offloader& off, const pipeline_model_component& c,
                            bool verify) {
  auto& t = off.transport();
  std::uint64_t bad = 0;
  std::vector<std::byte> back;
  for (int pass = 0; pass < c.passes; ++pass)
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, engine.view());
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::size_t w = lease.weight_index(i);
        const auto& info = c.table[w];
        engine.linear(t, lease.data(i), info.shape[0], info.shape[1], info.type, c.alpha[w], c.rows);
        if (verify) {
          back.resize(info.bytes);
          t.copy_to_host(back.data(), lease.data(i), info.bytes, engine.view());
          t.synchronize(engine.view());  // --verify only: the bytes are compared on the host
          if (std::memcmp(back.data(), std::get<host_source>(info.source).data, info.bytes) != 0) ++bad;
        }
      }
    }
  return bad;
}

/// One line per component, taken while its phase is current: its route and where its bytes live.
template <class Offloader>
std::string plan_line(const std::string& name, Offloader& off) {
  const auto& plan = off.plan();
  return name + ": route " + std::string(to_string(off.metrics().route)) + ", resident " +
         format_bytes(plan.total_bytes(placement::gpu_resident)) + ", ring " +
         std::to_string(off.slot_count()) + " x " + format_bytes(off.slot_bytes()) + ", pinned " +
         format_bytes(plan.total_bytes(placement::pinned_host)) + ", pageable " +
         format_bytes(plan.total_bytes(placement::pageable_host));
}

}  // namespace internal

/// @brief Runs @p images images through @p enter (which makes a component's phase current and
/// returns its offloader), recording each phase.
template <class Engine, class Offloader>
void run_images(Engine& engine, pipeline_model& model, const pipeline_run_options& o,
                const allocation_ledger& ledger, device_memory_sampler* sampler,
                const std::function<Offloader&(const std::string&)>& enter,
                const std::function<std::uint64_t()>& restored, pipeline_variant_result& out) {
  using clock = std::chrono::steady_clock;
  auto run_start = clock::now();
  // Image -1 warms up (cuBLAS, first loads) untimed; its peaks still count.
  for (int image = -1; image < o.images; ++image) {
    if (image == 0) run_start = clock::now();
    for (const auto& c : model.components()) {
      phase_record r;
      r.component = c.name;
      // The peak is a statistic of the transport's shared ledger; resetting it changes no
      // account (the ledger is const through the transport's accessor, not const itself).
      const_cast<allocation_ledger&>(ledger).reset_peak(ledger_kind::device);
      if (sampler) sampler->reset_peak();
      const auto restored_before = restored();
      const auto t0 = clock::now();
      auto& off = enter(c.name);
      if (image < 0) out.plans.push_back(internal::plan_line(c.name, off));
      const auto streamed_before = off.metrics().totals.bytes();
      r.mismatches = internal::run_component(engine, off, c, o.verify);
      off.transport().synchronize(engine.view());
      r.ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
      r.streamed_bytes = off.metrics().totals.bytes() - streamed_before;
      r.restored_bytes = restored() - restored_before;
      r.ledger_peak = ledger.peak(ledger_kind::device);
      if (sampler) {
        sampler->sample();
        r.sampled_peak = sampler->peak_above_baseline();
      }
      out.ledger_peak = std::max(out.ledger_peak, r.ledger_peak);
      out.sampled_peak = std::max(out.sampled_peak, r.sampled_peak);
      out.mismatches += r.mismatches;
      if (image >= 0) out.phases.push_back(std::move(r));
    }
  }
  out.total_ms = std::chrono::duration<double, std::milli>(clock::now() - run_start).count();
}

/// @brief Prints one variant's per-phase table (means over images; peaks over images).
inline void print_variant(const pipeline_variant_result& v, const pipeline_model& model, bool gpu,
                          int images) {
  std::printf("\n%s: %.1f ms end to end for %d image(s)\n", v.name.c_str(), v.total_ms, images);
  for (const auto& p : v.plans) std::printf("  %s\n", p.c_str());
  std::printf("| phase | ms / image | streamed / image | re-uploaded / image | ddo device peak (ledger) |%s\n",
              gpu ? " sampled - activations |" : "");
  std::printf("|---|---:|---:|---:|---:|%s\n", gpu ? "---:|" : "");
  for (const auto& c : model.components()) {
    double ms = 0;
    std::uint64_t streamed = 0, restored = 0, ledger = 0, sampled = 0;
    for (const auto& r : v.phases) {
      if (r.component != c.name) continue;
      ms += r.ms;
      streamed += r.streamed_bytes;
      restored += r.restored_bytes;
      ledger = std::max(ledger, r.ledger_peak);
      sampled = std::max(sampled, r.sampled_peak);
    }
    std::printf("| %s | %.1f | %s | %s | %s |", c.name.c_str(), ms / images,
                format_bytes(streamed / static_cast<std::uint64_t>(images)).c_str(),
                format_bytes(restored / static_cast<std::uint64_t>(images)).c_str(),
                format_bytes(ledger).c_str());
    if (gpu) std::printf(" %s |", format_bytes(sampled).c_str());
    std::printf("\n");
  }
}

/// @brief The whole pipeline mode over a fresh transport from @p make_transport; returns the
/// process exit status (0 ok, 1 a check or --verify failed).
template <class Engine, class MakeTransport>
int run_pipeline_mode(pipeline_run_options o, MakeTransport&& make_transport) {
  using transport_type = typename Engine::transport_type;
  using offloader_type = offloader<transport_type>;
  std::printf("pipeline: generating the synthetic pipeline (hidden %u; blocks: text encoder %u, "
              "transformer %u, VAE %u)...\n",
              o.shape.hidden, o.shape.text_encoder_blocks, o.shape.transformer_blocks, o.shape.vae_blocks);
  pipeline_model model(o.shape);
  std::vector<std::uint64_t> weight_bytes;
  for (const auto& c : model.components()) weight_bytes.push_back(c.table.total_bytes());
  auto pipeline_inputs = o.setup.inputs;
  pipeline_inputs.component.clear();
  const auto settings = resolve_settings(pipeline_inputs);
  const auto budgets = pipeline_budgets_from(settings, o.setup);
  // Where a budget came from, for the header line: a setting's source, code, or the runner.
  const auto source_of = [&](field_id field, std::uint64_t code_bytes, std::uint64_t chosen,
                             const char* runner_default) -> std::string {
    if (chosen == 0) return runner_default;
    if (code_bytes == chosen && settings.provenance.of(field).source < origin::toml) return "setup_options";
    return describe(settings.provenance.of(field));
  };
  const std::string device_source =
      source_of(field_id::pipeline_device_budget_gb, o.setup.pipeline_device_budget_bytes,
                budgets.device_bytes, "ddo-run's default: 40% of the weights + 64 MiB");
  const std::string pinned_source =
      source_of(field_id::pipeline_pinned_budget_gb, o.setup.pipeline_pinned_budget_bytes,
                budgets.pinned_host_bytes, "ddo-run's default: every weight");
  const std::uint64_t device_budget_bytes =
      budgets.device_bytes != 0 ? budgets.device_bytes
                                : model.total_bytes() * 2 / 5 + runtime_device_reserve_bytes;
  const std::uint64_t pinned_budget_bytes =
      budgets.pinned_host_bytes != 0 ? budgets.pinned_host_bytes : model.total_bytes();
  std::printf("pipeline: text encoder %s, transformer %s, VAE %s (%s); %d image(s): text encoder "
              "at %lld tokens, %d transformer steps and the VAE at %lld tokens\n",
              format_decimal_gb(weight_bytes[0]).c_str(), format_decimal_gb(weight_bytes[1]).c_str(),
              format_decimal_gb(weight_bytes[2]).c_str(), format_decimal_gb(model.total_bytes()).c_str(),
              o.images, static_cast<long long>(o.shape.text_tokens), o.shape.steps,
              static_cast<long long>(o.shape.tokens));
  std::printf("pipeline: device budget %s (ddo's bytes, incl. its 64 MiB reserve; %s), pinned-host "
              "budget %s (%s)%s\n",
              format_bytes(device_budget_bytes).c_str(), device_source.c_str(),
              format_bytes(pinned_budget_bytes).c_str(), pinned_source.c_str(),
              o.verify ? "; --verify: times include copying every weight back" : "");

  auto transport = make_transport();
  const auto& ledger = transport.ledger();
  Engine engine(transport, std::max(o.shape.tokens, o.shape.text_tokens), model.width(), dtype::bf16);
  std::unique_ptr<device_memory_sampler> sampler;
  if (o.gpu) sampler = std::make_unique<device_memory_sampler>(0);  // after the activations

  std::vector<pipeline_component> pipeline;
  for (const auto& c : model.components()) pipeline.push_back({c.name, &c.table, std::nullopt, c.passes});
  const std::uint64_t limit = device_budget_bytes + runtime_device_reserve_bytes;

  // --- shared by phase ---
  std::vector<component_route> routes;  // as the settings resolve them, for the split's shares
  pipeline_variant_result shared;
  shared.name = "shared budget, by phase";
  {
    auto so = o.setup;
    so.pipeline_device_budget_bytes = device_budget_bytes;  // the runner's defaults where unset
    so.pipeline_pinned_budget_bytes = pinned_budget_bytes;
    auto pipe = enable_pipeline_offload(pipeline, std::nullopt, so, transport);
    for (const auto& name : pipe.order) routes.push_back(pipe[name].component.route);
    std::function<offloader_type&(const std::string&)> enter = [&](const std::string& n) -> offloader_type& {
      pipe.enter_phase(n);
      return *pipe[n];
    };
    std::function<std::uint64_t()> restored = [&] { return pipe.phase_counts().restored_bytes; };
    run_images<Engine, offloader_type>(engine, model, o, ledger, sampler.get(), enter, restored, shared);
  }

  // --- the same total budget split by weight bytes ---
  pipeline_variant_result split;
  split.name = "split by weight bytes";
  {
    const std::uint64_t usable = device_budget_bytes > runtime_device_reserve_bytes
                                     ? device_budget_bytes - runtime_device_reserve_bytes
                                     : 0;
    // A route-none component holds its weights whatever its share: they come off the top.
    std::uint64_t held = 0;
    std::vector<std::uint64_t> streaming_bytes = weight_bytes;
    for (std::size_t i = 0; i < routes.size(); ++i)
      if (routes[i] == component_route::none) {
        held += weight_bytes[i];
        streaming_bytes[i] = 0;
      }
    auto device_shares = proportional_split(usable > held ? usable - held : 0, streaming_bytes);
    std::vector<pipeline_component_need> needs;
    for (std::size_t i = 0; i < routes.size(); ++i) {
      const auto& c = model.components()[i];
      if (routes[i] == component_route::none) device_shares[i] = weight_bytes[i];
      pipeline_component_need need;
      need.name = c.name;
      need.weight_bytes = weight_bytes[i];
      need.stays_resident = routes[i] == component_route::none;
      need.pins_whole = routes[i] == component_route::diffusers_group_offload;
      needs.push_back(need);
    }
    const auto pinned_shares = plan_pipeline_budgets(needs, {0, pinned_budget_bytes});
    std::map<std::string, enabled_offload<offloader_type>> parts;
    for (std::size_t i = 0; i < model.components().size(); ++i) {
      const auto& c = model.components()[i];
      auto so = o.setup;
      so.inputs.component = c.name;
      for (const auto& p : pipeline) so.inputs.components.push_back(p.name);
      so.runtime.device_budget_bytes = device_shares[i] + runtime_device_reserve_bytes;
      so.runtime.poison_released_slots = so.runtime.poison_released_slots || o.verify;
      if (pinned_shares[i].pinned_host_bytes == 0)
        so.inputs.overrides.emplace_back(ddo::field_id::pin_cpu_memory, false);
      else
        so.inputs.overrides.emplace_back(
            ddo::field_id::max_pin_weight_budget_gb,
            static_cast<double>(pinned_shares[i].pinned_host_bytes) / static_cast<double>(gib));
      auto part = enable_offload(c.table, std::nullopt, so, transport);
      parts.emplace(c.name, std::move(part));
    }
    std::function<offloader_type&(const std::string&)> enter = [&](const std::string& n) -> offloader_type& {
      return *parts.at(n);
    };
    std::function<std::uint64_t()> restored = [] { return std::uint64_t{0}; };
    run_images<Engine, offloader_type>(engine, model, o, ledger, sampler.get(), enter, restored, split);
    std::string shares = "device shares (of the budget less 64 MiB):";
    for (std::size_t i = 0; i < device_shares.size(); ++i) {
      const auto& name = model.components()[i].name;
      shares += (i ? ", " : " ") + name + " " + format_bytes(device_shares[i]);
      // A share below the ring still gets the ring: the split then holds more than the budget.
      const auto& part = parts.at(name);
      const std::uint64_t ring = ring_bytes_for(part->slot_bytes(), part->slot_count());
      if (routes[i] != component_route::none && ring > device_shares[i])
        shares += " (below its ring of " + format_bytes(ring) + ", which it holds anyway)";
    }
    split.plans.push_back(shares);
  }
  if (sampler) sampler->stop();

  print_variant(shared, model, o.gpu, o.images);
  print_variant(split, model, o.gpu, o.images);
  std::printf("\nend to end: shared %.1f ms, split by weight bytes %.1f ms: split / shared = %.3f "
              "(> 1: sharing the budget by phase is faster)\n",
              shared.total_ms, split.total_ms, split.total_ms / shared.total_ms);

  int status = 0;
  auto check = [&](bool ok, const std::string& what) {
    std::printf("check: %s: %s\n", what.c_str(), ok ? "ok" : "FAILED");
    if (!ok) status = 1;
  };
  for (const auto* v : {&shared, &split}) {
    check(v->ledger_peak <= limit, v->name + ": ddo's device bytes (ledger) " + format_bytes(v->ledger_peak) +
                                       " <= budget + 64 MiB (" + format_bytes(limit) + ")");
    if (o.gpu)
      check(v->sampled_peak <= limit, v->name + ": sampled device memory minus activations " +
                                          format_bytes(v->sampled_peak) + " <= budget + 64 MiB");
    if (o.verify)
      check(v->mismatches == 0, v->name + ": --verify: " + std::to_string(v->mismatches) + " mismatch(es)");
  }
  return status;
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
