// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief A device budget that moves (issue 41): set_device_budget() plans a running
/// offloader's component afresh for another device budget — the setup's own plan stage
/// (detail::fresh_setup: the same planner, selection rules, settings and machine facts, the
/// offloader's own device bytes counted free as at its setup) — and moves the offloader to that
/// plan (basic_offloader::move_budget: only what differs moves). plan_for_device_budget() is
/// the plan alone (what a fresh setup for that budget plans; tests compare the two), and
/// smallest_device_budget() the least budget the component runs in, which a refusal names.
/// set_device_reserve() is the same move when the engine's own reserve changes instead (its
/// activations for another workload size): the plan a setup with that reserve makes.
/// Part of the one setup path (setup/setup.hpp).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/format_bytes.hpp"
#include "ddo/core/units.hpp"
#include "ddo/model/weight_table.hpp"
#include "ddo/plan/default_policies.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/runtime/device_footprint.hpp"
#include "ddo/setup/options.hpp"
#include "ddo/setup/plan_loop.hpp"
#include "ddo/setup/planner_choice.hpp"
#include "ddo/setup/setup_offload.hpp"

namespace ddo {
inline namespace v0 {

namespace detail {

/// The planner and pin selector an offloader type plans with (ddo::offloader names them;
/// basic_offloader takes the defaults, as the settings constructors do).
template <class Offloader>
struct budget_policies {
  using planner = default_offload_planner;
  using pins = default_pin_selector;
};
template <class Offloader>
  requires requires {
    typename Offloader::planner_type;
    typename Offloader::pin_selector_type;
  }
struct budget_policies<Offloader> {
  using planner = typename Offloader::planner_type;
  using pins = typename Offloader::pin_selector_type;
};

/// Device bytes the runtime allocates for @p plan: each resident weight aligned as the runtime
/// lays it out (runtime/detail/group_layout.hpp), and the ring (streamed_ring_bytes).
[[nodiscard]] inline std::uint64_t plan_device_bytes(const offload_plan& plan,
                                                     const weight_table& table,
                                                     const runtime_options& runtime) {
  std::uint64_t resident = 0;
  for (std::size_t w = 0; w < table.size(); ++w)
    if (plan.decisions[w].where == placement::gpu_resident)
      resident += round_up(std::max<std::uint64_t>(table[w].bytes, 1), runtime.alignment);
  return resident + streamed_ring_bytes(plan, table, runtime);
}

/// A fresh setup as the one call makes it (prepare_offload): the component's route, the
/// planner by profile (@p Planner), @p PinSelector, the same settings and machine facts.
template <class Planner, class PinSelector, class Transport>
[[nodiscard]] offload_setup fresh_setup(const weight_table& table,
                                        const dynamic_offload_settings& settings,
                                        const setup_options& options, Transport& transport) {
  const auto planner =
      planner_for<Planner>(table, settings.config, settings.profile_dir, options.tokens,
                           runtime_options_from(settings.config, options.runtime), transport);
  return setup_offload(table, settings, component_for(settings, options.inputs), options,
                       transport, planner, PinSelector{});
}

}  // namespace detail

/// @brief The plan a fresh setup makes for a device budget of @p budget_bytes (setup_options
/// as given, runtime.device_budget_bytes set), @p held_bytes of the device counted free (a
/// running offloader's own bytes, which it frees before it moves).
/// @throws out_of_memory when nothing fits the budget, config_error as setup_offload.
template <class Planner = default_offload_planner, class PinSelector = default_pin_selector,
          class Transport>
[[nodiscard]] offload_setup plan_for_device_budget(const weight_table& table,
                                                   const dynamic_offload_settings& settings,
                                                   setup_options options, Transport& transport,
                                                   std::uint64_t budget_bytes,
                                                   std::uint64_t held_bytes = 0) {
  DDO_EXPECTS(budget_bytes != 0, "set_device_budget: a budget of 0 bytes means 'none'; give "
                                 "the device bytes ddo may use");
  options.runtime.device_budget_bytes = budget_bytes;
  options.device_held_bytes = held_bytes;
  auto setup = detail::fresh_setup<Planner, PinSelector>(table, settings, options, transport);
  const std::uint64_t need = detail::plan_device_bytes(setup.plan, table, setup.runtime);
  if (need > budget_bytes)
    throw out_of_memory(memory_tier::device, need, budget_bytes,
                        "the plan for a device budget of " + format_bytes_exact(budget_bytes) +
                            " needs " + format_bytes_exact(need) +
                            " of device memory (resident weights and the ring)");
  return setup;
}

/// @brief The smallest device budget (to 1 MiB) a fresh plan of this component fits in, from
/// above @p at_least; none when even @p at_most does not fit. Plans about 40 times (an error
/// path: set_device_budget names it when it refuses a budget).
template <class Planner = default_offload_planner, class PinSelector = default_pin_selector,
          class Transport>
[[nodiscard]] std::optional<std::uint64_t> smallest_device_budget(
    const weight_table& table, const dynamic_offload_settings& settings,
    const setup_options& options, Transport& transport, std::uint64_t held_bytes,
    std::uint64_t at_least, std::uint64_t at_most) {
  const auto fits = [&](std::uint64_t b) {
    try {
      (void)plan_for_device_budget<Planner, PinSelector>(table, settings, options, transport, b,
                                                         held_bytes);
      return true;
    } catch (const out_of_memory&) {
      return false;
    }
  };
  std::uint64_t lo = at_least / mib, hi = std::max<std::uint64_t>(lo + 1, at_most / mib);
  if (!fits(hi * mib)) return std::nullopt;
  while (hi - lo > 1) {  // fits(hi), and not fits(lo) or lo == at_least
    const std::uint64_t mid = lo + (hi - lo) / 2;
    (fits(mid * mib) ? hi : lo) = mid;
  }
  return hi * mib;
}

namespace detail {
/// The device bytes of @p off's attached adapters (0 for an offloader without adapters).
template <class Offloader>
[[nodiscard]] std::uint64_t adapter_bytes_of(const Offloader& off) noexcept {
  if constexpr (requires { off.adapter_device_bytes(); })
    return off.adapter_device_bytes();
  else
    return 0;
}
}  // namespace detail

/// @brief Moves running offloader @p off (set up from @p settings and @p options) to a device
/// budget of @p budget_bytes: plans it afresh with the setup's plan stage and calls
/// off.move_budget (applied now when no lease is alive, else at the next step boundary without
/// leases; docs/engine-walkthrough.md, "A device budget that moves").
/// @return whether the move was applied now.
/// @throws out_of_memory naming the smallest budget the component runs in when nothing fits
/// @p budget_bytes; usage_error where the offloader cannot move (basic_offloader::move_budget).
/// Nothing changes then.
template <class Offloader>
bool set_device_budget(Offloader& off, const dynamic_offload_settings& settings,
                       const setup_options& options, std::uint64_t budget_bytes) {
  using policies = detail::budget_policies<Offloader>;
  using planner = typename policies::planner;
  using pins = typename policies::pins;
  // The attached adapters' factors stay through the move and count in its budget: the plan gets
  // the rest, and only the bytes the move can free count free.
  const std::uint64_t adapters = detail::adapter_bytes_of(off);
  if (adapters != 0 && budget_bytes <= adapters)
    throw out_of_memory(memory_tier::device, adapters, budget_bytes,
                        "set_device_budget(" + format_bytes_exact(budget_bytes) +
                            ") refused, nothing moved: the attached adapters' factors alone "
                            "take " + format_bytes_exact(adapters));
  const std::uint64_t held = off.device_bytes() - adapters;
  offload_setup next;
  try {
    next = plan_for_device_budget<planner, pins>(off.table(), settings, options, off.transport(),
                                                 budget_bytes - adapters, held);
  } catch (const out_of_memory& e) {
    if (e.tier() != memory_tier::device) throw;
    const std::uint64_t card = off.transport().device_memory().total_bytes;
    auto least = smallest_device_budget<planner, pins>(
        off.table(), settings, options, off.transport(), held, budget_bytes - adapters,
        std::max({card, held, saturating_add(budget_bytes, budget_bytes)}));
    if (least) *least += adapters;
    throw out_of_memory(
        memory_tier::device, least.value_or(e.requested_bytes()), budget_bytes,
        "set_device_budget(" + format_bytes_exact(budget_bytes) + ") refused, nothing moved: " +
            e.what() +
            (least ? "; the smallest device budget this component runs in is " +
                         format_bytes_exact(*least)
                   : std::string("; no budget up to the card's memory fits it")));
  }
  return off.move_budget(std::move(next.plan), budget_bytes);
}

/// @brief Moves running offloader @p off to the plan a fresh setup makes when the engine
/// reserves @p reserve_bytes of the device for itself (setup_options::reserve_device_bytes:
/// activations, workspaces) — how an engine follows its workload size (tokens, frames, batch):
/// each size's reserve from the engine's own numbers, the plan then exactly what a setup at
/// that size plans. ddo's device budget for the move is what that plan leaves ddo: the device
/// memory free at setup (this offloader's bytes counted free) less the reserve and the
/// runtime's own reserve, capped by runtime.device_budget_bytes.
/// @return whether the move was applied now (else at the next step boundary without leases).
/// @throws out_of_memory naming the smallest device budget the component runs in when the
/// reserve leaves less; usage_error where the offloader cannot move. Nothing changes then.
template <class Offloader>
bool set_device_reserve(Offloader& off, const dynamic_offload_settings& settings,
                        setup_options options, std::uint64_t reserve_bytes) {
  using policies = detail::budget_policies<Offloader>;
  using planner = typename policies::planner;
  using pins = typename policies::pins;
  options.reserve_device_bytes = reserve_bytes;
  // The adapters' factors stay: not counted free for the plan, added to ddo's budget after it.
  const std::uint64_t adapters = detail::adapter_bytes_of(off);
  options.device_held_bytes = off.device_bytes() - adapters;
  offload_setup next;
  std::uint64_t budget = 0;
  try {
    next = detail::fresh_setup<planner, pins>(off.table(), settings, options, off.transport());
    const auto& m = next.machine;
    const std::uint64_t reserves = saturating_add(reserve_bytes, m.runtime_reserve_bytes);
    budget = m.device.free_bytes > reserves ? m.device.free_bytes - reserves : 1;
    if (options.runtime.device_budget_bytes != 0)
      budget = std::min(budget, options.runtime.device_budget_bytes);
    const std::uint64_t need = detail::plan_device_bytes(next.plan, off.table(), next.runtime);
    if (need > budget)
      throw out_of_memory(memory_tier::device, need, budget,
                          "the plan needs " + format_bytes_exact(need) +
                              " of device memory (resident weights and the ring)");
  } catch (const out_of_memory& e) {
    if (e.tier() != memory_tier::device) throw;
    throw out_of_memory(memory_tier::device, e.requested_bytes(), e.available_bytes(),
                        "set_device_reserve(" + format_bytes_exact(reserve_bytes) +
                            ") refused, nothing moved: the engine's reserve leaves ddo " +
                            format_bytes_exact(e.available_bytes()) + ": " + e.what());
  }
  return off.move_budget(std::move(next.plan), budget + adapters);
}

}  // namespace v0
}  // namespace ddo
