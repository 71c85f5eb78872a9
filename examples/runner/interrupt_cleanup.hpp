// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The programs' side of ddo's file-writing rule (ddo/core/atomic_file.hpp): on SIGINT or
/// SIGTERM, remove this process's temporaries from the directories it writes to, then exit with
/// 128 + the signal number. Example code (examples/runner/): the library installs no handlers.
///
/// How: the signals are blocked in every thread (create this object before any thread starts)
/// and one thread receives them with sigwait, so the cleanup runs in a normal thread where
/// std::filesystem may be used — no async-signal-safety limits.

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "ddo/core/atomic_file.hpp"

namespace ddo {
inline namespace v0 {
namespace runner {

/// @brief Removes this process's temporaries from the watched directories on SIGINT/SIGTERM.
class interrupt_cleanup {
 public:
  /// @param program the program name for the message printed on interruption.
  explicit interrupt_cleanup(std::string program) : program_(std::move(program)) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGUSR2);  // our own "stop" message to the waiting thread
    pthread_sigmask(SIG_BLOCK, &set_, &previous_);
    waiter_ = std::thread([this] { wait_loop(); });
  }
  interrupt_cleanup(const interrupt_cleanup&) = delete;
  interrupt_cleanup& operator=(const interrupt_cleanup&) = delete;
  ~interrupt_cleanup() {
    pthread_kill(waiter_.native_handle(), SIGUSR2);
    waiter_.join();
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }

  /// @brief Also cleans @p dir (its direct entries named like ddo temporaries of this process).
  void watch(const std::filesystem::path& dir) {
    std::lock_guard lock(mutex_);
    dirs_.push_back(dir);
  }

  /// @brief Removes this process's temporaries from the watched directories now.
  std::size_t clean() {
    std::lock_guard lock(mutex_);
    std::size_t removed = 0;
    const pid_t self = ::getpid();
    for (const auto& dir : dirs_) {
      std::error_code ec;
      std::filesystem::directory_iterator it(dir, ec), end;
      for (; !ec && it != end; it.increment(ec)) {
        if (temporary_owner(it->path().filename().string()) != self) continue;
        std::error_code rm;
        if (std::filesystem::remove_all(it->path(), rm) > 0 && !rm) ++removed;
      }
    }
    return removed;
  }

 private:
  void wait_loop() {
    for (;;) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      if (sig == SIGUSR2) return;
      const std::size_t removed = clean();
      std::fprintf(stderr, "%s: interrupted by %s; removed %zu temporar%s\n", program_.c_str(),
                   sig == SIGINT ? "SIGINT" : "SIGTERM", removed, removed == 1 ? "y" : "ies");
      std::fflush(stderr);
      ::_exit(128 + sig);
    }
  }

  std::string program_;
  sigset_t set_{};
  sigset_t previous_{};
  std::mutex mutex_;
  std::vector<std::filesystem::path> dirs_;
  std::thread waiter_;  // last: started after every other member exists
};

}  // namespace runner
}  // namespace v0
}  // namespace ddo
