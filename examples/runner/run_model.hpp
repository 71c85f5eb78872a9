// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The model as ddo-run computes it, and the engines that compute it: which weights are
/// GEMMs (with their scale and rows), the cuBLAS engine on a GPU, the CPU stand-in on host_sim.
/// Shared by ddo-run's normal run and its --compare variants (examples/runner/compare_run.hpp).
/// Example code (examples/runner/).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <variant>
#include <vector>

#include "ddo/core/safetensors_backend.hpp"
#include "ddo/core/units.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/host_sim_vmm.hpp"
#include "ddo/transport/linear.hpp"
#include "ddo/transport/nvme.hpp"
#include "ddo/transport/vmm.hpp"
#include "runner/synthetic_forward.hpp"
#include "runner/token_rows.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

// --- compute engines: what the runner does with a lease ---------------------------------------

/// A captured step of the GPU engine (ddo-run --graph): the graph and its instance.
struct cuda_graph_holder {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cuda_graph_holder() = default;
  cuda_graph_holder(const cuda_graph_holder&) = delete;
  cuda_graph_holder& operator=(const cuda_graph_holder&) = delete;
  ~cuda_graph_holder() {
    if (exec != nullptr) DDO_CUDA_TRY_NOTHROW(cudaGraphExecDestroy(exec));
    if (graph != nullptr) DDO_CUDA_TRY_NOTHROW(cudaGraphDestroy(graph));
  }
};

/// host_sim's graph where the transport has one (its adaptors too: graph_exec), else nothing.
template <class T>
struct sim_graph_of {
  using type = std::monostate;
};
template <class T>
  requires requires { typename T::graph_exec; }
struct sim_graph_of<T> {
  using type = typename T::graph_exec;
};

/// GPU: cuBLAS GEMMs on a non-blocking stream of the linear transport.
template <class Transport>
struct gpu_engine_t {
  using transport_type = Transport;
  using graph_holder = cuda_graph_holder;
  typename transport_type::stream stream;
  std::unique_ptr<runner::gpu_synthetic_forward> forward;

  gpu_engine_t(transport_type& t, std::int64_t tokens, std::int64_t width, dtype type)
      : stream(t.make_stream()) {
    forward = std::make_unique<runner::gpu_synthetic_forward>(tokens, width, type, stream.get());
  }
  gpu_engine_t(const gpu_engine_t&) = delete;
  gpu_engine_t& operator=(const gpu_engine_t&) = delete;
  /// A capture an exception left open ends first (its graph discarded): the forward's cudaFree
  /// and ddo's teardown are synchronizing calls, which CUDA refuses while it is open (issue 37).
  ~gpu_engine_t() { runner::end_open_capture(stream.get()); }
  [[nodiscard]] typename transport_type::stream_view view() { return transport_type::view(stream); }
  void linear(transport_type&, const std::byte* w, std::int64_t out, std::int64_t in, dtype,
              float alpha, std::int64_t rows) {
    forward->linear(w, out, in, alpha, rows);
  }
  /// Ends a step (enqueued: captured with it); the activation's digest after the steps.
  void end_step(transport_type&) { forward->end_step(); }
  [[nodiscard]] std::uint64_t output_digest(transport_type&) { return forward->digest(); }
  /// Device bytes the engine holds (activations, cuBLAS workspace).
  [[nodiscard]] std::uint64_t device_bytes() const { return forward->device_bytes(); }
  [[nodiscard]] static const char* compute_name() { return "cuBLAS GEMM"; }
  /// --graph: captures the work enqueued on the stream until end_capture (global mode, as
  /// frameworks capture; ddo relaxes it where it allocates).
  void begin_capture(transport_type&) {
    DDO_CUDA_TRY(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
  }
  [[nodiscard]] std::unique_ptr<graph_holder> end_capture(transport_type&) {
    auto h = std::make_unique<graph_holder>();
    DDO_CUDA_TRY(cudaStreamEndCapture(stream.get(), &h->graph));
    DDO_CUDA_TRY(cudaGraphInstantiate(&h->exec, h->graph, 0));
    return h;
  }
  [[nodiscard]] static const cudaGraphExec_t& exec_of(const graph_holder& h) { return h.exec; }
  /// Launches the captured step directly (every streamed group stays loaded: no graph streaming).
  void launch(transport_type&, const graph_holder& h) { DDO_CUDA_TRY(cudaGraphLaunch(h.exec, stream.get())); }
};
using gpu_engine = gpu_engine_t<linear_transport>;
/// The same engine on the VMM route (execution_mode vmm_runtime / backend vmm).
using gpu_vmm_engine = gpu_engine_t<vmm_transport>;
/// The file route (backend nvme): the linear ring, or VMM with execution_mode vmm_runtime
/// (nvme_baseline: the legacy VMM route fed from files).
using gpu_nvme_engine = gpu_engine_t<nvme_transport<linear_transport>>;
using gpu_nvme_vmm_engine = gpu_engine_t<nvme_transport<vmm_transport>>;

/// No GPU: the CPU stand-in, each product a task on a host_sim stream (the engine's "kernels").
template <class Transport>
struct cpu_engine_t {
  using transport_type = Transport;
  using graph_holder = typename sim_graph_of<Transport>::type;
  typename transport_type::stream stream;
  std::shared_ptr<runner::cpu_synthetic_forward> forward;

  cpu_engine_t(transport_type& t, std::int64_t tokens, std::int64_t width, dtype)
      : stream(t.make_stream()),
        forward(std::make_shared<runner::cpu_synthetic_forward>(tokens, width)) {}
  [[nodiscard]] typename transport_type::stream_view view() { return transport_type::view(stream); }
  void linear(transport_type& t, const std::byte* w, std::int64_t out, std::int64_t in,
              dtype type, float alpha, std::int64_t rows) {
    host_sim_device(t).enqueue(view(), [f = forward, w, out, in, type, alpha, rows] {
      f->linear(w, out, in, type, alpha, rows);
    });
  }
  /// Ends a step (a task on the stream: captured with it); the activation's digest after the
  /// steps, once the stream's work is done.
  void end_step(transport_type& t) {
    host_sim_device(t).enqueue(view(), [f = forward] { f->end_step(); });
  }
  [[nodiscard]] std::uint64_t output_digest(transport_type& t) {
    t.synchronize(view());
    return forward->digest();
  }
  /// The stand-in keeps its activations in host memory: nothing on the simulated device.
  [[nodiscard]] static std::uint64_t device_bytes() { return 0; }
  [[nodiscard]] static const char* compute_name() { return "CPU stand-in"; }
  /// --graph on host_sim: its graph model (values fixed at capture, as CUDA's).
  void begin_capture(transport_type& t) { host_sim_device(t).begin_capture(view()); }
  [[nodiscard]] std::unique_ptr<graph_holder> end_capture(transport_type& t) {
    return std::make_unique<graph_holder>(host_sim_device(t).end_capture(view()));
  }
  [[nodiscard]] static const graph_holder& exec_of(const graph_holder& h) { return h; }
  void launch(transport_type& t, const graph_holder& h) { t.launch_graph(h, view()); }
};
using cpu_engine = cpu_engine_t<host_sim_transport>;
/// The CPU stand-in on host_sim's VMM mode (execution_mode vmm_runtime / backend vmm).
using cpu_vmm_engine = cpu_engine_t<host_sim_vmm_transport>;
using cpu_nvme_engine = cpu_engine_t<nvme_transport<host_sim_transport>>;
using cpu_nvme_vmm_engine = cpu_engine_t<nvme_transport<host_sim_vmm_transport>>;

/// Whether @p Transport is host_sim standing in for the device (its VMM mode, the file route
/// over either): the CPU stand-in computes there.
template <class Transport>
inline constexpr bool simulated_transport = std::is_same_v<Transport, host_sim_transport> ||
                                            std::is_same_v<Transport, host_sim_vmm_transport>;
template <class Inner>
inline constexpr bool simulated_transport<nvme_transport<Inner>> = simulated_transport<Inner>;

/// The engine on the transport ddo::with_transport made.
template <class Transport>
using engine_for = std::conditional_t<simulated_transport<Transport>, cpu_engine_t<Transport>,
                                      gpu_engine_t<Transport>>;

// --- the model as the runner computes it ------------------------------------------------------

/// Per weight: whether it is a GEMM, its [out, in] and scale.
struct model_compute {
  dtype type = dtype::bf16;
  std::int64_t width = 1;  // the activation width: the largest dimension of any GEMM
  std::vector<char> is_gemm;
  std::vector<float> alpha;
  std::vector<std::int64_t> rows;  // tokens each GEMM multiplies (runner/token_rows.hpp)
  std::size_t gemms = 0;
  std::size_t skipped_other_dtype = 0;
};

/// Opens every file of the table once (for --verify and for sampling scales), for positional
/// reads whatever load_safetensors_backend says: reading through a mapping would add the files'
/// pages to the runner's RSS, and the memory figures it prints are ddo's, not the runner's.
inline std::vector<file_reader> open_files(const weight_table& table) {
  std::vector<file_reader> readers;
  for (const auto& path : table.files()) readers.emplace_back(path, safetensors_backend::pread);
  return readers;
}

/// The source bytes of weight @p w (from its file or host pointer) into @p out.
inline void read_source(const weight_table& table, const std::vector<file_reader>& files,
                 std::size_t w, std::span<std::byte> out) {
  const auto& info = table[w];
  if (const auto* f = std::get_if<file_source>(&info.source)) {
    files.at(f->file_index).read(f->offset, out);
  } else {
    const auto& h = std::get<host_source>(info.source);
    std::memcpy(out.data(), h.data, out.size());
  }
}

/// 2-D weights of the compute dtype are GEMMs ([out, in], as a linear layer stores them); the
/// compute dtype is that of the first 2-D weight of a supported type. Scales keep the activation
/// steady, estimated from the first 64 KiB of each weight; rows say how many of the @p tokens
/// each GEMM multiplies (the text stream and the modulations of a Flux-like model fewer).
inline model_compute describe_compute(const weight_table& table,
                                      const std::vector<file_reader>& files,
                                      std::int64_t tokens) {
  model_compute mc;
  mc.is_gemm.assign(table.size(), 0);
  mc.alpha.assign(table.size(), 1.0f);
  mc.rows.assign(table.size(), tokens);
  bool have_type = false;
  for (std::size_t w = 0; w < table.size(); ++w) {
    const auto& info = table[w];
    if (info.shape.size() != 2 || !runner::is_supported_compute_dtype(info.type)) continue;
    if (!have_type) {
      mc.type = info.type;
      have_type = true;
    }
    if (info.type != mc.type) {
      ++mc.skipped_other_dtype;
      continue;
    }
    mc.is_gemm[w] = 1;
    mc.rows[w] = token_rows(token_stream_of(info.name), tokens);
    ++mc.gemms;
    mc.width = std::max({mc.width, info.shape[0], info.shape[1]});
    const std::size_t sample_bytes =
        static_cast<std::size_t>(std::min<std::uint64_t>(info.bytes, 64 * kib));
    std::vector<std::byte> sample(sample_bytes - sample_bytes % size_of(info.type));
    read_source(table, files, w, sample);
    const auto elements = static_cast<std::int64_t>(sample.size() / size_of(info.type));
    // rms over the sample, scaled as if it were the whole [out, in] weight
    mc.alpha[w] = runner::variance_preserving_alpha(sample.data(), info.type, 1, elements) *
                  static_cast<float>(std::sqrt(static_cast<double>(elements) /
                                               static_cast<double>(info.shape[1])));
  }
  return mc;
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
