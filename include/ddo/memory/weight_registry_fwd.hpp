// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The names of ddo::weight_registry and its uses (memory/weight_registry.hpp), for the
/// headers that only pass them around (runtime_options). Each is a class template of one
/// instantiation, Tag = void: a template's bodies are compiled only in a TU that uses them, and
/// the umbrella, which includes the registry, then pays its declarations only.

namespace ddo {
inline namespace v0 {

template <class Tag>
class basic_weight_registry;
template <class Tag>
class basic_model_use;
template <class Tag>
class basic_piece_use;

/// @brief Several models' host copies under one pinned-RAM budget (memory/weight_registry.hpp).
using weight_registry = basic_weight_registry<void>;
/// @brief A model in use in a weight_registry.
using model_use = basic_model_use<void>;
/// @brief One use of one piece of a weight_registry, for one copy.
using piece_use = basic_piece_use<void>;

}  // namespace v0
}  // namespace ddo
