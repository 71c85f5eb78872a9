// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo inside the FLUX.1 engine, as an engine uses it: per stage of the forward (embed,
/// each block, the head) acquire the execution groups that hold the stage's weights, enqueue the
/// stage's work on the compute stream with the lease's pointers, drop the leases (a release
/// event after that work; no host wait). On host_sim the "kernels" are host tasks on the compute
/// stream's thread (transport.enqueue), reading the simulated device memory the leases point
/// into — so a prefetch that overwrote a live slot, or a copy not yet done, changes the output,
/// and the bitwise comparison with the all-resident forward catches it. The all-resident
/// reference reads every weight once into host memory and runs the same stages without ddo.
/// Example code (examples/flux/).

#include <algorithm>
#include <chrono>
#include <concepts>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddo/adapter/lora_delta.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/plan.hpp"
#include "flux/flux_forward.hpp"
#include "flux/flux_schedule.hpp"
#include "runner/run_model.hpp"

namespace flux {

/// @brief A stage of the forward and the execution groups holding its weights (in group order).
struct stage {
  enum class kind { embed, double_block, single_block, head };
  kind what = kind::embed;
  int block = 0;
  std::vector<std::size_t> groups;
  friend bool operator<(const stage& a, const stage& b) {
    return std::pair(a.what, a.block) < std::pair(b.what, b.block);
  }
};

/// @brief The stage whose weights include @p name.
[[nodiscard]] inline stage stage_of(const std::string& name) {
  const auto block = [&](std::size_t prefix) {
    return std::stoi(name.substr(prefix, name.find('.', prefix) - prefix));
  };
  if (name.starts_with("transformer_blocks.")) return {stage::kind::double_block, block(19), {}};
  if (name.starts_with("single_transformer_blocks."))
    return {stage::kind::single_block, block(26), {}};
  if (name.starts_with("norm_out.") || name.starts_with("proj_out."))
    return {stage::kind::head, 0, {}};
  return {stage::kind::embed, 0, {}};
}

/// @brief The stages of a forward in execution order, each with the groups of @p plan that hold
/// its weights. Normally one group per stage; a grouping that splits a stage (or puts the head in
/// the first group) still runs, acquiring each group the stage needs.
[[nodiscard]] inline std::vector<stage> plan_stages(const ddo::weight_table& table,
                                                    const ddo::offload_plan& plan) {
  std::map<stage, std::vector<std::size_t>> by_stage;
  for (std::size_t g = 0; g < plan.groups.size(); ++g)
    for (std::size_t w : plan.groups[g].weights) {
      auto& groups = by_stage[stage_of(table[w].name)];
      if (groups.empty() || groups.back() != g) groups.push_back(g);
    }
  std::vector<stage> stages;
  for (auto& [s, groups] : by_stage) {
    stage copy = s;
    copy.groups = groups;
    std::sort(copy.groups.begin(), copy.groups.end());
    copy.groups.erase(std::unique(copy.groups.begin(), copy.groups.end()), copy.groups.end());
    stages.push_back(std::move(copy));
  }
  return stages;
}

/// @brief The stage's name as its weights' prefix: "embed", "transformer_blocks.3",
/// "single_transformer_blocks.12", "head".
[[nodiscard]] inline std::string stage_name(const stage& s) {
  switch (s.what) {
    case stage::kind::embed:
      return "embed";
    case stage::kind::double_block:
      return "transformer_blocks." + std::to_string(s.block);
    case stage::kind::single_block:
      return "single_transformer_blocks." + std::to_string(s.block);
    case stage::kind::head:
      break;
  }
  return "head";
}

/// @brief Receives the Euler loop's host phases for a trace (ddo-flux --trace, flux_trace.hpp):
/// each step's forward, each stage's enqueueing (its acquires, which may wait for a ring slot,
/// its launches or task enqueues and its lease drops), the host's wait for the step's device
/// work, the velocity's read and the Euler update, so the host's share of the gaps between
/// loads shows.
class host_phases {
 public:
  using clock = std::chrono::steady_clock;
  virtual ~host_phases() = default;
  /// @brief One phase: @p name ("step 3", a stage's name, ...), @p category ("step",
  /// "enqueue", "wait", "host"), its span on the host's steady clock.
  virtual void phase(std::string name, std::string_view category, clock::time_point start,
                     clock::time_point end) = 0;
};

/// @brief A forward whose stages only enqueue device work (gpu::device_forward): the velocity
/// is read with velocity() once the stream is synchronized, not returned by head().
template <class Forward>
concept device_stages = requires(const Forward& f) {
  f.velocity();
};

/// @brief Runs @p s on @p f with the weights @p w: on the CPU forward the velocity comes back
/// from the head; a device forward's stays on it until velocity().
template <class Forward>
void run_stage(const stage& s, Forward& f, const weight_lookup& w, const inputs& in, float timestep,
               std::vector<float>& velocity) {
  switch (s.what) {
    case stage::kind::embed:
      f.embed(w, in, timestep);
      break;
    case stage::kind::double_block:
      f.double_block(s.block, w);
      break;
    case stage::kind::single_block:
      f.single_block(s.block, w);
      break;
    case stage::kind::head:
      if constexpr (device_stages<Forward>)
        f.head(w);
      else
        velocity = f.head(w);
      break;
  }
}

/// @brief Enqueues stage @p s through ddo on @p view: acquire its groups, run the stage on the
/// lease pointers, drop the leases (their release events follow the stage's work); no
/// synchronize. The host_sim stage task reads @p in and @p timestep and writes @p velocity by
/// reference when it runs (enqueue_forward says how long they must live).
template <class Offloader, class Forward>
void enqueue_stage(Offloader& off, typename Offloader::stream_view view, const stage& s, Forward& f,
                   const inputs& in, const float& timestep, std::vector<float>& velocity) {
  auto& t = off.transport();
  const auto& table = off.table();
  std::vector<typename Offloader::lease_type> leases;
  auto names = std::make_shared<std::unordered_map<std::string, cpu::tensor_ref>>();
  for (std::size_t g : s.groups) {
    leases.push_back(off.acquire(g, view));
    const auto& lease = leases.back();
    for (std::size_t i = 0; i < lease.size(); ++i) {
      const auto& info = table[lease.weight_index(i)];
      (*names)[info.name] = {lease.data(i), info.type,
                             static_cast<std::size_t>(info.bytes / ddo::size_of(info.type))};
    }
  }
  const auto lookup = [names](const std::string& name) {
    const auto it = names->find(name);
    if (it == names->end()) throw ddo::usage_error("flux: stage has no weight '" + name + "'");
    return it->second;
  };
  if constexpr (device_stages<Forward>) {
    run_stage(s, f, lookup, in, timestep, velocity);
  } else {
    // The stage's "kernels": a task on the compute stream, after the loads it waits for and
    // before the release events the leases record when they drop at the end of this scope.
    ddo::host_sim_device(t).enqueue(
        view, [&, s, lookup] { run_stage(s, f, lookup, in, timestep, velocity); });
  }
}

/// @brief Enqueues one forward's stages through ddo on @p view (enqueue_stage each, reported
/// to @p phases when set); no synchronize. The host_sim stage tasks read @p in and @p timestep
/// and write @p velocity by reference when they run, so all three must outlive the enqueued
/// work: the locals of streamed_forward (which synchronizes before returning), or a captured
/// step's step_buffers, which its replays read by address (--graph).
template <class Offloader, class Forward>
void enqueue_forward(Offloader& off, typename Offloader::stream_view view,
                     const std::vector<stage>& stages, Forward& f, const inputs& in,
                     const float& timestep, std::vector<float>& velocity,
                     host_phases* phases = nullptr) {
  for (const auto& s : stages) {
    const auto t0 = host_phases::clock::now();
    enqueue_stage(off, view, s, f, in, timestep, velocity);
    if (phases != nullptr) phases->phase(stage_name(s), "enqueue", t0, host_phases::clock::now());
  }
}

/// @brief One forward through ddo (enqueue_forward), then one synchronize of the compute stream.
/// On host_sim (flux::forward) each stage is a host task on the compute stream
/// (transport.enqueue); on a GPU (gpu::device_forward, bound to the stream of @p view) the
/// stage's kernels are launched on that stream from this thread. With @p phases: each stage's
/// enqueueing, the synchronize (on a GPU it also waits for the velocity's copy to pinned host
/// memory, which the head enqueues) and the velocity's read.
template <class Offloader, class Forward>
[[nodiscard]] std::vector<float> streamed_forward(Offloader& off,
                                                  typename Offloader::stream_view view,
                                                  const std::vector<stage>& stages, Forward& f,
                                                  const inputs& in, float timestep,
                                                  host_phases* phases = nullptr) {
  using clock = host_phases::clock;
  std::vector<float> velocity;
  off.begin_step();
  enqueue_forward(off, view, stages, f, in, timestep, velocity, phases);
  const auto enqueued = clock::now();
  off.transport().synchronize(view);
  const auto synchronized = clock::now();
  if (phases != nullptr) phases->phase("synchronize", "wait", enqueued, synchronized);
  if constexpr (device_stages<Forward>) {
    velocity = f.velocity();
    if (phases != nullptr) phases->phase("read velocity", "host", synchronized, clock::now());
  }
  return velocity;
}

/// @brief A forward's per-step inputs and output where a captured step reads and writes them by
/// address (--graph): each step writes its latents and timestep here before the launch and reads
/// the velocity after the stream is synchronized. Lives as long as the captured graph.
struct step_buffers {
  inputs in;
  float timestep = 0.f;
  std::vector<float> velocity;
};

/// @brief How graph_forward captures a step: begin(view) starts capturing the stream, end(view)
/// ends it and returns the step's graph, abort(view) ends a capture that failed part-way (no
/// stream left capturing), exec(graph) is what the transport or offloader.launch_graph launches.
/// host_sim: transport_capture; a CUDA stream: gpu::cuda_capture (flux_gpu.hpp).
template <class Capture, class View>
concept step_capture = requires(Capture& c, View v, const typename Capture::graph& g) {
  c.begin(v);
  { c.end(v) } -> std::same_as<typename Capture::graph>;
  c.abort(v);
  Capture::exec(g);
};

/// @brief host_sim's graph model, through its transport (--graph on the CPU path).
template <class Transport>
struct transport_capture {
  using graph = typename Transport::graph_exec;
  Transport& transport;
  void begin(typename Transport::stream_view v) {
    ddo::host_sim_device(transport).begin_capture(v);
  }
  [[nodiscard]] graph end(typename Transport::stream_view v) {
    return ddo::host_sim_device(transport).end_capture(v);
  }
  void abort(typename Transport::stream_view v) noexcept {
    try {
      (void)ddo::host_sim_device(transport).end_capture(v);
    } catch (...) {  // the capture's own error is the one being reported
    }
  }
  [[nodiscard]] static const graph& exec(const graph& g) noexcept { return g; }
};

/// @brief One forward as a captured step (--graph): the first call captures the stages
/// (acquires, stage work reading @p b or, on a device forward, its device buffers; lease drops)
/// into @p graph, every call launches it -- through the offloader (launch_graph: it enqueues
/// the step's loads) when the capture entered graph streaming (the ring smaller than the
/// streamed groups), else directly (every streamed group stays loaded). A device forward's
/// latents and timestep go to its device buffers before each launch (stage_inputs, on the
/// stream ahead of the graph), and it must have run one eager forward before the capture (its
/// GEMM shapes are chosen by running them: gpu::gemm_runner refuses a new shape in a capture).
/// @p f must outlive @p graph (host_sim's stage tasks hold it by reference; a CUDA graph holds
/// its buffers' addresses).
template <class Offloader, class Forward, class Capture>
requires step_capture<Capture, typename Offloader::stream_view>
[[nodiscard]] std::vector<float> graph_forward(Offloader& off, typename Offloader::stream_view view,
                                               const std::vector<stage>& stages, Forward& f,
                                               step_buffers& b, Capture& capture,
                                               std::optional<typename Capture::graph>& graph) {
  auto& t = off.transport();
  if constexpr (device_stages<Forward>) f.stage_inputs(b.in, b.timestep);
  off.begin_step();
  if (!graph) {
    capture.begin(view);
    try {
      enqueue_forward(off, view, stages, f, b.in, b.timestep, b.velocity);
    } catch (...) {
      capture.abort(view);
      throw;
    }
    graph.emplace(capture.end(view));
  }
  if (off.graph_mode())
    off.launch_graph(Capture::exec(*graph), view);
  else
    t.launch_graph(Capture::exec(*graph), view);
  t.synchronize(view);
  if constexpr (device_stages<Forward>)
    return f.velocity();
  else
    return b.velocity;
}

/// @brief Every weight of @p table read once into host memory: the all-resident reference.
class host_weights {
 public:
  explicit host_weights(const ddo::weight_table& table) {
    const auto files = ddo::runner::open_files(table);
    for (std::size_t w = 0; w < table.size(); ++w) {
      const auto& info = table[w];
      auto& bytes = data_[info.name];
      bytes.resize(static_cast<std::size_t>(info.bytes));
      ddo::runner::read_source(table, files, w, bytes);
      refs_[info.name] = {bytes.data(), info.type,
                          static_cast<std::size_t>(info.bytes / ddo::size_of(info.type))};
    }
  }
  /// @brief Merges @p adapters (each with its scale, in attach order) into the weights they
  /// change with ddo's one merge function, all terms of a weight at once (rounded once), as the
  /// offloader merges them: --check's all-resident reference with --lora.
  void merge(const std::vector<std::pair<const ddo::lora_adapter*, float>>& adapters,
             const ddo::weight_table& table) {
    for (std::size_t w = 0; w < table.size(); ++w) {
      std::vector<ddo::lora_term> terms;
      for (const auto& [a, scale] : adapters)
        if (const auto* d = a->find(w)) terms.push_back(d->term(scale));
      if (terms.empty()) continue;
      const auto& info = table[w];
      ddo::merge_lora(data_.at(info.name).data(), info.type, info.shape[0],
                      static_cast<std::int64_t>(info.bytes / ddo::size_of(info.type)) /
                          info.shape[0],
                      terms);
    }
  }
  /// @brief Weight @p name's bytes, to write a reference of one's own into (tests).
  [[nodiscard]] std::vector<std::byte>& bytes(const std::string& name) { return data_.at(name); }
  /// @brief Every weight by name (gpu::device_weights copies them to the device).
  [[nodiscard]] const std::unordered_map<std::string, cpu::tensor_ref>& refs() const noexcept {
    return refs_;
  }
  [[nodiscard]] weight_lookup lookup() const { return lookup_in(refs_); }

 private:
  std::unordered_map<std::string, std::vector<std::byte>> data_;
  std::unordered_map<std::string, cpu::tensor_ref> refs_;
};

/// @brief One forward on resident weights (@p weights: host_weights for the CPU forward,
/// gpu::device_weights for the GPU one), stage by stage in the same order as the streamed one.
/// A device forward's stream is synchronized before its velocity is read.
template <class Weights, class Forward>
[[nodiscard]] std::vector<float> resident_forward(const Weights& weights,
                                                  const std::vector<stage>& stages, Forward& f,
                                                  const inputs& in, float timestep) {
  std::vector<float> velocity;
  const auto w = weights.lookup();
  for (const auto& s : stages) run_stage(s, f, w, in, timestep, velocity);
  if constexpr (device_stages<Forward>) {
    f.synchronize();
    velocity = f.velocity();
  }
  return velocity;
}

/// @brief The Euler flow-matching loop of @p steps over @p model_forward (sigma -> velocity of
/// the current latents): the final latents, and the first step's velocity in @p first_velocity.
/// With @p phases: each step's forward ("step i") and its Euler update ("euler i").
template <class Forward>
[[nodiscard]] std::vector<float> denoise(inputs in, int steps, Forward&& model_forward,
                                         std::vector<float>* first_velocity = nullptr,
                                         host_phases* phases = nullptr) {
  using clock = host_phases::clock;
  const auto s = sigmas(steps, in.image_tokens);
  for (int i = 0; i < steps; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const auto t0 = clock::now();
    const std::vector<float> v = model_forward(in, pipeline_timestep(s[k]));
    const auto t1 = clock::now();
    if (i == 0 && first_velocity != nullptr) *first_velocity = v;
    euler_step(in.latents, v, s[k], s[k + 1]);
    if (phases != nullptr) {
      phases->phase("step " + std::to_string(i), "step", t0, t1);
      phases->phase("euler " + std::to_string(i), "host", t1, clock::now());
    }
  }
  return in.latents;
}

}  // namespace flux
