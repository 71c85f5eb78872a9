// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The floor of ddo's setup (issue 25 item 6), measured in the run it is compared with:
/// a parallel read of the model's files into fresh page-aligned host memory, and page-locking
/// those bytes with the transport's register_host (cudaHostRegister on a GPU). ddo's setup
/// reads the weights, page-locks the streamed ones and uploads the resident ones; however it
/// overlaps them, the machine cannot do it faster than the slower of reading every byte into
/// fresh pages and registering them, so setup ÷ max(read, registration) says how far ddo's
/// setup is from the floor (the goal: ≤ 1.3x with a warm page cache).
///
/// Measured a chunk at a time (each freshly mapped, read by the threads of one
/// parallel_reader, registered, unregistered, unmapped): the first touch of fresh pages is in
/// the read, as it is in ddo's packing, and the measurement needs one chunk of extra host memory,
/// not the model's size. Example code (examples/runner/).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "ddo/core/error.hpp"
#include "ddo/core/thread_limits.hpp"
#include "ddo/core/units.hpp"
#include "ddo/memory/host_buffer.hpp"
#include "ddo/model/file_reader.hpp"
#include "ddo/model/parallel_reader.hpp"
#include "ddo/model/weight_table.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief What measure_setup_floor() measured.
struct setup_floor {
  std::uint64_t bytes = 0;  ///< file bytes read (every file of the table, whole)
  std::size_t threads = 0;  ///< reader threads (the caller included)
  double read_s = 0.0;      ///< the parallel reads into fresh pages, summed over the chunks
  double register_s = 0.0;  ///< register_host of the same bytes, summed
  bool registered = true;   ///< false: the transport refused a chunk (register_s is then short)

  /// @brief max(read, registration): what the machine needs at least.
  [[nodiscard]] double floor_s() const noexcept { return std::max(read_s, register_s); }
  [[nodiscard]] double read_gbps() const noexcept {
    return read_s > 0 ? static_cast<double>(bytes) / read_s / 1e9 : 0.0;
  }
  [[nodiscard]] double register_gbps() const noexcept {
    return register_s > 0 ? static_cast<double>(bytes) / register_s / 1e9 : 0.0;
  }
};

/// @brief Reads every file of @p table into fresh page-aligned memory with @p threads reader
/// threads, @p chunk_bytes at a time, and page-locks each chunk with @p t.register_host (then
/// unregisters and unmaps it); the times of the reads and of the registrations, summed.
/// @throws io_error of a failed read; out_of_memory when a chunk cannot be mapped.
template <class Transport>
[[nodiscard]] setup_floor measure_setup_floor(const weight_table& table, Transport& t,
                                              std::size_t threads,
                                              std::uint64_t chunk_bytes = 2 * gib) {
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  DDO_EXPECTS(chunk_bytes > 0, "measure_setup_floor: chunk_bytes must be positive");
  setup_floor f;
  parallel_reader pool(std::clamp<std::size_t>(threads, 1, max_worker_threads));
  f.threads = pool.threads();
  for (const std::string& path : table.files()) {
    const file_reader reader(path, safetensors_backend::pread);
    for (std::uint64_t offset = 0; offset < reader.size(); offset += chunk_bytes) {
      const std::uint64_t n = std::min(chunk_bytes, reader.size() - offset);
      const host_buffer buffer(n);
      read_task task;
      task.dst = buffer.data();
      task.bytes = n;
      task.file = &reader;
      task.file_offset = offset;
      auto t0 = clock::now();
      pool.run(std::span<const read_task>(&task, 1));
      f.read_s += seconds(t0);
      t0 = clock::now();
      const bool ok = t.register_host(buffer.data(), static_cast<std::size_t>(buffer.size()));
      f.register_s += seconds(t0);
      if (ok)
        t.unregister_host(buffer.data());
      else
        f.registered = false;
      f.bytes += n;
    }
  }
  return f;
}

}  // namespace runner
}  // namespace v0
}  // namespace ddo
