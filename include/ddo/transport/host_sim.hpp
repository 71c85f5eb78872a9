// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief ddo::host_sim_transport: host memory stands in for the device, worker threads for the
/// CUDA streams (and so for the copy engine). A real transport with real concurrency, so the
/// runtime's ordering rules are exercised (and checked by ThreadSanitizer) on machines with no
/// GPU.
///
/// Model: every stream is a thread draining a FIFO of tasks. A copy is a task that memcpy's on
/// the copy stream's thread (optionally throttled to a bandwidth). An event records a marker in a
/// stream's FIFO; waiting on an event enqueues a task that blocks the waiting stream until the
/// marker ran — the same semantics as cudaEventRecord / cudaStreamWaitEvent, including "an event
/// never recorded is complete". The engine's compute stream is a host_sim stream too: tests and
/// the runner enqueue their "kernels" on it with enqueue().
///
/// The transport also polices the contract the CUDA transports rely on: copies outside a device
/// allocation are usage errors, and a copy from a pageable (unpinned) source is counted in
/// pageable_direct_copies(), which ddo's runtime keeps at zero. Its memory is accounted in an
/// allocation_ledger (ledger()); unlike linear it checks every copy in every build.
///
/// Graphs (issue 29) are modelled as CUDA has them: begin_capture()/end_capture() turn the work
/// issued on a stream into a `graph` whose nodes keep the values of capture time (ranges, flag
/// values, events); launch_graph() replays them, a wait node waiting on its event's record as of
/// the launch, a record node recording at every launch, a memory wait (wait_value) polling its
/// flag for the value captured. A protocol right only on the first replay therefore fails here
/// as on a GPU; host_sim_options::wait_value_timeout_ms turns a wait that never completes into a
/// stream error instead of a hang. A stream that waits on an event recorded inside a capture
/// joins it (a fork; capture_id() names the capture), as in CUDA.
///
/// While a capture is open, the calls that synchronize or may synchronize in CUDA (event and
/// stream synchronize, event query, elapsed time, allocating and freeing device or pinned memory,
/// registering host memory) are refused as CUDA's global capture mode refuses them
/// (cudaErrorStreamCaptureUnsupported, issue 37): on the capturing thread, and on any other thread
/// whose capture mode is global. bind_thread() puts a thread of ddo's own in thread-local mode (it
/// never captures: an engine's capture must not refuse its host waits) and relaxed_capture() lets
/// the calling thread through while alive, as cudaThreadExchangeStreamCaptureMode does for the
/// linear transport. host_sim_options::refuse_unsafe_calls_in_capture turns the check off.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddo/core/chrono.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/transport/allocation_ledger.hpp"
#include "ddo/transport/concepts.hpp"
#include "ddo/transport/limited_ledger.hpp"

namespace ddo {
inline namespace v0 {

/// @brief The host several simulated devices share (host_sim_options::host): memory
/// registered through any of them counts as page-locked for all, as CUDA's portable
/// registration does (linear_transport). Thread-safe.
class host_sim_host {
 public:
  void add(const void* p, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    ranges_[address(p)] = address(p) + bytes;
  }
  void remove(const void* p) {
    std::lock_guard lock(mutex_);
    ranges_.erase(address(p));
  }
  /// @brief Whether [p, p + bytes) lies inside one registration.
  [[nodiscard]] bool contains(const void* p, std::size_t bytes) const {
    std::lock_guard lock(mutex_);
    auto it = ranges_.upper_bound(address(p));
    return it != ranges_.begin() && address(p) + bytes <= std::prev(it)->second;
  }

 private:
  static std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::uintptr_t> ranges_;  // begin -> end
};

/// @brief Settings of the simulated device.
struct host_sim_options {
  /// Simulated VRAM: allocations beyond it throw out_of_memory(memory_tier::device, ...).
  std::uint64_t device_capacity_bytes = 4 * gib;
  /// Copy bandwidth in bytes per second for both directions; 0 copies as fast as memcpy.
  double bandwidth_bytes_per_second = 0.0;
  /// Makes every register_host fail (tests of allow_pin_memory_fallback).
  bool fail_host_registration = false;
  /// register_host fails once this many bytes are registered (0: no limit).
  std::uint64_t registration_limit_bytes = 0;
  /// Several simulated devices of one host: registrations through any transport given this
  /// host count as pinned for all of them (null: this device's registrations only).
  std::shared_ptr<host_sim_host> host = nullptr;
  /// A memory wait (wait_value) not satisfied within this many milliseconds fails its stream
  /// (synchronize rethrows) instead of blocking it forever: a deadlock fails a test (0: no limit).
  std::uint64_t wait_value_timeout_ms = 60'000;
  /// allocate_pinned returns addresses this many bytes past a 4096-byte boundary (a multiple of
  /// 16 below 4096): cudaHostAlloc promises no page alignment, and code that needs it (O_DIRECT)
  /// must cope.
  std::uint64_t pinned_misalignment_bytes = 0;
  /// A synchronizing call while a capture is open fails (a usage_error naming the call and the
  /// capture) where CUDA's global capture mode refuses it: see the file comment.
  bool refuse_unsafe_calls_in_capture = true;
};

/// @brief CUDA's stream-capture interaction modes (cudaStreamCaptureMode) as host_sim models
/// them, per thread: global (the default) refuses a synchronizing call while this thread or any
/// other captures; thread_local_mode only while this thread captures; relaxed never.
enum class host_sim_capture_mode { global, thread_local_mode, relaxed };

namespace detail {

/// The calling thread's capture mode (cudaThreadExchangeStreamCaptureMode's, per thread).
inline thread_local host_sim_capture_mode host_sim_thread_capture_mode =
    host_sim_capture_mode::global;

class host_sim_stream_state;
/// One node of a captured graph: what a launch issues on the launching stream.
using host_sim_node = std::function<void(host_sim_stream_state*)>;

/// One capture (cudaStreamBeginCapture .. cudaStreamEndCapture): its nodes, in issue order, and
/// its id (cudaStreamGetCaptureInfo's). A stream that waits on an event recorded inside it joins
/// it (a fork, as in CUDA); the capture ends for every stream at once when its origin ends it.
struct host_sim_capture {
  std::vector<host_sim_node> nodes;
  std::uint64_t id = 0;
  const host_sim_stream_state* origin = nullptr;  // the stream that began it (ends it)
  std::thread::id thread{};  // the thread that began it: its synchronizing calls are refused
  bool ended = false;
};

/// One simulated stream: a worker thread draining a FIFO of tasks.
class host_sim_stream_state {
 public:
  host_sim_stream_state() : worker_([this] { run(); }) {}
  host_sim_stream_state(const host_sim_stream_state&) = delete;
  host_sim_stream_state& operator=(const host_sim_stream_state&) = delete;
  ~host_sim_stream_state() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    work_cv_.notify_all();
    worker_.join();
  }

  /// While set and not ended, work issued on the stream is captured into it (the issuing
  /// thread's only).
  std::shared_ptr<host_sim_capture> capture;
  [[nodiscard]] host_sim_capture* active_capture() const noexcept {
    return capture != nullptr && !capture->ended ? capture.get() : nullptr;
  }

  void enqueue(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
      ++enqueued_;
    }
    work_cv_.notify_one();
  }

  /// Blocks until every task enqueued before the call has run; rethrows the first task failure.
  void synchronize() {
    std::unique_lock lock(mutex_);
    const std::uint64_t target = enqueued_;
    done_cv_.wait(lock, [&] { return completed_ >= target; });
    if (error_) {
      auto error = std::exchange(error_, nullptr);
      std::rethrow_exception(error);
    }
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and drained
      auto task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      std::exception_ptr failure;
      try {
        task();
      } catch (...) {
        failure = std::current_exception();
      }
      task = nullptr;  // destroy captured state outside the lock
      lock.lock();
      if (failure && !error_) error_ = failure;
      ++completed_;
      done_cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t enqueued_ = 0;
  std::uint64_t completed_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;  // last: started after every other member exists
};

/// One simulated event: each record gets a sequence number; a record is pending until the
/// stream reaches it. Waits capture the latest sequence number at call time (CUDA semantics).
struct host_sim_event_state {
  std::mutex mutex;
  std::condition_variable cv;
  std::uint64_t recorded = 0;            // sequence number of the latest record
  std::set<std::uint64_t> pending;       // records enqueued but not reached yet
  std::uint64_t latest_completed = 0;    // highest sequence number reached
  std::chrono::steady_clock::time_point when{};  // when latest_completed was reached
  bool timing = false;
  std::weak_ptr<host_sim_capture> captured_in;  // the capture of its latest record, if any

  void wait_for(std::uint64_t target) {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return !pending.contains(target); });
  }
};

/// State shared by all copies of one host_sim_transport.
struct host_sim_state {
  explicit host_sim_state(host_sim_options o)
      : options(o),
        memory("host_sim",
               {.device = o.device_capacity_bytes,
                .registered = o.registration_limit_bytes != 0 ? o.registration_limit_bytes
                                                              : unlimited_bytes},
               "the simulated device capacity") {
    DDO_EXPECTS(o.pinned_misalignment_bytes < 4096 && o.pinned_misalignment_bytes % 16 == 0,
                "host_sim_options::pinned_misalignment_bytes must be a multiple of 16 below "
                "4096, got " + std::to_string(o.pinned_misalignment_bytes));
  }
  host_sim_options options;
  limited_ledger memory;  // capacity and registration limit checked and accounted as one step
  std::atomic<std::uint64_t> pageable_direct_copies{0};
  std::atomic<std::uint64_t> copies{0};
  std::atomic<std::uint64_t> bytes_to_device{0};
  std::atomic<std::uint64_t> synchronizations{0};
  std::mutex captures_mutex;
  std::vector<std::weak_ptr<host_sim_capture>> open_captures;  // begun, not ended
};

}  // namespace detail

/// @brief The simulated transport. Copies share one simulated device (its memory, its
/// accounting); see the file comment.
class host_sim_transport {
 public:
  using transport_category = transport_tag;

  /// @brief An owning stream (a worker thread). Destroying it drains its queue first.
  class stream {
   public:
    stream() = default;
    [[nodiscard]] detail::host_sim_stream_state* get() const noexcept { return state_.get(); }

   private:
    friend class host_sim_transport;
    std::unique_ptr<detail::host_sim_stream_state> state_;
  };

  /// @brief A non-owning view of a stream, passed by value.
  struct stream_view {
    detail::host_sim_stream_state* state = nullptr;
    friend bool operator==(stream_view, stream_view) = default;
  };

  /// @brief A captured graph (begin_capture / end_capture): copyable, immutable, launched with
  /// launch_graph() as often as wanted.
  class graph {
   public:
    graph() = default;
    [[nodiscard]] std::size_t node_count() const noexcept {
      return nodes_ ? nodes_->nodes.size() : 0;
    }

   private:
    friend class host_sim_transport;
    std::shared_ptr<const detail::host_sim_capture> nodes_;
  };
  using graph_exec = graph;

  /// @brief An owning event; pending tasks keep its state alive, so it may be destroyed early.
  class event {
   public:
    event() = default;

   private:
    friend class host_sim_transport;
    std::shared_ptr<detail::host_sim_event_state> state_;
  };

  explicit host_sim_transport(host_sim_options options = {})
      : state_(std::make_shared<detail::host_sim_state>(options)) {}

  [[nodiscard]] std::string_view name() const noexcept { return "host_sim"; }
  /// The device is simulated (transport_with_simulated_device), for every transport that derives
  /// from this one too.
  static constexpr bool simulated_device = true;
  [[nodiscard]] const host_sim_options& options() const noexcept { return state_->options; }

  // --- streams and events --------------------------------------------------------------------
  [[nodiscard]] stream make_stream() {
    stream s;
    s.state_ = std::make_unique<detail::host_sim_stream_state>();
    return s;
  }
  [[nodiscard]] static stream_view view(stream& s) noexcept { return {s.get()}; }

  [[nodiscard]] event make_event(bool timing) {
    event e;
    e.state_ = std::make_shared<detail::host_sim_event_state>();
    e.state_->timing = timing;
    return e;
  }

  /// @brief Enqueues an engine task ("kernel") on @p s; it runs after everything enqueued before.
  void enqueue(stream_view s, std::function<void()> task) {
    require(s);
    issue_task(s, std::move(task));
  }

  /// @brief Records @p e on @p s; captured, a record node that records @p e at every launch.
  void record(event& e, stream_view s) {
    require(s);
    require(e);
    {
      std::lock_guard lock(e.state_->mutex);
      e.state_->captured_in = s.state->capture;  // a wait on it forks the capture (see wait)
      if (s.state->active_capture() == nullptr) e.state_->captured_in.reset();
    }
    issue(s, [st = e.state_](detail::host_sim_stream_state* on) {
      std::uint64_t seq = 0;
      {
        std::lock_guard lock(st->mutex);
        seq = ++st->recorded;
        st->pending.insert(seq);
      }
      on->enqueue([st, seq] {
        {
          std::lock_guard lock(st->mutex);
          st->pending.erase(seq);
          if (seq > st->latest_completed) {
            st->latest_completed = seq;
            st->when = std::chrono::steady_clock::now();
          }
        }
        st->cv.notify_all();
      });
    });
  }

  /// @brief Later work on @p s waits for @p e's latest record; captured, a wait node that takes
  /// the latest record as of each launch (as CUDA's event wait nodes do). If that record was made
  /// inside a capture and @p s is not capturing, @p s joins that capture (a fork, as in CUDA):
  /// its later work goes into the same graph, after the record (host_sim's graph is one list).
  void wait(stream_view s, const event& e) {
    require(s);
    require(e);
    if (s.state->active_capture() == nullptr) {
      std::shared_ptr<detail::host_sim_capture> fork;
      {
        std::lock_guard lock(e.state_->mutex);
        fork = e.state_->captured_in.lock();
      }
      if (fork != nullptr && !fork->ended) {
        s.state->capture = std::move(fork);
        return;  // the edge is the list's order
      }
    }
    issue(s, [st = e.state_](detail::host_sim_stream_state* on) {
      std::uint64_t target = 0;
      {
        std::lock_guard lock(st->mutex);
        target = st->recorded;
      }
      if (target == 0) return;  // never recorded: complete (as in CUDA)
      on->enqueue([st, target] { st->wait_for(target); });
    });
  }

  // --- graphs and memory operations (issue 29) --------------------------------------------------
  /// @brief Starts capturing the work issued on @p s (cudaStreamBeginCapture).
  void begin_capture(stream_view s) {
    require(s);
    DDO_EXPECTS(s.state->active_capture() == nullptr,
                "host_sim_transport::begin_capture: already capturing");
    static std::atomic<std::uint64_t> last_id{0};
    s.state->capture = std::make_shared<detail::host_sim_capture>();
    s.state->capture->id = ++last_id;
    s.state->capture->origin = s.state;
    s.state->capture->thread = std::this_thread::get_id();
    std::lock_guard lock(state_->captures_mutex);
    std::erase_if(state_->open_captures, [](const auto& c) { return c.expired(); });
    state_->open_captures.push_back(s.state->capture);
  }
  /// @brief Ends the capture begun on @p s and returns the graph (cudaStreamEndCapture); the
  /// streams that joined it stop capturing too.
  [[nodiscard]] graph end_capture(stream_view s) {
    require(s);
    DDO_EXPECTS(s.state->active_capture() != nullptr,
                "host_sim_transport::end_capture: not capturing");
    DDO_EXPECTS(s.state->capture->origin == s.state,
                "host_sim_transport::end_capture: the stream joined a capture begun on another "
                "stream (a fork); end it on the stream that began it");
    graph g;
    {
      std::lock_guard lock(state_->captures_mutex);
      std::erase_if(state_->open_captures, [&](const auto& c) {
        return c.expired() || c.lock() == s.state->capture;
      });
    }
    s.state->capture->ended = true;
    g.nodes_ = std::exchange(s.state->capture, nullptr);
    return g;
  }
  /// @brief Whether @p s is being captured (cudaStreamIsCapturing).
  [[nodiscard]] static bool capturing(stream_view s) {
    require(s);
    return s.state->active_capture() != nullptr;
  }
  /// @brief The id of the capture @p s takes part in, its origin's or a fork's; 0 when @p s is
  /// not capturing (cudaStreamGetCaptureInfo).
  [[nodiscard]] static std::uint64_t capture_id(stream_view s) {
    require(s);
    const auto* c = s.state->active_capture();
    return c != nullptr ? c->id : 0;
  }
  /// @brief Launches @p g on @p s (cudaGraphLaunch): its nodes are issued in capture order.
  void launch_graph(const graph& g, stream_view s) {
    require(s);
    DDO_EXPECTS(g.nodes_ != nullptr, "host_sim_transport::launch_graph: empty graph");
    DDO_EXPECTS(s.state->active_capture() == nullptr,
                "host_sim_transport::launch_graph: the stream is being captured");
    for (const auto& node : g.nodes_->nodes) node(s.state);
  }
  /// @brief An edge inside one capture (fork or join; CUDA: a plain cudaEventRecord): host_sim's
  /// graph is one list in issue order, so a record and a wait do it.
  void record_edge(event& e, stream_view s) { record(e, s); }
  /// @brief Makes @p s depend on @p e's record_edge; a stream not capturing joins the capture.
  void wait_edge(stream_view s, const event& e) { wait(s, e); }
  /// @brief Always available (the CUDA transports check their driver here).
  static void check_graph_streaming() noexcept {}

  /// @brief Sets the calling thread's capture mode; returns the previous one
  /// (cudaThreadExchangeStreamCaptureMode).
  static host_sim_capture_mode exchange_capture_mode(host_sim_capture_mode mode) noexcept {
    return std::exchange(detail::host_sim_thread_capture_mode, mode);
  }
  /// @brief While alive, the calling thread's capture mode is relaxed (linear_transport's
  /// relaxed_capture: graph streaming's allocations inside an engine's capture, teardown).
  class relaxed_capture_mode {
   public:
    relaxed_capture_mode() noexcept
        : previous_(exchange_capture_mode(host_sim_capture_mode::relaxed)) {}
    ~relaxed_capture_mode() { exchange_capture_mode(previous_); }
    relaxed_capture_mode(const relaxed_capture_mode&) = delete;
    relaxed_capture_mode& operator=(const relaxed_capture_mode&) = delete;

   private:
    host_sim_capture_mode previous_;
  };
  [[nodiscard]] static relaxed_capture_mode relaxed_capture() noexcept { return {}; }
  /// @brief The runtime calls it first on each of its own threads: they never capture, so an
  /// engine's global-mode capture must not refuse their host waits (thread-local mode, as the
  /// linear transport sets it).
  static void bind_thread() noexcept {
    exchange_capture_mode(host_sim_capture_mode::thread_local_mode);
  }

  /// @brief @p count zeroed 32-bit flags that both the host and the simulated device may read
  /// and write (CUDA: mapped pinned memory); counted as pinned memory.
  [[nodiscard]] std::uint32_t* allocate_flags(std::size_t count) {
    auto* p = allocate_pinned(count * sizeof(std::uint32_t));
    std::memset(p, 0, count * sizeof(std::uint32_t));
    return reinterpret_cast<std::uint32_t*>(p);
  }
  void free_flags(std::uint32_t* flags, std::size_t count) {
    free_pinned(reinterpret_cast<std::byte*>(flags), count * sizeof(std::uint32_t));
  }
  /// @brief Later work on @p s waits until `*flag == value` (cuStreamWaitValue32, EQ).
  void wait_value(stream_view s, std::uint32_t* flag, std::uint32_t value) {
    require(s);
    const std::uint64_t timeout_ms = state_->options.wait_value_timeout_ms;
    issue_task(s, [flag, value, timeout_ms] {
      const auto start = std::chrono::steady_clock::now();
      while (std::atomic_ref<std::uint32_t>(*flag).load(std::memory_order_acquire) != value) {
        if (timeout_ms != 0 &&
            std::chrono::steady_clock::now() - start > std::chrono::milliseconds(timeout_ms))
          throw usage_error("host_sim_transport: a memory wait for value " + std::to_string(value) +
                            " was not satisfied in " + std::to_string(timeout_ms) +
                            " ms (a deadlock, or a flag protocol right only on the first replay)");
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    });
  }
  /// @brief Sets `*flag = value` after the work before it on @p s (cuStreamWriteValue32).
  void write_value(stream_view s, std::uint32_t* flag, std::uint32_t value) {
    require(s);
    issue_task(s, [flag, value] {
      std::atomic_ref<std::uint32_t>(*flag).store(value, std::memory_order_release);
    });
  }

  [[nodiscard]] bool ready(const event& e) {
    require(e);
    refuse_in_capture("ready (cudaEventQuery)");
    std::lock_guard lock(e.state_->mutex);
    return !e.state_->pending.contains(e.state_->recorded);
  }

  void synchronize(const event& e) {
    require(e);
    refuse_in_capture("synchronize(event) (cudaEventSynchronize)");
    ++state_->synchronizations;
    std::uint64_t target = 0;
    {
      std::lock_guard lock(e.state_->mutex);
      target = e.state_->recorded;
    }
    if (target != 0) e.state_->wait_for(target);
  }

  void synchronize(stream_view s) {
    require(s);
    DDO_EXPECTS(s.state->active_capture() == nullptr,
                "host_sim_transport::synchronize: the stream is being captured");
    refuse_in_capture("synchronize(stream) (cudaStreamSynchronize)");
    ++state_->synchronizations;
    s.state->synchronize();
  }

  /// @brief Milliseconds between two completed timing events.
  [[nodiscard]] double elapsed_ms(const event& start, const event& end) {
    require(start);
    require(end);
    DDO_EXPECTS(start.state_->timing && end.state_->timing,
                "host_sim_transport::elapsed_ms: both events must be created with timing=true");
    refuse_in_capture("elapsed_ms (cudaEventSynchronize, cudaEventElapsedTime)");
    synchronize(start);
    synchronize(end);
    std::chrono::steady_clock::time_point a, b;
    {
      std::lock_guard lock(start.state_->mutex);
      a = start.state_->when;
    }
    {
      std::lock_guard lock(end.state_->mutex);
      b = end.state_->when;
    }
    return std::chrono::duration<double, std::milli>(b - a).count();
  }

  // --- memory (accounted in the shared allocation_ledger) ---------------------------------------
  [[nodiscard]] std::byte* allocate_device(std::size_t bytes) {
    DDO_EXPECTS(bytes > 0, "host_sim_transport::allocate_device: zero bytes requested");
    refuse_in_capture("allocate_device (cudaMalloc)");
    return state_->memory.allocate(ledger_kind::device, bytes, "host_sim_transport::allocate_device", [&] {
      return static_cast<std::byte*>(::operator new (bytes, std::align_val_t{256}));
    });
  }

  void free_device(std::byte* p, std::size_t bytes) {
    refuse_in_capture("free_device (cudaFree)");
    state_->memory.remove(ledger_kind::device, p, bytes, "host_sim_transport::free_device");
    ::operator delete(p, std::align_val_t{256});
  }

  /// @brief Accounts [p, p + bytes) as simulated device memory held by an extension of the
  /// simulator (VMM mode's physical handles, host_sim_vmm.hpp), with allocate_device's capacity
  /// check. @throws out_of_memory(memory_tier::device, ...) over the capacity.
  void add_device_range(const void* p, std::uint64_t bytes, std::string_view who) {
    state_->memory.add(ledger_kind::device, p, bytes, who);
  }
  /// @brief Ends the account add_device_range() started.
  void remove_device_range(const void* p, std::uint64_t bytes, std::string_view who) {
    state_->memory.remove(ledger_kind::device, p, bytes, who);
  }

  [[nodiscard]] std::byte* allocate_pinned(std::size_t bytes) {
    DDO_EXPECTS(bytes > 0, "host_sim_transport::allocate_pinned: zero bytes requested");
    refuse_in_capture("allocate_pinned (cudaHostAlloc)");
    const std::size_t offset = state_->options.pinned_misalignment_bytes;
    return state_->memory.allocate(ledger_kind::pinned, bytes, "host_sim_transport::allocate_pinned", [&] {
      auto* p = static_cast<std::byte*>(::operator new (bytes + offset, std::align_val_t{4096}));
      return p + offset;
    });
  }

  void free_pinned(std::byte* p, std::size_t bytes) {
    refuse_in_capture("free_pinned (cudaFreeHost)");
    state_->memory.remove(ledger_kind::pinned, p, bytes, "host_sim_transport::free_pinned");
    ::operator delete(p - state_->options.pinned_misalignment_bytes, std::align_val_t{4096});
  }

  /// @brief Page-locks [p, p + bytes). Returns false (like a failed cudaHostRegister) when
  /// registration is made to fail, over the limit, or overlapping an existing registration.
  [[nodiscard]] bool register_host(void* p, std::size_t bytes) {
    DDO_EXPECTS(p != nullptr && bytes > 0,
                "host_sim_transport::register_host: null pointer or zero bytes");
    refuse_in_capture("register_host (cudaHostRegister)");
    if (state_->options.fail_host_registration) return false;
    if (!state_->memory.try_add(ledger_kind::registered, p, bytes,
                                "host_sim_transport::register_host", ledger_kind::pinned))
      return false;
    if (state_->options.host) state_->options.host->add(p, bytes);
    return true;
  }

  void unregister_host(void* p) {
    refuse_in_capture("unregister_host (cudaHostUnregister)");
    state_->memory.remove(ledger_kind::registered, p, 0, "host_sim_transport::unregister_host");
    if (state_->options.host) state_->options.host->remove(p);
  }

  // --- copies --------------------------------------------------------------------------------
  /// @brief Copies host → device on @p s. The source must stay valid until the copy ran.
  void copy_to_device(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s) {
    require(s);
    // host_sim checks every copy in every build: policing the contract is its job.
    const auto& ledger = state_->memory.ledger();
    DDO_EXPECTS(ledger.contains(ledger_kind::device, dst, bytes),
                "host_sim_transport::copy_to_device: destination range of " +
                    std::to_string(bytes) + " bytes is not inside one device allocation");
    if (!ledger.contains(ledger_kind::pinned, src, bytes) &&
        !ledger.contains(ledger_kind::registered, src, bytes) &&
        !(state_->options.host && state_->options.host->contains(src, bytes)))
      state_->pageable_direct_copies.fetch_add(1, std::memory_order_relaxed);
    state_->copies.fetch_add(1, std::memory_order_relaxed);
    state_->bytes_to_device.fetch_add(bytes, std::memory_order_relaxed);
    const double bw = state_->options.bandwidth_bytes_per_second;
    issue_task(s, [dst, src, bytes, bw] {
      const auto start = std::chrono::steady_clock::now();
      std::memcpy(dst, src, bytes);
      throttle(start, bytes, bw);
    });
  }

  /// @brief Copies device → host on @p s.
  void copy_to_host(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s) {
    require(s);
    DDO_EXPECTS(state_->memory.ledger().contains(ledger_kind::device, src, bytes),
                "host_sim_transport::copy_to_host: source range of " + std::to_string(bytes) +
                    " bytes is not inside one device allocation");
    const double bw = state_->options.bandwidth_bytes_per_second;
    issue_task(s, [dst, src, bytes, bw] {
      const auto start = std::chrono::steady_clock::now();
      std::memcpy(dst, src, bytes);
      throttle(start, bytes, bw);
    });
  }

  /// @brief Sets device bytes to @p value on @p s (poisoning).
  void fill_device(std::byte* dst, int value, std::size_t bytes, stream_view s) {
    require(s);
    DDO_EXPECTS(state_->memory.ledger().contains(ledger_kind::device, dst, bytes),
                "host_sim_transport::fill_device: range is not inside one device allocation");
    issue_task(s, [dst, value, bytes] { std::memset(dst, value, bytes); });
  }

  [[nodiscard]] device_memory_info device_memory() const {
    return {state_->memory.available(ledger_kind::device), state_->options.device_capacity_bytes};
  }

  // --- accounting (for tests and metrics) ----------------------------------------------------
  /// @brief The shared account of this simulated device's allocations.
  [[nodiscard]] const allocation_ledger& ledger() const noexcept { return state_->memory.ledger(); }
  [[nodiscard]] std::uint64_t device_bytes_in_use() const { return state_->memory.ledger().in_use(ledger_kind::device); }
  [[nodiscard]] std::uint64_t peak_device_bytes() const { return state_->memory.ledger().peak(ledger_kind::device); }
  /// Sets the device peak to the bytes in use now (between phases of a test or a run).
  void reset_peak_device_bytes() noexcept { state_->memory.reset_peak(ledger_kind::device); }
  /// @brief Pinned host bytes: allocate_pinned plus register_host.
  [[nodiscard]] std::uint64_t pinned_bytes_in_use() const {
    return state_->memory.ledger().in_use(ledger_kind::pinned) + state_->memory.ledger().in_use(ledger_kind::registered);
  }
  [[nodiscard]] std::uint64_t registered_bytes_in_use() const { return state_->memory.ledger().in_use(ledger_kind::registered); }
  /// @brief Copies whose source was neither pinned nor registered (ddo keeps this at zero).
  [[nodiscard]] std::uint64_t pageable_direct_copies() const { return state_->pageable_direct_copies.load(); }
  [[nodiscard]] std::uint64_t copies_issued() const { return state_->copies.load(); }
  [[nodiscard]] std::uint64_t bytes_to_device() const { return state_->bytes_to_device.load(); }
  /// @brief Host waits issued: synchronize(stream) and synchronize(event) calls (each a
  /// cudaStreamSynchronize / cudaEventSynchronize on a GPU route).
  [[nodiscard]] std::uint64_t synchronizations() const { return state_->synchronizations.load(); }
  /// @brief Resets the peak to the current use (between phases of a test).
  void reset_peak() { state_->memory.reset_peak(ledger_kind::device); }

 private:
  static void throttle(std::chrono::steady_clock::time_point start, std::size_t bytes, double bw) {
    if (bw <= 0.0) return;
    const auto target = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(static_cast<double>(bytes) / bw));
    std::this_thread::sleep_until(target);
  }
  /// Runs @p node on @p s now, or keeps it in the graph being captured on @p s.
  static void issue(stream_view s, detail::host_sim_node node) {
    if (auto* c = s.state->active_capture())
      c->nodes.push_back(std::move(node));
    else
      node(s.state);
  }
  /// issue() of one task (a copy, a fill, a memory operation, an engine "kernel").
  static void issue_task(stream_view s, std::function<void()> task) {
    if (auto* c = s.state->active_capture(); c == nullptr)
      s.state->enqueue(std::move(task));
    else
      c->nodes.push_back(
          [task = std::move(task)](detail::host_sim_stream_state* on) { on->enqueue(task); });
  }
  /// Refuses @p call where CUDA's capture modes do (see the file comment).
  void refuse_in_capture(std::string_view call) const {
    if (!state_->options.refuse_unsafe_calls_in_capture) return;
    const auto mode = detail::host_sim_thread_capture_mode;
    if (mode == host_sim_capture_mode::relaxed) return;
    const auto self = std::this_thread::get_id();
    std::lock_guard lock(state_->captures_mutex);
    for (const auto& weak : state_->open_captures) {
      const auto c = weak.lock();
      if (c == nullptr) continue;
      const bool own = c->thread == self;
      if (!own && mode != host_sim_capture_mode::global) continue;
      throw usage_error(
          "host_sim_transport::" + std::string(call) + " while stream capture " +
          std::to_string(c->id) + " is open (begun on " +
          (own ? std::string("this thread") : std::string("another thread, in global mode")) +
          "): CUDA refuses a synchronizing call during a capture "
          "(cudaErrorStreamCaptureUnsupported) and invalidates the capture. Make it before the "
          "capture begins or after it ends, or from a thread whose capture mode allows it "
          "(bind_thread: thread-local; relaxed_capture)");
    }
  }
  static void require(stream_view s) {
    DDO_EXPECTS(s.state != nullptr, "host_sim_transport: null or moved-from stream");
  }
  static void require(const event& e) {
    DDO_EXPECTS(e.state_ != nullptr, "host_sim_transport: null or moved-from event");
  }

  std::shared_ptr<detail::host_sim_state> state_;
};

static_assert(transport<host_sim_transport>);
static_assert(transport_with_ledger<host_sim_transport>);
static_assert(transport_with_graph_streaming<host_sim_transport>);

/// @brief The host_sim_transport under @p t: @p t itself (or what derives from it), or the one
/// at the bottom of its adaptors (host_sim_vmm_transport, nvme_transport<...>,
/// fault_injection_transport<...>: each holds its upstream). A stand-in engine issues its own
/// work and captures there (enqueue, begin_capture, end_capture), as an engine on a GPU uses the
/// CUDA stream API.
template <class T>
[[nodiscard]] host_sim_transport& host_sim_device(T& t) noexcept {
  if constexpr (std::is_base_of_v<host_sim_transport, T>)
    return t;
  else
    return host_sim_device(t.upstream());
}

}  // namespace v0
}  // namespace ddo
