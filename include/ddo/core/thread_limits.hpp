// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::max_worker_threads: the most threads one of ddo's pools starts.
///
/// A thread costs a stack's resident pages and a kernel task (`--ddo-pin-cpu-workers 100000`
/// reached 2 GB of RSS in 1.5 s, about 115 KB a thread). No copy or read pool gains beyond the
/// memory system's parallelism (docs/physical-limits: 8 staging threads saturate PCIe on an H200
/// host; 16 readers a PCIe 5 NVMe array), so a count above this bound is a typo and is refused
/// naming its source; below it, pools start no more threads than they have work for.

#include <cstddef>

namespace ddo {
inline namespace v0 {

/// @brief The most threads a pool (pin workers, staging copy threads, file readers) may start.
inline constexpr std::size_t max_worker_threads = 256;

}  // namespace v0
}  // namespace ddo
