#include "app/telemetry_maintenance.h"

#include <map>

#include "absl/strings/str_cat.h"
#include <spdlog/spdlog.h>

#include "core/arbitration.h"
#include "core/status_macros.h"

namespace arbiter::app {
namespace {

// The window of measured usage that fair share weighs.
constexpr absl::Duration kFairShareHistory = absl::Hours(24);

}  // namespace

absl::Time HourOf(absl::Time t) {
  return absl::FromCivil(absl::ToCivilHour(t, absl::UTCTimeZone()), absl::UTCTimeZone());
}

TelemetryMaintenance::TelemetryMaintenance(store::Store* store, Clock* clock,
                                           const TelemetryOptions& options)
    : store_(store), clock_(clock), options_(options) {
  if (options_.rollup_every > absl::ZeroDuration()) thread_ = std::thread([this] { Run(); });
}

TelemetryMaintenance::~TelemetryMaintenance() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void TelemetryMaintenance::MarkDirty(absl::Span<const core::GpuSample> samples) {
  std::set<absl::Time> hours;
  for (const core::GpuSample& s : samples) hours.insert(HourOf(s.at));
  absl::MutexLock lock(&mu_);
  dirty_.insert(hours.begin(), hours.end());
}

absl::Status TelemetryMaintenance::RollUpHour(absl::Time hour, absl::Time now) {
  const absl::Time to = std::min(hour + absl::Hours(1), now);
  if (to <= hour) return absl::OkStatus();
  ARBITER_ASSIGN_OR_RETURN(auto members, store_->ListHeldMembers(hour, to));
  ARBITER_ASSIGN_OR_RETURN(auto samples, store_->ListSamples(hour, to));
  std::vector<core::MemberUsage> usage = core::RollUp(members, samples, hour, to);
  return store_->ReplaceUsageHour(hour, members, usage, now);
}

absl::StatusOr<std::vector<core::IdlePolicy>> TelemetryMaintenance::PoliciesInForce() {
  ARBITER_ASSIGN_OR_RETURN(auto stored, store_->ListIdlePolicies());
  return core::IdlePoliciesInForce(stored);
}

absl::StatusOr<std::vector<core::IdleFinding>> TelemetryMaintenance::FindIdle(absl::Time now) {
  ARBITER_ASSIGN_OR_RETURN(std::vector<core::IdlePolicy> policies, PoliciesInForce());
  return FindIdle(now, policies);
}

absl::StatusOr<std::vector<core::IdleFinding>> TelemetryMaintenance::FindIdle(
    absl::Time now, const std::vector<core::IdlePolicy>& policies) {
  absl::Duration longest;
  for (const core::IdlePolicy& p : policies) longest = std::max(longest, p.window);
  ARBITER_ASSIGN_OR_RETURN(auto members, store_->ListHeldMembers(now - longest, now));
  std::erase_if(members,
                [](const core::HeldMember& m) { return m.until != absl::InfiniteFuture(); });
  ARBITER_ASSIGN_OR_RETURN(auto samples, store_->ListSamples(now - longest, now));
  return core::FindIdle(members, samples, policies, now);
}

void TelemetryMaintenance::EnableIdleReclaim(Arbiter* arbiter) {
  absl::MutexLock lock(&mu_);
  arbiter_ = arbiter;
}

Arbiter* TelemetryMaintenance::arbiter() {
  absl::MutexLock lock(&mu_);
  return arbiter_;
}

absl::Status TelemetryMaintenance::ReclaimIdle(absl::Time now) {
  Arbiter* arbiter = this->arbiter();
  // Only the leader decides; a follower's commands would be refused.
  if (arbiter == nullptr || !arbiter->stats().leading) return absl::OkStatus();
  ARBITER_ASSIGN_OR_RETURN(std::vector<core::IdlePolicy> policies, PoliciesInForce());
  ARBITER_ASSIGN_OR_RETURN(std::vector<core::IdleFinding> idle, FindIdle(now, policies));
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

absl::Status TelemetryMaintenance::RefreshMeasuredUsage(absl::Time now) {
  Arbiter* arbiter = this->arbiter();
  // Only the leader decides; a follower's commands would be refused.
  if (arbiter == nullptr || !arbiter->stats().leading) return absl::OkStatus();
  const absl::Time to = HourOf(now) + absl::Hours(1);
  ARBITER_ASSIGN_OR_RETURN(auto rows, store_->ListUtilization(to - kFairShareHistory, to, ""));
  std::map<std::string, int64_t> used;
  for (const store::UtilizationRow& r : rows) used[r.team] += r.usage.used_milli_seconds;
  arbiter->Submit(
      [used = std::move(used)](core::State& state, absl::Time, core::ChangeSet&) {
        state.SetMeasuredUsage(used);
        return absl::OkStatus();
      },
      [](const absl::Status&) {}, "arbiter");
  return absl::OkStatus();
}

absl::Status TelemetryMaintenance::RunOnce(absl::Time now) {
  std::set<absl::Time> hours;
  bool drop = false;
  {
    absl::MutexLock lock(&mu_);
    hours.swap(dirty_);
    if (now - last_drop_ >= absl::Hours(1)) {
      drop = true;
      last_drop_ = now;
    }
  }
  hours.insert(HourOf(now));
  hours.insert(HourOf(now) - absl::Hours(1));
  absl::Status first;
  for (auto it = hours.begin(); it != hours.end(); ++it) {
    if (*it > now) continue;
    absl::Status s = RollUpHour(*it, now);
    if (!s.ok()) {
      absl::MutexLock lock(&mu_);
      dirty_.insert(it, hours.end());
      first = s;
      break;
    }
  }
  if (absl::Status s = ReclaimIdle(now); !s.ok() && first.ok()) first = s;
  if (absl::Status s = RefreshMeasuredUsage(now); !s.ok() && first.ok()) first = s;
  if (drop) {
    absl::StatusOr<int32_t> dropped = store_->DropSamplesBefore(now - options_.retention);
    if (!dropped.ok() && first.ok()) first = dropped.status();
    if (dropped.ok() && *dropped > 0)
      spdlog::info("telemetry: dropped {} days of samples", *dropped);
  }
  return first;
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
