// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::safetensors_backend: how model files are read (the config field
/// `load_safetensors_backend`). Vocabulary shared by config/ (which names it) and model/ and
/// runtime/ (which read files by it), so it sits below both: config/ includes no model/ header.

#include <array>
#include <string_view>

#include "ddo/core/enum_names.hpp"

namespace ddo {
inline namespace v0 {

/// @brief "" keeps the library default; mmap and pread are the explicit overrides.
enum class safetensors_backend { library_default, mmap, pread };

/// @brief load_safetensors_backend values ("" keeps the library default).
template <>
struct enum_names<safetensors_backend> {
  static constexpr std::array<std::string_view, 3> values = {"", "mmap", "pread"};
};

}  // namespace v0
}  // namespace ddo
