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

#include "ddo/core/format_bytes.hpp"
#include "ddo/core/json_writer.hpp"
#include "runner/step_timing.hpp"

namespace ddo {
inline namespace v0 {
namespace bench {

/// @brief A host fill (pageable memory → pinned by memcpy, or a cached file → pinned by pread)
/// with `threads` threads, measured alone and while a pinned host→device copy stream runs at
/// full rate: a pageable route needs both at once, so its ceiling is the slower of the fill
/// beside the copies and the copies beside the fill — the measured reason a pageable route can
/// miss the PCIe bound (both share the host's memory bandwidth).
struct concurrent_fill {
  unsigned threads = 0;   ///< 0: not measured
  std::uint64_t region_bytes = 0;  ///< the pinned destination the fills cycle through
  double alone = 0;       ///< bytes/s of the fill with the copy engine idle
  double beside_dma = 0;  ///< bytes/s of the fill while the pinned H2D stream runs
  double dma_beside = 0;  ///< bytes/s of the pinned H2D stream meanwhile
  /// @brief The rate a pipeline of this fill and the copies can sustain: the slower of the two
  /// measured side by side, and never above @p pinned (B); 0 when not measured.
  [[nodiscard]] double ceiling(double pinned) const noexcept {
    if (threads == 0 || beside_dma <= 0) return 0;
    const double dma = dma_beside > 0 ? std::min(pinned, dma_beside) : pinned;
    return std::min(dma, beside_dma);
  }
};

/// @brief Bandwidths measured in the same run, bytes per second.
struct bandwidths {
  double pinned_h2d = 0;        ///< B: large cudaMemcpyAsync from pinned memory
  double pageable_h2d = 0;      ///< a direct cudaMemcpyAsync from pageable memory
  /// pageable → pinned (CPU memcpy) → device through a hand-written double-buffered loop: the
  /// best below. Reported for reference only — every variant is judged against W / B (ddo's
  /// staging beats this loop, so a bound made of it would measure nothing).
  double pageable_staging = 0;
  /// (copy threads, bytes/s) of the hand-written double-buffered staging loop.
  std::vector<std::pair<unsigned, double>> staging_by_threads;
  /// Pageable memory → pinned memcpy, alone and beside the pinned copies (the ceiling of the
  /// variants staging pageable memory).
  concurrent_fill host_copy;
  /// Cached model file → pinned pread, alone and beside the pinned copies (the ceiling of the
  /// variants staging file pieces; measured only when a file variant runs).
  concurrent_fill file_read;
  /// The host copy again into a destination as large as the native VMM route's registered
  /// windows (--native-staging-mib capped as ddo caps it: 128 MiB; a larger ring leaves the CPU's
  /// caches and fills ~1.7x slower, which is why ddo caps it). Reported, not a ceiling.
  concurrent_fill host_copy_windows;
  /// Every pinned host→device rate measured by a copy pattern (GB/s): back-to-back batches, long
  /// single copies, the hand-written ring's streamed bytes over its step (add_ring_rates). B is
  /// the best of them and pinned_h2d (runner/step_timing.hpp).
  ddo::runner::pinned_rates pinned;
  /// @brief B in bytes/s.
  [[nodiscard]] double bound_rate() const noexcept {
    return std::max(pinned_h2d, pinned.best_gbps() * 1e9);
  }
};

/// @brief Where a variant's streamed bytes come from when they are not pinned: they then have
/// a measured ceiling besides the PCIe bound (concurrent_fill).
enum class staged_source { none, host_memory, file };

/// @brief Host memory of one variant, measured in the bench's own process: the peak RSS above
/// the variant's start (the peak is reset when the variant starts), PSS at its largest sample,
/// and the largest growth of MemTotal − MemAvailable seen after setup and after the steps.
struct host_memory_result {
  bool measured = false;
  std::uint64_t rss_start_bytes = 0;    ///< RSS when the variant started (the bench's model)
  std::uint64_t peak_rss_bytes = 0;     ///< VmHWM after the variant (reset at its start)
  std::uint64_t pss_bytes = 0;          ///< PSS at the sample after setup
  std::uint64_t used_growth_bytes = 0;  ///< MemTotal − MemAvailable, largest growth seen
  bool peak_reset = false;              ///< the kernel reset VmHWM (else it is the process's)
  /// @brief Peak RSS above the start (what the variant itself added).
  [[nodiscard]] std::uint64_t rss_growth_bytes() const noexcept {
    return peak_rss_bytes > rss_start_bytes ? peak_rss_bytes - rss_start_bytes : 0;
  }
};

/// @brief The file route's setup yardstick, measured in the same run: a plain parallel pread of
/// the whole model file (warm page cache) into fresh anonymous memory with the same thread count
/// as ddo's pin workers, then cudaHostRegister of that memory. Setup (read + pin) is judged as
/// (setup − register) / read against 1.5.
struct file_baseline {
  std::uint64_t bytes = 0;
  unsigned threads = 0;
  double read_s = 0;      ///< median of the passes
  double register_s = 0;  ///< cudaHostRegister of the read bytes
};

/// @brief What a VMM variant adds (issue 10): the host time of the window's driver calls per
/// loaded GB, and ddo's own device bytes against the mapped budget, by ddo's ledger and by the
/// sampled device memory minus the forward's activations.
struct vmm_result {
  bool measured = false;
  double map_ms = 0, access_ms = 0, unmap_ms = 0;  ///< host time in the calls, whole run
  std::uint64_t binds = 0;           ///< groups mapped onto window handles
  std::uint64_t loaded_bytes = 0;    ///< bytes ddo brought to the device over the same run
  std::uint64_t budget_bytes = 0;    ///< vmm_resident_weight_budget_gb: residents + window
  std::uint64_t ledger_device_bytes = 0;  ///< ddo's ledger: cudaMalloc (residents, staging) + handles
  std::uint64_t activation_bytes = 0;     ///< the forward's buffers and cuBLAS workspace
  /// @brief Map + access + unmap host milliseconds per GB (1e9 bytes) loaded.
  [[nodiscard]] double host_ms_per_gb() const noexcept {
    return loaded_bytes == 0 ? 0.0 : (map_ms + access_ms + unmap_ms) / (static_cast<double>(loaded_bytes) / 1e9);
  }
  /// @brief The allowance: the mapped budget plus 64 MiB.
  [[nodiscard]] std::uint64_t allowed_bytes() const noexcept { return budget_bytes + (64ull << 20); }
  [[nodiscard]] bool ledger_ok() const noexcept { return ledger_device_bytes <= allowed_bytes(); }
  /// @brief Sampled peak device memory above the start minus the activations.
  [[nodiscard]] std::uint64_t sampled_ddo_bytes(std::uint64_t peak_device_bytes) const noexcept {
    return peak_device_bytes > activation_bytes ? peak_device_bytes - activation_bytes : 0;
  }
  [[nodiscard]] bool sampled_ok(std::uint64_t peak_device_bytes) const noexcept {
    return sampled_ddo_bytes(peak_device_bytes) <= allowed_bytes();
  }
};

/// @brief One variant at one token count.
struct variant_result {
  std::string name;
  std::string description;
  std::vector<double> step_ms;       ///< measured steps: intervals between step starts
  std::vector<double> span_ms;       ///< the same steps' spans, start to end (shown apart)
  double ms = 0;                     ///< median of step_ms
  std::uint64_t streamed_bytes = 0;  ///< W: bytes streamed per step
  std::uint64_t resident_bytes = 0;
  std::uint64_t peak_device_bytes = 0;  ///< peak above the start, cudaMemGetInfo sampled
  std::uint64_t pinned_host_bytes = 0;
  host_memory_result host;
  double setup_s = 0;  ///< offloader setup (plan, pack + pin, residents, ring); 0: not ddo
  double bound_ms = 0;
  double ratio = 0;
  std::string bound_kind;  ///< "compute", "pinned copy"
  /// Non-pinned sources: the ceiling max(C, W / fill ceiling) (concurrent_fill::ceiling) and the
  /// step over it; 0 when the variant has none or it was not measured.
  staged_source staged = staged_source::none;
  double ceiling_ms = 0;
  double ceiling_ratio = 0;
  double target = 0;       ///< ratio target (over bound_ms), 0 = none
  std::string note;
  vmm_result vmm;  ///< measured only by the VMM variants
  /// @brief Whether the variant met its target (true when it has none). A VMM variant's device
  /// bytes have rows of their own in the summary.
  [[nodiscard]] bool pass() const noexcept { return target <= 0 || ratio <= target; }
  /// @brief The step beat its bound by more than ratio_floor allows: a measurement fault.
  [[nodiscard]] bool fault() const noexcept {
    return bound_ms > 0 && ms > 0 && ddo::runner::judge_ratio(ms, bound_ms).fault;
  }
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
  file_baseline file;  ///< bytes 0: no file variant ran
};

/// @brief Median (mean of the middle two for an even count); 0 for none.
[[nodiscard]] inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// @brief Fills ms, bound_ms, bound_kind and ratio: bound = max(C, W / B) for every variant,
/// pageable and file ones included (the PCIe bound is what they are judged against); for a
/// variant with a staged source also its ceiling (ceiling_ms, ceiling_ratio).
inline void finish(variant_result& r, double compute_ms, const bandwidths& bw) {
  r.ms = median(r.step_ms);
  const double rate = bw.bound_rate();
  const double copy_ms = rate > 0 ? static_cast<double>(r.streamed_bytes) / rate * 1e3 : 0.0;
  r.bound_ms = std::max(compute_ms, copy_ms);
  r.bound_kind = r.streamed_bytes == 0 || compute_ms >= copy_ms ? "compute" : "pinned copy";
  r.ratio = r.bound_ms > 0 ? r.ms / r.bound_ms : 0;
  r.ceiling_ms = r.ceiling_ratio = 0;
  const concurrent_fill* fill = r.staged == staged_source::host_memory ? &bw.host_copy
                                : r.staged == staged_source::file      ? &bw.file_read
                                                                       : nullptr;
  if (fill != nullptr && r.streamed_bytes != 0) {
    if (const double ceiling = fill->ceiling(rate); ceiling > 0) {
      r.ceiling_ms = std::max(compute_ms, static_cast<double>(r.streamed_bytes) / ceiling * 1e3);
      r.ceiling_ratio = r.ms / r.ceiling_ms;
    }
  }
}

/// @brief Adds each run's hand-written ring to @p bw's pinned rates (its streamed bytes over its
/// median step: the bus carried at least that), then finishes every variant again against the
/// best rate: a bound below what the ring reached is no bound.
inline void add_ring_rates(bandwidths& bw, std::vector<token_run>& runs) {
  for (const auto& run : runs)
    for (const auto& v : run.variants)
      if (v.name == "ring_baseline" && v.streamed_bytes != 0 && v.ms > 0 && std::isfinite(v.ms))
        bw.pinned.add("hand-written ring at " + std::to_string(run.tokens) + " tokens",
                      static_cast<double>(v.streamed_bytes) / (v.ms * 1e-3) / 1e9);
  for (auto& run : runs)
    for (auto& v : run.variants)
      if (std::isfinite(v.ms)) finish(v, run.compute_ms, bw);
}

/// @brief A pinning file variant's setup over the same run's plain parallel pread:
/// (setup − register) / read; 0 when there is no baseline, no setup, or the variant pins nothing
/// (its setup reads no file and registers nothing: the yardstick does not apply, and subtracting
/// a registration it never did made the ratio negative).
[[nodiscard]] inline double setup_ratio(const variant_result& r, const file_baseline& f) {
  if (f.read_s <= 0 || r.setup_s <= 0 || r.pinned_host_bytes == 0) return 0;
  return (r.setup_s - f.register_s) / f.read_s;
}

/// @brief Targets of the pinned file route's host memory (issue 11): peak RSS growth
/// ≤ 1.10x the weights, MemTotal − MemAvailable growth ≤ 1.05x, setup ≤ 1.5x the plain pread
/// (plus registration).
inline constexpr double rss_target = 1.10;
inline constexpr double used_growth_target = 1.05;
inline constexpr double setup_target = 1.5;

namespace internal {
inline std::string fixed(double value, int digits);
/// "1.23 (1.02x)" — bytes in GB and their ratio to the weights; "-" when not measured.
inline std::string memory_cell(bool measured, std::uint64_t bytes, std::uint64_t weights) {
  if (!measured) return "-";
  const double gbs = static_cast<double>(bytes) / 1e9;
  if (weights == 0) return fixed(gbs, 2);
  return fixed(gbs, 2) + " (" + fixed(static_cast<double>(bytes) / static_cast<double>(weights), 2) + "x)";
}
inline std::string fixed(double value, int digits) {
  if (!std::isfinite(value)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}
inline std::string gb(std::uint64_t bytes) { return format_size_number(bytes, size_unit::gb); }
}  // namespace internal

/// @brief The Markdown report: the run's context, then one table per token count.
[[nodiscard]] inline std::string markdown(const report_context& ctx,
                                          const std::vector<token_run>& runs) {
  using internal::fixed;
  using internal::gb;
  using internal::memory_cell;
  std::ostringstream out;
  out << "\n## streaming_bench on " << ctx.device << "\n\n"
      << "model: " << ctx.blocks << " blocks, hidden " << ctx.hidden << ", MLP " << ctx.mlp
      << ", bf16, " << ctx.tensors_per_block << " tensors/block, " << gb(ctx.weight_bytes)
      << " GB of weights\n"
      << "measured in this run: pinned H2D B = " << fixed(ctx.bw.bound_rate() / 1e9, 1)
      << " GB/s (the best of: " << ctx.bw.pinned.describe() << "), pageable H2D " << fixed(ctx.bw.pageable_h2d / 1e9, 1)
      << " GB/s, hand-written pageable staging loop (for reference, not a bound) "
      << fixed(ctx.bw.pageable_staging / 1e9, 1) << " GB/s";
  if (!ctx.bw.staging_by_threads.empty()) {
    out << " (best of";
    for (const auto& [threads, rate] : ctx.bw.staging_by_threads)
      out << " " << threads << "t " << fixed(rate / 1e9, 1);
    out << ")";
  }
  out << "\n";
  auto fill_line = [&](const concurrent_fill& f, const char* what) {
    if (f.threads == 0) return;
    out << what << ", " << f.threads << " threads into " << fixed(static_cast<double>(f.region_bytes) / (1 << 20), 0)
        << " MiB of pinned memory: " << fixed(f.alone / 1e9, 1)
        << " GB/s alone, " << fixed(f.beside_dma / 1e9, 1)
        << " GB/s beside a running pinned H2D stream (which meanwhile moved "
        << fixed(f.dma_beside / 1e9, 1) << " GB/s): ceiling of the routes staging them "
        << fixed(f.ceiling(ctx.bw.bound_rate()) / 1e9, 1) << " GB/s\n";
  };
  fill_line(ctx.bw.host_copy, "host fill pageable memory -> pinned (memcpy)");
  fill_line(ctx.bw.file_read, "host fill cached file -> pinned (pread)");
  fill_line(ctx.bw.host_copy_windows, "host fill pageable memory -> pinned (memcpy), native-window-sized destination");
  out << "steps: median of " << ctx.steps << " after " << ctx.warmup
      << " warm-up, each the interval between step starts (its span apart, in the JSON)\n";
  if (ctx.file.bytes != 0)
    out << "model file: " << gb(ctx.file.bytes) << " GB; plain parallel pread (warm cache, "
        << ctx.file.threads << " threads, into fresh memory) " << fixed(ctx.file.read_s, 2)
        << " s (" << fixed(static_cast<double>(ctx.file.bytes) / ctx.file.read_s / 1e9, 1)
        << " GB/s), cudaHostRegister of it " << fixed(ctx.file.register_s, 2) << " s\n";
  out
      << "command: " << ctx.command << "\n";
  for (const auto& run : runs) {
    const double b = ctx.bw.bound_rate();
    const double copy_ms = b > 0 ? static_cast<double>(ctx.weight_bytes) / b * 1e3 : 0;
    out << "\n### " << run.tokens << " tokens (C = " << fixed(run.compute_ms, 1)
        << " ms, all weights W/B = " << fixed(copy_ms, 1) << " ms)\n\n"
        << "| variant | ms/step | bound ms | x bound | target | x fill ceiling | GB/s | "
           "streamed GB | peak device GB | pinned host GB | RSS growth GB (x W) | "
           "MemAvail drop GB (x W) |\n"
        << "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& v : run.variants) {
      std::string target = "-";
      if (v.target > 0) target = (v.pass() ? "<= " : "MISS > ") + fixed(v.target, 2);
      if (v.fault()) target = "FAULT < " + fixed(ddo::runner::ratio_floor, 2);
      out << "| " << v.name << " | " << fixed(v.ms, 1) << " | " << fixed(v.bound_ms, 1) << " | "
          << fixed(v.ratio, 3) << " | " << target << " | "
          << (v.ceiling_ms > 0 ? fixed(v.ceiling_ratio, 3) : std::string("-")) << " | "
          << fixed(v.effective_bytes_per_second() / 1e9, 1) << " | " << gb(v.streamed_bytes)
          << " | " << gb(v.peak_device_bytes) << " | " << gb(v.pinned_host_bytes) << " | "
          << memory_cell(v.host.measured, v.host.rss_growth_bytes(), ctx.weight_bytes) << " | "
          << memory_cell(v.host.measured, v.host.used_growth_bytes, ctx.weight_bytes) << " |\n";
    }
    for (const auto& v : run.variants) {
      if (!v.note.empty()) out << "\n- " << v.name << ": " << v.note;
      if (v.fault()) {
        const ddo::runner::bound_figures f{v.step_ms, v.span_ms, run.compute_ms, v.streamed_bytes,
                                           ctx.bw.pinned};
        out << "\n- " << v.name << ": " << ddo::runner::format_ratio("ms / bound", v.ms, f);
      }
      if (v.ceiling_ms > 0 && !v.pass())
        out << "\n- " << v.name << " misses its target over the PCIe bound; its own ceiling (the "
            << (v.staged == staged_source::file ? "file read" : "host copy")
            << " beside the copies) is " << fixed(v.ceiling_ms, 1) << " ms = "
            << fixed(v.ceiling_ms / v.bound_ms, 3) << " x bound, and it runs at "
            << fixed(v.ceiling_ratio, 3) << " x that ceiling";
      if (setup_ratio(v, ctx.file) > 0 && v.name.find("file") != std::string::npos)
        out << "; setup " << fixed(v.setup_s, 2) << " s = " << fixed(setup_ratio(v, ctx.file), 2)
            << " x the plain pread + registration (target <= " << fixed(setup_target, 2) << ")";
      if (v.vmm.measured) {
        const auto& m = v.vmm;
        out << "\n- " << v.name << " (VMM): map/access/unmap host time " << fixed(m.host_ms_per_gb(), 3)
            << " ms per GB loaded (map " << fixed(m.map_ms, 1) << " + access " << fixed(m.access_ms, 1)
            << " + unmap " << fixed(m.unmap_ms, 1) << " ms over " << m.binds << " binds, "
            << gb(m.loaded_bytes) << " GB loaded); ddo's device bytes by the ledger "
            << gb(m.ledger_device_bytes) << " GB (allowed: mapped budget " << gb(m.budget_bytes)
            << " GB + 64 MiB: " << (m.ledger_ok() ? "ok" : "MISS") << "); sampled peak minus activations ("
            << gb(m.activation_bytes) << " GB) " << gb(m.sampled_ddo_bytes(v.peak_device_bytes)) << " GB ("
            << (m.sampled_ok(v.peak_device_bytes) ? "ok" : "MISS") << ")";
      }
    }
    out << "\n";
  }
  return out.str();
}

/// @brief The JSON report: context, bandwidths, every variant of every run with its steps, and a
/// "summary" list of {metric, value, unit, target?, pass?} rows for tools/gpu-check.
[[nodiscard]] inline std::string json(const report_context& ctx,
                                      const std::vector<token_run>& runs) {
  using lay = json_layout;
  json_writer out;
  out.begin_object(lay::lines).member("bench", "streaming").member("device", ctx.device);
  out.member("command", ctx.command).key("model").begin_object(lay::spaced);
  out.member("blocks", ctx.blocks).member("hidden", ctx.hidden).member("mlp", ctx.mlp);
  out.member("dtype", "bf16").member("tensors_per_block", ctx.tensors_per_block);
  out.member("weight_bytes", ctx.weight_bytes).end_object();
  out.member("steps", ctx.steps).member("warmup", ctx.warmup);
  out.key("bandwidth_gbps").begin_object(lay::spaced).member("pinned_h2d", ctx.bw.pinned_h2d / 1e9);
  out.member("bound", ctx.bw.bound_rate() / 1e9).key("pinned_patterns").begin_object(lay::spaced);
  for (const auto& p : ctx.bw.pinned.samples) out.member(p.pattern, p.gbps);
  out.end_object();
  out.member("pageable_h2d", ctx.bw.pageable_h2d / 1e9);
  out.member("pageable_staging", ctx.bw.pageable_staging / 1e9);
  out.key("pageable_staging_by_threads").begin_object(lay::spaced);
  for (const auto& [threads, bps] : ctx.bw.staging_by_threads)
    out.member(std::to_string(threads), bps / 1e9);
  out.end_object();
  auto fill_json = [&](std::string_view name, const concurrent_fill& f) {
    out.key(name).begin_object(lay::spaced).member("threads", f.threads);
    out.member("region_bytes", f.region_bytes).member("alone", f.alone / 1e9);
    out.member("beside_dma", f.beside_dma / 1e9).member("dma_beside", f.dma_beside / 1e9);
    out.member("ceiling", f.ceiling(ctx.bw.bound_rate()) / 1e9).end_object();
  };
  fill_json("host_copy", ctx.bw.host_copy);
  fill_json("file_read", ctx.bw.file_read);
  fill_json("host_copy_windows", ctx.bw.host_copy_windows);
  out.end_object().key("file_baseline").begin_object(lay::spaced).member("bytes", ctx.file.bytes);
  out.member("threads", ctx.file.threads).member("read_s", ctx.file.read_s);
  out.member("register_s", ctx.file.register_s).end_object();
  out.key("runs").begin_array(lay::lines);
  for (const auto& run : runs) {
    out.begin_object(lay::spaced).member("tokens", run.tokens).member("compute_ms", run.compute_ms);
    out.key("variants").begin_array(lay::lines);
    for (const auto& v : run.variants) {
      out.begin_object(lay::spaced).member("name", v.name).member("description", v.description);
      out.member("ms_per_step", v.ms).member("bound_ms", v.bound_ms).member("ratio", v.ratio);
      out.member("bound_kind", v.bound_kind).member("ceiling_ms", v.ceiling_ms);
      out.member("ceiling_ratio", v.ceiling_ratio).member("target", v.target);
      out.member("pass", v.pass()).member("measurement_fault", v.fault());
      out.member("streamed_bytes", v.streamed_bytes);
      out.member("resident_bytes", v.resident_bytes);
      out.member("effective_gbps", v.effective_bytes_per_second() / 1e9);
      out.member("peak_device_bytes", v.peak_device_bytes);
      out.member("pinned_host_bytes", v.pinned_host_bytes).member("setup_s", v.setup_s);
      out.key("host_memory").begin_object(lay::spaced).member("measured", v.host.measured);
      out.member("rss_start_bytes", v.host.rss_start_bytes);
      out.member("peak_rss_bytes", v.host.peak_rss_bytes);
      out.member("peak_rss_reset", v.host.peak_reset);
      out.member("rss_growth_bytes", v.host.rss_growth_bytes());
      out.member("pss_bytes", v.host.pss_bytes);
      out.member("mem_used_growth_bytes", v.host.used_growth_bytes).end_object();
      out.key("vmm").begin_object(lay::spaced).member("measured", v.vmm.measured);
      out.member("map_ms", v.vmm.map_ms).member("access_ms", v.vmm.access_ms);
      out.member("unmap_ms", v.vmm.unmap_ms).member("binds", v.vmm.binds);
      out.member("loaded_bytes", v.vmm.loaded_bytes);
      out.member("host_ms_per_gb", v.vmm.host_ms_per_gb());
      out.member("budget_bytes", v.vmm.budget_bytes);
      out.member("ledger_device_bytes", v.vmm.ledger_device_bytes);
      out.member("activation_bytes", v.vmm.activation_bytes);
      out.member("sampled_ddo_bytes", v.vmm.sampled_ddo_bytes(v.peak_device_bytes)).end_object();
      out.member("note", v.note).key("steps_ms").begin_array(lay::spaced);
      for (double ms : v.step_ms) out.value(ms);
      out.end_array().key("span_ms").begin_array(lay::spaced);
      for (double ms : v.span_ms) out.value(ms);
      out.end_array().end_object();
    }
    out.end_array().end_object();
  }
  out.end_array();
  // The summary rows tools/gpu-check reads: {metric, value, unit, target?, pass?}.
  out.key("summary").begin_array(lay::lines);
  auto metric = [&](const std::string& name, double value, std::string_view unit) -> json_writer& {
    out.begin_object(lay::spaced).member("metric", name).member("value", value);
    return out.member("unit", unit);
  };
  metric("pinned H2D bandwidth (B: the best pattern)", ctx.bw.bound_rate() / 1e9, "GB/s")
      .end_object();
  metric("pageable staging", ctx.bw.pageable_staging / 1e9, "GB/s").end_object();
  for (const auto& run : runs) {
    for (const auto& v : run.variants) {
      const std::string prefix = std::to_string(run.tokens) + " tok ";
      if (v.name == "resident") {
        metric(prefix + v.name, v.ms, "ms (C)").end_object();
        continue;
      }
      metric(prefix + v.name, v.ratio, "x bound");
      if (v.target > 0)
        out.member("target", "<= " + internal::fixed(v.target, 2)).member("pass", v.pass());
      if (v.fault()) out.member("measurement_fault", true);
      out.end_object();
      // A VMM variant's host time per loaded GB and its device bytes (issue 10).
      if (v.vmm.measured) {
        const auto& m = v.vmm;
        const std::string allowed = "<= " + internal::gb(m.allowed_bytes()) + " (budget + 64 MiB)";
        metric(prefix + v.name + " map/access/unmap host time", m.host_ms_per_gb(),
               "ms per GB loaded")
            .end_object();
        metric(prefix + v.name + " ddo device bytes (ledger)",
               static_cast<double>(m.ledger_device_bytes) / 1e9, "GB")
            .member("target", allowed)
            .member("pass", m.ledger_ok())
            .end_object();
        metric(prefix + v.name + " sampled device minus activations",
               static_cast<double>(m.sampled_ddo_bytes(v.peak_device_bytes)) / 1e9, "GB")
            .member("target", allowed)
            .member("pass", m.sampled_ok(v.peak_device_bytes))
            .end_object();
      }
      if (v.ceiling_ms > 0)
        metric(prefix + v.name + " over its fill ceiling", v.ceiling_ratio, "x ceiling").end_object();
      // The pinned file route's memory and setup targets (issue 11), as rows of their own.
      if (v.name == "ddo_file_pinned" && v.host.measured && ctx.weight_bytes != 0) {
        const double w = static_cast<double>(ctx.weight_bytes);
        auto row = [&](const std::string& name, double value, const char* unit, double target) {
          metric(prefix + name, value, unit)
              .member("target", "<= " + internal::fixed(target, 2))
              .member("pass", value <= target)
              .end_object();
        };
        row("file pinned peak RSS growth", static_cast<double>(v.host.rss_growth_bytes()) / w,
            "x weights", rss_target);
        row("file pinned MemTotal-MemAvailable growth",
            static_cast<double>(v.host.used_growth_bytes) / w, "x weights", used_growth_target);
        if (const double sr = setup_ratio(v, ctx.file); sr > 0)
          row("file pinned setup", sr, "x plain pread (+ registration)", setup_target);
      }
    }
  }
  out.end_array().end_object();
  return out.take() + "\n";
}

}  // namespace bench
}  // namespace v0
}  // namespace ddo
