// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo-run (examples/ddo_run.cpp): the steps of the plain run — each group acquired, its
/// GEMMs enqueued on the engine's stream and its lease dropped, eager or with --graph the first
/// step captured and every step launched; --verify's comparison of every acquired weight with
/// its file; each step's span printed and sampled. Example code (docs/runner.md).

#include "ddo_run/report.hpp"

namespace ddo_run {

/// --verify: after each group's compute on the same stream, every weight of its lease copied
/// back and compared with its file: the bytes must still be the file's when the GEMMs that read
/// them are done (a prefetch overwriting a live slot would show here).
struct step_verifier {
  bool on = false;
  std::vector<std::byte> device_copy, source_copy;
  std::uint64_t verified_bytes = 0, mismatches = 0;

  step_verifier(const ddo::weight_table& table, bool enabled) : on(enabled) {
    if (!on) return;
    std::uint64_t largest = 0;
    for (const auto& w : table.weights()) largest = std::max(largest, w.bytes);
    device_copy.resize(largest);
    source_copy.resize(largest);
  }

  /// Compares @p lease (group @p g of step @p step) with the files; a mismatch is counted and
  /// said with the first differing byte.
  template <class Offloader, class Lease>
  void check(run_context& ctx, Offloader& offloader, typename Offloader::stream_view view,
             const Lease& lease, std::size_t g, int step, progress_bar& bar) {
    auto& t = offloader.transport();
    for (std::size_t i = 0; i < lease.size(); ++i) {
      const std::size_t w = lease.weight_index(i);
      const std::size_t n = static_cast<std::size_t>(ctx.table[w].bytes);
      t.copy_to_host(device_copy.data(), lease.data(i), n, view);
      t.synchronize(view);
      read_source(ctx.table, ctx.files, w, std::span(source_copy.data(), n));
      verified_bytes += n;
      if (std::memcmp(device_copy.data(), source_copy.data(), n) == 0) continue;
      std::size_t at = 0;
      while (at < n && device_copy[at] == source_copy[at]) ++at;
      ++mismatches;
      bar.interrupt([&] {
        std::fprintf(stderr,
                     "ddo-run: VERIFY FAILED: step %d, group '%s', weight '%s': device bytes "
                     "differ from the file at byte %zu of %zu\n",
                     step, offloader.group_name(g).c_str(), ctx.table[w].name.c_str(), at, n);
      });
    }
  }
};

/// What the steps run on: the offloader, the engine and its stream, the trace, the checks.
template <class Engine, class Offloader>
struct step_loop {
  run_context& ctx;
  Offloader& offloader;
  Engine& engine;
  typename Offloader::stream_view view;
  chrome_trace& trace;
  step_verifier& verify;
  progress_bar& bar;
  std::unique_ptr<typename Engine::graph_holder> graph{};  ///< --graph: the captured step
};

/// One step's work enqueued: each group acquired, the GEMMs that read its weights, the lease
/// dropped (--trace: each group's enqueueing; --verify: its bytes after its compute).
template <class Engine, class Offloader>
void enqueue_step(step_loop<Engine, Offloader>& s, int step) {
  auto& t = s.offloader.transport();
  for (std::size_t g = 0; g < s.offloader.group_count(); ++g) {
    auto lease = s.offloader.acquire(g, s.view);
    const double enqueue_us = s.trace.now_us();
    for (std::size_t i = 0; i < lease.size(); ++i) {
      const std::size_t w = lease.weight_index(i);
      if (!s.ctx.compute.is_gemm[w]) continue;
      const auto& info = s.ctx.table[w];
      s.engine.linear(t, lease.data(i), info.shape[0], info.shape[1], info.type,
                      s.ctx.compute.alpha[w], s.ctx.compute.rows[w]);
    }
    if (!s.ctx.opt.trace_path.empty())
      s.trace.add("enqueue " + s.offloader.group_name(g), "compute", enqueue_us,
                  s.trace.now_us() - enqueue_us, chrome_trace::host);
    if (s.verify.on) s.verify.check(s.ctx, s.offloader, s.view, lease, g, step, s.bar);
  }
  s.engine.end_step(t);  // every step starts from the same buffer: graph replays chain alike
}

/// One step, eager or --graph: the first step captured (acquires, GEMMs, lease drops), every
/// step launched; through ddo when the capture entered graph streaming (ddo enqueues the step's
/// loads).
template <class Engine, class Offloader>
void run_step(step_loop<Engine, Offloader>& s, int step) {
  if constexpr (ddo::graph_streaming_transport<typename Engine::transport_type>) {
    if (s.ctx.opt.graph) {
      auto& t = s.offloader.transport();
      if (!s.graph) {
        s.engine.begin_capture(t);
        enqueue_step(s, step);
        s.graph = s.engine.end_capture(t);
      }
      if (s.offloader.graph_mode())
        s.offloader.launch_graph(Engine::exec_of(*s.graph), s.view);
      else
        s.engine.launch(t, *s.graph);
      return;
    }
  }
  enqueue_step(s, step);
}

/// @p warmup + the steady steps, each timed from its start to the next step's
/// (runner/step_timing.hpp: the sampling and printing between steps belong to an interval, as
/// the copy stream's loads of the next step's groups meanwhile do), its own span printed beside
/// it; the device and host memory sampled after each.
template <class Engine, class Offloader>
ddo::runner::step_clock run_step_loop(step_loop<Engine, Offloader>& s, int warmup,
                                      ddo::runner::device_memory_sampler* sampler,
                                      ddo::memory_watch& host_memory) {
  const int total_steps = warmup + s.ctx.steps;
  ddo::runner::step_clock steps;
  auto& t = s.offloader.transport();
  for (int step = 0; step < total_steps; ++step) {
    const std::string step_name = step < warmup ? "warm-up " + std::to_string(step)
                                                : "step " + std::to_string(step - warmup);
    nvtx_scope range(s.ctx.gpu, step_name.c_str());
    steps.start();
    s.offloader.begin_step();
    const double t0_us = s.trace.now_us();
    run_step(s, step);
    t.synchronize(s.view);  // the step's span for the printout (the benchmark never syncs)
    steps.end();
    const double ms = steps.last_span_ms();
    if (!s.ctx.opt.trace_path.empty())
      s.trace.add(step_name, "step", t0_us, s.trace.now_us() - t0_us, chrome_trace::host);
    if (sampler) sampler->sample();
    host_memory.sample_used();  // PSS (~90 ms) is read once, by print_host_memory
    s.bar.interrupt([&] {
      std::printf("  %s: span %.1f ms\n", step_name.c_str(), ms);
      if (s.ctx.settings.config.show_profile) {
        const auto m = s.offloader.metrics();
        if (!m.steps.empty()) print_step_metrics(m.steps.back(), m.timing);
      }
      std::fflush(stdout);
    });
    s.bar.update(static_cast<std::uint64_t>(step + 1));
  }
  steps.close();
  s.bar.finish();
  return steps;
}

}  // namespace ddo_run
