// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The synthetic compute of ddo-run and the streaming benchmark: one GEMM per linear
/// weight over a [tokens, hidden] activation.
///
/// On a GPU every 2-D weight `[out, in]` (row-major, as safetensors stores a linear layer) becomes
/// one cuBLAS GEMM `Y[tokens, out] = alpha * X[tokens, in] * W^T` in the weight's dtype (bf16,
/// fp16 or fp32) with fp32 accumulation; the activation ping-pongs between two buffers sized for
/// the largest dimension. Without a GPU a small CPU stand-in does the same product in float on a
/// few tokens, reading every byte of the weight, so the host_sim transport's data is really used.
///
/// This is example code (not part of the library): it lives under examples/runner/ and is
/// included by examples/ddo_run.cpp and bench/streaming/streaming_bench.cpp.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/model/dtype.hpp"
#include "ddo/platform/cuda_device.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief The runner's GPU probe: ddo::probe_cuda_device (platform/cuda_device.hpp, ddo's one
/// probe), with "no GPU found: " before its reason, since the runner prints it to a person
/// deciding why it fell back to host_sim.
[[nodiscard]] inline cuda_device_probe probe_gpu(int device = 0) {
  cuda_device_probe result = probe_cuda_device(device);
  if (!result.available) result.reason = "no GPU found: " + result.reason;
  return result;
}

namespace internal {

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call,
                                            const char* file, int line) {
  const char* name = cublasGetStatusName(status);
  const char* text = cublasGetStatusString(status);
  std::string what = std::string("cuBLAS call failed: ") + call + " returned " +
                     (name ? name : "unknown") + " (" + (text ? text : "") + ") at " + file + ":" +
                     std::to_string(line);
  if (status == CUBLAS_STATUS_NOT_INITIALIZED)
    what += "; is a GPU present and is the CUDA driver loaded?";
  throw cuda_error(static_cast<int>(status), name ? name : "cublasStatus_t", call, file, line,
                   what);
}

/// bf16 → float: the upper 16 bits of an IEEE float. Always inlined, through the builtin that
/// std::bit_cast wraps: the sanitizer builds run the CPU stand-in unoptimised, where the two calls
/// per weight element were 19% of a ddo-run script's CPU under ASan (row_as_float).
[[nodiscard, gnu::always_inline]] inline float bf16_to_float(std::uint16_t bits) noexcept {
  return __builtin_bit_cast(float, static_cast<std::uint32_t>(bits) << 16);
}

/// float → bf16, round to nearest even (NaN stays NaN).
[[nodiscard]] inline std::uint16_t float_to_bf16(float value) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

/// IEEE half → float (denormals, infinities and NaN included).
[[nodiscard]] inline float f16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits = 0;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // denormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

/// float → IEEE half, round to nearest (used only to fill fp16 activations with random data).
[[nodiscard]] inline std::uint16_t float_to_f16(float value) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127 + 15;
  const std::uint32_t mantissa = bits & 0x7fffffu;
  if (exponent <= 0) return sign;  // tiny values flush to zero: fine for random fill data
  if (exponent >= 0x1f) return static_cast<std::uint16_t>(sign | 0x7c00u);
  return static_cast<std::uint16_t>(sign | (exponent << 10) | ((mantissa + 0x1000u) >> 13));
}

}  // namespace internal

/// Runs a cuBLAS call and throws ddo::cuda_error naming it (and its status) when it fails.
#define DDO_RUNNER_CUBLAS_TRY(call)                                                               \
  do {                                                                                            \
    const ::cublasStatus_t ddo_cublas_status_ = (call);                                           \
    if (ddo_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                              \
      ::ddo::runner::internal::throw_cublas_error(ddo_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

/// @brief Element of a weight as float (bf16, fp16, fp32 supported; others read as 0).
[[nodiscard]] inline float element_as_float(const std::byte* data, dtype type,
                                            std::size_t index) noexcept {
  switch (type) {
    case dtype::bf16: {
      std::uint16_t bits;
      std::memcpy(&bits, data + 2 * index, 2);
      return internal::bf16_to_float(bits);
    }
    case dtype::f16: {
      std::uint16_t bits;
      std::memcpy(&bits, data + 2 * index, 2);
      return internal::f16_to_float(bits);
    }
    case dtype::f32: {
      float value;
      std::memcpy(&value, data + 4 * index, 4);
      return value;
    }
    default: return 0.0f;
  }
}

/// @brief Elements [@p first, @p first + @p count) of @p data as float into @p out, as
/// element_as_float converts each (the dtype is switched on once, not per element).
inline void row_as_float(const std::byte* data, dtype type, std::size_t first, std::size_t count,
                         float* out) noexcept {
  switch (type) {
    case dtype::bf16:
    case dtype::f16: {
      const std::byte* p = data + 2 * first;
      const bool brain = type == dtype::bf16;
      // The two bytes are assembled in native order (what memcpy into a uint16_t gives) without
      // a memcpy call per element: the sanitizers intercept each one.
      constexpr int low = std::endian::native == std::endian::little ? 0 : 1;
      for (std::size_t i = 0; i < count; ++i) {
        // static_cast, not std::to_integer: no call per byte at -O0.
        const auto bits = static_cast<std::uint16_t>(
            static_cast<unsigned>(p[2 * i + low]) | static_cast<unsigned>(p[2 * i + 1 - low]) << 8);
        out[i] = brain ? internal::bf16_to_float(bits) : internal::f16_to_float(bits);
      }
      return;
    }
    case dtype::f32: std::memcpy(out, data + 4 * first, 4 * count); return;
    default:
      for (std::size_t i = 0; i < count; ++i) out[i] = 0.0f;
      return;
  }
}

/// @brief Whether the synthetic compute can multiply by a weight of this dtype.
[[nodiscard]] constexpr bool is_supported_compute_dtype(dtype type) noexcept {
  return type == dtype::bf16 || type == dtype::f16 || type == dtype::f32;
}

/// @brief The GEMM scale that keeps the activation's magnitude steady through many layers:
/// 1 / (sqrt(in) * rms(W)), with rms estimated from up to @p samples evenly spaced elements.
/// Without it a chain of hundreds of random layers overflows to inf or underflows to zero, and
/// both would make the GEMMs' timing unrepresentative (zeros run measurably faster).
[[nodiscard]] inline float variance_preserving_alpha(const std::byte* host_weight, dtype type,
                                                     std::int64_t out, std::int64_t in,
                                                     std::size_t samples = 4096) {
  const auto count = static_cast<std::size_t>(out) * static_cast<std::size_t>(in);
  if (count == 0 || host_weight == nullptr) return 1.0f;
  const std::size_t n = std::min(count, samples);
  const std::size_t stride = count / n;
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = element_as_float(host_weight, type, i * stride);
    if (std::isfinite(v)) sum += v * v;
  }
  const double rms = std::sqrt(sum / static_cast<double>(n));
  if (!(rms > 0.0)) return 1.0f;
  return static_cast<float>(1.0 / (std::sqrt(static_cast<double>(in)) * rms));
}

/// @brief One linear layer of the synthetic forward: a 2-D weight `[out, in]`.
struct linear_layer {
  std::size_t weight_index = 0;  ///< index in the weight table (for looking up its device pointer)
  std::int64_t out = 0;
  std::int64_t in = 0;
  dtype type = dtype::bf16;
  float alpha = 1.0f;            ///< GEMM scale (see variance_preserving_alpha)
};

/// @brief Owns a cuBLAS handle bound to one stream; throws ddo::cuda_error (with the cuBLAS status
/// name) when creation fails, e.g. because no GPU is present.
class cublas_handle {
 public:
  /// @brief Creates the handle and binds it to @p stream.
  explicit cublas_handle(cudaStream_t stream) {
    DDO_RUNNER_CUBLAS_TRY(cublasCreate(&handle_));
    const cublasStatus_t status = cublasSetStream(handle_, stream);
    if (status != CUBLAS_STATUS_SUCCESS) {
      cublasDestroy(handle_);
      internal::throw_cublas_error(status, "cublasSetStream(handle_, stream)", __FILE__, __LINE__);
    }
  }
  cublas_handle(const cublas_handle&) = delete;
  cublas_handle& operator=(const cublas_handle&) = delete;
  ~cublas_handle() {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }
  /// @brief The raw handle.
  [[nodiscard]] cublasHandle_t get() const noexcept { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

/// @brief Ends a capture left open on @p stream (an exception inside the captured step) and
/// discards its graph: the frees and host waits of the unwinding that follows are synchronizing
/// calls, which CUDA refuses while a capture is open (cudaErrorStreamCaptureUnsupported, issue
/// 37). Never throws: an invalidated capture ends with an error, which is cleared.
inline void end_open_capture(cudaStream_t stream) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (status == cudaStreamCaptureStatusNone) return;
  cudaGraph_t abandoned = nullptr;
  (void)cudaStreamEndCapture(stream, &abandoned);
  if (abandoned != nullptr) (void)cudaGraphDestroy(abandoned);
  (void)cudaGetLastError();
}

/// @brief Device bytes of the cuBLAS workspace gpu_synthetic_forward gives its handle: set
/// explicitly (cublasSetWorkspace) so that the engine's reserve is a number the plan can leave
/// free, not whatever cuBLAS picks for the device (32 MiB is what it picks on Hopper).
inline constexpr std::uint64_t cublas_workspace_bytes = 32ull << 20;

/// @brief The GPU synthetic forward: ping-pong activations and one GEMM per linear weight.
/// Everything is enqueued on the stream given at construction; nothing synchronises the host.
/// @brief 64-bit FNV-1a over @p bytes: the activation's digest ddo-run prints, so that two runs
/// (eager and --graph, one route and another) can be compared bit for bit from their logs.
[[nodiscard]] inline std::uint64_t activation_digest(std::span<const std::byte> bytes) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte b : bytes) h = (h ^ static_cast<std::uint64_t>(b)) * 0x100000001b3ull;
  return h;
}

class gpu_synthetic_forward {
 public:
  /// @brief Allocates two activation buffers of @p tokens × @p max_dim elements of @p type,
  /// fills them with random data (never zeros) and creates the cuBLAS handle on @p stream.
  /// @throws ddo::cuda_error when CUDA or cuBLAS fail; ddo::usage_error for an unsupported dtype.
  gpu_synthetic_forward(std::int64_t tokens, std::int64_t max_dim, dtype type, cudaStream_t stream,
                        std::uint64_t seed = 0x5eed)
      : tokens_(tokens), max_dim_(max_dim), type_(type), stream_(stream), cublas_(stream) {
    DDO_EXPECTS(is_supported_compute_dtype(type),
                "synthetic forward: dtype " + std::string(to_string(type)) +
                    " is not supported (bf16, F16 and F32 are)");
    DDO_EXPECTS(tokens > 0 && max_dim > 0, "synthetic forward: tokens and hidden must be > 0");
    const std::size_t elements = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(max_dim);
    bytes_per_buffer_ = elements * size_of(type);
    std::vector<std::byte> host(bytes_per_buffer_);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t i = 0; i < elements; ++i) {
      const float v = normal(rng);
      if (type == dtype::f32) {
        std::memcpy(host.data() + 4 * i, &v, 4);
      } else {
        const std::uint16_t bits =
            type == dtype::bf16 ? internal::float_to_bf16(v) : internal::float_to_f16(v);
        std::memcpy(host.data() + 2 * i, &bits, 2);
      }
    }
    try {
      for (auto& buffer : buffers_) {
        DDO_CUDA_TRY(cudaMalloc(&buffer, bytes_per_buffer_));
        // Synchronous on purpose: setup, before any timed work, from pageable memory.
        DDO_CUDA_TRY(cudaMemcpy(buffer, host.data(), bytes_per_buffer_, cudaMemcpyHostToDevice));
      }
      DDO_CUDA_TRY(cudaMalloc(&workspace_, cublas_workspace_bytes));
      DDO_RUNNER_CUBLAS_TRY(cublasSetWorkspace(cublas_.get(), workspace_, cublas_workspace_bytes));
    } catch (...) {
      release();
      throw;
    }
  }
  gpu_synthetic_forward(const gpu_synthetic_forward&) = delete;
  gpu_synthetic_forward& operator=(const gpu_synthetic_forward&) = delete;
  ~gpu_synthetic_forward() { release(); }

  /// @brief Enqueues `Y[rows, out] = alpha * X[rows, in] * W^T` on the stream, where
  /// @p weight_device is the `[out, in]` row-major weight on the device; X is the current
  /// activation, Y becomes the next. @p rows (1..tokens; 0: every token) is how many tokens the
  /// weight sees (examples/runner/token_rows.hpp). Dimensions larger than max_dim are refused.
  void linear(const void* weight_device, std::int64_t out, std::int64_t in, float alpha = 1.0f,
              std::int64_t rows = 0) {
    DDO_EXPECTS(out <= max_dim_ && in <= max_dim_,
                "synthetic forward: layer [" + std::to_string(out) + ", " + std::to_string(in) +
                    "] exceeds the activation width " + std::to_string(max_dim_));
    DDO_EXPECTS(rows >= 0 && rows <= tokens_, "synthetic forward: rows " + std::to_string(rows) +
                                                  " outside 0.." + std::to_string(tokens_));
    const std::int64_t n = rows == 0 ? tokens_ : rows;
    const float beta = 0.0f;
    const cudaDataType_t t = cuda_type();
    // Row-major X[tokens, in] is column-major X^T (in × tokens); row-major W[out, in] is
    // column-major W^T (in × out). Column-major Y^T (out × tokens) = (W^T)^T · X^T.
    DDO_RUNNER_CUBLAS_TRY(cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N,
                                       static_cast<int>(out), static_cast<int>(n),
                                       static_cast<int>(in), &alpha, weight_device, t,
                                       static_cast<int>(in), buffers_[current_], t,
                                       static_cast<int>(in), &beta, buffers_[1 - current_], t,
                                       static_cast<int>(out), CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
    current_ = 1 - current_;
  }

  /// @brief Ends a step: after an odd number of GEMMs the result is copied back to buffer 0, so
  /// every step starts from buffer 0. A captured step keeps the buffer pointers of capture time;
  /// with this its replays chain as the eager steps do, and their outputs compare bit for bit.
  void end_step() {
    if (current_ == 0) return;
    DDO_CUDA_TRY(cudaMemcpyAsync(buffers_[0], buffers_[1], bytes_per_buffer_,
                                 cudaMemcpyDeviceToDevice, stream_));
    current_ = 0;
  }
  /// @brief activation_digest of the current activation. Synchronizes the stream: call it after
  /// the timed steps.
  [[nodiscard]] std::uint64_t digest() {
    std::vector<std::byte> host(bytes_per_buffer_);
    DDO_CUDA_TRY(cudaMemcpyAsync(host.data(), buffers_[current_], bytes_per_buffer_,
                                 cudaMemcpyDeviceToHost, stream_));
    DDO_CUDA_TRY(cudaStreamSynchronize(stream_));
    return activation_digest(host);
  }

  /// @brief FLOPs of one linear() over every token: 2 · tokens · out · in.
  [[nodiscard]] double flops(std::int64_t out, std::int64_t in) const noexcept {
    return 2.0 * static_cast<double>(tokens_) * static_cast<double>(out) * static_cast<double>(in);
  }
  /// @brief Device bytes held: the activation buffers and the cuBLAS workspace.
  [[nodiscard]] std::uint64_t device_bytes() const noexcept {
    return 2 * bytes_per_buffer_ + cublas_workspace_bytes;
  }
  /// @brief The stream every GEMM is enqueued on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  /// @brief Tokens per activation row block.
  [[nodiscard]] std::int64_t tokens() const noexcept { return tokens_; }
  /// @brief The compute dtype.
  [[nodiscard]] dtype type() const noexcept { return type_; }

 private:
  [[nodiscard]] cudaDataType_t cuda_type() const noexcept {
    return type_ == dtype::bf16 ? CUDA_R_16BF : type_ == dtype::f16 ? CUDA_R_16F : CUDA_R_32F;
  }

  void release() noexcept {
    end_open_capture(stream_);  // cudaFree is refused while the stream captures
    for (auto*& buffer : buffers_)
      if (buffer != nullptr) DDO_CUDA_TRY_NOTHROW(cudaFree(buffer));
    if (workspace_ != nullptr) DDO_CUDA_TRY_NOTHROW(cudaFree(workspace_));
    buffers_[0] = buffers_[1] = workspace_ = nullptr;
  }

  std::int64_t tokens_;
  std::int64_t max_dim_;
  dtype type_;
  cudaStream_t stream_;
  cublas_handle cublas_;
  std::size_t bytes_per_buffer_ = 0;
  void* buffers_[2] = {nullptr, nullptr};
  void* workspace_ = nullptr;
  int current_ = 0;
};

/// @brief The CPU stand-in for machines without a GPU: the same chain of products in float on a
/// handful of tokens. Every element of every weight is read, so data that reached the (simulated)
/// device wrongly changes the result.
class cpu_synthetic_forward {
 public:
  /// @brief @p tokens rows of width @p max_dim, filled with random values from @p seed.
  cpu_synthetic_forward(std::int64_t tokens, std::int64_t max_dim, std::uint64_t seed = 0x5eed)
      : tokens_(tokens), max_dim_(max_dim) {
    DDO_EXPECTS(tokens > 0 && max_dim > 0, "synthetic forward: tokens and hidden must be > 0");
    const auto n = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(max_dim);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& buffer : buffers_) {
      buffer.resize(n);
      for (auto& v : buffer) v = normal(rng);
    }
  }

  /// @brief `Y = alpha * X * W^T` for a row-major `[out, in]` weight of @p type at @p weight,
  /// over the first @p rows tokens (0: all; the rows after them keep their values).
  void linear(const std::byte* weight, std::int64_t out, std::int64_t in, dtype type,
              float alpha = 1.0f, std::int64_t rows = 0) {
    DDO_EXPECTS(out <= max_dim_ && in <= max_dim_,
                "synthetic forward: layer [" + std::to_string(out) + ", " + std::to_string(in) +
                    "] exceeds the activation width " + std::to_string(max_dim_));
    DDO_EXPECTS(rows >= 0 && rows <= tokens_, "synthetic forward: rows " + std::to_string(rows) +
                                                  " outside 0.." + std::to_string(tokens_));
    const std::int64_t n = rows == 0 ? tokens_ : rows;
    const auto& x = buffers_[current_];
    auto& y = buffers_[1 - current_];
    const auto width = static_cast<std::size_t>(max_dim_);
    const auto count = static_cast<std::size_t>(in);
    row_.resize(count);
    // Raw pointers and one dtype switch per row: the sanitizer builds run this unoptimised, where
    // a call per element (operator[], the per-element switch) made it the runner tests' largest
    // cost. The arithmetic and its order are the same.
    float* row = row_.data();
    const float* xs = x.data();
    float* ys = y.data();
    for (std::int64_t o = 0; o < out; ++o) {
      row_as_float(weight, type, static_cast<std::size_t>(o) * count, count, row);
      for (std::int64_t t = 0; t < n; ++t) {
        const float* xr = xs + static_cast<std::size_t>(t) * width;
        float acc = 0.0f;
        for (std::size_t i = 0; i < count; ++i) acc += xr[i] * row[i];
        ys[static_cast<std::size_t>(t) * width + static_cast<std::size_t>(o)] = alpha * acc;
      }
    }
    current_ = 1 - current_;
  }

  /// @brief A checksum of the current activation (the sum of all its values), to show that the
  /// result depends on every weight byte.
  [[nodiscard]] double checksum() const noexcept {
    double sum = 0.0;
    for (float v : buffers_[current_]) sum += static_cast<double>(v);
    return sum;
  }

  /// @brief Ends a step as gpu_synthetic_forward::end_step does (the result back in buffer 0),
  /// so that the two forwards follow one buffer discipline.
  void end_step() {
    if (current_ == 0) return;
    buffers_[0] = buffers_[1];
    current_ = 0;
  }
  /// @brief activation_digest of the current activation's bytes.
  [[nodiscard]] std::uint64_t digest() const noexcept {
    return activation_digest(std::as_bytes(std::span(buffers_[current_])));
  }

  /// @brief The current activation: tokens rows of width() floats, row-major.
  [[nodiscard]] std::span<const float> activation() const noexcept { return buffers_[current_]; }
  /// @brief The activation's row width (the largest dimension).
  [[nodiscard]] std::int64_t width() const noexcept { return max_dim_; }
  /// @brief Rows (tokens).
  [[nodiscard]] std::int64_t tokens() const noexcept { return tokens_; }

 private:
  std::int64_t tokens_;
  std::int64_t max_dim_;
  std::vector<float> buffers_[2];
  std::vector<float> row_;
  int current_ = 0;
};

}  // namespace runner
}  // namespace v0
}  // namespace ddo
