// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::runtime_options: how an offloader runs a plan (ring size, prefetch depth,
/// strategy, pinning, staging, budgets, metrics). runtime_options_from() maps the relevant
/// fields of a dynamic_offload_config (the one mapping: setup and every tool use it).

#include <cstddef>
#include <algorithm>
#include <thread>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/log_sink.hpp"
#include "ddo/core/thread_limits.hpp"
#include "ddo/core/units.hpp"
#include "ddo/memory/weight_registry_fwd.hpp"
#include "ddo/model/file_fault_hook.hpp"
#include "ddo/runtime/executed_route.hpp"
#include "ddo/runtime/native_vmm_options.hpp"
#include "ddo/runtime/poison_byte.hpp"
#include "ddo/runtime/setup_progress.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Half the hardware threads, clamped to [1, 8]: the staging copy threads by default.
[[nodiscard]] inline std::size_t default_staging_threads() noexcept {
  const std::size_t hw = std::thread::hardware_concurrency();
  return std::clamp<std::size_t>(hw / 2, 1, 8);
}

class pinned_weight_cache;
class shared_weight_store;
class trace_sink;

/// @brief Settings of one offloader's runtime. The defaults are the fast path.
struct runtime_options {
  /// Device slots in the ring (each the size of the largest streamed group, aligned). Reduced
  /// to the number of streamed groups when there are fewer. 2 overlaps one copy with one
  /// compute; 3 also absorbs jitter (what the measured plain ring used).
  std::size_t slot_count = 3;
  /// Streamed groups kept loaded or loading ahead of the engine (0: load only on acquire, no
  /// overlap). Bounded by the ring: a deeper request just prefetches as far as slots allow.
  std::size_t prefetch_depth = std::numeric_limits<std::size_t>::max();
  /// functional: plain leases. swap: bound engine pointers are rewritten for each lease.
  runtime_strategy strategy = runtime_strategy::functional;
  /// Alignment of every weight inside a slot and of resident weights (bytes, power of two).
  std::uint64_t alignment = 256;
  /// Largest single copy (0: a group's pinned bytes are one copy). Chunks below 16 MiB lose
  /// bandwidth (physical-limits.md), so values under 16 MiB are raised to it.
  std::uint64_t max_copy_bytes = 0;
  /// Size of each of the two pinned staging buffers pageable and file weights go through. The
  /// staging loop cuts each into parts of at most 16 MiB (at least two), so the default makes a
  /// ring of four 16 MiB buffers: two copies queued while the copy threads fill the others.
  std::uint64_t staging_buffer_bytes = 32 * mib;
  /// Threads copying pageable bytes into the staging buffers (one alone copies at ~5 GB/s,
  /// far below PCIe; on the H200 machine 4 threads reached 17 GB/s and 8 reached 29 GB/s). The
  /// default is half the hardware threads, between 1 and 8, so an engine's own threads keep cores.
  std::size_t staging_threads = default_staging_threads();
  /// Threads packing and page-locking pinned groups at setup (pin_cpu_workers).
  int pin_workers = 1;
  /// Page-lock pinned weights where the engine keeps them (cudaHostRegister over its pages,
  /// one copy per weight) instead of packing each group into a new block (one copy per group,
  /// but a second host copy of the pinned weights). Saves host RAM and setup time; costs
  /// bandwidth when weights are small (2 MiB copies run ~6% slower). File sources are packed.
  bool pin_in_place = false;
  /// Setup packs and page-locks the streamed groups on a thread of its own while the calling
  /// thread uploads the resident weights, so reading, page-locking and uploading overlap
  /// (issue 25 item 6; not with native VMM, whose windows are made after the pinning). Off by
  /// default: not yet measured on a GPU (ddo-run --parallel-setup --setup-floor measures it).
  bool parallel_setup = false;
  /// Continue with staged copies when page-locking fails (allow_pin_memory_fallback);
  /// otherwise setup throws out_of_memory(memory_tier::pinned_host, ...).
  bool allow_pin_fallback = true;
  /// Pinned blocks are looked up in and added to this cache (cache_pinned_weights); null: none.
  pinned_weight_cache* pinned_cache = nullptr;
  /// Separates cache entries between models/configs (pinned_weight_cache_namespace).
  std::string cache_namespace;
  /// One host copy shared by several offloaders (memory/shared_weight_store.hpp): every pinned
  /// streamed weight is copied from the store (added there once if missing) instead of a block
  /// of this offloader's; the store outlives the offloaders holding it. With a store,
  /// pinned_cache and pin_in_place are not used (the store holds host sources' copies too).
  /// Null: none.
  std::shared_ptr<shared_weight_store> weight_store;
  /// Several models' host copies under one pinned-RAM budget (memory/weight_registry.hpp,
  /// issue 42): as weight_store (every pinned streamed weight copied from the registry's piece,
  /// a piece two models share held once), but the registry may evict a model's pieces when no
  /// offloader of it lives, and refuses (registry_full, naming the models to release) a model
  /// that does not fit beside those in use. The offloader holds its model in use for its life.
  /// Not with weight_store. Null: none.
  std::shared_ptr<weight_registry> registry;
  /// The model's name in `registry` (keep, hint_next and release take it); empty: the
  /// namespace and the table's files (or its host generation), so one model is one name.
  std::string registry_model;
  /// Whether the host copies come from a store or a registry (setup fills their addresses).
  [[nodiscard]] bool shared_host_copies() const noexcept { return weight_store || registry; }
  /// Hard cap on ddo's device bytes (resident weights + ring); 0: what the transport has free.
  std::uint64_t device_budget_bytes = 0;
  /// Hard cap on page-locked weight bytes; 0: the plan's pin budget (when it has one).
  std::uint64_t pinned_budget_bytes = 0;
  /// Record timing events (copy and stall times, GB/s, overlap) — costs a few events per load.
  bool metrics = false;
  /// With metrics: also record a timing event pair on the engine's stream around each lease
  /// (after acquire's wait for the load, and at release): compute spans and
  /// step_metrics::compute_ms, what a calibration (runtime/calibration.hpp) measures. Two more
  /// events per acquire.
  bool time_compute = false;
  /// Receives spans when set (metrics must be on for device spans). Not owned.
  trace_sink* trace = nullptr;
  /// Push NVTX ranges (acquire, release, setup) when the toolkit's nvtx3 headers exist.
  bool nvtx = false;
  /// Fill each slot with a poison byte (0xCD) before every load (tests; costs device bandwidth):
  /// a read before the load's copy finished shows as 0xCD bytes.
  bool poison_slots = false;
  /// Debug mode for engine authors: fill a streamed group's slot with poison_byte as soon as the
  /// last lease on it is released, ordered on the releasing stream after the lease's work (so
  /// before any later copy into the slot, which waits on the release), and load the group again
  /// at its next acquire. A raw pointer kept past its lease then reads 0xCD bytes instead of
  /// whatever the slot holds next. Costs a device fill and a reload per release. On a
  /// stable-address (VMM) route the group's mapped range and its side image are filled, before
  /// the range is unmapped. Set from `debug_poison_released_slots`
  /// (DDO_DEBUG_POISON_RELEASED_SLOTS); ddo-run sets it under --verify (docs/getting-started.md).
  bool poison_released_slots = false;
  /// Consulted before every file read (fault-injection tests, ddo/transport/fault_injection.hpp).
  /// Not owned; must outlive the offloader.
  file_fault_hook* file_faults = nullptr;
  /// How the runtime reads weights from their files (load_safetensors_backend): pread, or mmap
  /// (a read-only mapping advised sequential, each read copied into the weight's final home and
  /// its mapped pages dropped behind it, runtime/detail/group_layout.hpp). library_default ("")
  /// is pread, ddo's measured default (docs/benchmarks.md). The file route (backend nvme) reads
  /// with its own direct I/O and ignores it.
  safetensors_backend file_backend = safetensors_backend::pread;
  /// The route that runs, reported in metrics (setup sets it).
  executed_route route = executed_route::dynamic_offload;
  /// Where the offloader writes its profile summary when destroyed (totals of every step:
  /// bytes by source, copies, copy and stall time, overlap, resident, pinned and peak device
  /// bytes; runtime/profile_summary.hpp). Silent by default; setup sets it from
  /// setup_options::log when `show_profile` is on. Needs `metrics`.
  log_sink profile_summary = nullptr;
  /// Receives setup progress (reading, packing, pinning, uploading; setup_progress.hpp); empty:
  /// none.
  setup_progress_callback on_setup_progress;
  /// The native VMM route's host side (registered windows, retained sources, micro-cache);
  /// used by transports with stable addresses when enabled (runtime/native_vmm_options.hpp).
  native_vmm_options native_vmm;
  /// Stable-address (VMM) routes: per weight of the table, whether the route maps it (1) or it
  /// keeps its planned placement (0: resident, or streamed through the slot's linear side
  /// image). Empty: the reference's rule, dense BF16/FP16 linear weights
  /// (vmm_covered_weight, runtime/component_ownership.hpp); setup_offload narrows it by
  /// `vmm_module_pattern`. Ignored when native_vmm.component_tensor_ownership is on (the route
  /// owns every tensor) and by transports without stable addresses.
  std::vector<char> vmm_covered;
};

/// @brief The runtime fields of a resolved config on top of @p base: strategy, pin workers and
/// fallback, cache namespace, and the application's pinned-weight cache when
/// `cache_pinned_weights` is on (the cache object itself is the application's to pass).
/// @throws config_error when pin_cpu_workers is below 1 (never raised silently).
[[nodiscard]] inline runtime_options runtime_options_from(const dynamic_offload_config& config,
                                                          runtime_options base = {},
                                                          pinned_weight_cache* cache = nullptr) {
  if (config.pin_cpu_workers < 1 ||
      static_cast<std::size_t>(config.pin_cpu_workers) > max_worker_threads)
    throw config_error(origin::config, "pin_cpu_workers",
                       "pin_cpu_workers must be a positive worker count, at most " +
                           std::to_string(max_worker_threads) + ", got " +
                           std::to_string(config.pin_cpu_workers));
  base.strategy = config.linear_runtime_strategy;
  base.pin_workers = config.pin_cpu_workers;
  base.poison_released_slots = base.poison_released_slots || config.debug_poison_released_slots;
  base.allow_pin_fallback = config.allow_pin_memory_fallback;
  base.cache_namespace = config.pinned_weight_cache_namespace;
  base.pinned_cache = config.cache_pinned_weights ? cache : nullptr;
  base.file_backend = config.load_safetensors_backend == safetensors_backend::mmap
                          ? safetensors_backend::mmap
                          : safetensors_backend::pread;
  return base;
}

}  // namespace v0
}  // namespace ddo
