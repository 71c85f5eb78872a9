// SPDX-License-Identifier: Apache-2.0
// ddo-run --devices' threads (examples/runner/device_threads.hpp): a thread that cannot be
// created fails its device with a message; the started devices are released from the start gate
// and joined (before, the process terminated: a joinable std::thread destroyed).
#include "runner/device_threads.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

TEST_SUITE_BEGIN("runner");

TEST_CASE("--devices: a device thread that cannot start fails its devices, the others run") {
  using ddo::runner::devices_internal::run_on_threads;
  using ddo::runner::devices_internal::spawn_thread;
  using ddo::runner::devices_internal::start_gate;
  for (std::size_t fail_at : {0u, 2u, 4u}) {
    CAPTURE(fail_at);
    const std::size_t n = 5;
    start_gate gate(n);
    std::atomic<std::size_t> ran{0}, calls{0};
    std::vector<std::string> error(n);
    // Creates threads until the fail_at-th, which throws as std::thread does at the thread limit.
    auto spawn = [&](auto&& f) {
      if (calls++ == fail_at)
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                                "thread creation");
      return spawn_thread{}(std::forward<decltype(f)>(f));
    };
    const std::size_t started = run_on_threads(
        n, gate,
        [&](std::size_t) {
          gate.arrive(true);  // as run_device: waits for every device's setup
          ++ran;
        },
        [&](std::size_t d, const std::string& why) { error[d] = why; }, spawn);
    CHECK(started == fail_at);
    CHECK(ran == fail_at);  // the started ones were released from the gate and joined
    for (std::size_t d = 0; d < n; ++d) {
      CAPTURE(d);
      if (d < fail_at) {
        CHECK(error[d].empty());
      } else {
        CHECK(error[d].find("could not start its thread (" + std::to_string(fail_at) + " of 5") !=
              std::string::npos);
        CHECK(error[d].find("thread creation") != std::string::npos);
      }
    }
  }
  // Every thread made: each device ran once.
  start_gate gate(3);
  std::atomic<int> ran{0};
  CHECK(run_on_threads(
            3, gate,
            [&](std::size_t) {
              gate.arrive(true);
              ++ran;
            },
            [](std::size_t, const std::string&) { FAIL("no device fails"); }) == 3);
  CHECK(ran == 3);
}

TEST_SUITE_END();
