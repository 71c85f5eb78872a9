// SPDX-License-Identifier: Apache-2.0
// ddo-flux's GPU forward (examples/flux/flux_gpu.hpp: cuBLASLt bf16 GEMMs, the kernels of
// flux_kernels.cu) at the tiny reference configuration against diffusers' own
// FluxTransformer2DModel (tests/data/flux_tiny_reference.bin, the data the CPU path is held to in
// tests/runner/flux_test.cpp), and the same forward streamed through ddo's linear transport on
// the GPU: bitwise equal to the all-resident GPU forward, eagerly and as a captured CUDA graph
// replayed through ddo's graph streaming (ddo-flux --graph). Skips without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddo/config/resolve.hpp"
#include "ddo/model/safetensors.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/setup/setup.hpp"
#include "ddo/transport/linear.hpp"
#include "flux/flux_engine.hpp"
#include "flux/flux_gpu.hpp"
#include "flux/flux_init.hpp"
#include "flux_reference_data.hpp"
#include "gpu_support.hpp"

#ifndef DDO_FLUX_REFERENCE
#error "DDO_FLUX_REFERENCE names tests/data/flux_tiny_reference.bin"
#endif

namespace flux_forward_gpu_test {

constexpr std::uint64_t seed = 25;  // tools/flux_reference.py's

std::vector<std::vector<float>> reference() {
  return ddo_test::read_flux_reference(DDO_FLUX_REFERENCE);
}

/// ||a - b|| / ||b|| over every element (the error relative to the reference's size).
double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

double max_abs(const std::vector<float>& a) {
  double m = 0.0;
  for (float v : a) m = std::max(m, std::fabs(double(v)));
  return m;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

TEST_SUITE("gpu") {
  TEST_CASE("flux GPU forward: matches diffusers within bf16 tolerance; streamed bitwise equal") {
    if (const auto why = ddo_test::gpu_skip_reason(); !why.empty()) {
      MESSAGE("skipped: " << why);
      return;
    }
    // The tests' tiny model with bf16 weights (the GPU GEMMs take bf16, as FLUX.1 is published);
    // diffusers' reference ran on the float values these round.
    const auto dir = std::filesystem::temp_directory_path() / "ddo-flux-gpu-test";
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "flux-tiny-bf16.safetensors").string();
    flux::write_seeded_model(flux::tiny_config(), path, ddo::dtype::bf16, seed);
    const ddo::weight_table table = ddo::load_safetensors(path);
    const auto c = flux::config_of(table, {8, 28, 28});
    const flux::inputs in = flux::seeded_inputs(c, 8, 8, 16, 3.5f, seed);
    const auto ref = reference();
    REQUIRE(ref.size() == 2);
    const auto groups = ddo::infer_execution_groups(table);
    ddo::offload_plan whole;
    for (const auto& g : groups) whole.groups.push_back({g.name, g.weights, {}});
    const auto stages = flux::plan_stages(table, whole);

    // The CPU float path on the same bf16 weights: what rounding the weights alone costs.
    const flux::host_weights host(table);
    std::vector<float> cpu_v0;
    const auto cpu_latents = flux::denoise(
        in, 2,
        [&](const flux::inputs& x, float t) {
          flux::forward f(c, x.image_tokens, x.text_tokens);
          return flux::resident_forward(host, stages, f, x, t);
        },
        &cpu_v0);

    // The GPU forward, all resident.
    flux::gpu::gemm_runner gemms;
    flux::gpu::device_forward f(c, in.image_tokens, in.text_tokens, gemms);
    const flux::gpu::device_weights weights(host.refs());
    cudaStream_t stream = nullptr;
    DDO_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    f.bind(stream);
    std::vector<float> gpu_v0;
    const auto resident = flux::denoise(
        in, 2,
        [&](const flux::inputs& x, float t) {
          return flux::resident_forward(weights, stages, f, x, t);
        },
        &gpu_v0);
    DDO_CUDA_TRY(cudaStreamDestroy(stream));

    // Tolerance. bf16 keeps 8 significant bits: each rounding is off by at most u = 2^-9 of the
    // value. The GPU path rounds every weight (as the CPU run above does) and every GEMM's
    // activation operand (about 40 GEMMs on the path of each output, each a sum over >= 64
    // products whose rounding errors are independent), so its error relative to the output's
    // size grows like u times a small factor, not like u times the depth: bounded here by 8u
    // (0.0156) in relative L2 and 0.05 of the largest value per element, and within twice the
    // CPU path's own error plus 4u (the activation roundings at most double the weights').
    constexpr double u = 1.0 / 512.0;
    const double gpu_v = relative_l2(gpu_v0, ref[0]), gpu_l = relative_l2(resident, ref[1]);
    const double cpu_v = relative_l2(cpu_v0, ref[0]), cpu_l = relative_l2(cpu_latents, ref[1]);
    MESSAGE("relative L2 error vs diffusers (fp32): GPU velocity " << gpu_v << ", latents " << gpu_l
                                                                   << "; CPU on the same bf16 "
                                                                      "weights "
                                                                   << cpu_v << ", " << cpu_l);
    MESSAGE("max |GPU - diffusers|: velocity "
            << max_abs_diff(gpu_v0, ref[0]) << " (max |ref| " << max_abs(ref[0]) << "), latents "
            << max_abs_diff(resident, ref[1]) << " (max |ref| " << max_abs(ref[1]) << ")");
    CHECK(gpu_v < 8 * u);
    CHECK(gpu_l < 8 * u);
    CHECK(gpu_v < 2 * cpu_v + 4 * u);
    CHECK(gpu_l < 2 * cpu_l + 4 * u);
    CHECK(max_abs_diff(gpu_v0, ref[0]) < 0.05 * max_abs(ref[0]));
    CHECK(max_abs_diff(resident, ref[1]) < 0.05 * max_abs(ref[1]));
    // The GPU is not the CPU: an engine that silently ran the CPU path would pass the above.
    CHECK(std::memcmp(gpu_v0.data(), cpu_v0.data(), gpu_v0.size() * 4) != 0);

    // Streamed through ddo's linear transport on the GPU, nothing resident but what is under
    // the small-tensor threshold: bitwise equal to all-resident (same forward, same GEMM
    // algorithms and workspace).
    ddo::setup_options options;
    options.inputs.environment = std::map<std::string, std::string>{};
    options.inputs.preset = "diffusers_offload_compat";
    options.inputs.overrides = {{ddo::field_id::small_tensor_threshold_bytes, std::int64_t{1024}}};
    options.reserve_device_bytes = f.device_bytes() + gemms.device_bytes();
    const auto settings = ddo::resolve_settings(options.inputs);
    ddo::linear_options lo;
    lo.device_limit_bytes = 256 * ddo::mib;
    ddo::linear_transport transport(lo);
    auto setup = ddo::setup_offload(table, settings, ddo::component_for(settings, options.inputs),
                                    options, transport);
    const std::uint64_t streamed =
        table.total_bytes() - setup.plan.total_bytes(ddo::placement::gpu_resident);
    CHECK(streamed > table.total_bytes() * 9 / 10);
    ddo::offloader<ddo::linear_transport> off(table, std::move(setup), transport);
    auto compute = off.transport().make_stream();
    const auto view = ddo::linear_transport::view(compute);
    f.bind(view.handle);
    const auto streamed_stages = flux::plan_stages(table, off.plan());
    const auto through_ddo = flux::denoise(in, 2, [&](const flux::inputs& x, float t) {
      return flux::streamed_forward(off, view, streamed_stages, f, x, t);
    });
    REQUIRE(through_ddo.size() == resident.size());
    CHECK(std::memcmp(through_ddo.data(), resident.data(), resident.size() * sizeof(float)) == 0);
    CHECK(off.metrics(true).totals.bytes() >= 2 * streamed);

    // --graph's path after the eager loop (which chose every GEMM shape): the same loop with its
    // first step captured (latents and timestep staged on the device before each launch), then
    // replayed -- twice over, so three replays -- through the offloader's graph streaming, the
    // ring smaller than the streamed groups: bitwise equal to all-resident each time.
    flux::step_buffers buffers{in, 0.f, {}};
    flux::gpu::cuda_capture capture;
    std::optional<flux::gpu::captured_graph> captured;
    for (int loop = 0; loop < 2; ++loop) {
      const auto graph_latents = flux::denoise(in, 2, [&](const flux::inputs& x, float t) {
        buffers.in.latents = x.latents;
        buffers.timestep = t;
        return flux::graph_forward(off, view, streamed_stages, f, buffers, capture, captured);
      });
      INFO("graph loop " << loop << ": " << off.slot_count() << " slots, " << off.group_count()
                         << " groups");
      CHECK(off.graph_mode());
      REQUIRE(graph_latents.size() == resident.size());
      CHECK(std::memcmp(graph_latents.data(), resident.data(), resident.size() * sizeof(float)) ==
            0);
    }
    CHECK(!flux::gpu::capturing(view.handle));
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("flux GPU forward: a GEMM shape first seen inside a capture is refused, naming it") {
    if (const auto why = ddo_test::gpu_skip_reason(); !why.empty()) {
      MESSAGE("skipped: " << why);
      return;
    }
    flux::gpu::gemm_runner gemms;
    flux::gpu::device_buffer<std::uint16_t> w(64 * 64), x(16 * 64);
    flux::gpu::device_buffer<float> y(16 * 64);
    cudaStream_t stream = nullptr;
    DDO_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    DDO_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CHECK_THROWS_WITH_AS(
        gemms.run(w.get(), x.get(), 64, y.get(), false, 64, 16, 64, 64, nullptr, false, stream),
        doctest::Contains("16 x 64 by [64, 64]) first seen inside a CUDA graph"), ddo::usage_error);
    cudaGraph_t g = nullptr;
    DDO_CUDA_TRY(cudaStreamEndCapture(stream, &g));
    if (g != nullptr) DDO_CUDA_TRY(cudaGraphDestroy(g));
    // Outside the capture the same shape runs (and is then known to a later capture).
    CHECK_FALSE(
        gemms.run(w.get(), x.get(), 64, y.get(), false, 64, 16, 64, 64, nullptr, false, stream));
    DDO_CUDA_TRY(cudaStreamSynchronize(stream));
    CHECK(gemms.shapes() == 1);
    DDO_CUDA_TRY(cudaStreamDestroy(stream));
  }
}

}  // namespace flux_forward_gpu_test
