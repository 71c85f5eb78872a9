// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::safetensors_backend: how model files are read (the config field
/// `load_safetensors_backend`). It lives in model/, the lowest layer that uses it; config/ names it.

namespace ddo {
inline namespace v0 {

/// @brief "" keeps the library default; mmap and pread are the explicit overrides.
enum class safetensors_backend { library_default, mmap, pread };

}  // namespace v0
}  // namespace ddo
