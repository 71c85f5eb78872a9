// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The variants of `ddo-run --compare`, each run with the same model, engine, token count
/// and number of steps: everything resident, ddo's plan on an emulated card, and the naive loop
/// an engine without ddo writes (copy a group, wait, compute it, wait) from pinned and from
/// pageable host memory; plus the two measurements the bound needs, C (the step's compute with
/// nothing to copy) and B (pinned host→device bandwidth). Timed steps never verify: a variant's
/// verification pass (ddo rows, with --verify) runs after its timed steps and reports apart.
/// The report itself is examples/runner/compare.hpp. Example code (examples/runner/).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/units.hpp"
#include "ddo/model/execution_groups.hpp"
#include "ddo/model/synthetic_model.hpp"
#include "ddo/runtime/device_footprint.hpp"
#include "ddo/runtime/offloader.hpp"
#include "ddo/setup/prepare_offload.hpp"
#include "ddo/setup/setup.hpp"
#include "runner/compare.hpp"
#include "runner/device_memory_sampler.hpp"
#include "runner/peak_rss.hpp"
#include "runner/run_model.hpp"
#include "runner/step_timing.hpp"
#include "runner/vram_budget.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief What every variant shares.
struct compare_inputs {
  const weight_table& table;
  const std::vector<file_reader>& files;
  const model_compute& compute;
  std::vector<execution_group> groups;  ///< the order every variant computes in
  std::int64_t tokens = 0;
  int steps = 0;      ///< timed steps (after one untimed warm-up step)
  bool gpu = false;   ///< sample cudaMemGetInfo
  bool verify = false;
  std::uint64_t context_bytes = 0;
  std::uint64_t engine_reserve_bytes = 0;
};

namespace internal {

using clock = std::chrono::steady_clock;

[[nodiscard]] inline double ms_since(clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
}

/// Peak RSS and sampled device memory around one variant.
class variant_meter {
 public:
  explicit variant_meter(bool gpu) : rss_reset_(reset_peak_rss()) {
    if (gpu) sampler_.emplace(0);
  }
  void finish(compare_row& row) {
    if (sampler_) {
      sampler_->stop();
      row.sampled_peak_device_bytes = sampler_->peak_used();
    }
    row.peak_rss_bytes = peak_rss_bytes();
  }
  [[nodiscard]] bool rss_reset() const noexcept { return rss_reset_; }

 private:
  bool rss_reset_;
  std::optional<device_memory_sampler> sampler_;
};

/// Enqueues one group's GEMMs with weight pointers from @p pointer(weight index).
template <class Engine, class Pointer>
void enqueue_group(Engine& engine, typename Engine::transport_type& t, const compare_inputs& in,
                   const execution_group& g, Pointer&& pointer) {
  for (std::size_t w : g.weights) {
    if (!in.compute.is_gemm[w]) continue;
    const auto& info = in.table[w];
    engine.linear(t, pointer(w), info.shape[0], info.shape[1], info.type, in.compute.alpha[w],
                  in.compute.rows[w]);
  }
}

/// One warm-up step, then in.steps timed ones, each ended by a stream synchronize; a step's
/// time is the interval to the next step's start (runner/step_timing.hpp), its span apart.
template <class Step, class Sync>
[[nodiscard]] step_times time_steps(const compare_inputs& in, Step&& step, Sync&& sync) {
  step();
  sync();
  step_clock steps;
  for (int s = 0; s < in.steps; ++s) {
    steps.start();
    step();
    sync();
    steps.end();
  }
  steps.close();
  return steps.times();
}

/// Fills @p row's step times (the intervals) and spans from @p t.
inline void take_times(compare_row& row, step_times t) {
  row.step_ms = std::move(t.interval_ms);
  row.span_ms = std::move(t.span_ms);
}

/// Device offsets of every weight in one block, each aligned as the runtime aligns them.
[[nodiscard]] inline std::vector<std::uint64_t> aligned_offsets(const weight_table& table,
                                                                std::span<const std::size_t> weights,
                                                                std::uint64_t* total) {
  std::vector<std::uint64_t> offsets(table.size(), 0);
  std::uint64_t cursor = 0;
  for (std::size_t w : weights) {
    offsets[w] = cursor;
    cursor = round_up(cursor + table[w].bytes, 256);
  }
  *total = cursor;
  return offsets;
}

}  // namespace internal

namespace internal {
/// Bytes per second of @p copies copies of @p bytes each in @p ms, as GB/s.
[[nodiscard]] inline double gbps_of(std::uint64_t bytes, int copies, double ms) {
  return ms > 0.0 ? static_cast<double>(bytes) * copies / (ms * 1e-3) / 1e9 : 0.0;
}
}  // namespace internal

/// @brief Pinned host→device rates over @p bytes copies by two patterns (runner/step_timing.hpp:
/// B is the best): three batches of five back-to-back copies (a streamed step's pattern; the
/// best batch) and five single copies each waited for (a long copy alone; the best), after one
/// warm-up copy.
template <class Transport>
[[nodiscard]] pinned_rates measure_pinned_rates(Transport& t, std::uint64_t bytes) {
  auto stream = t.make_stream();
  const auto view = Transport::view(stream);
  std::byte* host = t.allocate_pinned(bytes);
  std::byte* device = nullptr;
  try {
    device = t.allocate_device(bytes);
    std::memset(host, 0x5a, bytes);
    t.copy_to_device(device, host, bytes, view);
    t.synchronize(view);
    constexpr int batch = 5;
    double best_batch = 0.0, best_single = 0.0;
    for (int b = 0; b < 3; ++b) {
      const auto t0 = internal::clock::now();
      for (int i = 0; i < batch; ++i) t.copy_to_device(device, host, bytes, view);
      t.synchronize(view);
      best_batch = std::max(best_batch, internal::gbps_of(bytes, batch, internal::ms_since(t0)));
    }
    for (int i = 0; i < 5; ++i) {
      const auto t0 = internal::clock::now();
      t.copy_to_device(device, host, bytes, view);
      t.synchronize(view);
      best_single = std::max(best_single, internal::gbps_of(bytes, 1, internal::ms_since(t0)));
    }
    t.free_device(device, bytes);
    t.free_pinned(host, bytes);
    pinned_rates rates;
    const std::string size = format_bytes(bytes);
    rates.add("batches of " + std::to_string(batch) + " x " + size, best_batch);
    rates.add("single " + size + " copies", best_single);
    return rates;
  } catch (...) {
    if (device != nullptr) t.free_device(device, bytes);
    t.free_pinned(host, bytes);
    throw;
  }
}

/// @brief B: the best pinned host→device rate of measure_pinned_rates, GB/s.
template <class Transport>
[[nodiscard]] double measure_pinned_gbps(Transport& t, std::uint64_t bytes) {
  return measure_pinned_rates(t, bytes).best_gbps();
}

/// @brief Everything resident: every weight uploaded once to one device block, then the steps.
/// Skipped (row.skipped says why) when the model and the engine's reserve do not fit the free
/// memory the device @p t reports.
template <class Engine>
[[nodiscard]] compare_row run_resident(const compare_inputs& in, typename Engine::transport_type& t) {
  compare_row row;
  row.variant = "resident";
  row.description = "every weight uploaded once; the steps copy nothing";
  std::vector<std::size_t> all;
  for (const auto& g : in.groups) all.insert(all.end(), g.weights.begin(), g.weights.end());
  std::uint64_t block_bytes = 0;
  const auto offsets = internal::aligned_offsets(in.table, all, &block_bytes);
  const auto free = t.device_memory().free_bytes;
  const std::uint64_t needed = block_bytes + in.engine_reserve_bytes + 256 * mib;
  if (free != 0 && needed > free) {
    row.skipped = "the model (" + format_bytes(block_bytes) + ") and the engine's reserve do not " +
                  "fit the device's " + format_bytes(free) + " free";
    return row;
  }
  internal::variant_meter meter(in.gpu);
  std::byte* block = t.allocate_device(block_bytes);
  try {
    Engine engine(t, in.tokens, in.compute.width, in.compute.type);
    const auto view = engine.view();
    std::uint64_t largest = 0;
    for (const auto& w : in.table.weights()) largest = std::max(largest, w.bytes);
    std::vector<std::byte> staging(static_cast<std::size_t>(largest));
    for (std::size_t w : all) {
      const auto n = static_cast<std::size_t>(in.table[w].bytes);
      read_source(in.table, in.files, w, std::span(staging.data(), n));
      t.copy_to_device(block + offsets[w], staging.data(), n, view);
      t.synchronize(view);  // the staging vector is reused by the next weight
    }
    const auto step = [&] {
      for (const auto& g : in.groups)
        internal::enqueue_group(engine, t, in, g,
                                [&](std::size_t w) { return block + offsets[w]; });
    };
    internal::take_times(row, internal::time_steps(in, step, [&] { t.synchronize(view); }));
  } catch (...) {
    t.free_device(block, block_bytes);
    throw;
  }
  t.free_device(block, block_bytes);
  meter.finish(row);
  row.resident_bytes = in.table.total_bytes();
  row.peak_device_bytes = in.context_bytes + in.engine_reserve_bytes + block_bytes;
  return row;
}

/// @brief C when the model cannot be resident: the same GEMMs, every one reading one device
/// buffer of random non-zero values the size of the largest weight (no copies at all).
template <class Engine>
[[nodiscard]] double measure_compute_only(const compare_inputs& in, typename Engine::transport_type& t) {
  std::uint64_t largest = 0;
  for (const auto& w : in.table.weights()) largest = std::max(largest, w.bytes);
  largest = round_up(largest, 4);
  std::vector<std::byte> host(static_cast<std::size_t>(largest));
  splitmix64 rng{0xc0ffee};
  fill_random_nonzero(host, in.compute.type, rng);
  std::byte* scratch = t.allocate_device(largest);
  double ms = 0.0;
  try {
    Engine engine(t, in.tokens, in.compute.width, in.compute.type);
    const auto view = engine.view();
    t.copy_to_device(scratch, host.data(), host.size(), view);
    t.synchronize(view);
    ms = median_of(internal::time_steps(
        in,
        [&] {
          for (const auto& g : in.groups)
            internal::enqueue_group(engine, t, in, g, [&](std::size_t) { return scratch; });
        },
        [&] { t.synchronize(view); }).interval_ms);
  } catch (...) {
    t.free_device(scratch, largest);
    throw;
  }
  t.free_device(scratch, largest);
  return ms;
}

/// @brief The host copy of every weight the naive loops copy from (pageable, then registered).
class host_model_copy {
 public:
  explicit host_model_copy(const compare_inputs& in) {
    std::vector<std::size_t> all;
    for (const auto& g : in.groups) all.insert(all.end(), g.weights.begin(), g.weights.end());
    offsets_ = internal::aligned_offsets(in.table, all, &bytes_);
    // Page-aligned (cudaHostRegister page-locks whole pages) and not value-initialised: the
    // pages are first touched by the reads below, once.
    data_.reset(static_cast<std::byte*>(::operator new(bytes_, std::align_val_t{page})));
    for (std::size_t w : all)
      read_source(in.table, in.files, w,
                  std::span(data_.get() + offsets_[w], static_cast<std::size_t>(in.table[w].bytes)));
  }
  [[nodiscard]] const std::byte* weight(std::size_t w) const { return data_.get() + offsets_[w]; }
  [[nodiscard]] std::byte* data() noexcept { return data_.get(); }
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  static constexpr std::size_t page = 4096;
  struct release {
    void operator()(std::byte* p) const noexcept { ::operator delete(p, std::align_val_t{page}); }
  };
  std::uint64_t bytes_ = 0;
  std::vector<std::uint64_t> offsets_;
  std::unique_ptr<std::byte, release> data_;
};

/// @brief The naive loop: per group, copy its weights into one device buffer, wait, compute,
/// wait (the buffer is reused by the next group), from @p host (pinned when registered).
template <class Engine>
[[nodiscard]] compare_row run_naive(const compare_inputs& in, typename Engine::transport_type& t,
                                    const host_model_copy& host, bool pinned) {
  compare_row row;
  row.variant = pinned ? "naive pinned" : "naive pageable";
  row.description = std::string("per group: copy from ") + (pinned ? "pinned" : "pageable") +
                    " memory, wait, compute, wait";
  std::uint64_t slot = 0;
  std::vector<std::vector<std::uint64_t>> offsets;
  for (const auto& g : in.groups) {
    std::uint64_t bytes = 0;
    offsets.push_back(internal::aligned_offsets(in.table, g.weights, &bytes));
    slot = std::max(slot, bytes);
  }
  internal::variant_meter meter(in.gpu);
  std::byte* buffer = t.allocate_device(slot);
  try {
    Engine engine(t, in.tokens, in.compute.width, in.compute.type);
    const auto view = engine.view();
    const auto step = [&] {
      for (std::size_t gi = 0; gi < in.groups.size(); ++gi) {
        const auto& g = in.groups[gi];
        for (std::size_t w : g.weights)
          t.copy_to_device(buffer + offsets[gi][w], host.weight(w),
                           static_cast<std::size_t>(in.table[w].bytes), view);
        t.synchronize(view);  // a synchronous copy, as cudaMemcpy is
        internal::enqueue_group(engine, t, in, g,
                                [&](std::size_t w) { return buffer + offsets[gi][w]; });
        t.synchronize(view);  // the buffer is reused by the next group
      }
    };
    internal::take_times(row, internal::time_steps(in, step, [&] { t.synchronize(view); }));
  } catch (...) {
    t.free_device(buffer, slot);
    throw;
  }
  t.free_device(buffer, slot);
  meter.finish(row);
  row.streamed_bytes = in.table.total_bytes();
  row.peak_device_bytes = in.context_bytes + in.engine_reserve_bytes + slot;
  return row;
}

/// @brief ddo's plan on an emulated card of @p budget: the one setup path over @p transport
/// (capped at the card minus the context), then acquire/compute/release per group; ddo
/// prefetches on its own stream. With in.verify, a separate verification step follows the timed
/// ones: every acquired weight's device bytes compared with its file after its GEMMs.
template <class Engine>
[[nodiscard]] compare_row run_ddo(const compare_inputs& in, typename Engine::transport_type transport,
                                  const dynamic_offload_settings& settings, setup_options options,
                                  const vram_budget& budget) {
  using transport_type = typename Engine::transport_type;
  compare_row row;
  row.variant = "ddo";
  row.vram_gib = static_cast<double>(budget.vram_bytes) / static_cast<double>(gib);
  row.description = "ddo's plan (" + settings.effective_preset + ") on the emulated card";
  internal::variant_meter meter(in.gpu);
  // A card too small for the plan (or for the ring the offloader allocates) is a skipped row
  // with ddo's refusal, not a failed sweep.
  // The one call (ddo/setup/prepare_offload.hpp) over this card's transport.
  std::optional<enabled_offload<offloader<transport_type>>> held;
  try {
    auto prepared = prepare_offload<>(in.table, settings, options, transport);
    row.description += ": " + std::string(to_string(prepared.setup.component.route));
    row.resident_bytes = prepared.plan().total_bytes(placement::gpu_resident);
    row.streamed_bytes = in.table.total_bytes() - row.resident_bytes;
    held.emplace(prepared.start());
  } catch (const out_of_memory& e) {
    row.skipped = std::string("ddo refused the plan: ") + e.what();
    return row;
  }
  auto& off = *held->offloader;
  auto& t = off.transport();
  Engine engine(t, in.tokens, in.compute.width, in.compute.type);
  const auto view = engine.view();
  auto step = [&] {
    off.begin_step();
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, view);
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::size_t w = lease.weight_index(i);
        if (!in.compute.is_gemm[w]) continue;
        const auto& info = in.table[w];
        engine.linear(t, lease.data(i), info.shape[0], info.shape[1], info.type,
                      in.compute.alpha[w], in.compute.rows[w]);
      }
    }
  };
  internal::take_times(row, internal::time_steps(in, step, [&] { t.synchronize(view); }));
  const auto metrics = off.metrics(true);
  const auto check =
      check_accounted_peak(budget, ddo_peak_device_bytes(t, metrics.peak_device_bytes));
  row.peak_device_bytes = check.accounted_peak_bytes;
  row.within_budget = check.within();
  meter.finish(row);
  if (in.verify) {
    std::uint64_t largest = 0;
    for (const auto& w : in.table.weights()) largest = std::max(largest, w.bytes);
    std::vector<std::byte> device_copy(static_cast<std::size_t>(largest));
    std::vector<std::byte> source(static_cast<std::size_t>(largest));
    bool ok = true;
    off.begin_step();
    for (std::size_t g = 0; g < off.group_count(); ++g) {
      auto lease = off.acquire(g, view);
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::size_t w = lease.weight_index(i);
        if (in.compute.is_gemm[w]) {
          const auto& info = in.table[w];
          engine.linear(t, lease.data(i), info.shape[0], info.shape[1], info.type,
                        in.compute.alpha[w], in.compute.rows[w]);
        }
      }
      for (std::size_t i = 0; i < lease.size(); ++i) {
        const std::size_t w = lease.weight_index(i);
        const auto n = static_cast<std::size_t>(in.table[w].bytes);
        t.copy_to_host(device_copy.data(), lease.data(i), n, view);
        t.synchronize(view);
        read_source(in.table, in.files, w, std::span(source.data(), n));
        if (std::memcmp(device_copy.data(), source.data(), n) != 0) ok = false;
      }
    }
    t.synchronize(view);
    row.verified = ok;
  }
  return row;
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
