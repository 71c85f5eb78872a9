// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The line ddo-run and ddo-flux print after `--graph`: how the captured step was launched
/// (through offloader.launch_graph, streaming through a ring smaller than the model, or directly
/// when every streamed group stays loaded). Example code (examples/runner/).

#include <cstdio>
#include <string>

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief Prints "graph: the first step captured, every step launched ..." for @p off.
template <class Offloader>
void print_graph_launches(Offloader& off) {
  const std::size_t slots = off.slot_count();
  const std::string how =
      off.graph_mode() ? "through offloader.launch_graph (graph streaming: " +
                             std::to_string(slots) + (slots == 1 ? " slot, " : " slots, ") +
                             std::to_string(off.group_count()) + " groups)"
                       : "directly (every streamed group stays loaded)";
  std::printf("graph: the first step captured, every step launched %s\n", how.c_str());
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
