// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::backend_served_by<T>(): which `backend` setting a transport type serves, a trait
/// (not the transport's name), so that setup refuses a `backend` the engine's fixed transport
/// cannot honour without comparing names. Here in runtime/, not beside the transports: the
/// `offload_backend` enum is config/'s, which transport/ never needs.

#include <optional>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/host_sim.hpp"
#include "ddo/transport/host_sim_vmm.hpp"
#include "ddo/transport/linear.hpp"
#include "ddo/transport/nvme.hpp"
#include "ddo/transport/vmm.hpp"

namespace ddo {
inline namespace v0 {

/// @brief An engine's say in which backend its own transport @p T serves: specialise with
/// `static constexpr offload_backend value`. The primary template says nothing; ddo's
/// transports and classes derived from them are known without it (backend_served_by).
template <class T>
struct transport_backend {};

namespace detail {
// ddo's transports by type; overload resolution picks the most derived base, so a class derived
// from one (a test's recording host_sim) serves what it serves. The adaptors (VMM, file route)
// hold their upstream rather than derive from it: each has its own overload.
constexpr std::optional<offload_backend> backend_of(const void*) noexcept { return std::nullopt; }
constexpr std::optional<offload_backend> backend_of(const linear_transport*) noexcept {
  return offload_backend::linear;
}
constexpr std::optional<offload_backend> backend_of(const host_sim_transport*) noexcept {
  return offload_backend::host_sim;
}
#if defined(__linux__)
// host_sim's VMM mode is the vmm backend simulated, not host_sim's copies.
constexpr std::optional<offload_backend> backend_of(const host_sim_vmm_transport*) noexcept {
  return offload_backend::vmm;
}
#endif
constexpr std::optional<offload_backend> backend_of(const vmm_transport*) noexcept {
  return offload_backend::vmm;
}
template <class Inner>
constexpr std::optional<offload_backend> backend_of(const nvme_transport<Inner>*) noexcept {
  return offload_backend::nvme;
}
}  // namespace detail

/// @brief The backend transport @p T serves: the engine's transport_backend<T> specialisation,
/// else ddo's transport @p T is or derives from; nullopt for any other (fault_injection, an
/// engine's own transport).
template <class T>
[[nodiscard]] constexpr std::optional<offload_backend> backend_served_by() noexcept {
  if constexpr (requires { transport_backend<T>::value; })
    return transport_backend<T>::value;
  else
    return detail::backend_of(static_cast<const T*>(nullptr));
}

/// @brief Whether transport @p T honours `backend = want`: the backend it serves, or `vmm` for
/// any transport with stable addresses.
template <class T>
[[nodiscard]] constexpr bool transport_serves_backend(offload_backend want) noexcept {
  return backend_served_by<T>() == want ||
         (want == offload_backend::vmm && transport_with_stable_addresses<T>);
}

}  // namespace v0
}  // namespace ddo
