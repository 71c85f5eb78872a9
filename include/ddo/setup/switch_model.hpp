// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::switch_model: one call that moves an engine's component from model A to model B
/// (issue 42) — A's device side (resident set and ring) is released before B is planned, so
/// B's plan sees the whole device budget and the device never holds both; B's host copies come
/// from the weight registry, where A's pieces stay held but evictable (least recently used) once
/// A's offloader is gone.
///
/// Why not the moving device budget (basic_offloader::move_budget, issue 41): a move re-plans
/// the same table and keeps what both plans share; a switch shares nothing on the device (A's
/// residents are not B's weights) and B's offloader has other groups, ring and layout. What a
/// switch reuses lives on the host, in the registry. So it is built on release_device /
/// restore_device and the registry:
///   1. A.release_device(): A's residents and ring freed (usage_error with live leases: nothing
///      changed);
///   2. B planned (prepare_offload over B's transport). A failed plan restores A's device side
///      and rethrows: the engine still runs A;
///   3. A's offloader destroyed: its streams synchronised, its registry use given back;
///   4. B started: its pinned pieces taken from the registry (those held reused, the rest read),
///      evicting least recently used unused models to fit the registry's budget. A failure here
///      (registry_full names the models to release, having loaded and evicted nothing; a read
///      error keeps nothing of the call) leaves no model running and the registry consistent:
///      A's pieces are still held, so starting A again reads nothing of them.
/// Part of the one setup path (setup/setup.hpp).

#include <optional>
#include <utility>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/core/error.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/setup/options.hpp"
#include "ddo/setup/prepare_offload.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Switches @p from (model A, running) to the model @p to under @p settings and
/// @p options over @p transport (see the file comment for the order and what a failure leaves).
/// @p to must outlive the returned offloader, as with prepare_offload.
/// @returns B's offloader, of A's type; @p from holds none afterwards.
/// @throws usage_error (A has live leases, or holds no offloader; nothing changed); what
/// prepare_offload throws (A restored); what the offloader's setup throws (no model running).
template <class Offloader>
[[nodiscard]] enabled_offload<Offloader> switch_model(
    enabled_offload<Offloader>& from, const weight_table& to, dynamic_offload_settings settings,
    const setup_options& options, typename Offloader::transport_type transport) {
  DDO_EXPECTS(from.offloader != nullptr,
              "switch_model: the offloader to switch from is empty (already switched or never "
              "started); start the model with prepare_offload instead");
  from.offloader->release_device();
  std::optional<prepared_offload<Offloader>> prepared;
  try {
    prepared.emplace(detail::prepare_offload_as<Offloader>(to, std::move(settings), options,
                                                           std::move(transport)));
  } catch (...) {
    from.offloader->restore_device();
    throw;
  }
  from.offloader.reset();
  return prepared->start();
}

}  // namespace v0
}  // namespace ddo
