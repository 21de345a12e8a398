#include "app/telemetry_maintenance.h"

#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include <spdlog/spdlog.h>

#include "app/thread_name.h"
#include "core/arbitration.h"
#include "core/status_macros.h"

namespace arbiter::app {
namespace {

// The window of measured usage that fair share weighs.
constexpr absl::Duration kFairShareHistory = absl::Hours(24);
// The longest slice a rollup reads at once: it bounds the members and
// samples in memory when an hour is rolled up again, or after a pause.
constexpr absl::Duration kLongestSlice = absl::Minutes(5);
// How long before a slice readings are read, for those whose span reaches
// into it (core::RollUp). So once rolled up a reading stands for at most
// about this long, whatever its interval.
constexpr absl::Duration kReadingsBefore = absl::Minutes(5);

// How many of the rollup's reads a pass keeps for the idle tracker.
constexpr size_t kKeptReads = 2;
// The most members a pass holds at once: a slice's members are as many as
// the decisions made in it (240,000 in a minute at 4,000 decisions/s), and
// a pass reads them in parts (store::TelemetryStore::ScanHeldMembers).
constexpr size_t kMembersPerPart = 16'384;

// Records `at` for `hour` in `earliest` unless an earlier time is there.
void KeepEarliest(std::map<absl::Time, absl::Time>& earliest, absl::Time hour, absl::Time at) {
  auto [it, fresh] = earliest.try_emplace(hour, at);
  if (!fresh) it->second = std::min(it->second, at);
}

}  // namespace

absl::Time HourOf(absl::Time t) {
  return absl::FromCivil(absl::ToCivilHour(t, absl::UTCTimeZone()), absl::UTCTimeZone());
}

TelemetryMaintenance::TelemetryMaintenance(store::TelemetryStore* store,
                                           store::GovernanceReads* governance, Clock* clock,
                                           const TelemetryOptions& options)
    : store_(store),
      governance_(governance),
      clock_(clock),
      options_(options),
      rollup_slices_(kReadingsBefore),
      idle_slices_(kReadingsBefore) {
  if (options_.rollup_every > absl::ZeroDuration())
    thread_ = StartNamedThread("arb-rollup", [this] { Run(); });
}

TelemetryMaintenance::~TelemetryMaintenance() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void TelemetryMaintenance::MarkDirty(absl::Span<const core::GpuSample> samples) {
  std::map<absl::Time, absl::Time> earliest;
  for (const core::GpuSample& s : samples) KeepEarliest(earliest, HourOf(s.at), s.at);
  absl::MutexLock lock(&mu_);
  for (const auto& [hour, at] : earliest) KeepEarliest(dirty_, hour, at);
}

SliceReader::ReadFn TelemetryMaintenance::RollupReads() {
  return [this](absl::Time from, absl::Time to) -> absl::StatusOr<std::vector<core::GpuSample>> {
    ARBITER_ASSIGN_OR_RETURN(std::vector<core::GpuSample> samples, store_->ListSamples(from, to));
    slices_mu_.AssertHeld();
    if (to <= keep_reads_from_) return samples;  // The tracker has it already.
    if (pass_reads_.size() == kKeptReads) pass_reads_.pop_front();
    pass_reads_.push_back({from, to, samples});
    return samples;
  };
}

SliceReader::ReadFn TelemetryMaintenance::TrackerReads() {
  return [this](absl::Time from, absl::Time to) -> absl::StatusOr<std::vector<core::GpuSample>> {
    slices_mu_.AssertHeld();
    for (const SpanRead& read : pass_reads_) {
      if (read.from > from || read.to < to) continue;
      std::vector<core::GpuSample> samples;
      for (const core::GpuSample& s : read.samples) {
        if (s.at >= from && s.at < to) samples.push_back(s);
      }
      return samples;
    }
    return store_->ListSamples(from, to);
  };
}

absl::Status TelemetryMaintenance::RollUpHour(absl::Time hour, absl::Time to) {
  const absl::Time end = hour + absl::Hours(1);
  to = std::min(to, end);
  ARBITER_ASSIGN_OR_RETURN(absl::Time from, store_->UsageRolledTo(hour));
  while (from < to) {
    const absl::Time slice_to = std::min(to, from + kLongestSlice);
    std::vector<core::GpuSample> samples;
    {
      absl::MutexLock lock(&slices_mu_);
      ARBITER_ASSIGN_OR_RETURN(samples, rollup_slices_.Read(from, slice_to, RollupReads()));
    }
    ARBITER_RETURN_IF_ERROR(
        store_->RollUpSlice(hour, from, slice_to, clock_->TimeNow(), kMembersPerPart,
                            [&](absl::Span<const core::HeldMember> members) {
                              return core::RollUp(members, samples, from, slice_to);
                            }));
    from = slice_to;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<core::IdlePolicy>> TelemetryMaintenance::PoliciesInForce() {
  ARBITER_ASSIGN_OR_RETURN(auto stored, governance_->ListIdlePolicies());
  return core::IdlePoliciesInForce(stored);
}

absl::StatusOr<std::vector<core::IdleFinding>> TelemetryMaintenance::FindIdle() {
  ARBITER_ASSIGN_OR_RETURN(std::vector<core::IdlePolicy> policies, PoliciesInForce());
  return FindIdle(policies);
}

absl::StatusOr<std::vector<core::IdleFinding>> TelemetryMaintenance::FindIdle(
    const std::vector<core::IdlePolicy>& policies) {
  // Only what is held now can be idle: the live members, not every member
  // the window saw come and go.
  ARBITER_ASSIGN_OR_RETURN(auto members, store_->ListLiveMembers());
  absl::MutexLock lock(&idle_mu_);
  if (!idle_.has_value()) return std::vector<core::IdleFinding>{};
  return idle_->FindIdle(members, policies);
}

absl::Status TelemetryMaintenance::TrackIdle(absl::Time now, absl::Time late,
                                             const std::vector<core::IdlePolicy>& policies) {
  absl::Duration longest = absl::Minutes(1);
  for (const core::IdlePolicy& p : policies) longest = std::max(longest, p.window);
  const absl::Time to = now - options_.settle;
  absl::Time from;
  {
    absl::MutexLock lock(&idle_mu_);
    if (!idle_.has_value() || idle_->longest_window() != longest) idle_.emplace(longest);
    if (late < idle_->tracked_to()) idle_->Rewind(late);
    from = idle_->tracked_to();
    // A fresh tracker, or one further behind than any window reaches,
    // starts with the longest window.
    if (from == absl::InfinitePast() || from < to - longest - idle_->bucket()) {
      from = idle_->BucketStart(to - longest);
    }
  }
  // Held and sampled time of each member over the pass's slices.
  absl::flat_hash_map<std::pair<int64_t, int32_t>, std::pair<int64_t, int64_t>> held;
  const absl::Time pass_from = from;
  while (from < to) {
    absl::Time slice_to;
    {
      absl::MutexLock lock(&idle_mu_);
      slice_to = std::min({to, idle_->BucketEnd(from), from + kLongestSlice});
    }
    std::vector<core::GpuSample> samples;
    {
      absl::MutexLock lock(&slices_mu_);
      ARBITER_ASSIGN_OR_RETURN(samples, idle_slices_.Read(from, slice_to, TrackerReads()));
    }
    ARBITER_RETURN_IF_ERROR(store_->ScanHeldMembers(
        from, slice_to, kMembersPerPart,
        [&](absl::Span<const core::HeldMember> members) -> absl::Status {
          const std::vector<core::MemberUsage> usage =
              core::RollUp(members, samples, from, slice_to);
          for (size_t i = 0; i < members.size(); ++i) {
            auto& [allocated, sampled] = held[{members[i].request_id, members[i].member}];
            allocated += usage[i].allocated_milli_seconds;
            sampled += usage[i].sampled_milli_seconds;
          }
          absl::MutexLock lock(&idle_mu_);
          idle_->Add(from, slice_to, members, usage);
          return absl::OkStatus();
        }));
    from = slice_to;
  }
  if (pass_from < to) {
    TelemetryCoverage c;
    c.from = pass_from;
    c.to = to;
    for (const auto& [member, time] : held) {
      if (time.first == 0) continue;
      ++c.members;
      if (time.second == 0) ++c.unsampled_members;
      c.allocated_milli_seconds += time.first;
      c.sampled_milli_seconds += time.second;
    }
    absl::MutexLock lock(&idle_mu_);
    c.passes = coverage_.passes;
    c.failed_passes = coverage_.failed_passes;
    coverage_ = c;
  }
  return absl::OkStatus();
}

TelemetryCoverage TelemetryMaintenance::coverage() const {
  absl::MutexLock lock(&idle_mu_);
  return coverage_;
}

void TelemetryMaintenance::EnableIdleReclaim(Arbiter* arbiter) {
  absl::MutexLock lock(&mu_);
  arbiter_ = arbiter;
}

Arbiter* TelemetryMaintenance::arbiter() {
  absl::MutexLock lock(&mu_);
  return arbiter_;
}

absl::Status TelemetryMaintenance::ReclaimIdle(absl::Time now,
                                               const std::vector<core::IdlePolicy>& policies) {
  Arbiter* arbiter = this->arbiter();
  // Only the leader decides; a follower's commands would be refused.
  if (arbiter == nullptr || !arbiter->stats().leading) return absl::OkStatus();
  ARBITER_ASSIGN_OR_RETURN(std::vector<core::IdleFinding> idle, FindIdle(policies));
  for (const core::IdleFinding& f : idle) {
    if (f.action != core::IdleAction::kRelease) continue;
    core::IdlePolicy policy;
    for (const core::IdlePolicy& p : policies) {
      if (p.workload_class == f.workload_class) policy = p;
    }
    const std::string why =
        absl::StrCat("busy under ", policy.threshold_milli / 10.0, "% (peak ",
                     f.peak_busy_milli / 10.0, "%) for ", absl::FormatDuration(policy.window));
    arbiter->Submit(
        [id = f.request_id, notice = policy.notice, why](core::State& state, absl::Time at,
                                                         core::ChangeSet& changes) {
          const core::CapacityRequest* live = state.FindLiveRequest(id);
          // Already on notice (an earlier pass) or gone: nothing to do.
          if (live == nullptr || live->state != core::RequestState::kAdmitted) {
            return absl::OkStatus();
          }
          return core::ReclaimIdle(state, id, notice, why, at, changes).status();
        },
        [id = f.request_id](const absl::Status& s) {
          if (s.ok()) {
            spdlog::info("telemetry: request {} is idle; notice to vacate given", id);
          } else {
            spdlog::warn("telemetry: idle reclaim of request {}: {}", id, s.ToString());
          }
        },
        "arbiter");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, int64_t>> TelemetryMaintenance::MeasuredUsage(absl::Time now) {
  // Hours before the previous one no longer change (but for late samples,
  // which drop them from the cache): each is read once, not every pass.
  const absl::Time open_from = HourOf(now) - absl::Hours(1);
  const absl::Time to = HourOf(now) + absl::Hours(1);
  const absl::Time from = to - kFairShareHistory;
  auto add = [](std::map<std::string, int64_t>& used,
                const std::vector<store::UtilizationRow>& rows) {
    for (const store::UtilizationRow& r : rows) used[r.team] += r.usage.used_milli_seconds;
  };
  std::map<std::string, int64_t> used;
  for (absl::Time hour = from; hour < open_from; hour += absl::Hours(1)) {
    std::optional<std::map<std::string, int64_t>> cached;
    {
      absl::MutexLock lock(&mu_);
      auto it = closed_hours_.find(hour);
      if (it != closed_hours_.end()) cached = it->second;
    }
    if (!cached.has_value()) {
      ARBITER_ASSIGN_OR_RETURN(auto rows, store_->ListUtilization(hour, hour + absl::Hours(1), ""));
      cached.emplace();
      add(*cached, rows);
      absl::MutexLock lock(&mu_);
      closed_hours_[hour] = *cached;
    }
    for (const auto& [team, ms] : *cached) used[team] += ms;
  }
  {
    absl::MutexLock lock(&mu_);
    closed_hours_.erase(closed_hours_.begin(), closed_hours_.lower_bound(from));
  }
  ARBITER_ASSIGN_OR_RETURN(auto open, store_->ListUtilization(open_from, to, ""));
  add(used, open);
  return used;
}

absl::Status TelemetryMaintenance::RefreshMeasuredUsage(absl::Time now) {
  Arbiter* arbiter = this->arbiter();
  // Only the leader decides; a follower's commands would be refused.
  if (arbiter == nullptr || !arbiter->stats().leading) return absl::OkStatus();
  ARBITER_ASSIGN_OR_RETURN(auto used, MeasuredUsage(now));
  arbiter->Submit(
      [used = std::move(used)](core::State& state, absl::Time, core::ChangeSet&) {
        state.SetMeasuredUsage(used);
        return absl::OkStatus();
      },
      [](const absl::Status&) {}, "arbiter");
  return absl::OkStatus();
}

absl::Status TelemetryMaintenance::RunOnce(absl::Time now) {
  std::map<absl::Time, absl::Time> hours;
  bool drop = false;
  {
    absl::MutexLock lock(&mu_);
    hours.swap(dirty_);
    if (now - last_drop_ >= absl::Hours(1)) {
      drop = true;
      last_drop_ = now;
    }
  }
  // The earliest sample stored since the last pass: the idle tracker
  // forgets what it rolled up from there on.
  absl::Time late = absl::InfiniteFuture();
  for (const auto& [hour, earliest] : hours) late = std::min(late, earliest);
  const absl::Time to = now - options_.settle;
  {
    absl::Time tracked_to = absl::InfinitePast();
    {
      absl::MutexLock lock(&idle_mu_);
      if (idle_.has_value()) tracked_to = idle_->tracked_to();
    }
    absl::MutexLock lock(&slices_mu_);
    keep_reads_from_ = tracked_to;
  }
  hours.try_emplace(HourOf(to), absl::InfiniteFuture());
  hours.try_emplace(HourOf(to) - absl::Hours(1), absl::InfiniteFuture());
  absl::Status first;
  for (auto it = hours.begin(); it != hours.end(); ++it) {
    const auto [hour, earliest] = *it;
    if (hour > to) continue;
    absl::Status s = RollUpAgainIfLate(hour, earliest);
    if (s.ok()) s = RollUpHour(hour, to);
    if (!s.ok()) {
      absl::MutexLock lock(&mu_);
      for (auto rest = it; rest != hours.end(); ++rest) {
        KeepEarliest(dirty_, rest->first, rest->second);
      }
      first = s;
      break;
    }
  }
  absl::StatusOr<std::vector<core::IdlePolicy>> policies = PoliciesInForce();
  absl::Status tracked = policies.status();
  if (tracked.ok()) tracked = TrackIdle(now, late, *policies);
  {
    absl::MutexLock lock(&slices_mu_);
    pass_reads_.clear();
  }
  if (!tracked.ok() && first.ok()) first = tracked;
  if (absl::Status s = tracked.ok() ? ReclaimIdle(now, *policies) : absl::OkStatus();
      !s.ok() && first.ok()) {
    first = s;
  }
  if (absl::Status s = RefreshMeasuredUsage(now); !s.ok() && first.ok()) first = s;
  if (drop) {
    absl::StatusOr<int32_t> dropped = store_->DropSamplesBefore(now - options_.retention);
    if (!dropped.ok() && first.ok()) first = dropped.status();
    if (dropped.ok() && *dropped > 0)
      spdlog::info("telemetry: dropped {} days of samples", *dropped);
  }
  {
    absl::MutexLock lock(&idle_mu_);
    ++coverage_.passes;
    if (!first.ok()) ++coverage_.failed_passes;
  }
  return first;
}

absl::Status TelemetryMaintenance::RollUpAgainIfLate(absl::Time hour, absl::Time earliest) {
  ARBITER_ASSIGN_OR_RETURN(absl::Time rolled_to, store_->UsageRolledTo(hour));
  if (earliest >= rolled_to) return absl::OkStatus();
  spdlog::info(
      "telemetry: samples from {} arrived after the hour was rolled up to {}; rolling "
      "the hour up again",
      absl::FormatTime(earliest), absl::FormatTime(rolled_to));
  return store_->ResetUsageHour(hour);
}

void TelemetryMaintenance::Run() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.rollup_every);
    if (stopping_) break;
    mu_.Unlock();
    absl::Status s = RunOnce(clock_->TimeNow());
    if (!s.ok()) spdlog::warn("telemetry rollup: {}", s.ToString());
    mu_.Lock();
  }
}

}  // namespace arbiter::app
