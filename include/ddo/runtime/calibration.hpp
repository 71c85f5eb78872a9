// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief Calibration through the library: an engine runs a few steps of its own model at two
/// token counts on a zero-resident calibration plan (`build_profile` with a `profile_name`), and
/// ddo turns what it measured into a capacity profile (format 4) for the overlap-aware planner.
///
/// @code
/// ddo::calibration_recorder recorder;
/// ddo::setup_options options;
/// options.runtime = recorder.runtime_options(options.runtime);  // metrics, compute timing, spans
/// auto setup = ddo::setup_offload(table, settings, component, options, transport);
/// ddo::offloader<ddo::linear_transport> off(table, std::move(setup), transport);
/// const auto profile = ddo::calibrate(off, recorder, settings.config,
///     [&](std::uint64_t tokens) { engine.step(off, tokens); }, ddo::calibration_options{1024,
///     4096});
/// ddo::profile_store(settings.profile_dir).save(profile);
/// @endcode
///
/// What is measured, per execution group: its compute on the engine's stream (timing events
/// after acquire's wait and at release: runtime_options::time_compute; on host_sim, the host
/// time the simulated stream ran it), its lead-in (the engine's stream time between the previous
/// group's release and this group's compute, less the wait for its load: the engine's own work
/// between groups, which the step predictor counts and copies overlap), the device time of each
/// load (copy spans) and its bytes by route (pinned, staged, file) as the plan placed them; the
/// device's name, the transport, the model's fingerprint, the ring, and the free-memory
/// low-water mark (sampled after every step). Medians over the measured steps; the first steps at
/// each token count are warm-up and are not used for compute (their loads are, so groups the ring
/// keeps loaded count too). The engine should drop each lease before acquiring the next group, so
/// that one group's compute span does not include the next one's wait.
///
/// The sustained pass (calibration_options::sustained_pass, on by default): at each token count
/// the same steps run again in compute-only mode (basic_offloader::set_compute_only: no copies,
/// leases address stale slot bytes), so the engine's stream runs its groups back to back as a
/// plan that hides its copies runs them. On a power-limited GPU that compute is slower than
/// the streaming pass's (the clock drops at the power cap; docs/calibration.md); the profile
/// keeps both and the planner plans with the sustained compute. The engine's outputs
/// of those steps are meaningless; an engine whose compute depends on the weights' values
/// (data-dependent routing) turns the pass off.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ddo/config/dynamic_offload_config.hpp"
#include "ddo/core/error.hpp"
#include "ddo/core/units.hpp"
#include "ddo/plan/budget_source.hpp"
#include "ddo/plan/plan.hpp"
#include "ddo/profile/capacity_profile.hpp"
#include "ddo/profile/model_fingerprint.hpp"
#include "ddo/runtime/runtime_options.hpp"
#include "ddo/runtime/trace.hpp"
#include "ddo/runtime/transport_setup.hpp"

namespace ddo {
inline namespace v0 {

/// @brief A trace_sink that keeps the copy and compute spans of a calibration, per group and
/// per token count. Forwards every span to @p next when given (the engine's own trace).
class calibration_recorder final : public trace_sink {
 public:
  explicit calibration_recorder(trace_sink* next = nullptr) : next_(next) {}

  /// @brief @p base with what calibration needs: metrics, compute timing, this recorder as
  /// the trace sink.
  [[nodiscard]] ddo::runtime_options runtime_options(ddo::runtime_options base = {}) {
    base.metrics = true;
    base.time_compute = true;
    base.trace = this;
    return base;
  }

  void on_span(const trace_span& s) override {
    {
      std::lock_guard lock(mutex_);
      if (s.kind == span_kind::copy || s.kind == span_kind::compute) {
        auto& per = s.kind == span_kind::copy ? copies_ : compute_[slot()];
        if (per.size() <= s.group) per.resize(s.group + 1);
        per[s.group].push_back(s.end_us - s.start_us);
      }
      if (s.kind == span_kind::compute || s.kind == span_kind::stall)
        harvest_.push_back({s.kind == span_kind::compute, s.group, s.start_us, s.end_us});
    }
    if (next_ != nullptr) next_->on_span(s);
  }

  /// @brief Spans from now on are compute at token point @p point (0: low, 1: high; 2 and 3:
  /// the same in the sustained pass; -1: warm-up, kept apart). Call after harvesting the previous
  /// point's spans (metrics(true)): the lead-ins of that harvest are counted under the point it was
  /// recorded at. The waiting harvest held the host back, so the gap before the next compute is not
  /// the engine's: no lead-in is counted across this call.
  void set_point(int point) {
    std::lock_guard lock(mutex_);
    count_lead_ins();
    last_compute_end_us_ = -1.0;
    point_ = point;
  }

  /// @brief Median load time (ns) of group @p g, 0 when it was never loaded.
  [[nodiscard]] std::uint64_t transfer_ns(std::size_t g) const {
    std::lock_guard lock(mutex_);
    return g < copies_.size() ? median_ns(copies_[g]) : 0;
  }
  /// @brief Median compute (ns) of group @p g at point @p point (0 to 3), 0 when none.
  [[nodiscard]] std::uint64_t compute_ns(std::size_t g, int point) const {
    std::lock_guard lock(mutex_);
    const auto& per = compute_[point];
    return g < per.size() ? median_ns(per[g]) : 0;
  }
  /// @brief Median lead-in (ns) of group @p g at point @p point: the engine's time on its
  /// stream between the previous compute's end and this group's compute start, less its wait
  /// for the load (capacity_profile.hpp, group_profile). 0 when none was seen.
  [[nodiscard]] std::uint64_t lead_in_ns(std::size_t g, int point) const {
    std::lock_guard lock(mutex_);
    const auto& per = lead_ins_[point];
    return g < per.size() ? median_ns(per[g]) : 0;
  }
  /// @brief Compute spans seen at point @p point for group @p g.
  [[nodiscard]] std::size_t compute_samples(std::size_t g, int point) const {
    std::lock_guard lock(mutex_);
    return g < compute_[point].size() ? compute_[point][g].size() : 0;
  }
  /// @brief One step's compute and lead-ins at @p point, summed over the first @p groups groups.
  [[nodiscard]] std::uint64_t step_ns(std::size_t groups, int point) const {
    std::uint64_t ns = 0;
    for (std::size_t g = 0; g < groups; ++g) ns += compute_ns(g, point) + lead_in_ns(g, point);
    return ns;
  }
  /// @brief Group @p g's medians into @p gp: its load, its compute and lead-in at the two token
  /// counts (points 0 and 1; with one count, the low one's for both) and, with @p sustained, its
  /// compute in the sustained pass (points 2 and 3).
  void group_timings(group_profile& gp, std::size_t g, bool two_counts, bool sustained) const {
    using median = std::uint64_t (calibration_recorder::*)(std::size_t, int) const;
    const auto low_high = [&](median ns, int point, std::uint64_t& low, std::uint64_t& high) {
      low = (this->*ns)(g, point);
      high = two_counts ? (this->*ns)(g, point + 1) : low;
    };
    gp.transfer_ns = transfer_ns(g);
    low_high(&calibration_recorder::compute_ns, 0, gp.compute_ns_low, gp.compute_ns_high);
    low_high(&calibration_recorder::lead_in_ns, 0, gp.lead_in_ns_low, gp.lead_in_ns_high);
    if (sustained)
      low_high(&calibration_recorder::compute_ns, 2, gp.sustained_compute_ns_low,
               gp.sustained_compute_ns_high);
  }

 private:
  static std::uint64_t median_ns(std::vector<double> us) {
    if (us.empty()) return 0;
    std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(us.size() / 2), us.end());
    return microseconds_to_ns(us[us.size() / 2]);
  }

  /// A compute or stall span of the harvest not yet counted (engine stream, device clock).
  struct engine_span {
    bool compute = false;
    std::size_t group = 0;
    double start_us = 0.0, end_us = 0.0;
  };

  static constexpr int warm_up = 4;  // where warm-up spans go (point -1)
  [[nodiscard]] int slot() const noexcept { return point_ < 0 ? warm_up : point_; }

  /// Lead-ins of the spans harvested since the last call, in stream order: a compute span's
  /// start less the previous compute's end (carried across the steps of a token point: the
  /// first group's lead-in is the engine's time between steps) less the wait for its load.
  void count_lead_ins() {
    std::sort(harvest_.begin(), harvest_.end(),
              [](const engine_span& a, const engine_span& b) { return a.start_us < b.start_us; });
    double waited_us = 0.0;
    for (const auto& s : harvest_) {
      if (!s.compute) {
        waited_us += s.end_us - s.start_us;
        continue;
      }
      if (last_compute_end_us_ >= 0.0) {
        auto& per = lead_ins_[slot()];
        if (per.size() <= s.group) per.resize(s.group + 1);
        per[s.group].push_back(std::max(0.0, s.start_us - last_compute_end_us_ - waited_us));
      }
      last_compute_end_us_ = std::max(last_compute_end_us_, s.end_us);
      waited_us = 0.0;
    }
    harvest_.clear();
  }

  trace_sink* next_;
  mutable std::mutex mutex_;
  int point_ = -1;
  std::vector<std::vector<double>> copies_;                // per group: load spans (µs)
  std::vector<std::vector<double>> compute_[warm_up + 1];  // per point, then warm-up
  std::vector<std::vector<double>> lead_ins_[warm_up + 1];
  std::vector<engine_span> harvest_;
  double last_compute_end_us_ = -1.0;
};

/// @brief How calibrate() runs.
struct calibration_options {
  std::uint64_t tokens_low = 0;   ///< the two token counts compute is timed at (0 < low ≤ high;
  std::uint64_t tokens_high = 0;  ///< equal: one count, no interpolation)
  int warmup_steps = 1;           ///< per token count and pass, not used for compute
  int measured_steps = 3;         ///< per token count and pass; medians over these
  /// Time compute again in compute-only mode, back to back (see this header's description).
  bool sustained_pass = true;
  /// The sustained pass warms up for at least this much compute (device time, estimated from
  /// the streaming pass's steps), and at least warmup_steps: a GPU's power controller takes
  /// a few hundred milliseconds to bring the clock down to what it sustains (on the H200, from
  /// 1980 to ~1550 MHz within 0.5 s of back-to-back compute), so a few short steps would be
  /// timed at the boost clock.
  double sustained_warmup_ms = 2000.0;
  /// Free device memory now; sampled before the first step and after every step (the
  /// low-water mark). Empty: the transport's device_memory() (cudaMemGetInfo; host_sim's
  /// ledger).
  std::function<std::uint64_t()> free_vram;
  /// Free device memory before the offloader was set up (setup_machine::device.free_bytes).
  /// Empty: what is free now plus the offloader's own device bytes.
  std::optional<std::uint64_t> free_vram_before;
};

namespace detail {

/// calibrate's preconditions (its @throws).
template <class Offloader>
void check_calibration(const Offloader& off, const calibration_recorder& recorder,
                       const dynamic_offload_config& config, const calibration_options& options) {
  DDO_EXPECTS(
      config.build_profile && !config.profile_name.empty(),
      "calibrate: set build_profile and profile_name (the profile is saved under that name)");
  validate_profile_name(config.profile_name);
  DDO_EXPECTS(
      off.plan().budgets.resident_source == resident_budget_source::build_profile,
      "calibrate: the offloader does not run a calibration plan (resident budget source '" +
          std::string(to_string(off.plan().budgets.resident_source)) +
          "'); plan it with build_profile = true so that nothing but rule weights is resident");
  DDO_EXPECTS(
      off.options().metrics && off.options().time_compute && off.options().trace == &recorder,
      "calibrate: set the offloader up with recorder.runtime_options() (metrics, "
      "time_compute and the recorder as trace sink)");
  DDO_EXPECTS(options.tokens_low > 0 && options.tokens_low <= options.tokens_high,
              "calibrate: need 0 < tokens_low <= tokens_high, got " +
                  std::to_string(options.tokens_low) + " and " +
                  std::to_string(options.tokens_high));
  DDO_EXPECTS(options.warmup_steps >= 0 && options.measured_steps >= 1,
              "calibrate: warmup_steps must be >= 0 and measured_steps >= 1");
  DDO_EXPECTS(options.sustained_warmup_ms >= 0.0 && options.sustained_warmup_ms <= 600'000.0,
              "calibrate: sustained_warmup_ms must be in [0, 600000], got " +
                  std::to_string(options.sustained_warmup_ms));
  DDO_EXPECTS(!off.compute_only(),
              "calibrate: the offloader is in compute-only mode; switch it off first");
}

/// What a profile of @p off is matched against when applied (the model's bytes and fingerprint,
/// the device, the transport) and what it was measured with (the ring, the token counts).
template <class Offloader, class Transport>
[[nodiscard]] calibration_measurement measured_with(const Offloader& off, Transport& transport,
                                                    const calibration_options& options) {
  calibration_measurement m;
  m.tokens_low = options.tokens_low;
  m.tokens_high = options.tokens_high;
  m.model_bytes = off.table().total_bytes();
  m.device_name = transport_device_name(transport);
  m.model_fingerprint = model_fingerprint(off.table());
  m.transport = std::string(transport.name());
  m.slot_count = off.slot_count();
  m.prefetch_depth = std::min<std::uint64_t>(off.options().prefetch_depth, off.slot_count());
  return m;
}

}  // namespace detail

/// @brief Runs the calibration steps through @p off and returns the profile to save (see this
/// header's description). @p run_step(tokens) runs one step of the engine's model through
/// @p off at that many tokens.
/// @throws usage_error when @p off does not run a calibration plan (`build_profile`), was not
/// set up with @p recorder's runtime_options(), or the options are invalid; config_error for an
/// invalid profile name.
template <class Offloader, class RunStep>
[[nodiscard]] capacity_profile calibrate(Offloader& off, calibration_recorder& recorder,
                                         const dynamic_offload_config& config, RunStep&& run_step,
                                         const calibration_options& options) {
  detail::check_calibration(off, recorder, config, options);
  auto& transport = off.transport();
  const auto free_now = [&]() -> std::uint64_t {
    return options.free_vram ? options.free_vram() : transport.device_memory().free_bytes;
  };
  calibration_measurement m = detail::measured_with(off, transport, options);
  const auto device = transport.device_memory();
  m.total_vram_bytes = device.total_bytes;
  // Free before ddo's own allocations (resident rule weights and the ring), so that the peak
  // counts them like the engine's activations.
  m.free_vram_before_bytes =
      options.free_vram_before
          ? *options.free_vram_before
          : std::min<std::uint64_t>(free_now() + off.device_bytes(),
                                    device.total_bytes != 0 ? device.total_bytes : ~0ull);
  m.min_free_vram_bytes = m.free_vram_before_bytes;
  const int points = options.tokens_low == options.tokens_high ? 1 : 2;
  const int passes = options.sustained_pass ? 2 : 1;
  // Whatever run_step throws, the offloader leaves compute-only mode (its leases are gone by
  // then: they unwound with run_step), so the engine's next step reads real weights.
  struct copying_again {
    Offloader& off;
    ~copying_again() {
      try {
        off.set_compute_only(false);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ddo: calibrate: leaving compute-only mode failed: %s\n", e.what());
      }
    }
  } restore{off};
  for (int point = 0; point < points; ++point) {
    const std::uint64_t tokens = point == 0 ? options.tokens_low : options.tokens_high;
    for (int pass = 0; pass < passes; ++pass) {
      off.set_compute_only(pass == 1);
      // Spans arrive when harvested: harvest (waiting) before switching what they count as (the
      // previous pass's spans under its point, then warm-up) — only then, so that the measured
      // steps run back to back as the engine runs them (a waiting harvest between steps would
      // put a host gap before each step's first group).
      (void)off.metrics(true);
      recorder.set_point(-1);
      int warmup = options.warmup_steps;
      // The sustained pass warms up for sustained_warmup_ms of the compute the streaming pass
      // measured.
      const std::uint64_t step_ns = pass == 1 ? recorder.step_ns(off.group_count(), point) : 0;
      if (step_ns > 0) {
        const double steps = options.sustained_warmup_ms * 1e6 / static_cast<double>(step_ns);
        warmup = std::max(warmup, static_cast<int>(std::min(steps + 0.999, 1e6)));
      }
      for (int step = 0; step < warmup + options.measured_steps; ++step) {
        if (step == warmup) {
          (void)off.metrics(true);
          recorder.set_point(point + 2 * pass);
        }
        off.begin_step();
        run_step(tokens);
        m.min_free_vram_bytes = std::min(m.min_free_vram_bytes, free_now());
      }
    }
  }
  (void)off.metrics(true);
  recorder.set_point(-1);
  off.set_compute_only(false);

  const auto& plan = off.plan();
  for (std::size_t g = 0; g < plan.groups.size(); ++g) {
    const auto& pg = plan.groups[g];
    DDO_EXPECTS(recorder.compute_samples(g, 0) > 0,
                "calibrate: no compute was timed for group '" + pg.name +
                    "': run_step must acquire every group through the offloader");
    recorder.group_timings(m.groups.emplace_back(group_profile{
                               pg.name, pg.bytes(placement::pinned_host),
                               pg.bytes(placement::pageable_host), pg.bytes(placement::file)}),
                           g, points == 2, passes == 2);
  }
  return make_capacity_profile(config.profile_name, m, config.profile_vram_headroom_gb);
}

}  // namespace v0
}  // namespace ddo
