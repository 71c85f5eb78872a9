// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief detail::transport_adaptor<Upstream>: the one way ddo builds a transport out of another
/// (rmm's resource adaptors: an adaptor holds its upstream). It holds @p Upstream by value and
/// forwards ddo::transport's operations and each optional capability @p Upstream models
/// (concepts.hpp), so an adaptor writes only what it changes and models exactly what its upstream
/// does plus what it adds. A derived adaptor's member of the same name hides the forwarded one.
///
/// Adaptors built on it: nvme_transport<Inner> (the file route), fault_injection_transport<Inner>,
/// vmm_transport (over linear_transport) and host_sim_vmm_transport (over host_sim_transport).
/// The last two add the stable-address window through detail::stable_addresses, a capability
/// shared by the real and the simulated driver (not an adaptor): they name its members with
/// using-declarations, since both bases declare them.
///
/// Why one style: the file route inherited its Inner (an override silently missed when Inner
/// grew a member), the VMM transports forwarded by hand (one list each), fault injection
/// composed; three ways to read one idea, and the forwarding lists drifted apart.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "ddo/transport/allocation_ledger.hpp"
#include "ddo/transport/concepts.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// `graph_exec`, where the upstream streams through captured graphs.
template <class Upstream>
struct adaptor_graph_types {};
template <class Upstream>
  requires requires { typename Upstream::graph_exec; }
struct adaptor_graph_types<Upstream> {
  using graph_exec = typename Upstream::graph_exec;
};

template <class Upstream>
class transport_adaptor : public adaptor_graph_types<Upstream> {
  static_assert(check_transport<Upstream>());

 public:
  using transport_category = transport_tag;
  using upstream_type = Upstream;
  using stream = typename Upstream::stream;
  using stream_view = typename Upstream::stream_view;
  using event = typename Upstream::event;
  /// A simulated upstream makes a simulated adaptor (transport_with_simulated_device).
  static constexpr bool simulated_device = transport_with_simulated_device<Upstream>;

  /// @brief The transport this one is built on (its own accounting and extra members).
  [[nodiscard]] Upstream& upstream() noexcept { return upstream_; }
  [[nodiscard]] const Upstream& upstream() const noexcept { return upstream_; }

  // --- ddo::transport ------------------------------------------------------------------------
  [[nodiscard]] std::string_view name() const noexcept { return upstream_.name(); }
  [[nodiscard]] stream make_stream() { return upstream_.make_stream(); }
  [[nodiscard]] static stream_view view(stream& s) noexcept { return Upstream::view(s); }
  [[nodiscard]] event make_event(bool timing) { return upstream_.make_event(timing); }
  void record(event& e, stream_view s) { upstream_.record(e, s); }
  void wait(stream_view s, const event& e) { upstream_.wait(s, e); }
  [[nodiscard]] bool ready(const event& e) { return upstream_.ready(e); }
  void synchronize(const event& e) { upstream_.synchronize(e); }
  void synchronize(stream_view s) { upstream_.synchronize(s); }
  [[nodiscard]] double elapsed_ms(const event& a, const event& b) {
    return upstream_.elapsed_ms(a, b);
  }
  [[nodiscard]] std::byte* allocate_device(std::size_t n) { return upstream_.allocate_device(n); }
  void free_device(std::byte* p, std::size_t n) { upstream_.free_device(p, n); }
  [[nodiscard]] std::byte* allocate_pinned(std::size_t n) { return upstream_.allocate_pinned(n); }
  void free_pinned(std::byte* p, std::size_t n) { upstream_.free_pinned(p, n); }
  [[nodiscard]] bool register_host(void* p, std::size_t n) { return upstream_.register_host(p, n); }
  void unregister_host(void* p) { upstream_.unregister_host(p); }
  void copy_to_device(std::byte* dst, const std::byte* src, std::size_t n, stream_view s) {
    upstream_.copy_to_device(dst, src, n, s);
  }
  void copy_to_host(std::byte* dst, const std::byte* src, std::size_t n, stream_view s) {
    upstream_.copy_to_host(dst, src, n, s);
  }
  void fill_device(std::byte* dst, int value, std::size_t n, stream_view s) {
    upstream_.fill_device(dst, value, n, s);
  }
  [[nodiscard]] device_memory_info device_memory() { return upstream_.device_memory(); }
  [[nodiscard]] device_memory_info device_memory() const
    requires requires(const Upstream& u) { u.device_memory(); }
  {
    return upstream_.device_memory();
  }

  // --- the device and the accounting, where the upstream has them ------------------------------
  [[nodiscard]] int device() const noexcept
    requires requires(const Upstream& u) { { u.device() } -> std::convertible_to<int>; }
  {
    return upstream_.device();
  }
  [[nodiscard]] const allocation_ledger& ledger() const noexcept
    requires transport_with_ledger<Upstream>
  {
    return upstream_.ledger();
  }
  [[nodiscard]] std::uint64_t device_bytes_in_use() const
    requires requires(const Upstream& u) { u.device_bytes_in_use(); }
  {
    return upstream_.device_bytes_in_use();
  }
  [[nodiscard]] std::uint64_t peak_device_bytes() const
    requires requires(const Upstream& u) { u.peak_device_bytes(); }
  {
    return upstream_.peak_device_bytes();
  }
  [[nodiscard]] std::uint64_t pinned_bytes_in_use() const
    requires requires(const Upstream& u) { u.pinned_bytes_in_use(); }
  {
    return upstream_.pinned_bytes_in_use();
  }
  [[nodiscard]] std::uint64_t registered_bytes_in_use() const
    requires requires(const Upstream& u) { u.registered_bytes_in_use(); }
  {
    return upstream_.registered_bytes_in_use();
  }

  // --- optional capabilities (concepts.hpp) ----------------------------------------------------
  void bind_thread()
    requires transport_with_thread_binding<Upstream>
  {
    upstream_.bind_thread();
  }
  std::byte* bind_slot(std::byte* base, std::uint64_t bytes, std::size_t group,
                       const event& release)
    requires transport_with_slot_binding<Upstream>
  {
    return upstream_.bind_slot(base, bytes, group, release);
  }
  window_sizing size_window(const window_sizing_request& r)
    requires transport_with_window_sizing<Upstream>
  {
    return upstream_.size_window(r);
  }
  std::size_t prepare_stable_addresses(const stable_address_request& r)
    requires transport_with_stable_addresses<Upstream>
  {
    return upstream_.prepare_stable_addresses(r);
  }
  [[nodiscard]] std::byte* stable_address(std::size_t g)
    requires transport_with_stable_addresses<Upstream>
  {
    return upstream_.stable_address(g);
  }
  void bind_stable(std::size_t slot, std::size_t g)
    requires transport_with_stable_addresses<Upstream>
  {
    upstream_.bind_stable(slot, g);
  }
  void release_stable_addresses()
    requires transport_with_stable_addresses<Upstream>
  {
    upstream_.release_stable_addresses();
  }
  void read_file_to_device(std::byte* dst, const std::string& path, std::uint64_t offset,
                           std::size_t n, stream_view s)
    requires transport_with_file_reads<Upstream>
  {
    upstream_.read_file_to_device(dst, path, offset, n, s);
  }
  void read_files_to_device(std::span<const device_file_read> pieces, stream_view s)
    requires transport_with_batched_file_reads<Upstream>
  {
    upstream_.read_files_to_device(pieces, s);
  }
  void prepare_file_reads(const file_staging_request& r)
    requires transport_with_file_staging<Upstream>
  {
    upstream_.prepare_file_reads(r);
  }
  void release_file_reads() noexcept
    requires transport_with_file_staging<Upstream>
  {
    upstream_.release_file_reads();
  }
  [[nodiscard]] std::uint64_t staging_slot_bytes() const noexcept
    requires transport_with_file_staging<Upstream>
  {
    return upstream_.staging_slot_bytes();
  }
  bool resize_file_staging(std::uint64_t largest_piece_bytes)
    requires requires(Upstream& u) { u.resize_file_staging(largest_piece_bytes); }
  {
    return upstream_.resize_file_staging(largest_piece_bytes);
  }

  // --- graph streaming (transport_with_graph_streaming) ----------------------------------------
  [[nodiscard]] static bool capturing(stream_view s)
    requires transport_with_graph_streaming<Upstream>
  {
    return Upstream::capturing(s);
  }
  [[nodiscard]] static std::uint64_t capture_id(stream_view s)
    requires transport_with_graph_streaming<Upstream>
  {
    return Upstream::capture_id(s);
  }
  [[nodiscard]] static auto relaxed_capture()
    requires requires { Upstream::relaxed_capture(); }
  {
    return Upstream::relaxed_capture();
  }
  void record_edge(event& e, stream_view s)
    requires transport_with_graph_streaming<Upstream>
  {
    upstream_.record_edge(e, s);
  }
  void wait_edge(stream_view s, const event& e)
    requires transport_with_graph_streaming<Upstream>
  {
    upstream_.wait_edge(s, e);
  }
  template <class G = Upstream>
  void launch_graph(const typename G::graph_exec& g, stream_view s)
    requires transport_with_graph_streaming<G>
  {
    upstream_.launch_graph(g, s);
  }
  void check_graph_streaming()
    requires transport_with_graph_streaming<Upstream>
  {
    upstream_.check_graph_streaming();
  }
  [[nodiscard]] std::uint32_t* allocate_flags(std::size_t n)
    requires transport_with_graph_streaming<Upstream>
  {
    return upstream_.allocate_flags(n);
  }
  void free_flags(std::uint32_t* flags, std::size_t n)
    requires transport_with_graph_streaming<Upstream>
  {
    upstream_.free_flags(flags, n);
  }
  void wait_value(stream_view s, std::uint32_t* flag, std::uint32_t v)
    requires transport_with_graph_streaming<Upstream>
  {
    upstream_.wait_value(s, flag, v);
  }
  void write_value(stream_view s, std::uint32_t* flag, std::uint32_t v)
    requires transport_with_graph_streaming<Upstream>
  {
    upstream_.write_value(s, flag, v);
  }

 protected:
  explicit transport_adaptor(Upstream upstream) : upstream_(std::move(upstream)) {}

 private:
  Upstream upstream_;
};

}  // namespace detail
}  // namespace v0
}  // namespace ddo
