// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The streaming benchmark's results and how they are reported: the ratio to the bound,
/// the Markdown table and the JSON file (with the "summary" rows tools/gpu-check prints).
///
/// Kept apart from the CUDA code so the arithmetic and the output format are tested on machines
/// without a GPU (tests/runner/streaming_report_test.cpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ddo {
inline namespace v0 {
namespace bench {

/// @brief Bandwidths measured in the same run, bytes per second.
struct bandwidths {
  double pinned_h2d = 0;        ///< B: large cudaMemcpyAsync from pinned memory
  double pageable_h2d = 0;      ///< a direct cudaMemcpyAsync from pageable memory
  double pageable_staging = 0;  ///< pageable → pinned (CPU memcpy) → device: the best below
  /// (copy threads, bytes/s) of the hand-written double-buffered staging loop.
  std::vector<std::pair<unsigned, double>> staging_by_threads;
};

/// @brief What a variant's bound is made of.
enum class bound_source {
  pinned,   ///< max(C, W / B)
  staging,  ///< max(C, W / pageable staging throughput)
};

/// @brief One variant at one token count.
struct variant_result {
  std::string name;
  std::string description;
  std::vector<double> step_ms;       ///< measured steps (after warm-up)
  double ms = 0;                     ///< median of step_ms
  std::uint64_t streamed_bytes = 0;  ///< W: bytes streamed per step
  std::uint64_t resident_bytes = 0;
  std::uint64_t peak_device_bytes = 0;  ///< peak above the start, cudaMemGetInfo sampled
  std::uint64_t pinned_host_bytes = 0;
  bound_source source = bound_source::pinned;
  double bound_ms = 0;
  double ratio = 0;
  std::string bound_kind;  ///< "compute", "pinned copy", "pageable staging"
  double target = 0;       ///< ratio target, 0 = none
  std::string note;
  /// @brief Whether the variant met its target (true when it has none).
  [[nodiscard]] bool pass() const noexcept { return target <= 0 || ratio <= target; }
  /// @brief Streamed bytes per second of step time (0 when nothing is streamed).
  [[nodiscard]] double effective_bytes_per_second() const noexcept {
    return streamed_bytes && ms > 0 ? static_cast<double>(streamed_bytes) / (ms * 1e-3) : 0.0;
  }
};

/// @brief All variants at one token count; compute_ms is C (the resident variant's median).
struct token_run {
  std::int64_t tokens = 0;
  double compute_ms = 0;
  std::vector<variant_result> variants;
};

/// @brief What the report says about the run as a whole.
struct report_context {
  std::string device;
  std::string command;
  int blocks = 0;
  std::int64_t hidden = 0;
  std::int64_t mlp = 0;
  std::size_t tensors_per_block = 0;
  std::uint64_t weight_bytes = 0;
  int steps = 0;
  int warmup = 0;
  bandwidths bw;
};

/// @brief Median (mean of the middle two for an even count); 0 for none.
[[nodiscard]] inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// @brief Fills ms, bound_ms, bound_kind and ratio: bound = max(C, W / bandwidth), the
/// bandwidth being B or the staging throughput per the variant's bound source.
inline void finish(variant_result& r, double compute_ms, const bandwidths& bw) {
  r.ms = median(r.step_ms);
  const double rate = r.source == bound_source::staging ? bw.pageable_staging : bw.pinned_h2d;
  const double copy_ms = rate > 0 ? static_cast<double>(r.streamed_bytes) / rate * 1e3 : 0.0;
  r.bound_ms = std::max(compute_ms, copy_ms);
  r.bound_kind = r.streamed_bytes == 0 || compute_ms >= copy_ms ? "compute"
                 : r.source == bound_source::staging          ? "pageable staging"
                                                              : "pinned copy";
  r.ratio = r.bound_ms > 0 ? r.ms / r.bound_ms : 0;
}

namespace detail {
inline std::string fixed(double value, int digits) {
  if (!std::isfinite(value)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}
inline std::string gb(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / 1e9, 2); }
/// A JSON number, or null where the value is not finite (JSON has no nan/inf).
inline std::string num(double value) {
  if (!std::isfinite(value)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  return buf;
}
inline std::string str(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}
}  // namespace detail

/// @brief The Markdown report: the run's context, then one table per token count.
[[nodiscard]] inline std::string markdown(const report_context& ctx,
                                          const std::vector<token_run>& runs) {
  using detail::fixed;
  using detail::gb;
  std::ostringstream out;
  out << "\n## streaming_bench on " << ctx.device << "\n\n"
      << "model: " << ctx.blocks << " blocks, hidden " << ctx.hidden << ", MLP " << ctx.mlp
      << ", bf16, " << ctx.tensors_per_block << " tensors/block, " << gb(ctx.weight_bytes)
      << " GB of weights\n"
      << "measured in this run: pinned H2D B = " << fixed(ctx.bw.pinned_h2d / 1e9, 1)
      << " GB/s, pageable H2D " << fixed(ctx.bw.pageable_h2d / 1e9, 1)
      << " GB/s, pageable staging " << fixed(ctx.bw.pageable_staging / 1e9, 1) << " GB/s";
  if (!ctx.bw.staging_by_threads.empty()) {
    out << " (best of";
    for (const auto& [threads, rate] : ctx.bw.staging_by_threads)
      out << " " << threads << "t " << fixed(rate / 1e9, 1);
    out << ")";
  }
  out << "\n"
      << "steps: median of " << ctx.steps << " after " << ctx.warmup << " warm-up\n"
      << "command: " << ctx.command << "\n";
  for (const auto& run : runs) {
    const double copy_ms =
        ctx.bw.pinned_h2d > 0 ? static_cast<double>(ctx.weight_bytes) / ctx.bw.pinned_h2d * 1e3 : 0;
    out << "\n### " << run.tokens << " tokens (C = " << fixed(run.compute_ms, 1)
        << " ms, all weights W/B = " << fixed(copy_ms, 1) << " ms)\n\n"
        << "| variant | ms/step | bound ms | x bound | target | GB/s | streamed GB | "
           "peak device GB | pinned host GB |\n"
        << "|---|---:|---:|---:|---|---:|---:|---:|---:|\n";
    for (const auto& v : run.variants) {
      std::string target = "-";
      if (v.target > 0) target = (v.pass() ? "<= " : "MISS > ") + fixed(v.target, 2);
      out << "| " << v.name << " | " << fixed(v.ms, 1) << " | " << fixed(v.bound_ms, 1) << " | "
          << fixed(v.ratio, 3) << " | " << target << " | "
          << fixed(v.effective_bytes_per_second() / 1e9, 1) << " | " << gb(v.streamed_bytes)
          << " | " << gb(v.peak_device_bytes) << " | " << gb(v.pinned_host_bytes) << " |\n";
    }
    for (const auto& v : run.variants)
      if (!v.note.empty()) out << "\n- " << v.name << ": " << v.note;
    out << "\n";
  }
  return out.str();
}

/// @brief The JSON report: context, bandwidths, every variant of every run with its steps, and a
/// "summary" list of {metric, value, unit, target?, pass?} rows for tools/gpu-check.
[[nodiscard]] inline std::string json(const report_context& ctx,
                                      const std::vector<token_run>& runs) {
  using detail::num;
  using detail::str;
  std::ostringstream out;
  out << "{\n  \"bench\": \"streaming\",\n  \"device\": " << str(ctx.device)
      << ",\n  \"command\": " << str(ctx.command) << ",\n  \"model\": {\"blocks\": " << ctx.blocks
      << ", \"hidden\": " << ctx.hidden << ", \"mlp\": " << ctx.mlp
      << ", \"dtype\": \"bf16\", \"tensors_per_block\": " << ctx.tensors_per_block
      << ", \"weight_bytes\": " << ctx.weight_bytes << "},\n  \"steps\": " << ctx.steps
      << ", \"warmup\": " << ctx.warmup << ",\n  \"bandwidth_gbps\": {\"pinned_h2d\": "
      << num(ctx.bw.pinned_h2d / 1e9) << ", \"pageable_h2d\": " << num(ctx.bw.pageable_h2d / 1e9)
      << ", \"pageable_staging\": " << num(ctx.bw.pageable_staging / 1e9)
      << ", \"pageable_staging_by_threads\": {";
  for (std::size_t i = 0; i < ctx.bw.staging_by_threads.size(); ++i)
    out << (i ? ", " : "") << "\"" << ctx.bw.staging_by_threads[i].first
        << "\": " << num(ctx.bw.staging_by_threads[i].second / 1e9);
  out << "}},\n  \"runs\": [";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    out << (i ? "," : "") << "\n    {\"tokens\": " << run.tokens
        << ", \"compute_ms\": " << num(run.compute_ms) << ", \"variants\": [";
    for (std::size_t j = 0; j < run.variants.size(); ++j) {
      const auto& v = run.variants[j];
      out << (j ? "," : "") << "\n      {\"name\": " << str(v.name)
          << ", \"description\": " << str(v.description) << ", \"ms_per_step\": " << num(v.ms)
          << ", \"bound_ms\": " << num(v.bound_ms) << ", \"ratio\": " << num(v.ratio)
          << ", \"bound_kind\": " << str(v.bound_kind) << ", \"target\": " << num(v.target)
          << ", \"pass\": " << (v.pass() ? "true" : "false")
          << ", \"streamed_bytes\": " << v.streamed_bytes
          << ", \"resident_bytes\": " << v.resident_bytes
          << ", \"effective_gbps\": " << num(v.effective_bytes_per_second() / 1e9)
          << ", \"peak_device_bytes\": " << v.peak_device_bytes
          << ", \"pinned_host_bytes\": " << v.pinned_host_bytes << ", \"note\": " << str(v.note)
          << ", \"steps_ms\": [";
      for (std::size_t s = 0; s < v.step_ms.size(); ++s) out << (s ? ", " : "") << num(v.step_ms[s]);
      out << "]}";
    }
    out << "\n    ]}";
  }
  out << "\n  ],\n  \"summary\": [\n    {\"metric\": \"pinned H2D bandwidth\", \"value\": "
      << num(ctx.bw.pinned_h2d / 1e9) << ", \"unit\": \"GB/s\"},\n"
      << "    {\"metric\": \"pageable staging\", \"value\": "
      << num(ctx.bw.pageable_staging / 1e9) << ", \"unit\": \"GB/s\"}";
  for (const auto& run : runs) {
    for (const auto& v : run.variants) {
      out << ",\n    {\"metric\": " << str(std::to_string(run.tokens) + " tok " + v.name);
      if (v.name == "resident") {
        out << ", \"value\": " << num(v.ms) << ", \"unit\": \"ms (C)\"}";
        continue;
      }
      out << ", \"value\": " << num(v.ratio) << ", \"unit\": \"x bound\"";
      if (v.target > 0)
        out << ", \"target\": " << str("<= " + detail::fixed(v.target, 2))
            << ", \"pass\": " << (v.pass() ? "true" : "false");
      out << "}";
    }
  }
  out << "\n  ]\n}\n";
  return out.str();
}

}  // namespace bench
}  // namespace v0
}  // namespace ddo
