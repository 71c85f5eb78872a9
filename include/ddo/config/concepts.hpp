// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The config_source concept: a source of settings composed at compile time (built-in
/// presets, explicit config, TOML file, DDO_* environment, command line).
///
/// A source opts in explicitly with `using source_category = ddo::config_source_tag;`, so that no
/// type with a `collect()` member is taken for a source by accident, and provides
/// `config_layer collect() const`. The resolver merges the layers in the order the sources are
/// given (lowest precedence first).

#include <concepts>

#include "ddo/config/config_layer.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The opt-in tag of a config source.
struct config_source_tag {};
/// @brief An instance of the tag, for the `_tag` convention.
inline constexpr config_source_tag config_source_v{};

/// @brief A type that explicitly declares itself a config source and yields a config_layer.
template <class S>
concept config_source = requires { typename S::source_category; } &&
                        std::same_as<typename S::source_category, config_source_tag> &&
                        requires(const S& source) {
                          { source.collect() } -> std::same_as<config_layer>;
                        };

/// @brief Checks a pack of sources with a message that names the concept and this header.
template <class... Sources>
constexpr bool check_config_sources() {
  static_assert((config_source<Sources> && ...),
                "ddo: every config source must model ddo::config_source (declare "
                "`using source_category = ddo::config_source_tag;` and `config_layer collect() "
                "const`); see include/ddo/config/concepts.hpp");
  return true;
}

}  // namespace v0
}  // namespace ddo
