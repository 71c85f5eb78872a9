// SPDX-License-Identifier: Apache-2.0
#pragma once
// ddo-run --devices' threads (runner/devices_run.hpp): one per device, held at a start gate until
// every device has finished its setup (or failed), so the steady steps overlap; a thread that
// cannot be created fails its device with a message instead of terminating the process.

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ddo::runner::devices_internal {

/// Holds every device until all finished setup (or failed), so the steady steps overlap.
class start_gate {
 public:
  explicit start_gate(std::size_t n) : waiting_(n) {}
  void arrive(bool wait) {
    std::unique_lock lock(mutex_);
    if (--waiting_ == 0) cv_.notify_all();
    if (wait) cv_.wait(lock, [&] { return waiting_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::size_t waiting_;
};

/// Makes a std::thread (the default of run_on_threads; a test passes one that throws).
struct spawn_thread {
  template <class F>
  std::thread operator()(F&& f) const {
    return std::thread(std::forward<F>(f));
  }
};

/// Runs @p body(d) for each device d of @p n on a thread of its own and joins them all; @p body
/// arrives at @p gate once. When a thread cannot be created (std::thread throws
/// std::system_error at the process's thread limit, or bad_alloc), that device and the later
/// ones are not started: @p not_started(d, why) tells each, the gate is opened for them (the
/// started devices would wait for them forever) and the started threads run on and are joined —
/// no joinable std::thread is destroyed (std::terminate). Returns how many devices started.
template <class Body, class NotStarted, class Spawn = spawn_thread>
std::size_t run_on_threads(std::size_t n, start_gate& gate, Body body, NotStarted not_started,
                           Spawn spawn = {}) {
  std::vector<std::thread> threads;
  threads.reserve(n);  // emplace_back then throws only where the thread was not created
  try {
    for (std::size_t d = 0; d < n; ++d) threads.push_back(spawn([&body, d] { body(d); }));
  } catch (const std::exception& e) {
    const std::size_t started = threads.size();
    const std::string why = "could not start its thread (" + std::to_string(started) + " of " +
                            std::to_string(n) + " device threads started): " + e.what();
    for (std::size_t d = started; d < n; ++d) {
      not_started(d, why);
      gate.arrive(false);
    }
  }
  for (auto& t : threads) t.join();
  return threads.size();
}

}  // namespace ddo::runner::devices_internal
