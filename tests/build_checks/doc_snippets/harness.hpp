// SPDX-License-Identifier: Apache-2.0
// The engine the docs' ```cpp {fragment} snippets are written in (tests/build_checks/
// doc_snippets.py): each fragment is the body of a doc_engine::snippet<N>(), so these members are
// the names a snippet may take as given. They are the engine's own things — its model, transport,
// streams, kernels, settings — declared with ddo's types where the docs use ddo's, and as
// catch-all templates where the docs call the engine's own code. A fragment that declares one of
// the names shadows it. Never run: only compiled (-fsyntax-only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <boost/program_options/variables_map.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ddo/ddo.hpp>
#include <ddo/memory/shared_weight_store.hpp>
#include <ddo/runtime/calibration.hpp>
#include <ddo/setup/enable_offload.hpp>
#include <ddo/setup/pipeline_offload.hpp>
#include <ddo/setup/prepare_offload.hpp>
#include <ddo/setup/setup.hpp>
#include <ddo/transport/host_sim.hpp>

/// The custom selector of docs/policies.md, which getting-started's engine-API snippet names.
struct smallest_first {
  using selector_category = ddo::weight_selector_tag;
  std::vector<std::size_t> select(std::span<const ddo::selection_candidate> candidates,
                                  std::uint64_t budget) const;
};

/// The engine's own code the docs call: kernels, logging, a model's forward pass.
void launch_linear(const auto&...) {}
void launch_stage(const auto&...) {}
void engine_log(ddo::log_severity, std::string_view) {}
void encode(const auto&...) {}
void denoise(const auto&...) {}
void decode(const auto&...) {}
auto lookup_from(const auto&) { return 0; }

/// A host tensor of the engine's (getting-started: `my_tensor.host_data()`, `to_q.data_ptr`).
struct engine_tensor {
  const std::byte* host_data() const { return reinterpret_cast<const std::byte*>(data_ptr); }
  __nv_bfloat16* data_ptr = nullptr;
};

/// The latents of the walk-through's sampling loop (flow matching: latents += dt * v).
struct latent_tensor {
  latent_tensor& operator+=(const latent_tensor&) { return *this; }
  friend latent_tensor operator*(double, const latent_tensor& t) { return t; }
};
namespace flux {
std::vector<double> sigmas(int steps, std::size_t image_tokens);
}

struct doc_engine {
  using linear_offloader = ddo::offloader<ddo::linear_transport>;
  /// A stage of the walk-through's forward pass: which group it acquires.
  struct stage {
    std::size_t group = 0;
  };
  /// The engine's step callback of docs/calibration.md.
  struct engine_loop {
    void step(linear_offloader&, std::uint64_t) {}
  };

  // The model and the machine.
  ddo::weight_table model, table, text_encoder, transformer, vae;
  std::vector<std::string> models;  // safetensors files or an .index.json
  engine_tensor my_tensor, to_q;
  std::uint64_t activations = 0, workspaces = 0, total_weight_bytes = 0, tokens = 0;
  // What ddo gave the engine, as the pages before a snippet set it up.
  ddo::setup_options options, base;
  ddo::dynamic_offload_settings settings;
  ddo::resolved_component component;
  ddo::linear_transport transport;
  linear_offloader& offloader;
  linear_offloader& off;
  ddo::pipeline_offload<linear_offloader>& pipe;
  std::vector<ddo::enabled_offload<linear_offloader>> devices;
  ddo::capacity_profile profile;
  boost::program_options::variables_map vm;
  // The engine's loop.
  cudaStream_t compute_stream = nullptr, stream = nullptr;
  std::size_t g = 0, w = 0, i = 0;
  int n = 1, steps = 28;
  std::size_t image_tokens = 4096;
  std::vector<stage> stages;
  std::vector<std::string> prompts;
  latent_tensor latents;
  engine_loop engine;
  latent_tensor forward(const latent_tensor&, double) const { return {}; }

  /// The fragments, one specialisation each (doc_snippets.py writes them).
  template <int N>
  void snippet();
};
