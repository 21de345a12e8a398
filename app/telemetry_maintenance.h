// TelemetryMaintenance: keeps the hourly usage rollups current and the raw
// samples within their retention, and acts on idle allocations. A background
// thread, every `rollup_every`, rolls the current and the previous hour up
// to `settle` ago, in slices: each slice adds what the members held and used
// in it to their rows (store::TelemetryStore::AddUsageSlice), so a pass
// reads what happened since the last one, not the whole hour. An hour that
// receives samples older than how far it is rolled up is rolled up again
// from its start. Once an hour it drops sample partitions past the
// retention period; each pass gives idle preemptible work notice to vacate
// where the class policy says "release", and hands the teams' measured
// usage to fair share.
//
// Idle detection does not re-read its window of samples each pass: each
// pass rolls up what arrived since the last one, in slices, into a
// core::IdleTracker (per request, usage summed in buckets of a 48th of the
// longest class window), and findings are judged on it, as of the end of
// the last slice (`settle` ago). A tracker reads the longest window once
// when it starts (at start-up, or when a policy makes the longest window
// longer), and again from where late samples arrived.
//
// Thread-safe.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include "app/arbiter.h"
#include "app/slice_reader.h"
#include "core/clock.h"
#include "core/idle_tracker.h"
#include "core/telemetry.h"
#include "store/governance_store.h"
#include "store/telemetry_store.h"

namespace arbiter::app {

struct TelemetryOptions {
  // How often rollups are refreshed; zero: no background thread (tests call
  // RunOnce). Default: one minute.
  absl::Duration rollup_every = absl::Minutes(1);
  // Raw samples older than this are dropped (whole days). Default: 30 days.
  absl::Duration retention = absl::Hours(24 * 30);
  // How long an agent's batch of samples waits for others to share its
  // transaction (SampleWriter's `gather`). Default: none; arbiterd's
  // --sample-gather sets 200 ms.
  absl::Duration sample_gather = absl::ZeroDuration();
  // Largest clock skew of an agent that is left uncorrected. Default: 2 s.
  absl::Duration max_skew = absl::Seconds(2);
  // How long after a moment it is rolled up: the samples taken and the
  // decisions made before then should have arrived. A sample older than
  // that makes its hour roll up again. Zero in tests that roll up by hand.
  // Default: 2 minutes (agents send every 10 s).
  absl::Duration settle = absl::Minutes(2);
};

// How much of the time held samples covered, in the span the idle
// tracker's last pass rolled up. A source that stops (Prometheus down, an
// agent gone) shows here as coverage falling, `settle` and a pass after it
// stopped. docs/operations.md lists the series made of it.
struct TelemetryCoverage {
  int64_t passes = 0;         // Since start.
  int64_t failed_passes = 0;  // Of them, those that ended with an error.
  // The span of the last pass that rolled anything up; InfinitePast before.
  absl::Time from = absl::InfinitePast();
  absl::Time to = absl::InfinitePast();
  int64_t members = 0;            // Members held in the span.
  int64_t unsampled_members = 0;  // Of them, those with no sample in it.
  int64_t allocated_milli_seconds = 0;
  int64_t sampled_milli_seconds = 0;  // Of allocated, the part samples covered.
};

class TelemetryMaintenance {
 public:
  // Samples and rollups are read and written through `store`, the idle
  // policies read through `governance` (both usually the one store::Store).
  // REQUIRES: both and `clock` outlive this object.
  TelemetryMaintenance(store::TelemetryStore* store, store::GovernanceReads* governance,
                       Clock* clock, const TelemetryOptions& options);
  // Stops the thread (finishing a pass in progress).
  ~TelemetryMaintenance();

  const TelemetryOptions& options() const { return options_; }

  // Records that `samples` were stored, so that the rollups of their hours
  // are recomputed on the next pass.
  void MarkDirty(absl::Span<const core::GpuSample> samples) ABSL_LOCKS_EXCLUDED(mu_);

  // One pass at `now`: rolls up the dirty hours, the hour holding `now` and
  // the one before to `now - settle`, and drops samples past retention.
  // Returns the first error (the remaining hours stay dirty); ABORTED when
  // another replica rolled an hour up at the same time (the next pass goes
  // on from where it got).
  [[nodiscard]] absl::Status RunOnce(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // Rolls the hour starting at `hour` up from where it stands to
  // min(its end, `to`), in slices of at most kLongestSlice.
  [[nodiscard]] absl::Status RollUpHour(absl::Time hour, absl::Time to);
  // Live allocations idle under the class policies, as of the last pass
  // (its time less `settle`); none before the first pass.
  [[nodiscard]] absl::StatusOr<std::vector<core::IdleFinding>> FindIdle();
  // What the last passes saw of the telemetry's coverage. Thread-safe.
  TelemetryCoverage coverage() const ABSL_LOCKS_EXCLUDED(idle_mu_);

  // From now on, each pass also gives idle preemptible work whose class
  // policy says "release" notice to vacate (core::ReclaimIdle), and sets the
  // teams' measured usage for fair share (State::SetMeasuredUsage), through
  // `arbiter`. REQUIRES: called once; the arbiter outlives this object.
  void EnableIdleReclaim(Arbiter* arbiter) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run();
  // The store's samples of a span, for the rollup's slice reader; each read
  // is kept for the idle tracker until the pass ends.
  SliceReader::ReadFn RollupReads() ABSL_EXCLUSIVE_LOCKS_REQUIRED(slices_mu_);
  // The samples of a span for the idle tracker's slice reader: from what the
  // rollup read in this pass when a read of it holds the span (almost
  // always: both go on from where they stopped to `now - settle`), else
  // from the store.
  SliceReader::ReadFn TrackerReads() ABSL_EXCLUSIVE_LOCKS_REQUIRED(slices_mu_);
  // Drops the rollups of `hour` when a sample taken at `earliest` arrived
  // after the hour was rolled up past it.
  [[nodiscard]] absl::Status RollUpAgainIfLate(absl::Time hour, absl::Time earliest);
  // The arbiter idle reclaim and fair share go through; null until enabled.
  Arbiter* arbiter() ABSL_LOCKS_EXCLUDED(mu_);
  // The stored idle policies over the defaults.
  [[nodiscard]] absl::StatusOr<std::vector<core::IdlePolicy>> PoliciesInForce();
  [[nodiscard]] absl::StatusOr<std::vector<core::IdleFinding>> FindIdle(
      const std::vector<core::IdlePolicy>& policies) ABSL_LOCKS_EXCLUDED(idle_mu_);
  // Rolls what arrived since the last pass up into the idle tracker, to
  // `now - settle`, after forgetting what it holds from `late` on (the
  // earliest sample stored since the last pass). Only the maintenance
  // thread (or RunOnce) calls it.
  [[nodiscard]] absl::Status TrackIdle(absl::Time now, absl::Time late,
                                       const std::vector<core::IdlePolicy>& policies)
      ABSL_LOCKS_EXCLUDED(idle_mu_);
  // Gives notice to the idle allocations whose policy releases them.
  [[nodiscard]] absl::Status ReclaimIdle(absl::Time now,
                                         const std::vector<core::IdlePolicy>& policies)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Hands the teams' measured usage over the last 24 hours to fair share.
  [[nodiscard]] absl::Status RefreshMeasuredUsage(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Used milli-GPU seconds per team over the 24 hours to the end of `now`'s
  // hour.
  [[nodiscard]] absl::StatusOr<std::map<std::string, int64_t>> MeasuredUsage(absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

  store::TelemetryStore* const store_;
  store::GovernanceReads* const governance_;
  Clock* const clock_;
  const TelemetryOptions options_;
  absl::Mutex mu_;
  // Hour -> its earliest sample stored since the last pass.
  std::map<absl::Time, absl::Time> dirty_ ABSL_GUARDED_BY(mu_);
  // Used milli-GPU seconds per team of the hours of the last 24 that are
  // closed (before the previous hour), by hour.
  std::map<absl::Time, std::map<std::string, int64_t>> closed_hours_ ABSL_GUARDED_BY(mu_);
  absl::Time last_drop_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  Arbiter* arbiter_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The rollup's and the idle tracker's reads of their slices.
  absl::Mutex slices_mu_;
  SliceReader rollup_slices_ ABSL_GUARDED_BY(slices_mu_);
  SliceReader idle_slices_ ABSL_GUARDED_BY(slices_mu_);
  // The rollup's last reads of the current pass that reach past where the
  // idle tracker stands (`keep_reads_from_`, set as the pass starts), at
  // most kKeptReads: an hour's last slice and the next hour's. For
  // TrackerReads; cleared at the end of each pass. So what they hold is
  // what arrived since the last pass, once more: a rollup that rolls an hour
  // up again from its start (late samples) keeps none of its earlier slices.
  struct SpanRead {
    absl::Time from;
    absl::Time to;
    std::vector<core::GpuSample> samples;
  };
  std::deque<SpanRead> pass_reads_ ABSL_GUARDED_BY(slices_mu_);
  absl::Time keep_reads_from_ ABSL_GUARDED_BY(slices_mu_) = absl::InfinitePast();
  // Written by the pass (TrackIdle), read by FindIdle from any thread.
  mutable absl::Mutex idle_mu_;
  std::optional<core::IdleTracker> idle_ ABSL_GUARDED_BY(idle_mu_);
  TelemetryCoverage coverage_ ABSL_GUARDED_BY(idle_mu_);
  std::thread thread_;
};

// The start of the UTC hour holding `t`.
absl::Time HourOf(absl::Time t);

}  // namespace arbiter::app
