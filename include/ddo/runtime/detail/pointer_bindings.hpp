// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Engine pointer bindings of the swap strategy (not API): per weight, the address of the
/// engine's T* and its value at bind time. A lease of a group writes its device addresses into
/// the bound pointers; the last lease of the group dropped restores them. Host logic only.
///
/// Hot path: write() and restore() walk a per-group list of bound positions, precomputed at
/// bind time; they allocate nothing.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddo/core/error.hpp"

namespace ddo {
inline namespace v0 {
namespace detail {

/// An engine pointer ddo rewrites for leases.
struct binding {
  void* target = nullptr;                 // address of the engine's T*
  void (*write)(void*, void*) = nullptr;  // *static_cast<T**>(target) = value
  void* original = nullptr;               // the engine's value at bind time
};

/// A class template of one instantiation (pointer_bindings): only the runtime core, itself a
/// template, uses it, and GCC compiles a plain class's inline bodies (their vector code) in
/// every TU including the umbrella (docs/development.md, "What including ddo costs").
template <class = void>
class basic_pointer_bindings {
 public:
  /// Sizes the table: @p group_of maps each weight to its group (or no_group), @p groups holds
  /// each group's weights in plan order.
  void reset(std::vector<std::size_t> group_of,
             const std::vector<std::vector<std::size_t>>& groups);

  /// Binds weight @p w. Rebinding replaces the previous binding (without restoring it).
  /// @throws usage_error for an out-of-range weight or one in no group.
  void bind(std::size_t w, const binding& b, const std::string& weight_name);
  /// Restores and forgets the binding of @p w (nothing when unbound).
  void unbind(std::size_t w);
  [[nodiscard]] bool bound(std::size_t w) const noexcept {
    return w < bindings_.size() && bindings_[w].target != nullptr;
  }
  /// Whether group @p g has bound weights.
  [[nodiscard]] bool any(std::size_t g) const noexcept { return !groups_[g].positions.empty(); }

  /// Writes @p ptrs (the lease pointers, plan order) into group @p g's bound engine pointers.
  void write(std::size_t g, std::byte* const* ptrs) noexcept;
  /// Restores group @p g's bound engine pointers if write() set them.
  void restore(std::size_t g) noexcept;
  /// Restores every binding (teardown).
  void restore_all() noexcept;

 private:
  struct group_bindings {
    std::vector<std::size_t> weights;      // plan order
    std::vector<std::uint32_t> positions;  // positions with a binding
    bool written = false;
  };
  void rebuild(std::size_t g);

  std::vector<binding> bindings_;  // per weight
  std::vector<std::size_t> group_of_;
  std::vector<group_bindings> groups_;
};

using pointer_bindings = basic_pointer_bindings<>;

template <class Tag>
void basic_pointer_bindings<Tag>::reset(std::vector<std::size_t> group_of,
                                        const std::vector<std::vector<std::size_t>>& groups) {
  bindings_.assign(group_of.size(), binding{});
  group_of_ = std::move(group_of);
  groups_.assign(groups.size(), group_bindings{});
  for (std::size_t g = 0; g < groups.size(); ++g) groups_[g].weights = groups[g];
}

template <class Tag>
void basic_pointer_bindings<Tag>::bind(std::size_t w, const binding& b,
                                       const std::string& weight_name) {
  DDO_EXPECTS(w < bindings_.size(), "bind: weight index out of range");
  const std::size_t g = group_of_[w];
  DDO_EXPECTS(g < groups_.size(), "bind: weight '" + weight_name + "' is in no group");
  bindings_[w] = b;
  rebuild(g);
}

template <class Tag>
void basic_pointer_bindings<Tag>::unbind(std::size_t w) {
  DDO_EXPECTS(w < bindings_.size(), "unbind: weight index out of range");
  if (bindings_[w].target == nullptr) return;
  bindings_[w].write(bindings_[w].target, bindings_[w].original);
  bindings_[w] = {};
  if (group_of_[w] < groups_.size()) rebuild(group_of_[w]);
}

template <class Tag>
void basic_pointer_bindings<Tag>::write(std::size_t g, std::byte* const* ptrs) noexcept {
  auto& gb = groups_[g];
  for (std::uint32_t i : gb.positions) {
    const auto& b = bindings_[gb.weights[i]];
    b.write(b.target, ptrs[i]);
  }
  gb.written = true;
}

template <class Tag>
void basic_pointer_bindings<Tag>::restore(std::size_t g) noexcept {
  auto& gb = groups_[g];
  if (!gb.written) return;
  for (std::uint32_t i : gb.positions) {
    const auto& b = bindings_[gb.weights[i]];
    b.write(b.target, b.original);
  }
  gb.written = false;
}

template <class Tag>
void basic_pointer_bindings<Tag>::restore_all() noexcept {
  for (auto& b : bindings_)
    if (b.target != nullptr) b.write(b.target, b.original);
  for (auto& gb : groups_) gb.written = false;
}

template <class Tag>
void basic_pointer_bindings<Tag>::rebuild(std::size_t g) {
  auto& gb = groups_[g];
  gb.positions.clear();
  for (std::size_t i = 0; i < gb.weights.size(); ++i)
    if (bindings_[gb.weights[i]].target != nullptr)
      gb.positions.push_back(static_cast<std::uint32_t>(i));
}

}  // namespace detail
}  // namespace v0
}  // namespace ddo
