// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The FLUX.1 forward on the GPU: the stages of flux_forward.hpp (embed, double block,
/// single block, head) over device buffers, enqueued on one stream, reading the weights through
/// the same lookup by published name (a lease's device pointers, or a resident copy).
///
/// Precision: the residual stream and the modulation vectors are float, and every kernel
/// computes in float; what a GEMM or attention reads is bf16, stored so. cuBLASLt accumulates in
/// float (CUBLAS_COMPUTE_32F) with the bias in its epilogue (or a kernel after, where cuBLASLt
/// has no epilogue for that bias type; decided once per shape) and writes float where a gated
/// residual add follows (the output projections), bf16 where more math follows: q and k
/// (RMSNorm + RoPE in float, back to bf16 in place: rms_rope_bf16), v (attention's operand as
/// is) and the MLP's hidden layer (GELU in place). LayerNorm + modulation write the bf16 rows
/// the next GEMMs read; attention (tensor cores: scores, softmax and sums in float, P rounded
/// to bf16) writes its output in bf16 where the output projection reads it. So q and k are
/// rounded twice (GEMM output, after RoPE) and the MLP's hidden layer twice (GEMM output, after
/// GELU), where a float pipeline rounds once: the price of half the activation memory (32768
/// image tokens on an 8 GiB card) and traffic; the diffusers tolerance
/// (tests/gpu/flux_forward_gpu_test.cpp) holds it.
///
/// Determinism: one cuBLASLt algorithm per GEMM shape, chosen by the heuristic the first time
/// the shape is seen with split-K reductions excluded and a fixed 16-byte alignment asked for
/// (so the choice cannot depend on where a lease's pointer happens to fall), the same fixed
/// workspace for every GEMM, and kernels without atomics: the streamed and the all-resident
/// forward give the same bits when they share the gemm_runner. Example code (examples/flux/).

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddo/adapter/lora_delta.hpp"
#include "ddo/core/error.hpp"
#include "ddo/model/weight_table.hpp"
#include "flux/flux_forward.hpp"
#include "flux/flux_kernels.hpp"

namespace flux::gpu {

/// @brief Throws ddo::cuda_error naming a failed cuBLASLt call.
inline void check_lt(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const char* name = cublasLtGetStatusName(status);
  throw ddo::cuda_error(
      static_cast<int>(status), name ? name : "cublasStatus_t", call, __FILE__, __LINE__,
      std::string("cuBLASLt call failed: ") + call + " returned " + (name ? name : "?"));
}

/// @brief Whether @p stream is being captured into a CUDA graph (or was, and the capture failed).
inline bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  DDO_CUDA_TRY(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

/// @brief A step captured from a stream and instantiated (ddo-flux --graph), destroyed with its
/// owner; exec() is what the transport (or offloader.launch_graph) launches.
class captured_graph {
 public:
  /// Owns @p graph from here (destroyed with this object, instantiated or not).
  explicit captured_graph(cudaGraph_t graph) noexcept : graph_(graph) {}
  captured_graph(captured_graph&& o) noexcept
      : graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)) {}
  captured_graph& operator=(captured_graph&&) = delete;
  captured_graph(const captured_graph&) = delete;
  captured_graph& operator=(const captured_graph&) = delete;
  ~captured_graph() {
    if (exec_ != nullptr) DDO_CUDA_TRY_NOTHROW(cudaGraphExecDestroy(exec_));
    if (graph_ != nullptr) DDO_CUDA_TRY_NOTHROW(cudaGraphDestroy(graph_));
  }
  void instantiate() { DDO_CUDA_TRY(cudaGraphInstantiate(&exec_, graph_, 0)); }
  [[nodiscard]] const cudaGraphExec_t& exec() const noexcept { return exec_; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

/// @brief How flux::graph_forward captures a step on a CUDA stream (ddo's linear and VMM
/// transports' views). Thread-local capture mode: what this thread must not do inside the
/// capture is refused (an allocation, a sync), while ddo's own threads (the VMM route's binder,
/// which may still be mapping the eager loop's last prefetches) are not bound by it, as they
/// would be by a global-mode capture. abort ends a capture that failed part-way, so no stream
/// is left capturing.
struct cuda_capture {
  using graph = captured_graph;
  template <class View>
  void begin(View v) {
    DDO_CUDA_TRY(cudaStreamBeginCapture(v.handle, cudaStreamCaptureModeThreadLocal));
  }
  template <class View>
  [[nodiscard]] graph end(View v) {
    cudaGraph_t g = nullptr;
    DDO_CUDA_TRY(cudaStreamEndCapture(v.handle, &g));
    captured_graph held(g);
    held.instantiate();
    return held;
  }
  template <class View>
  void abort(View v) noexcept {
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(v.handle, &g) == cudaSuccess && g != nullptr) cudaGraphDestroy(g);
    (void)cudaGetLastError();  // an invalidated capture's error is this call's, not sticky
  }
  [[nodiscard]] static const cudaGraphExec_t& exec(const graph& g) noexcept { return g.exec(); }
};

/// @brief A device allocation of @p T, freed with its owner.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t count) : count_(count) {
    if (count > 0) DDO_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  device_buffer(device_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(count_, o.count_);
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() {
    if (data_ != nullptr) DDO_CUDA_TRY_NOTHROW(cudaFree(data_));
  }
  [[nodiscard]] T* get() const noexcept { return data_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return count_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

/// @brief y[rows, out] = x[rows, in] W^T with W the published [out, in] bf16 weight, x bf16 and
/// y float or bf16 (rounded from the float accumulator), each with its own row stride:
/// cuBLASLt, one algorithm per shape (see the file comment), one workspace. Shared by every
/// forward that must give the same bits.
class gemm_runner {
 public:
  static constexpr std::uint64_t workspace_bytes = 32ull << 20;
  static constexpr std::uint32_t alignment = 16;

  gemm_runner() : workspace_(workspace_bytes) {
    check_lt(cublasLtCreate(&handle_), "cublasLtCreate");
  }
  gemm_runner(const gemm_runner&) = delete;
  gemm_runner& operator=(const gemm_runner&) = delete;
  ~gemm_runner() {
    for (auto& [k, p] : plans_) destroy(p);
    if (handle_ != nullptr) cublasLtDestroy(handle_);
  }

  /// @brief Runs the GEMM; with @p bias (bf16 when @p bias_bf16, else float) the bias is added
  /// in cuBLASLt's epilogue where it takes that bias type for the shape. @return whether it did
  /// (else the caller adds it); decided at the shape's first call, the same for every later one.
  /// @p y is float, or bf16 when @p y_bf16.
  bool run(const void* w, const std::uint16_t* x, int x_stride, void* y, bool y_bf16, int y_stride,
           int rows, int out, int in, const void* bias, bool bias_bf16, cudaStream_t stream) {
    for (const void* p : {w, static_cast<const void*>(x), static_cast<const void*>(y)})
      DDO_EXPECTS(reinterpret_cast<std::uintptr_t>(p) % alignment == 0,
                  "flux gpu: a GEMM operand is not 16-byte aligned");
    const key k{rows, out, in, x_stride, y_stride, bias == nullptr ? 0 : bias_bf16 ? 2 : 1, y_bf16};
    const float one = 1.f, zero = 0.f;
    const auto matmul = [&](const plan& p) {
      if (p.bias)
        check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias),
                 "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
      return cublasLtMatmul(handle_, p.desc, &one, w, p.a, x, p.b, &zero, y, p.d, y, p.d, &p.algo,
                            workspace_.get(), workspace_bytes, stream);
    };
    if (const auto it = plans_.find(k); it != plans_.end()) {
      check_lt(matmul(it->second), "cublasLtMatmul");
      return it->second.bias;
    }
    // First call of this shape: the bias epilogue if cuBLASLt has it for this bias type, else
    // a plain GEMM (the caller adds the bias). Decided by running it, which a captured step
    // must not contain (a refused epilogue, cuBLASLt's first loads): shapes are chosen eagerly.
    if (capturing(stream))
      throw ddo::usage_error("flux gpu: a GEMM shape (" + std::to_string(k.rows) + " x " +
                             std::to_string(k.in) + " by [" + std::to_string(k.out) + ", " +
                             std::to_string(k.in) +
                             "]) first seen inside a CUDA graph capture; run one eager forward "
                             "before capturing (it chooses every shape's cuBLASLt algorithm)");
    if (k.bias != 0) {
      plan p = make_plan(k, true);
      if (p.desc != nullptr) {
        const cublasStatus_t status = matmul(p);
        if (status == CUBLAS_STATUS_SUCCESS) {
          plans_.emplace(k, p);
          return true;
        }
        destroy(p);
        if (status != CUBLAS_STATUS_NOT_SUPPORTED) check_lt(status, "cublasLtMatmul");
      }
    }
    plan p = make_plan(k, false);
    if (p.desc == nullptr)
      throw ddo::usage_error("flux gpu: cuBLASLt has no algorithm for a bf16 GEMM of " +
                             std::to_string(k.rows) + " x " + std::to_string(k.in) + " by [" +
                             std::to_string(k.out) + ", " + std::to_string(k.in) + "]");
    plans_.emplace(k, p);
    check_lt(matmul(p), "cublasLtMatmul");
    return false;
  }

  /// @brief Shapes whose bias is added in the GEMM's epilogue, of those with a bias.
  [[nodiscard]] std::pair<std::size_t, std::size_t> epilogue_bias_shapes() const noexcept {
    std::size_t with = 0, fused = 0;
    for (const auto& [k, p] : plans_) {
      with += k.bias != 0;
      fused += p.bias;
    }
    return {fused, with};
  }

  /// @brief GEMM shapes seen so far (each with its one algorithm).
  [[nodiscard]] std::size_t shapes() const noexcept { return plans_.size(); }
  [[nodiscard]] std::uint64_t device_bytes() const noexcept { return workspace_.bytes(); }

 private:
  struct key {
    int rows, out, in, x_stride, y_stride;
    int bias;  // 0: none, 1: float, 2: bf16
    bool y_bf16;
    auto operator<=>(const key&) const = default;
  };
  struct plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool bias = false;  // added in the epilogue
  };

  static void destroy(plan& p) noexcept {
    if (p.a != nullptr) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b != nullptr) cublasLtMatrixLayoutDestroy(p.b);
    if (p.d != nullptr) cublasLtMatrixLayoutDestroy(p.d);
    if (p.desc != nullptr) cublasLtMatmulDescDestroy(p.desc);
    p = plan{};
  }

  /// The descriptor, layouts and the heuristic's first algorithm for @p k, with the bias
  /// epilogue when @p with_bias; desc null when the heuristic has none.
  plan make_plan(const key& k, bool with_bias) {
    plan p;
    check_lt(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
             "cublasLtMatmulDescCreate");
    const cublasOperation_t transpose = CUBLAS_OP_T;
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                            sizeof transpose),
             "cublasLtMatmulDescSetAttribute(TRANSA)");
    if (with_bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t type = k.bias == 2 ? CUDA_R_16BF : CUDA_R_32F;
      check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof epilogue),
               "cublasLtMatmulDescSetAttribute(EPILOGUE)");
      check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type,
                                              sizeof type),
               "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
      p.bias = true;
    }
    // Column-major view: W [out, in] row-major is in x out (op T gives out x in), x^T is
    // in x rows, y^T out x rows.
    check_lt(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, static_cast<std::uint64_t>(k.in),
                                        static_cast<std::uint64_t>(k.out), k.in),
             "cublasLtMatrixLayoutCreate(A)");
    check_lt(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, static_cast<std::uint64_t>(k.in),
                                        static_cast<std::uint64_t>(k.rows), k.x_stride),
             "cublasLtMatrixLayoutCreate(B)");
    check_lt(cublasLtMatrixLayoutCreate(&p.d, k.y_bf16 ? CUDA_R_16BF : CUDA_R_32F,
                                        static_cast<std::uint64_t>(k.out),
                                        static_cast<std::uint64_t>(k.rows), k.y_stride),
             "cublasLtMatrixLayoutCreate(D)");
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const std::uint64_t ws = workspace_bytes;
    const std::uint32_t no_split_k = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                         &no_split_k, sizeof no_split_k);
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof alignment);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d,
                                                                 p.d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      destroy(p);
      return p;
    }
    p.algo = result.algo;
    return p;
  }

  cublasLtHandle_t handle_ = nullptr;
  device_buffer<std::byte> workspace_;
  std::map<key, plan> plans_;
};

/// @brief Pinned host memory of @p T (the uploads and the velocity's way back).
template <class T>
class pinned_buffer {
 public:
  explicit pinned_buffer(std::size_t count) : count_(count) {
    DDO_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer() {
    if (data_ != nullptr) DDO_CUDA_TRY_NOTHROW(cudaFreeHost(data_));
  }
  [[nodiscard]] T* get() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }

 private:
  T* data_ = nullptr;
  std::size_t count_;
};

/// @brief Where a forward's GPU time goes, measured with CUDA events around each GEMM and each
/// attention call of one step (profile mode; events add a little launch overhead, so a profiled
/// step is not a timed one): GEMM time and FLOPs (2 rows out in, from the shapes), attention time
/// and FLOPs (4 n^2 width: q k^T and p v), and the step from its first to its last event; what
/// is neither is the rest.
class step_profile {
 public:
  enum class kind { gemm, attention };
  step_profile() = default;
  step_profile(const step_profile&) = delete;
  step_profile& operator=(const step_profile&) = delete;
  ~step_profile() { clear(); }

  void begin(cudaStream_t s) { start_ = record(s); }
  void mark(kind k, double flops, cudaEvent_t before, cudaEvent_t after) {
    spans_.push_back({k, flops, before, after});
  }
  [[nodiscard]] cudaEvent_t record(cudaStream_t s) {
    cudaEvent_t e = nullptr;
    DDO_CUDA_TRY(cudaEventCreate(&e));
    DDO_CUDA_TRY(cudaEventRecord(e, s));
    events_.push_back(e);
    return e;
  }
  void end(cudaStream_t s) { end_ = record(s); }

  struct totals {
    double step_ms = 0, gemm_ms = 0, gemm_flops = 0, attention_ms = 0, attention_flops = 0;
  };
  /// @brief The sums, once the stream has passed end() (waits for it).
  [[nodiscard]] totals sum() const {
    DDO_CUDA_TRY(cudaEventSynchronize(end_));
    totals t;
    float ms = 0;
    DDO_CUDA_TRY(cudaEventElapsedTime(&ms, start_, end_));
    t.step_ms = ms;
    for (const auto& s : spans_) {
      DDO_CUDA_TRY(cudaEventElapsedTime(&ms, s.before, s.after));
      (s.what == kind::gemm ? t.gemm_ms : t.attention_ms) += ms;
      (s.what == kind::gemm ? t.gemm_flops : t.attention_flops) += s.flops;
    }
    return t;
  }
  void clear() noexcept {
    for (auto e : events_) cudaEventDestroy(e);
    events_.clear();
    spans_.clear();
  }

 private:
  struct span {
    kind what;
    double flops;
    cudaEvent_t before, after;
  };
  std::vector<cudaEvent_t> events_;
  std::vector<span> spans_;
  cudaEvent_t start_ = nullptr, end_ = nullptr;
};

/// @brief One GPU forward's activations and its stages (the twin of flux::forward). Every
/// stage only enqueues work on the bound stream; velocity() reads the head's output after the
/// caller synchronized that stream.
class device_forward {
 public:
  device_forward(const config& c, std::size_t image_tokens, std::size_t text_tokens,
                 gemm_runner& gemms)
      : c_(c),
        ni_(image_tokens),
        nt_(text_tokens),
        n_(image_tokens + text_tokens),
        h_(static_cast<std::size_t>(c.hidden())),
        m_(static_cast<std::size_t>(c.mlp())),
        gemms_(gemms),
        x_(n_ * h_),
        out_(n_ * h_),
        q_(n_ * h_),
        k_(n_ * h_),
        v_(n_ * h_),
        normed_(n_ * h_),
        b16_(n_ * std::max({h_ + m_, static_cast<std::size_t>(c.text_dim),
                            static_cast<std::size_t>(c.in_channels), std::size_t{256},
                            static_cast<std::size_t>(c.pooled_dim)})),
        silu_temb16_(h_),
        latents_(ni_ * static_cast<std::size_t>(c.in_channels)),
        text_(nt_ * static_cast<std::size_t>(c.text_dim)),
        pooled_(static_cast<std::size_t>(c.pooled_dim)),
        cos_(n_ * static_cast<std::size_t>(c.head_dim)),
        sin_(n_ * static_cast<std::size_t>(c.head_dim)),
        vec_(16 * h_ + 256),
        velocity_(ni_ * static_cast<std::size_t>(c.in_channels)),
        scalars_(2),
        latents_host_(ni_ * static_cast<std::size_t>(c.in_channels)),
        velocity_host_(ni_ * static_cast<std::size_t>(c.in_channels)),
        scalars_host_(2) {
    validate(c_);
    DDO_EXPECTS(c.head_dim == 64 || c.head_dim == 128,
                "flux gpu: head_dim must be 64 or 128 (the attention kernel's), got " +
                    std::to_string(c.head_dim));
  }

  /// @brief The stream the stages enqueue on (the compute stream ddo's leases are acquired for).
  void bind(cudaStream_t stream) noexcept { stream_ = stream; }

  /// @brief Times every GEMM and attention call into @p p (nullptr: stop).
  void profile(step_profile* p) noexcept { profile_ = p; }

  /// @brief Waits for everything enqueued on the bound stream.
  void synchronize() const { DDO_CUDA_TRY(cudaStreamSynchronize(stream_)); }

  /// @brief Device bytes of the activations (the GEMMs' workspace is the gemm_runner's).
  [[nodiscard]] std::uint64_t device_bytes() const noexcept {
    std::uint64_t total = 0;
    for (const auto* b :
         {&x_, &out_, &latents_, &text_, &pooled_, &cos_, &sin_, &vec_, &velocity_, &scalars_})
      total += b->bytes();
    for (const auto* b : {&q_, &k_, &v_, &normed_, &b16_, &silu_temb16_}) total += b->bytes();
    return total;
  }

  /// @brief Puts a step's inputs where embed() reads them on the device, enqueued on the bound
  /// stream: the latents, the timestep and the guidance (through pinned buffers; the caller
  /// synchronized the stream since the last step read them), and at the first call the text,
  /// pooled vector and RoPE tables, which do not change from step to step (then a host sync:
  /// the host vectors are temporaries). Host work and a sync, so never inside a capture: a
  /// captured step (--graph, flux::graph_forward) is staged by this call before each launch.
  void stage_inputs(const inputs& in, float timestep) {
    DDO_EXPECTS(in.latents.size() == latents_host_.size() &&
                    in.text.size() == nt_ * static_cast<std::size_t>(c_.text_dim) &&
                    in.pooled.size() == static_cast<std::size_t>(c_.pooled_dim),
                "flux: the inputs do not match the model's widths");
    if (!uploaded_) {
      std::vector<float> cos, sin;
      rope_tables(c_, in.txt_ids, in.img_ids, cos, sin);
      DDO_EXPECTS(cos.size() == n_ * static_cast<std::size_t>(c_.head_dim),
                  "flux: position ids must be tokens x 3");
      upload(text_.get(), in.text);
      upload(pooled_.get(), in.pooled);
      upload(cos_.get(), cos);
      upload(sin_.get(), sin);
      DDO_CUDA_TRY(cudaStreamSynchronize(stream_));
      uploaded_ = true;
    }
    std::memcpy(latents_host_.get(), in.latents.data(), in.latents.size() * 4);
    scalars_host_.get()[0] = timestep;
    scalars_host_.get()[1] = in.guidance;
    DDO_CUDA_TRY(cudaMemcpyAsync(latents_.get(), latents_host_.get(), in.latents.size() * 4,
                                 cudaMemcpyHostToDevice, stream_));
    DDO_CUDA_TRY(cudaMemcpyAsync(scalars_.get(), scalars_host_.get(), scalars_.bytes(),
                                 cudaMemcpyHostToDevice, stream_));
  }

  /// @brief The embedding stage: stages @p in and @p timestep (stage_inputs), then reads them on
  /// the device. Inside a capture it stages nothing (host work a replay would not repeat): the
  /// captured kernels read what stage_inputs put on the device before each launch.
  void embed(const weight_lookup& w, const inputs& in, float timestep) {
    if (!capturing(stream_)) stage_inputs(in, timestep);
    const int h = hidden();
    lin(w, "x_embedder", latents_.get(), c_.in_channels, static_cast<int>(ni_), c_.in_channels,
        x_.get() + nt_ * h_, h, h);
    lin(w, "context_embedder", text_.get(), c_.text_dim, static_cast<int>(nt_), c_.text_dim,
        x_.get(), h, h);
    float* temb = vec(0);
    float* silu_temb = vec(1);
    float* a = vec(2);
    float* b = vec(3);
    float* proj = vec(16);  // 256 floats after the 16 h-wide vectors
    timestep_embedding(w, "time_text_embed.timestep_embedder", scalars_.get(), proj, a, temb);
    if (c_.guidance) {
      timestep_embedding(w, "time_text_embed.guidance_embedder", scalars_.get() + 1, proj, a, b);
      add(temb, b, 1, h, h);
    }
    lin(w, "time_text_embed.text_embedder.linear_1", pooled_.get(), c_.pooled_dim, 1, c_.pooled_dim,
        a, h, h);
    gpu::silu(a, h, stream_);
    lin(w, "time_text_embed.text_embedder.linear_2", a, h, 1, h, b, h, h);
    add(temb, b, 1, h, h);
    DDO_CUDA_TRY(cudaMemcpyAsync(silu_temb, temb, h_ * 4, cudaMemcpyDeviceToDevice, stream_));
    gpu::silu(silu_temb, h, stream_);
    // Rounded once here, as lin() would round it for each modulation linear.
    gpu::to_bf16(silu_temb, 1, h, h, silu_temb16_.get(), h, stream_);
  }

  void double_block(int block, const weight_lookup& w) {
    const std::string p = "transformer_blocks." + std::to_string(block) + ".";
    const int h = hidden(), ni = static_cast<int>(ni_), nt = static_cast<int>(nt_);
    float* txt = x_.get();
    float* img = x_.get() + nt_ * h_;
    float* mod = vec(4);    // 6 h: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
    float* cmod = vec(10);  // 6 h, the text stream's
    lin16(w, p + "norm1.linear", silu_temb16_.get(), h, 1, h, mod, 6 * h, 6 * h);
    lin16(w, p + "norm1_context.linear", silu_temb16_.get(), h, 1, h, cmod, 6 * h, 6 * h);
    const auto chunk = [&](float* m, int i) { return m + static_cast<std::size_t>(i) * h_; };
    std::uint16_t* ntxt = normed_.get();
    std::uint16_t* nimg = normed_.get() + nt_ * h_;
    gpu::layer_norm_modulate_bf16(txt, nt, h, chunk(cmod, 0), chunk(cmod, 1), ntxt, h, stream_);
    gpu::layer_norm_modulate_bf16(img, ni, h, chunk(mod, 0), chunk(mod, 1), nimg, h, stream_);
    const auto img_rows = [&](auto* buffer) { return buffer + nt_ * h_; };
    lin16(w, p + "attn.to_q", nimg, h, ni, h, img_rows(q_.get()), h, h);
    lin16(w, p + "attn.to_k", nimg, h, ni, h, img_rows(k_.get()), h, h);
    lin16(w, p + "attn.to_v", nimg, h, ni, h, img_rows(v_.get()), h, h);
    lin16(w, p + "attn.add_q_proj", ntxt, h, nt, h, q_.get(), h, h);
    lin16(w, p + "attn.add_k_proj", ntxt, h, nt, h, k_.get(), h, h);
    lin16(w, p + "attn.add_v_proj", ntxt, h, nt, h, v_.get(), h, h);
    rms_rope(w, p + "attn.norm_q.weight", q_.get(), nt, ni);
    rms_rope(w, p + "attn.norm_k.weight", k_.get(), nt, ni);
    rms_rope(w, p + "attn.norm_added_q.weight", q_.get(), 0, nt);
    rms_rope(w, p + "attn.norm_added_k.weight", k_.get(), 0, nt);
    joint_attention(b16_.get(), h);
    lin16(w, p + "attn.to_add_out", b16_.get(), h, nt, h, out_.get(), h, h);
    lin16(w, p + "attn.to_out.0", img_rows(b16_.get()), h, ni, h, img_rows(out_.get()), h, h);
    gpu::gated_add(img, ni, h, chunk(mod, 2), img_rows(out_.get()), h, stream_);
    gpu::gated_add(txt, nt, h, chunk(cmod, 2), out_.get(), h, stream_);
    // out_ is free again: the feed-forwards put their outputs there
    feed_forward(w, p + "ff", img, ni, chunk(mod, 3), chunk(mod, 4), chunk(mod, 5));
    feed_forward(w, p + "ff_context", txt, nt, chunk(cmod, 3), chunk(cmod, 4), chunk(cmod, 5));
  }

  void single_block(int block, const weight_lookup& w) {
    const std::string p = "single_transformer_blocks." + std::to_string(block) + ".";
    const int h = hidden(), m = static_cast<int>(m_), n = static_cast<int>(n_);
    float* mod = vec(4);  // shift, scale, gate
    lin16(w, p + "norm.linear", silu_temb16_.get(), h, 1, h, mod, 3 * h, 3 * h);
    gpu::layer_norm_modulate_bf16(x_.get(), n, h, mod, mod + h_, normed_.get(), h, stream_);
    // proj_out reads [attention | GELU(MLP)] per token, one bf16 row of h + m: the MLP's GEMM
    // writes its part (GELU in place after), attention writes the other.
    std::uint16_t* row = b16_.get();
    lin16(w, p + "proj_mlp", normed_.get(), h, n, h, row + h_, h + m, m);
    gpu::gelu_bf16(row + h_, n, m, h + m, row + h_, h + m, stream_);
    lin16(w, p + "attn.to_q", normed_.get(), h, n, h, q_.get(), h, h);
    lin16(w, p + "attn.to_k", normed_.get(), h, n, h, k_.get(), h, h);
    lin16(w, p + "attn.to_v", normed_.get(), h, n, h, v_.get(), h, h);
    rms_rope(w, p + "attn.norm_q.weight", q_.get(), 0, n);
    rms_rope(w, p + "attn.norm_k.weight", k_.get(), 0, n);
    joint_attention(row, h + m);
    lin16(w, p + "proj_out", row, h + m, n, h + m, out_.get(), h, h);
    gpu::gated_add(x_.get(), n, h, mod + 2 * h_, out_.get(), h, stream_);
  }

  /// @brief norm_out and proj_out of the image tokens; the velocity is copied back to pinned
  /// host memory on the stream (velocity() reads it once the stream is synchronized).
  void head(const weight_lookup& w) {
    const int h = hidden(), ni = static_cast<int>(ni_);
    float* emb = vec(4);  // scale, shift
    lin16(w, "norm_out.linear", silu_temb16_.get(), h, 1, h, emb, 2 * h, 2 * h);
    gpu::layer_norm_modulate_bf16(x_.get() + nt_ * h_, ni, h, emb + h_, emb, b16_.get(), h,
                                  stream_);
    lin16(w, "proj_out", b16_.get(), h, ni, h, velocity_.get(), c_.in_channels, c_.in_channels);
    DDO_CUDA_TRY(cudaMemcpyAsync(velocity_host_.get(), velocity_.get(), velocity_host_.size() * 4,
                                 cudaMemcpyDeviceToHost, stream_));
  }

  /// @brief The head's output of the last forward (after its stream was synchronized).
  [[nodiscard]] std::vector<float> velocity() const {
    return {velocity_host_.get(), velocity_host_.get() + velocity_host_.size()};
  }

  [[nodiscard]] const config& model_config() const noexcept { return c_; }

 private:
  [[nodiscard]] int hidden() const noexcept { return static_cast<int>(h_); }
  /// The i-th h-wide float vector of the small-vector buffer.
  [[nodiscard]] float* vec(int i) const noexcept {
    return vec_.get() + static_cast<std::size_t>(i) * h_;
  }

  template <class T>
  void upload(T* device, const std::vector<T>& host) {
    if (!host.empty())
      DDO_CUDA_TRY(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T),
                                   cudaMemcpyHostToDevice, stream_));
  }

  void add(float* x, const float* y, int rows, int n, int y_stride) {
    gpu::add(x, y, rows, n, y_stride, stream_);
  }

  /// The Linear called @p module over float rows: rounded to bf16 into the scratch, then lin16.
  void lin(const weight_lookup& w, const std::string& module, const float* x, int x_stride,
           int rows, int in, float* y, int y_stride, int out) {
    gpu::to_bf16(x, rows, in, x_stride, b16_.get(), in, stream_);
    lin16(w, module, b16_.get(), in, rows, in, y, y_stride, out);
  }

  /// y = x W^T + b for bf16 rows @p x (stride @p x_stride) of width @p in; @p out outputs, float
  /// or (@p Y std::uint16_t) rounded to bf16.
  template <class Y>
  void lin16(const weight_lookup& w, const std::string& module, const std::uint16_t* x,
             int x_stride, int rows, int in, Y* y, int y_stride, int out) {
    static_assert(std::is_same_v<Y, float> || std::is_same_v<Y, std::uint16_t>);
    constexpr bool y_bf16 = std::is_same_v<Y, std::uint16_t>;
    const cpu::tensor_ref weight = w(module + ".weight");
    const cpu::tensor_ref bias = w(module + ".bias");
    if (weight.type != ddo::dtype::bf16)
      throw ddo::usage_error("flux gpu: " + module + ".weight is " +
                             std::string(ddo::to_string(weight.type)) +
                             "; the GPU forward's GEMMs take bf16 weights (write the model with "
                             "--dtype bf16)");
    DDO_EXPECTS(weight.elements == static_cast<std::size_t>(in) * static_cast<std::size_t>(out) &&
                    bias.elements == static_cast<std::size_t>(out),
                "flux gpu: " + module + " has not the shape the forward expects");
    cudaEvent_t before = profile_ ? profile_->record(stream_) : nullptr;
    const bool bias_bf16 = is_bf16(bias, module + ".bias");
    const bool fused = gemms_.run(weight.data, x, x_stride, y, y_bf16, y_stride, rows, out, in,
                                  bias.data, bias_bf16, stream_);
    if (profile_)
      profile_->mark(step_profile::kind::gemm, 2.0 * rows * out * in, before,
                     profile_->record(stream_));
    if (!fused) gpu::add_bias(y, y_bf16, rows, out, y_stride, bias.data, bias_bf16, stream_);
  }

  static bool is_bf16(const cpu::tensor_ref& t, const std::string& name) {
    if (t.type == ddo::dtype::bf16) return true;
    if (t.type == ddo::dtype::f32) return false;
    throw ddo::usage_error("flux gpu: " + name + " is " + std::string(ddo::to_string(t.type)) +
                           "; biases and norm weights must be bf16 or f32");
  }

  /// RMSNorm by the weight @p name, then RoPE, of rows [row_begin, row_begin + rows) of the
  /// bf16 q or k.
  void rms_rope(const weight_lookup& w, const std::string& name, std::uint16_t* x, int row_begin,
                int rows) {
    const cpu::tensor_ref weight = w(name);
    DDO_EXPECTS(weight.elements == static_cast<std::size_t>(c_.head_dim),
                "flux gpu: " + name + " must have head_dim elements");
    DDO_EXPECTS(gpu::rms_rope_bf16(x, row_begin, rows, hidden(), c_.head_dim, weight.data,
                                   is_bf16(weight, name), cos_.get(), sin_.get(), stream_),
                "flux gpu: no RMSNorm + RoPE kernel for head_dim " + std::to_string(c_.head_dim));
  }

  /// TimestepEmbedding of the sinusoidal projection of *value x 1000 into @p out (h floats);
  /// @p value on the device (scalars_).
  void timestep_embedding(const weight_lookup& w, const std::string& module, const float* value,
                          float* proj, float* scratch, float* out) {
    const int h = hidden();
    gpu::timestep_projection(value, proj, stream_);
    lin(w, module + ".linear_1", proj, 256, 1, 256, scratch, h, h);
    gpu::silu(scratch, h, stream_);
    lin(w, module + ".linear_2", scratch, h, 1, h, out, h, h);
  }

  /// Attention over q_, k_, v_ (every token), written as bf16 into @p out (row stride
  /// @p out_stride): the next GEMM's operand.
  void joint_attention(std::uint16_t* out, int out_stride) {
    const int h = hidden(), n = static_cast<int>(n_), d = c_.head_dim;
    cudaEvent_t before = profile_ ? profile_->record(stream_) : nullptr;
    const bool launched =
        gpu::attention_bf16(q_.get(), k_.get(), v_.get(), out, true, out_stride, n, h, d, stream_);
    DDO_EXPECTS(launched, "flux gpu: no attention kernel for head_dim " + std::to_string(d));
    if (profile_)
      profile_->mark(step_profile::kind::attention, 4.0 * n * double(n) * h, before,
                     profile_->record(stream_));
  }

  /// x += gate * ff(LayerNorm(x) * (1 + scale) + shift) (flux::forward's feed_forward): the
  /// hidden layer in bf16 in b16_ (GELU in place), the output through out_.
  void feed_forward(const weight_lookup& w, const std::string& module, float* x, int rows,
                    const float* shift, const float* scale, const float* gate) {
    const int h = hidden(), m = static_cast<int>(m_);
    gpu::layer_norm_modulate_bf16(x, rows, h, shift, scale, normed_.get(), h, stream_);
    lin16(w, module + ".net.0.proj", normed_.get(), h, rows, h, b16_.get(), m, m);
    gpu::gelu_bf16(b16_.get(), rows, m, m, b16_.get(), m, stream_);
    lin16(w, module + ".net.2", b16_.get(), m, rows, m, out_.get(), h, h);
    gpu::gated_add(x, rows, h, gate, out_.get(), h, stream_);
  }

  config c_;
  std::size_t ni_, nt_, n_, h_, m_;
  gemm_runner& gemms_;
  cudaStream_t stream_ = nullptr;
  step_profile* profile_ = nullptr;
  bool uploaded_ = false;
  device_buffer<float> x_, out_;  // the residual stream; a GEMM's float output before its gated add
  // bf16: q, k, v (RMSNorm + RoPE in place); the normed rows every block's first GEMMs read;
  // b16_ the rows the second GEMMs read (attention's output, GELU(MLP)) and the small GEMMs'
  // rounded inputs
  device_buffer<std::uint16_t> q_, k_, v_, normed_, b16_;
  // silu(temb) rounded to bf16 once a step: every modulation linear's input (57 a step).
  device_buffer<std::uint16_t> silu_temb16_;
  device_buffer<float> latents_, text_, pooled_, cos_, sin_, vec_, velocity_;
  device_buffer<float> scalars_;  // the step's timestep and the guidance, read by embed's kernels
  pinned_buffer<float> latents_host_, velocity_host_, scalars_host_;
};

/// @brief Every weight of @p host copied once to the device: the GPU's all-resident reference
/// (no ddo), read through the same lookup by name.
class device_weights {
 public:
  explicit device_weights(const std::unordered_map<std::string, cpu::tensor_ref>& host) {
    for (const auto& [name, ref] : host) {
      const std::size_t bytes = ref.elements * ddo::size_of(ref.type);
      device_buffer<std::byte> buffer(bytes);
      DDO_CUDA_TRY(cudaMemcpy(buffer.get(), ref.data, bytes, cudaMemcpyHostToDevice));
      refs_[name] = {buffer.get(), ref.type, ref.elements};
      index_[name] = buffers_.size();
      buffers_.push_back(std::move(buffer));
    }
  }
  [[nodiscard]] weight_lookup lookup() const { return lookup_in(refs_); }

  /// @brief Merges @p adapters (each with its scale, in attach order) into the device copies
  /// with @p launch (ddo's merge kernel), all terms of a weight in one job as the offloader
  /// issues them: --check's all-resident reference with --lora, bit for bit what the streamed
  /// weights get. (The host merge of the same arithmetic, host_weights::merge, runs on one core:
  /// minutes over FLUX.1-dev's 22 GiB at rank 64; it stays the CPU path's reference.) The
  /// factors go up as f32, the host's copy: each conversion the device makes is exact.
  void merge(const std::vector<std::pair<const ddo::lora_adapter*, float>>& adapters,
             const ddo::weight_table& table, ddo::lora_merge_launcher launch) {
    for (std::size_t w = 0; w < table.size(); ++w) {
      const auto& info = table[w];
      ddo::lora_merge_job job;
      std::vector<device_buffer<float>> factors;
      for (const auto& [a, scale] : adapters) {
        const auto* d = a->find(w);
        if (d == nullptr) continue;
        if (job.term_count == ddo::max_lora_terms)
          throw ddo::usage_error("--lora: more than " + std::to_string(ddo::max_lora_terms) +
                                 " adapters change " + info.name);
        job.terms[job.term_count] = d->term(scale);
        for (const auto* host : {&d->down, &d->up}) {
          factors.emplace_back(host->size());
          DDO_CUDA_TRY(cudaMemcpy(factors.back().get(), host->data(), host->size() * 4,
                                  cudaMemcpyHostToDevice));
        }
        job.terms[job.term_count].down = factors[factors.size() - 2].get();
        job.terms[job.term_count].up = factors.back().get();
        ++job.term_count;
      }
      if (job.term_count == 0) continue;
      job.weight = buffers_[index_.at(info.name)].get();
      job.type = info.type;
      job.rows = info.shape[0];
      job.cols = static_cast<std::int64_t>(info.bytes / ddo::size_of(info.type)) / job.rows;
      launch(job, nullptr);
      DDO_CUDA_TRY(cudaDeviceSynchronize());  // before the factors' buffers go
    }
  }

 private:
  std::unordered_map<std::string, std::size_t> index_;  // name -> buffers_
  std::vector<device_buffer<std::byte>> buffers_;
  std::unordered_map<std::string, cpu::tensor_ref> refs_;
};

}  // namespace flux::gpu
