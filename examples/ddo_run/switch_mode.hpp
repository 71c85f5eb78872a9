// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run --models A,B[,C] --switch-every N, and --experts A,B (examples/ddo_run.cpp):
/// several models in one process under one pinned-RAM budget (issue 42). Every model's host
/// copies come from the process's weight registry (ddo::process_weight_registry, its budget
/// set by every setup from the settings: ddo::registry_budget_bytes); each switch is one
/// ddo::switch_model call (the old model's device side released before the new one is planned,
/// on the same device). --models runs
/// generations of --steps steps, changing model every N generations; --experts mirrors Wan 2.2
/// A14B: expert A for the first half of each generation's steps, expert B for the rest.
///
/// Per switch: the process's own reads (/proc/self/io rchar and read_bytes, not inferred), the
/// bytes the registry read and pinned, reused, evicted and recycled (the evicted pages read
/// again in place), the transport's page-locked and unlocked bytes, the registry's wait for
/// unpinning and its loads, the switch's time against its floor
/// (the bytes not already held over the read and page-lock rates measured in the same run), the
/// peak RSS and MemAvailable against the registry's budget, the steady step after the switch,
/// and --verify's count. Example code (docs/runner.md, docs/several-models.md).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddo/memory/weight_registry.hpp"
#include "ddo/setup/registry_budget.hpp"
#include "ddo/setup/switch_model.hpp"
#include "ddo/transport/allocation_ledger.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo_run/model_choice.hpp"
#include "ddo_run/phases_mode.hpp"
#include "ddo_run/report.hpp"
#include "runner/peak_rss.hpp"
#include "runner/process_io.hpp"

namespace ddo_run {

/// One model of the switching run: its table, settings, files and compute.
struct switch_model_slot {
  std::string name;  // as given (the registry's model name)
  ddo::weight_table table;
  ddo::dynamic_offload_settings settings;
  std::vector<ddo::file_reader> files;
  model_compute compute;
  ddo::setup_options setup;
  double compute_ms = 0.0;  // C at the run's tokens (--no-bound: 0)
};

/// One model's span of steps: generations of --models, or one expert's half of a generation.
struct switch_segment {
  std::size_t model = 0;
  int generation = 0;
  int steps = 0;
};

/// What one switch (or the first load) did, and the steps after it.
struct switch_row {
  switch_segment segment;
  std::string from;  // empty: the first load
  double switch_s = 0.0, floor_s = 0.0;
  std::uint64_t rchar = 0, read_bytes = 0;            // the process's reads during the switch
  std::uint64_t loaded = 0, reused = 0, evicted = 0;  // the registry's, during the switch
  // Of evicted, the pages handed to the new model's pieces (page-locked still: read in place,
  // neither unpinned nor pinned again); the registry's seconds waiting for the other evicted
  // pages to be unpinned, and in its loads (reads, and page-locking the new pages).
  std::uint64_t recycled = 0;
  double unpin_wait_s = 0.0, load_s = 0.0;
  // The transport's own count of host bytes page-locked (cudaHostRegister) and unlocked
  // (cudaHostUnregister) during the switch: what recycling saves, counted where it happens.
  std::uint64_t registered = 0, unregistered = 0;
  std::uint64_t resident = 0;  // the new model's resident bytes (read from its files)
  std::uint64_t pinned_now = 0, budget = 0;
  std::uint64_t peak_rss = 0, mem_available = 0;
  double step_ms = 0.0, bound_ms = 0.0;
  std::uint64_t mismatches = 0;
  bool io_known = false;
};

/// The segments of the run: --models every N generations in turn, or --experts' halves.
inline std::vector<switch_segment> switch_schedule(const run_options& opt, int steps) {
  std::vector<switch_segment> out;
  const auto models = opt.switch_models.size();
  for (int g = 0; g < opt.generations; ++g) {
    if (opt.experts) {
      const int first = (steps + 1) / 2;
      out.push_back({0, g, first});
      out.push_back({1, g, steps - first});
      continue;
    }
    const std::size_t m = static_cast<std::size_t>(g / opt.switch_every) % models;
    if (!out.empty() && out.back().model == m) {
      out.back().steps += steps;  // the same model's next generation: no switch
      continue;
    }
    out.push_back({m, g, steps});
  }
  return out;
}

/// The files of model spec @p spec: a path as given, or `synthetic[:key=value...]` (seed,
/// blocks, single-blocks, hidden over the run's synthetic flags) found in or generated into the
/// model cache; nullopt to go on, else the exit status of a refusal.
inline std::optional<int> switch_model_paths(const std::string& spec, run_options opt, bool gpu,
                                             ddo::runner::interrupt_cleanup& interrupts,
                                             std::vector<std::string>& paths) {
  if (spec.rfind("synthetic", 0) != 0 || (spec.size() > 9 && spec[9] != ':')) {
    if (!std::filesystem::is_regular_file(spec))
      return fail("--models/--experts: '" + spec +
                      "' is neither a model file nor "
                      "synthetic[:seed=S][:blocks=N][:single-blocks=M][:hidden=H]",
                  exit_usage);
    paths.push_back(spec);
    return std::nullopt;
  }
  std::size_t at = 9;
  auto& s = opt.synthetic;
  const bool flux = s.single_blocks > 0;
  bool single_given = false;
  while (at < spec.size()) {
    const std::size_t end = std::min(spec.find(':', at + 1), spec.size());
    const std::string item = spec.substr(at + 1, end - at - 1);
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const auto n = eq == std::string::npos ? std::nullopt
                                           : ddo::parse_bounded_integer<std::uint32_t>(
                                                 item.substr(eq + 1), key == "seed" ? 0 : 1,
                                                 1u << 20);
    if (n && key == "seed") {
      s.seed = *n;
    } else if (n && key == "blocks") {
      s.blocks = *n;
      if (flux && !single_given) s.single_blocks = 2 * *n;  // as --blocks does
    } else if (n && key == "single-blocks" && flux) {
      s.single_blocks = *n;
      single_given = true;
    } else if (n && key == "hidden") {
      s.hidden = *n;
    } else {
      return fail("--models/--experts: '" + spec + "': '" + item + "': expected seed=S (0.." +
                      "1048576), blocks=N, hidden=H" + (flux ? ", single-blocks=M" : "") +
                      " (1..1048576)" + (key == "single-blocks" ? "; single-blocks needs "
                                                                  "--shape flux" : ""),
                  exit_usage);
    }
    opt.synthetic_given = true;
    at = end;
  }
  return synthetic_model_paths(opt, gpu, interrupts, paths);
}

/// C at @p tokens for @p m on @p transport, before any setup (0 with --no-bound).
template <class Engine>
double switch_compute_ms(const run_options& opt, switch_model_slot& m, std::int64_t tokens,
                         bool gpu, typename Engine::transport_type& transport) {
  if (!opt.bound) return 0.0;
  run_context at{opt,     m.settings, m.table,
                 m.files, m.compute,  tokens,
                 0,       gpu,        ddo::component_route::dynamic_offload,
                 m.setup, {},         false,
                 {},      {},         {}};
  at.steps = 3;
  return measure_bound<Engine>(at, transport).compute_ms;
}

/// The rates a switch's floor divides by, measured once in this run before any setup.
struct switch_rates {
  double read_gbps = 0.0;      // a parallel read of the first model's files into fresh pages
  double register_gbps = 0.0;  // page-locking those bytes
  double h2d_gbps = 0.0;       // B: pinned host-to-device (the bound's copy term)
};

/// The switch's floor: the bytes not already held (what the registry read, and the residents
/// read from their files) over the read rate, or the pinned ones over the page-lock rate.
inline double switch_floor_s(const switch_row& r, const switch_rates& rates) {
  const auto s = [](std::uint64_t bytes, double gbps) {
    return gbps > 0 ? static_cast<double>(bytes) / (gbps * 1e9) : 0.0;
  };
  return std::max(s(r.loaded + r.resident, rates.read_gbps), s(r.loaded, rates.register_gbps));
}

inline void print_switch_row(const switch_row& r, const std::string& to) {
  std::printf(
      "%s %s -> %s (generation %d, %d steps): %.3f s, floor %.3f s (%.2fx); read %s (rchar; disk "
      "read_bytes %s), registry read+pinned %s, reused %s, evicted %s (recycled %s), residents "
      "%s; page-locked %s, unlocked %s; registry unpin wait %.3f s, load %.3f s; pinned %s of "
      "budget %s; peak RSS %s, MemAvailable %s; step %.1f ms%s\n",
      r.from.empty() ? "load" : "switch", r.from.empty() ? "-" : r.from.c_str(), to.c_str(),
      r.segment.generation, r.segment.steps, r.switch_s, r.floor_s,
      r.floor_s > 0 ? r.switch_s / r.floor_s : 0.0,
      r.io_known ? std::to_string(r.rchar).c_str() : "unknown",
      r.io_known ? std::to_string(r.read_bytes).c_str() : "unknown",
      std::to_string(r.loaded).c_str(), std::to_string(r.reused).c_str(),
      std::to_string(r.evicted).c_str(), std::to_string(r.recycled).c_str(),
      std::to_string(r.resident).c_str(), std::to_string(r.registered).c_str(),
      std::to_string(r.unregistered).c_str(), r.unpin_wait_s, r.load_s, gb(r.pinned_now).c_str(),
      gb(r.budget).c_str(), gb(r.peak_rss).c_str(), gb(r.mem_available).c_str(), r.step_ms,
      r.bound_ms > 0 ? (", bound " + std::to_string(r.bound_ms).substr(0, 6) + " ms").c_str() : "");
  std::fflush(stdout);
}

/// The run's rows as JSON (--json FILE), written atomically.
inline void write_switch_json(const std::string& path, const std::vector<switch_row>& rows,
                              const std::vector<std::unique_ptr<switch_model_slot>>& models) {
  ddo::json_writer j;
  j.begin_object(ddo::json_layout::spaced).key("switches").begin_array(ddo::json_layout::lines);
  for (const auto& r : rows) {
    j.begin_object()
        .member("model", models[r.segment.model]->name)
        .member("from", r.from)
        .member("generation", r.segment.generation)
        .member("steps", r.segment.steps)
        .member("switch_s", r.switch_s)
        .member("floor_s", r.floor_s)
        .member("rchar_bytes", r.rchar)
        .member("read_bytes", r.read_bytes)
        .member("registry_loaded_bytes", r.loaded)
        .member("registry_reused_bytes", r.reused)
        .member("registry_evicted_bytes", r.evicted)
        .member("registry_recycled_bytes", r.recycled)
        .member("registry_unpin_wait_s", r.unpin_wait_s)
        .member("registry_load_s", r.load_s)
        .member("registered_bytes", r.registered)
        .member("unregistered_bytes", r.unregistered)
        .member("resident_bytes", r.resident)
        .member("pinned_bytes", r.pinned_now)
        .member("budget_bytes", r.budget)
        .member("peak_rss_bytes", r.peak_rss)
        .member("mem_available_bytes", r.mem_available)
        .member("step_ms", r.step_ms)
        .member("bound_ms", r.bound_ms)
        .member("verify_mismatches", r.mismatches)
        .end_object();
  }
  j.end_array().end_object();
  ddo::write_file_atomically(path, j.str() + "\n");
}

/// Measures the switch into @p row around @p act (the switch itself): the process's reads, the
/// registry's counters, @p ledger's page-locking (the transport's: null, none), the time; the
/// floor from @p rates.
template <class Act>
void measure_switch(switch_row& row, ddo::weight_registry& registry,
                    const ddo::allocation_ledger* ledger, const switch_rates& rates, Act&& act) {
  (void)ddo::runner::reset_peak_rss();
  const auto locked = [&] {
    return ledger ? ledger->counts(ddo::ledger_kind::registered) : ddo::ledger_counts{};
  };
  const auto locked0 = locked();
  const auto stats0 = registry.stats();
  const auto io0 = ddo::runner::read_process_io();
  const auto t0 = std::chrono::steady_clock::now();
  act();
  row.switch_s = seconds_since(t0);
  const auto io1 = ddo::runner::read_process_io();
  const auto stats1 = registry.stats();
  const auto locked1 = locked();
  row.registered = locked1.bytes_allocated - locked0.bytes_allocated;
  row.unregistered = locked1.bytes_freed - locked0.bytes_freed;
  row.io_known = io0 && io1;
  if (row.io_known) {
    const auto d = io1->since(*io0);
    row.rchar = d.rchar;
    row.read_bytes = d.read_bytes;
  }
  row.loaded = stats1.loaded_bytes - stats0.loaded_bytes;
  row.reused = stats1.reused_bytes - stats0.reused_bytes;
  row.evicted = stats1.evicted_bytes - stats0.evicted_bytes;
  row.recycled = stats1.recycled_bytes - stats0.recycled_bytes;
  row.unpin_wait_s = stats1.unpin_wait_seconds - stats0.unpin_wait_seconds;
  row.load_s = stats1.load_seconds - stats0.load_seconds;
  row.pinned_now = stats1.pinned_bytes;
  row.budget = stats1.budget_bytes;
  row.floor_s = switch_floor_s(row, rates);
}

/// The options of model @p m's offloader: the registry, its name there, metrics.
inline ddo::setup_options switch_setup(const switch_model_slot& m,
                                       const std::shared_ptr<ddo::weight_registry>& registry) {
  ddo::setup_options o = m.setup;
  o.runtime.registry = registry;
  o.runtime.registry_model = m.name;
  o.runtime.metrics = true;
  return o;
}

/// The steps of @p row's segment on @p off (--verify's count and the median step into @p row).
template <class Engine, class Offloader>
void run_switch_steps(const run_options& opt, switch_model_slot& m, bool gpu, std::int64_t tokens,
                      Offloader& off, switch_row& row, const switch_rates& rates) {
  run_options once = opt;
  once.warmup = 0;  // each segment's steps are all reported: a switch's first step included
  run_context at{once,
                 m.settings,
                 m.table,
                 m.files,
                 m.compute,
                 tokens,
                 row.segment.steps,
                 gpu,
                 ddo::component_route::dynamic_offload,
                 m.setup,
                 {},
                 false,
                 {},
                 {},
                 {}};
  row.step_ms = run_phase_steps<Engine>(at, off, tokens, m.compute, row.mismatches);
  row.resident = off.plan().total_bytes(ddo::placement::gpu_resident);
  if (m.compute_ms > 0)
    row.bound_ms = ddo::runner::bound_ms_of(m.compute_ms, m.table.total_bytes() - row.resident,
                                            rates.h2d_gbps);
  row.peak_rss = ddo::runner::peak_rss_bytes().value_or(0);
  row.mem_available = ddo::available_ram_bytes().value_or(0);
}

/// The table of every switch, the registry at the end, --json; the exit status: a --verify
/// mismatch or a pinned byte over the budget fails the run.
inline int report_switches(const run_options& opt, const std::vector<switch_row>& rows,
                           const std::vector<std::unique_ptr<switch_model_slot>>& models,
                           const ddo::weight_registry& registry) {
  std::printf(
      "\nswitches (one process, the registry's budget %s):\n"
      "| # | model | from | switch s | floor s | x floor | read (rchar) | disk read | "
      "registry read | reused | evicted | recycled | page-locked | unlocked | unpin wait s | "
      "load s | pinned | peak RSS | MemAvailable | step ms | bound ms |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      gb(registry.budget()).c_str());
  std::uint64_t mismatches = 0;
  bool over = false;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    mismatches += r.mismatches;
    over = over || r.pinned_now > r.budget;
    std::printf(
        "| %zu | %s | %s | %.3f | %.3f | %.2f | %s | %s | %s | %s | %s | %s | %s | %s | %.3f | "
        "%.3f | %s | %s | %s | %.1f | %.1f |\n",
        i, models[r.segment.model]->name.c_str(), r.from.empty() ? "-" : r.from.c_str(), r.switch_s,
        r.floor_s, r.floor_s > 0 ? r.switch_s / r.floor_s : 0.0, gb(r.rchar).c_str(),
        gb(r.read_bytes).c_str(), gb(r.loaded).c_str(), gb(r.reused).c_str(), gb(r.evicted).c_str(),
        gb(r.recycled).c_str(), gb(r.registered).c_str(), gb(r.unregistered).c_str(),
        r.unpin_wait_s, r.load_s, gb(r.pinned_now).c_str(),
        gb(r.peak_rss).c_str(), gb(r.mem_available).c_str(), r.step_ms, r.bound_ms);
  }
  const auto st = registry.stats();
  std::printf(
      "  registry at the end: %s pinned (peak %s) of %s, %zu model(s); read %s, reused "
      "%s, evicted %s (recycled %s) in all\n",
      gb(st.pinned_bytes).c_str(), gb(st.peak_pinned_bytes).c_str(), gb(st.budget_bytes).c_str(),
      st.models, gb(st.loaded_bytes).c_str(), gb(st.reused_bytes).c_str(),
      gb(st.evicted_bytes).c_str(), gb(st.recycled_bytes).c_str());
  if (opt.verify)
    std::printf("  verify: %llu mismatch(es)\n", static_cast<unsigned long long>(mismatches));
  if (!opt.json_path.empty()) write_switch_json(opt.json_path, rows, models);
  if (over || st.peak_pinned_bytes > st.budget_bytes) {
    std::fprintf(stderr, "ddo-run: the registry held more than its budget\n");
    return exit_failure;
  }
  return mismatches == 0 ? 0 : exit_failure;
}

/// Runs the schedule over @p models (see the file comment): the first model set up on
/// @p transport, every later one switched to with ddo::switch_model on a transport of its own.
template <class Engine>
int run_switches(const run_options& opt, std::vector<std::unique_ptr<switch_model_slot>>& models,
                 bool gpu, std::int64_t tokens, int steps,
                 typename Engine::transport_type transport) {
  using T = typename Engine::transport_type;
  switch_rates rates;
  std::fprintf(stderr, "ddo-run: measuring the read and page-lock rates (the switch floor)...\n");
  const auto floor = ddo::runner::measure_setup_floor(
      models[0]->table, transport, std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  rates.read_gbps = floor.read_gbps();
  rates.register_gbps = floor.register_gbps();
  for (auto& m : models) m->compute_ms = switch_compute_ms<Engine>(opt, *m, tokens, gpu, transport);
  if (opt.bound)
    rates.h2d_gbps =
        ddo::runner::measure_pinned_rates(transport, gpu ? 256 * ddo::mib : 16 * ddo::mib)
            .best_gbps();
  std::printf("switch floor rates (measured now): read %.2f GB/s, page-lock %.2f GB/s\n",
              rates.read_gbps, rates.register_gbps);
  const auto& registry = ddo::process_weight_registry();
  // A copy shares the transport's state (its ledger): every model's setup page-locks through a
  // copy of it.
  const T counted = transport;
  const ddo::allocation_ledger* ledger = nullptr;
  if constexpr (ddo::transport_with_ledger<T>) ledger = &counted.ledger();
  std::vector<switch_row> rows;
  std::optional<decltype(ddo::prepare_offload<>(models[0]->table, models[0]->settings,
                                                models[0]->setup, std::move(transport))
                             .start())>
      current;
  std::size_t current_model = 0;
  for (const auto& seg : switch_schedule(opt, steps)) {
    auto& m = *models[seg.model];
    switch_row row;
    row.segment = seg;
    const auto options = switch_setup(m, registry);
    measure_switch(row, *registry, ledger, rates, [&] {
      if (!current) {
        auto prepared = ddo::prepare_offload<>(m.table, m.settings, options, std::move(transport));
        prepared.setup.runtime.profile_summary = nullptr;
        current.emplace(prepared.start());
        return;
      }
      row.from = models[current_model]->name;
      // A copy of the running transport: the same device (and cap), which the old model's
      // device side leaves before the new one is planned on it.
      T same_device = (*current)->transport();
      *current = ddo::switch_model(*current, m.table, m.settings, options, std::move(same_device));
    });
    current_model = seg.model;
    run_switch_steps<Engine>(opt, m, gpu, tokens, **current, row, rates);
    row.floor_s = switch_floor_s(row, rates);
    print_switch_row(row, m.name);
    rows.push_back(row);
  }
  current.reset();
  return report_switches(opt, rows, models, *registry);
}

/// Loads model @p spec (its files, table, settings, compute, setup options) for a switching run.
inline std::optional<int> load_switch_model(const std::string& spec, run_options& opt,
                                            const po::variables_map& vm, run_inputs& start,
                                            bool gpu, ddo::runner::interrupt_cleanup& interrupts,
                                            std::vector<std::unique_ptr<switch_model_slot>>& out) {
  std::vector<std::string> paths;
  if (const auto refused = switch_model_paths(spec, opt, gpu, interrupts, paths)) return refused;
  (void)vm;
  auto m = std::make_unique<switch_model_slot>();
  m->name = spec;
  auto loaded = load_model(paths, start.inputs, opt, start.helper_vmm_budget_gb);
  m->table = std::move(loaded.table);
  m->settings = std::move(loaded.settings);
  if (m->settings.config.backend != ddo::offload_backend::nvme) load_files(m->table);
  m->files = open_files(m->table);
  const std::int64_t tokens = opt.tokens ? opt.tokens : ddo::runner::default_tokens(gpu);
  m->compute = describe_compute(m->table, m->files, tokens);
  if (m->compute.gemms == 0)
    return fail("--models/--experts: '" + spec + "' has no 2-D weights of a supported dtype",
                exit_usage);
  const std::uint64_t reserve =
      ddo::runner::engine_reserve_bytes(tokens, ddo::runner::compute_shape_of(m->table), gpu);
  m->setup = ddo::runner::run_setup_options(
      start.inputs, reserve,
      opt.ram_gb > 0.0 ? std::optional<std::uint64_t>(ddo::gib_to_bytes(opt.ram_gb))
                       : std::nullopt);
  out.push_back(std::move(m));
  return std::nullopt;
}

/// --models / --experts (see the file comment): every model loaded, the card chosen for the
/// largest, the registry's budget set from the settings, the schedule run.
inline int run_switch_mode(run_options& opt, const po::variables_map& vm, run_inputs& start,
                           const device_choice& device,
                           ddo::runner::interrupt_cleanup& interrupts) {
  const bool gpu = device.gpu;
  if (const auto refused = choose_synthetic(opt, vm, gpu)) return *refused;
  std::vector<std::unique_ptr<switch_model_slot>> models;
  for (const auto& spec : opt.switch_models)
    if (const auto refused = load_switch_model(spec, opt, vm, start, gpu, interrupts, models))
      return *refused;
  std::size_t largest = 0;
  for (std::size_t i = 0; i < models.size(); ++i)
    if (models[i]->table.total_bytes() > models[largest]->table.total_bytes()) largest = i;
  auto& big = *models[largest];
  const std::int64_t tokens = opt.tokens ? opt.tokens : ddo::runner::default_tokens(gpu);
  const int steps = opt.steps ? opt.steps : 3;
  std::uint64_t reserve = 0;
  for (const auto& m : models) reserve = std::max(reserve, m->setup.reserve_device_bytes);
  run_context ctx{opt,       big.settings, big.table,
                  big.files, big.compute,  tokens,
                  steps,     gpu,          ddo::component_route::dynamic_offload,
                  big.setup, {},           false,
                  {},        {},           {}};
  set_cards(ctx, device.probe, device.context_bytes, reserve);
  const std::uint64_t ram =
      opt.ram_gb > 0.0 ? ddo::gib_to_bytes(opt.ram_gb) : ddo::available_ram_bytes().value_or(0);
  // Each setup sets the registry's budget from its settings (ddo::registry_budget_bytes): what
  // the first will set, said now.
  const std::uint64_t budget = ddo::registry_budget_bytes(big.settings.config, ram);
  std::uint64_t sum = 0;
  for (const auto& m : models) sum += m->table.total_bytes();
  std::printf("switching: %zu model(s), %s in all; the registry's budget %s (%s)\n",
              models.size(), gb(sum).c_str(), gb(budget).c_str(),
              big.settings.config.pinned_weight_cache_budget_gb > 0
                  ? "pinned_weight_cache_budget_gb"
                  : ("RAM " + gb(ram) + " less system_ram_headroom_gb").c_str());
  for (auto& m : models) {
    m->setup.simulate_device = !gpu;
    m->setup.host_sim.device_capacity_bytes =
        ctx.budget.ddo_limit_bytes(ddo::runtime_device_reserve_bytes);
    m->setup.device_limit_bytes =
        gpu && ctx.emulated ? ctx.budget.ddo_limit_bytes(ddo::runtime_device_reserve_bytes) : 0;
  }
  return ddo::with_transport(models[0]->settings, models[0]->setup, [&](auto transport) {
    using engine = ddo::runner::engine_for<decltype(transport)>;
    return run_switches<engine>(opt, models, gpu, tokens, steps, std::move(transport));
  });
}

}  // namespace ddo_run
