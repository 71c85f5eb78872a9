// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Definitions of offloader_core.hpp's setup and teardown (not API): layout, budgets,
/// pinning, resident upload, ring, and the one host synchronization of a run. Out of the class
/// on purpose (see offloader_core_impl.hpp).

#include <algorithm>
#include <cstdio>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <variant>

#include "ddo/runtime/detail/budget_check.hpp"
#include "ddo/runtime/nvtx_range.hpp"
#include "ddo/runtime/profile_summary.hpp"
// Part of ddo/runtime/detail/offloader_core.hpp, which includes it (not back: no include cycles).
#include "ddo/runtime/detail/staging_size.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

// --- setup ------------------------------------------------------------------------------------

template <class T>
offloader_core<T>::offloader_core(T transport, const weight_table& table, offload_plan plan,
                                  runtime_options options)
    : t_(std::move(transport)),
      table_(&table),
      plan_(std::move(plan)),
      options_(std::move(options)),
      meter_(options_.on_setup_progress) {
  const auto setup_start = clock::now();
  nvtx_range range(options_.nvtx, "ddo setup");
  bool setup_only_staging = false;  // the staging buffers serve the residents' upload only
  try {
    // A stable-address route covers dense BF16/FP16 linear weights; the others keep their
    // planned placement (a linear side image per slot), unless the route owns the component.
    layout_ = make_group_layout(table, plan_, options_,
                                transport_with_stable_addresses<T> &&
                                    !options_.native_vmm.component_tensor_ownership);
    check_runtime_budgets(layout_, plan_, options_, t_.device_memory().free_bytes,
                          !transport_with_stable_addresses<T>);
    resident_ptr_.assign(table.size(), nullptr);
    {
      std::vector<std::vector<std::size_t>> weights;
      for (const auto& gr : layout_.groups) weights.push_back(gr.weights);
      bindings_.reset(layout_.group_of, weights);
    }
    files_ = open_source_files(table, layout_, options_.file_faults, options_.file_backend);
    if constexpr (transport_with_file_staging<T>) {
      // The file route reads through the transport's own readers and pinned slots. Members set
      // one by one: nvcc with clang++ as its host compiler reads designators here as GNU's
      // old-style ones (-Wgnu-designator).
      file_staging_request request;
      request.paths = &table.files();
      request.used = layout_.file_used;
      request.faults = options_.file_faults;
      request.largest_piece_bytes = layout_.largest_file_piece(table);
      t_.prepare_file_reads(request);
    }
    copy_stream_ = t_.make_stream();
    staging_.prepare(t_, options_.staging_buffer_bytes, options_.staging_threads, files_);
    plan_setup_progress();
    if (options_.parallel_setup && !options_.native_vmm.enabled) {
      setup_only_staging = pin_beside_upload();
    } else {
      pinning_.pin(t_, layout_, table, plan_, options_, files_, meter_);
      // After pinning: a pin fallback adds staged pieces, and the native stager keys on them.
      if (options_.native_vmm.enabled) {
        native_.prepare(t_, options_.native_vmm, layout_, files_, options_.allow_pin_fallback);
        staging_.use_native(&native_);
      } else {
        // Buffers as large as what passes through them, capped by the setting (staging_size.hpp);
        // a transport that reads files into the device itself needs them only for host bytes.
        const auto demand = staging_demand_of(layout_, table, transport_with_file_reads<T>);
        const std::uint64_t bytes = staging_buffer_bytes_for(demand, options_.staging_buffer_bytes);
        if (bytes != 0) staging_.ensure_buffers(bytes);
        setup_only_staging = demand.run_bytes == 0;
      }
      upload_residents(&meter_);
    }
    allocate_ring(options_.slot_count);
    ring_schedule_.reset(layout_.groups.size(), layout_.slot_count, layout_.streamed_order,
                         layout_.prefetch_depth);
    timing_.setup(t_, options_.metrics, options_.trace, layout_.groups, staging_);
    // Setup is the one place that synchronizes: residents must be on the device before the
    // first lease, and the metrics epoch must be a completed event.
    t_.synchronize(T::view(copy_stream_));
    t_.synchronize(staging_.stream());
    // The residents' copies from the buffers are complete: no group stages, so none are kept.
    if (setup_only_staging) staging_.release_buffers();
    for (auto p : {setup_phase::reading, setup_phase::packing, setup_phase::pinning, setup_phase::uploading})
      meter_.finish(p);
    timing_.start_epoch(T::view(copy_stream_));
    // One job per load, two on a split layout (the mapped image, then the side image).
    if (layout_.staging_needed || (transport_with_stable_addresses<T> && !slots_.empty()))
      staging_.start((layout_.side_parts.empty() ? 1 : 2) * slots_.size() + 1);
  } catch (...) {
    teardown();
    throw;
  }
  timing_.setup_finished(setup_start);
}

template <class T>
offloader_core<T>::~offloader_core() {
  if (live_leases_ != 0)
    std::fprintf(stderr, "ddo: offloader destroyed while %d lease(s) are alive; their pointers dangle\n",
                 live_leases_);
  // show_profile: the run's totals through the setup log, before the memory goes.
  if (options_.profile_summary && options_.metrics && live_leases_ == 0) {
    try {
      for (const auto& line : profile_summary_lines(metrics(true)))
        options_.profile_summary(log_severity::info, line);
    } catch (const std::exception& e) {  // a destructor never throws: say so, then tear down
      std::fprintf(stderr, "ddo: no profile summary: %s\n", e.what());
    }
  }
  teardown();
}

/// Totals of the resident phases (pinning plans its own before it starts).
template <class T>
void offloader_core<T>::plan_setup_progress() {
  if (!meter_.active()) return;
  const auto& table = *table_;
  for (std::size_t w = 0; w < table.size(); ++w) {
    if (layout_.resident_offset[w] == not_streamed) continue;
    if (std::holds_alternative<file_source>(table[w].source)) meter_.plan(setup_phase::reading, table[w].bytes);
    meter_.plan(setup_phase::uploading, table[w].bytes);
  }
}

template <class T>
std::uint64_t offloader_core<T>::upload_residents(
    setup_meter* meter, const std::vector<char>* only,
    const std::vector<const std::byte*>* pinned_copies) {
  if (layout_.resident_bytes == 0) return 0;
  const auto& table = *table_;
  const std::size_t pieces = layout_.resident_piece_bytes.size();
  resident_.resize(pieces);
  std::vector<std::vector<staged_piece>> staged(pieces);
  std::vector<std::size_t> from_pinned;
  for (std::size_t p = 0; p < pieces; ++p) {
    if (layout_.resident_piece_bytes[p] == 0 || (only != nullptr && !(*only)[p])) continue;
    resident_[p] = allocate_device_bytes(t_, layout_.resident_piece_bytes[p]);
    resident_device_bytes_ += layout_.resident_piece_bytes[p];
    note_device_peak();
  }
  for (std::size_t w = 0; w < table.size(); ++w) {
    if (layout_.resident_offset[w] == not_streamed) continue;
    const std::size_t p = layout_.resident_piece_of(w);
    if (only != nullptr && !(*only)[p]) continue;
    resident_ptr_[w] = resident_[p].data + layout_.resident_offset[w];
    const auto& info = table[w];
    if (info.bytes == 0) continue;
    if (pinned_copies != nullptr && (*pinned_copies)[w] != nullptr) {
      from_pinned.push_back(w);
      continue;
    }
    staged_piece piece;
    piece.slot_offset = layout_.resident_offset[w];
    piece.bytes = info.bytes;
    if (const auto* h = std::get_if<host_source>(&info.source)) {
      piece.host = h->data;
    } else {
      const auto& f = std::get<file_source>(info.source);
      piece.file = f.file_index;
      piece.file_offset = f.offset;
    }
    staged[p].push_back(piece);
  }
  if (meter != nullptr) meter->start(setup_phase::uploading);
  // Through the native route's windows when it is on (staging_worker::stage routes there).
  for (std::size_t p = 0; p < pieces; ++p)
    if (!staged[p].empty())
      staging_.stage(resident_[p].data, staged[p], T::view(copy_stream_), meter);
  // After the staged copies on the same stream: a staged copy spans the gaps between its
  // pieces, which these weights may lie in.
  std::uint64_t from_copies = 0;
  for (const std::size_t w : from_pinned) {
    t_.copy_to_device(resident_ptr_[w], (*pinned_copies)[w], table[w].bytes, T::view(copy_stream_));
    from_copies += table[w].bytes;
  }
  return from_copies;
}

template <class T>
void offloader_core<T>::free_resident_piece(std::size_t p) noexcept {
  if (p >= resident_.size() || resident_[p].data == nullptr) return;
  resident_device_bytes_ -= resident_[p].bytes;
  resident_[p] = device_allocation<T>{};
  const auto& table = *table_;
  for (std::size_t w = 0; w < table.size(); ++w)
    if (layout_.resident_offset[w] != not_streamed && layout_.resident_piece_of(w) == p)
      resident_ptr_[w] = nullptr;
}

/// runtime_options::parallel_setup: the streamed groups are packed and page-locked on a thread
/// of their own (with its pin workers) while this thread uploads the residents through the
/// staging buffers, so the setup's reads, page-locking and uploads overlap. The buffers are
/// sized before the pinning and grown after it where a pinning fallback staged more. The upload
/// starts once the pinning planned its progress totals. @return whether the buffers served the
/// residents' upload only (no group stages).
template <class T>
bool offloader_core<T>::pin_beside_upload() {
  const auto& table = *table_;
  const auto demand = [&] {
    return staging_demand_of(layout_, table, transport_with_file_reads<T>);
  };
  const std::uint64_t bytes = staging_buffer_bytes_for(demand(), options_.staging_buffer_bytes);
  if (bytes != 0) staging_.ensure_buffers(bytes);
  std::mutex mutex;
  std::condition_variable cv;
  bool planned = false;
  std::exception_ptr failure;
  const auto release = [&] {
    {
      std::lock_guard lock(mutex);
      planned = true;
    }
    cv.notify_one();
  };
  std::thread pinner([&] {
    try {
      bind_runtime_thread(t_);
      pinning_.pin(t_, layout_, table, plan_, options_, files_, meter_, release);
    } catch (...) {
      failure = std::current_exception();
    }
    release();  // a pinning that failed before planning must not leave the upload waiting
  });
  try {
    {
      std::unique_lock lock(mutex);
      cv.wait(lock, [&] { return planned; });
    }
    upload_residents(&meter_);  // (after a failed pinning too: it is rethrown below)
  } catch (...) {
    pinner.join();
    throw;
  }
  pinner.join();
  if (failure) std::rethrow_exception(failure);
  const auto pinned_demand = demand();  // with what a pinning fallback staged
  const std::uint64_t need = staging_buffer_bytes_for(pinned_demand, options_.staging_buffer_bytes);
  if (need > bytes) {
    // A pinning fallback staged more than the buffers were sized for: the residents' copies
    // from them are done first.
    t_.synchronize(T::view(copy_stream_));
    t_.synchronize(staging_.stream());
    staging_.release_buffers();
    staging_.ensure_buffers(need);
  }
  return pinned_demand.run_bytes == 0;
}

/// @param max_slots the most slots a stable-address transport may size its window for (setup:
/// slot_count; a restore: the count setup got, which the staging worker's queue is sized for).
template <class T>
void offloader_core<T>::allocate_ring(std::size_t max_slots) {
  for (auto& gr : layout_.groups) {
    gr.resident.assign(gr.weights.size(), nullptr);
    for (std::size_t i = 0; i < gr.weights.size(); ++i) gr.resident[i] = resident_ptr_[gr.weights[i]];
    if (!gr.streamed()) gr.pointers = gr.resident;
  }
  std::size_t count = layout_.slot_count;
  if (count == 0) return;
  const std::uint64_t slot = layout_.slot_bytes;
  if constexpr (transport_with_stable_addresses<T>) {
    // The transport maps each group at its own range on physical memory it sized from its
    // budget: no ring is allocated, and the slot count is what that budget holds.
    stable_address_request r;
    r.slot_bytes = slot;
    r.resident_bytes = resident_device_bytes_;
    r.side_slot_bytes = layout_.side_slot_bytes;
    r.streamed_groups = layout_.streamed_order.size();
    for (const auto& gr : layout_.groups) {
      r.group_bytes.push_back(gr.slot_bytes);
      std::uint64_t staged = 0;
      for (const auto& p : gr.staged) staged += p.bytes;
      if (gr.side != no_group)
        for (const auto& p : layout_.side_parts[gr.side].staged) staged += p.bytes;
      r.largest_staged_bytes = std::max(r.largest_staged_bytes, staged);
    }
    r.max_slots = max_slots;
    if constexpr (requires { { t_.stable_addresses_prepared() } -> std::same_as<bool>; })
      if (t_.stable_addresses_prepared())
        throw usage_error(
            "the VMM transport's one window is held by another offloader on the same transport "
            "(a pipeline component whose phase has not ended): give the pipeline a shared "
            "device budget (pipeline_device_budget_gb) so that only the current phase holds "
            "it, or give each component its own transport");
    try {
      count = t_.prepare_stable_addresses(r);
    } catch (...) {
      // A refusal mid-prepare (budget, staging) must leave the window free for a retry.
      try {
        t_.release_stable_addresses();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ddo: releasing a refused stable-address window: %s\n", e.what());
      }
      throw;
    }
    holds_window_ = true;
    if constexpr (requires { { t_.vmm_physical_bytes() } -> std::convertible_to<std::uint64_t>; })
      window_bytes_ = t_.vmm_physical_bytes();
    // The side images (weights the route does not cover) are a linear ring beside the window;
    // the transport counted them against its budget when it sized the window.
    const std::uint64_t side = layout_.side_slot_bytes;
    if (side != 0 && count != 0) ring_ = allocate_device_bytes(t_, ring_bytes_for(side, count));
    note_device_peak();
    layout_.slot_count = count;
    slots_.resize(count);
    for (std::size_t s = 0; s < count; ++s) {
      auto& st = slots_[s];
      st.pointers.assign(layout_.max_group_weights, nullptr);
      st.ready = t_.make_event(false);
      st.release = t_.make_event(false);
      if (side != 0) {
        st.side_image = ring_.data + s * side;
        if (options_.poison_slots)
          t_.fill_device(st.side_image, poison_byte, side, T::view(copy_stream_));
      }
    }
    return;
  }
  ring_ = allocate_device_bytes(t_, ring_bytes_for(slot, count));
  note_device_peak();
  slots_.resize(count);
  for (std::size_t s = 0; s < count; ++s) {
    auto& st = slots_[s];
    st.base = ring_.data + s * slot;
    st.image = st.base;
    st.pointers.assign(layout_.max_group_weights, nullptr);
    st.ready = t_.make_event(false);
    st.release = t_.make_event(false);
    if (options_.poison_slots) t_.fill_device(st.base, poison_byte, slot, T::view(copy_stream_));
  }
}

template <class T>
void offloader_core<T>::note_device_peak() noexcept {
  peak_device_bytes_ = std::max(peak_device_bytes_, device_bytes());
}

// --- the device side across a pipeline's phases -------------------------------------------------

template <class T>
void offloader_core<T>::release_device() {
  DDO_EXPECTS(live_leases_ == 0,
              "release_device: " + std::to_string(live_leases_) +
                  " lease(s) of this component are alive; drop them before its phase ends (the "
                  "device memory they point into is freed at the phase switch)");
  if (released_) return;
  end_graph_mode();
  // The engine's reads of the slots end with their release events, ddo's loads with the copy
  // and staging streams: only then may the memory go.
  (void)wait_for_slot_users();
  free_device_side();
  // Setup frees staging buffers that only served the residents' upload; every restore uploads
  // them again, so they are made once now and kept (never re-pinned per phase or image).
  if (!native_.active() && !staging_.has_buffers()) {
    const auto demand = staging_demand_of(layout_, *table_, transport_with_file_reads<T>);
    const std::uint64_t bytes = staging_buffer_bytes_for(demand, options_.staging_buffer_bytes);
    if (demand.setup_bytes != 0 && bytes != 0) staging_.ensure_buffers(bytes);
  }
  released_ = true;
}

template <class T>
void offloader_core<T>::restore_device() {
  if (!released_) return;
  try {
    upload_residents(nullptr);
    if (adapters_.any()) adapters_changed({});  // the residents came back as their base
    allocate_ring(layout_.slot_count);
    ring_schedule_.reset(layout_.groups.size(), layout_.slot_count, layout_.streamed_order,
                         layout_.prefetch_depth);
    // Residents must be on the device before the first lease of the phase.
    t_.synchronize(T::view(copy_stream_));
    if (staging_.has_stream()) t_.synchronize(staging_.stream());
  } catch (...) {
    // Copies of the residents may be in flight: they end before their memory goes.
    try {
      t_.synchronize(T::view(copy_stream_));
      if (staging_.has_stream()) t_.synchronize(staging_.stream());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddo: after a failed restore_device: %s\n", e.what());
    }
    free_device_side();
    throw;
  }
  released_ = false;
}

/// Frees the arena and the ring and forgets every device address (the caller synchronized).
template <class T>
void offloader_core<T>::free_device_side() noexcept {
  if constexpr (transport_with_stable_addresses<T>) {
    // Only the holder releases the window: a pipeline's other components share the transport.
    if (holds_window_) {
      try {
        t_.release_stable_addresses();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ddo: releasing the stable-address window: %s\n", e.what());
      }
    }
    holds_window_ = false;
    window_bytes_ = 0;
  }
  slots_.clear();
  ring_ = device_allocation<T>{};
  resident_.clear();
  resident_device_bytes_ = 0;
  std::fill(resident_ptr_.begin(), resident_ptr_.end(), nullptr);
  for (auto& gr : layout_.groups) {
    gr.resident.assign(gr.weights.size(), nullptr);
    if (!gr.streamed()) gr.pointers = gr.resident;
  }
}

template <class T>
void offloader_core<T>::throw_released(std::size_t g) const {
  throw usage_error("acquire: group '" + layout_.groups[g].name +
                    "' belongs to a component whose device memory was released at a phase switch; "
                    "enter its phase first (pipeline_offload::enter_phase)");
}

template <class T>
void offloader_core<T>::teardown() noexcept {
  // The engine may tear down with its capture still open in global mode (an exception left it
  // so): this thread's synchronizations and frees would be refused as unsafe, leaking everything.
  [[maybe_unused]] auto relaxed = relaxed_capture(t_);
  // Before the staging thread stops: on a VMM route its binder serves the last launch's loads.
  end_graph_mode();
  staging_.stop();
  auto quiet = [](auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddo: during offloader teardown: %s\n", e.what());
    }
  };
  // Engine work reading the slots ends with their release events; ddo's own loads with the
  // copy and staging streams. Only then is the memory freed.
  for (auto& st : slots_) {
    quiet([&] { t_.synchronize(st.release); });
    quiet([&] { t_.synchronize(st.ready); });
  }
  if (copy_stream_.get() != nullptr) quiet([&] { t_.synchronize(T::view(copy_stream_)); });
  if (staging_.has_stream()) quiet([&] { t_.synchronize(staging_.stream()); });
  // The window is released by its holder only: another component of a pipeline may hold it.
  if constexpr (transport_with_stable_addresses<T>)
    if (holds_window_) quiet([&] { t_.release_stable_addresses(); });
  if constexpr (transport_with_file_staging<T>) t_.release_file_reads();
  bindings_.restore_all();
  slots_.clear();
  timing_.release();
  ring_ = device_allocation<T>{};
  resident_.clear();
  resident_device_bytes_ = 0;
  native_.release();
  staging_.release();
  layout_.for_each_part([](group_runtime& gr) { gr.block.reset(); });
  pinning_.release(t_);
  files_.clear();
  copy_stream_ = typename T::stream{};
  if (merge_stream_.get() != nullptr) quiet([&] { t_.synchronize(T::view(merge_stream_)); });
  merge_stream_ = typename T::stream{};
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
