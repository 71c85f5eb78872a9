// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The transport a setup uses, from the settings: `execution_device` parsed and applied
/// (make_transport), and the checks that refuse a `backend` or `execution_device` an engine's
/// fixed transport cannot honour. Part of the one setup path (setup/setup.hpp).

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/config/dynamic_offload_settings.hpp"
#include "ddo/config/enum_names.hpp"
#include "ddo/core/error.hpp"
#include "ddo/platform/cuda_device.hpp"
#include "ddo/runtime/native_vmm_options.hpp"
#include "ddo/runtime/transport_backend.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/host_sim_vmm.hpp"
#include "ddo/transport/linear.hpp"
#include "ddo/transport/nvme.hpp"
#include "ddo/transport/vmm.hpp"

namespace ddo {
inline namespace v0 {

/// @brief Whether field @p id was set by the application or the user (code config, TOML,
/// environment, flag or component policy), not by a default, detection or the preset.
[[nodiscard]] inline bool set_explicitly(const dynamic_offload_settings& s, field_id id) {
  return s.provenance.given(id);
}

/// @brief A parsed `execution_device`: "cpu", "cuda" (device 0) or "cuda:N".
struct execution_device_spec {
  bool cuda = true;
  int index = 0;
};

/// @brief Parses `execution_device`. @throws config_error naming its source for other text.
[[nodiscard]] inline execution_device_spec parse_execution_device(const dynamic_offload_settings& s) {
  const std::string& text = s.config.execution_device;
  const auto& where = s.provenance.of(field_id::execution_device);
  auto bad = [&] {
    return config_error(where.source, where.key,
                        describe(where) + ": execution_device = \"" + text +
                            "\" is not a device; expected \"cuda\", \"cuda:N\" (N a device "
                            "ordinal) or \"cpu\"");
  };
  if (text == "cpu") return {false, 0};
  if (text == "cuda") return {true, 0};
  if (text.rfind("cuda:", 0) != 0 || text.size() == 5 || text.size() > 8) throw bad();
  int index = 0;
  for (char c : std::string_view(text).substr(5)) {
    if (c < '0' || c > '9') throw bad();
    index = index * 10 + (c - '0');
  }
  return {true, index};
}

namespace detail {
/// The VMM window's settings from the legacy VMM fields (docs/transports.md): budget = resident
/// set + mapped window; page size (0: measured default); the pinned staging buffer must fit the
/// largest group's staged bytes.
[[nodiscard]] inline vmm_window_options vmm_window_options_from(const dynamic_offload_settings& s) {
  vmm_window_options w;
  w.budget_bytes = gib_to_bytes(s.config.vmm_resident_weight_budget_gb);
  // A mapped budget no source the user controls set (a preset's 4 GiB) follows the card: the
  // plan keeps the resident set inside free VRAM (setup's size_window) and the window maps no
  // more than the ring's slots, so the budget itself bounds nothing (issue 38).
  if (!set_explicitly(s, field_id::vmm_resident_weight_budget_gb) && w.budget_bytes != 0)
    w.budget_bytes = std::numeric_limits<std::uint64_t>::max() / 2;
  w.handle_bytes = s.config.vmm_page_mb * mib;
  // The native route streams through whole windows: no group has to fit its staging.
  w.staging_buffer_bytes = native_vmm_selected(s.config) ? 0 : gib_to_bytes(s.config.vmm_staging_buffer_gb);
  return w;
}

/// The file route's settings: vmm_staging_buffer_gb is one of its two pinned staging slots
/// (--ddo-vmm-total-staging-gb splits a total over the two, config/resolve).
[[nodiscard]] inline nvme_options nvme_options_from(const dynamic_offload_settings& s) {
  nvme_options o;
  o.staging_slot_bytes = round_up(gib_to_bytes(s.config.vmm_staging_buffer_gb), direct_io_alignment);
  return o;
}

/// A simulated device capped as a CUDA one is (device_limit_bytes, 0: uncapped): the smaller of
/// its capacity and the cap.
[[nodiscard]] inline host_sim_options capped_simulation(host_sim_options sim,
                                                        std::uint64_t device_limit_bytes) {
  if (device_limit_bytes != 0)
    sim.device_capacity_bytes = std::min(sim.device_capacity_bytes, device_limit_bytes);
  return sim;
}

template <class T>
inline constexpr bool is_nvme_transport = false;
template <class Inner>
inline constexpr bool is_nvme_transport<nvme_transport<Inner>> = true;

[[nodiscard]] inline config_error cpu_device_refused(const dynamic_offload_settings& s,
                                                     std::string_view what) {
  const auto& where = s.provenance.of(field_id::execution_device);
  return config_error(where.source, where.key,
                      describe(where) + ": execution_device = \"cpu\" but " + std::string(what) +
                          "; use \"cuda:N\", or backend host_sim");
}
}  // namespace detail

/// @brief The name of the device @p transport runs on, as capacity profiles record it: "host_sim"
/// for a simulated device (transport_with_simulated_device: host_sim, its VMM mode and the file
/// route over either simulate the same "device"), the CUDA device's name for a transport on a
/// device (device()), the transport's own name otherwise; "" when the device cannot be asked.
template <class Transport>
[[nodiscard]] std::string transport_device_name(const Transport& transport) {
  if constexpr (transport_with_simulated_device<Transport>) {
    return "host_sim";
  } else if constexpr (requires { { transport.device() } -> std::convertible_to<int>; }) {
    try {
      return query_device_name(transport.device());
    } catch (const cuda_error&) {
      return {};
    }
  } else {
    return std::string(transport.name());
  }
}

/// @brief The transport @p Transport gets from the settings: linear or VMM on the device
/// `execution_device` names (VMM with its window from the vmm_* fields); host_sim (and its VMM
/// mode) with @p sim; nvme_transport<Inner> over the Inner these rules make, its two staging
/// slots of vmm_staging_buffer_gb each; others default-constructed.
/// @throws config_error when execution_device is "cpu" for a CUDA transport; cuda_error.
/// @param device_limit_bytes caps the device memory the transport uses (an emulated smaller
/// card; host_sim's capacity is capped alike); 0: the device's.
template <class Transport>
[[nodiscard]] Transport make_transport(const dynamic_offload_settings& s,
                                       const host_sim_options& sim = {},
                                       std::uint64_t device_limit_bytes = 0) {
  static_assert(detail::check_transport<Transport>());
  if constexpr (detail::is_nvme_transport<Transport>) {
    return Transport(make_transport<typename Transport::upstream_type>(s, sim, device_limit_bytes),
                     detail::nvme_options_from(s));
  } else if constexpr (std::same_as<Transport, host_sim_transport>) {
    (void)parse_execution_device(s);  // checked even where the simulation ignores it
    return host_sim_transport(detail::capped_simulation(sim, device_limit_bytes));
  }
#if defined(__linux__)
  else if constexpr (std::same_as<Transport, host_sim_vmm_transport>) {
    (void)parse_execution_device(s);
    host_sim_vmm_options options;
    options.device = detail::capped_simulation(sim, device_limit_bytes);
    options.window = detail::vmm_window_options_from(s);
    return host_sim_vmm_transport(options);
  }
#endif
  else if constexpr (std::same_as<Transport, vmm_transport>) {
    const auto device = parse_execution_device(s);
    if (!device.cuda) throw detail::cpu_device_refused(s, "the VMM transport maps CUDA device memory");
    vmm_options options;
    options.device.device = device.index;
    options.device.device_limit_bytes = device_limit_bytes;
    options.window = detail::vmm_window_options_from(s);
    return vmm_transport(options);
  } else if constexpr (std::constructible_from<Transport, linear_options>) {
    const auto device = parse_execution_device(s);
    if (!device.cuda) throw detail::cpu_device_refused(s, "this transport copies to a CUDA device");
    linear_options options;
    options.device = device.index;
    options.device_limit_bytes = device_limit_bytes;
    return Transport(options);
  } else {
    return Transport{};
  }
}

namespace detail {

/// Refuses a `backend` or `execution_device` the engine's transport cannot honour; notes in
/// @p notes where it streams instead of what the settings ask.
template <class Transport>
void check_transport_settings(const dynamic_offload_settings& s, Transport& t,
                              std::vector<std::string>& notes) {
  const std::string_view have = t.name();  // for the messages only: the trait decides
  const std::string_view want = enum_name(s.config.backend);
  if (!transport_serves_backend<Transport>(s.config.backend)) {
    const auto& where = s.provenance.of(field_id::backend);
    if (set_explicitly(s, field_id::backend))
      throw config_error(where.source, where.key,
                         describe(where) + ": backend = " + std::string(want) +
                             " but this engine fixed the " + std::string(have) +
                             " transport at compile time; set backend to " + std::string(have) +
                             " (or leave it unset), or let ddo choose the transport with "
                             "ddo::with_offload_backend (setup/enable_offload.hpp)");
    const origin from = s.provenance.of(field_id::backend).source;
    if ((from != origin::default_value && from != origin::detected) ||
        s.config.execution_mode == exec_mode::vmm_runtime)
      notes.push_back("backend " + std::string(want) + " (" + describe(where) +
                      "): no such transport here; the engine's " + std::string(have) +
                      " transport streams instead");
  }
  if constexpr (requires { { t.device() } -> std::convertible_to<int>; }) {
    const auto device = parse_execution_device(s);
    if (set_explicitly(s, field_id::execution_device) &&
        (!device.cuda || device.index != t.device())) {
      const auto& where = s.provenance.of(field_id::execution_device);
      throw config_error(
          where.source, where.key,
          describe(where) + ": execution_device = \"" + s.config.execution_device +
              "\" but the engine's transport uses cuda:" + std::to_string(t.device()) +
              "; construct the transport for that device or let ddo make it");
    }
  }
  if (!transport_with_stable_addresses<Transport> &&
      s.config.execution_mode == exec_mode::vmm_runtime)
    notes.push_back("execution_mode vmm_runtime (" + std::string(vmm_route_name(s.config)) +
                    "): this engine fixed the " + std::string(have) +
                    " transport (no stable addresses), which streams instead (executed: the " +
                    "linear route); the VMM transport runs where ddo chooses it "
                    "(ddo::with_offload_backend, ddo-run)");
}

}  // namespace detail

}  // namespace v0
}  // namespace ddo
