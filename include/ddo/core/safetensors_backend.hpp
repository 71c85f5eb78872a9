// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::safetensors_backend: how model files are read (the config field
/// `load_safetensors_backend`). Vocabulary shared by config/ (which names it) and model/ and
/// runtime/ (which read files by it), so it sits below both: config/ includes no model/ header.

namespace ddo {
inline namespace v0 {

/// @brief "" keeps the library default; mmap and pread are the explicit overrides.
enum class safetensors_backend { library_default, mmap, pread };

}  // namespace v0
}  // namespace ddo
