#include "app/telemetry.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/arbitration.h"

namespace arbiter::app {

absl::Status Telemetry::CheckStream(const Caller& caller) const {
  return ctx_.access->Check(caller, "TelemetryService.StreamSamples", {});
}

std::vector<core::GpuSample> Telemetry::Resolve(SampleBatch& batch, absl::Time now,
                                                IngestOutcome& outcome) const {
  const TelemetryOptions& options = ctx_.telemetry->options();
  const absl::Duration skew = batch.sent_at - now;
  outcome.skew_ms = absl::ToInt64Milliseconds(skew);
  outcome.skew_corrected = absl::AbsDuration(skew) > options.max_skew;
  std::optional<std::pair<int64_t, int32_t>> node;
  if (!batch.node.empty()) node = ctx_.nodes->Find(batch.cluster, batch.node);
  std::vector<core::GpuSample> out;
  out.reserve(batch.samples.size());
  for (ReportedSample& reported : batch.samples) {
    core::GpuSample& sample = reported.sample;
    if (outcome.skew_corrected) sample.at -= skew;
    if (sample.at > now + absl::Seconds(1)) {
      ++outcome.in_future;
      continue;
    }
    if (sample.at < now - options.retention) {
      ++outcome.too_old;
      continue;
    }
    // A registered UUID wins; else the named node's GPU at that index,
    // unless that GPU was registered with another UUID.
    if (auto gpu = reported.uuid.empty() ? std::nullopt : ctx_.nodes->FindGpu(reported.uuid)) {
      sample.node_id = gpu->first;
      sample.gpu_index = gpu->second;
    } else if (node && sample.gpu_index < node->second &&
               ctx_.nodes->UuidOf(node->first, sample.gpu_index).empty()) {
      sample.node_id = node->first;
    } else {
      outcome.unknown.push_back(reported.uuid.empty() ? absl::StrCat(batch.cluster, "/", batch.node,
                                                                     "/gpu", sample.gpu_index)
                                                      : reported.uuid);
      continue;
    }
    out.push_back(std::move(sample));
  }
  return out;
}

void Telemetry::Ingest(SampleBatch batch, Reply<IngestOutcome> reply) const {
  IngestOutcome outcome;
  std::vector<core::GpuSample> samples = Resolve(batch, ctx_.clock->TimeNow(), outcome);
  writer_->Write(
      std::move(samples),
      [telemetry = ctx_.telemetry, outcome = std::move(outcome), reply = std::move(reply)](
          absl::StatusOr<int64_t> stored, absl::Span<const core::GpuSample> written) mutable {
        if (!stored.ok()) return reply(stored.status());
        outcome.stored = *stored;
        outcome.duplicates = static_cast<int64_t>(written.size()) - *stored;
        telemetry->MarkDirty(written);
        reply(std::move(outcome));
      });
}

void Telemetry::GetUtilization(const Caller& caller, absl::StatusOr<Span> span, std::string team,
                               Reply<UtilizationReport> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "TelemetryService.GetUtilization", {});
      !access.ok()) {
    return reply(access);
  }
  if (!span.ok()) return reply(span.status());
  const absl::Time from = HourOf(span->from);
  const absl::Time to = HourOf(span->to) == span->to ? span->to : HourOf(span->to) + absl::Hours(1);
  RunRead<UtilizationReport>(
      ctx_,
      [store = ctx_.store, from, to,
       team = std::move(team)]() -> absl::StatusOr<UtilizationReport> {
        absl::StatusOr<std::vector<store::UtilizationRow>> rows =
            store->ListUtilization(from, to, team);
        if (!rows.ok()) return rows.status();
        UtilizationReport report;
        core::MemberUsage& total = report.total;
        for (const store::UtilizationRow& r : *rows) core::AddUsage(total, r.usage);
        report.rows = *std::move(rows);
        return report;
      },
      std::move(reply));
}

void Telemetry::ListIdleAllocations(const Caller& caller,
                                    Reply<std::vector<core::IdleFinding>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "TelemetryService.ListIdleAllocations", {});
      !access.ok()) {
    return reply(access);
  }
  RunRead<std::vector<core::IdleFinding>>(
      ctx_, [telemetry = ctx_.telemetry] { return telemetry->FindIdle(); }, std::move(reply));
}

namespace {

// Right-sizing advice from what the store holds for [from, to).
absl::StatusOr<std::vector<RightSizing>> AdviseRightSizing(store::Store& store, absl::Time from,
                                                           absl::Time to, int32_t headroom,
                                                           const std::string& team) {
  absl::StatusOr<std::vector<core::GpuModel>> models = store.ListGpuModels();
  if (!models.ok()) return models.status();
  absl::StatusOr<std::vector<core::HeldMember>> members = store.ListHeldMembers(from, to);
  if (!members.ok()) return members.status();
  absl::StatusOr<std::vector<core::MemberUsage>> usage = store.ListMemberUsage(from, to);
  if (!usage.ok()) return usage.status();
  std::map<std::pair<int64_t, int32_t>, core::MemberUsage> by_member;
  for (const core::MemberUsage& u : *usage) by_member[{u.request_id, u.member}] = u;
  std::vector<RightSizing> found;
  for (const core::HeldMember& m : *members) {
    if (m.until != absl::InfiniteFuture() || (!team.empty() && m.team != team)) continue;
    auto u = by_member.find({m.request_id, m.member});
    auto model = std::find_if(models->begin(), models->end(),
                              [&](const auto& g) { return g.name == m.gpu_model; });
    if (u == by_member.end() || model == models->end()) continue;
    core::RightSizeAdvice a = core::AdviseRightSize(m, u->second, *model, headroom);
    if (a.saving_milli > 0) found.push_back(RightSizing{a, m.team, m.gpu_model});
  }
  std::stable_sort(found.begin(), found.end(), [](const RightSizing& a, const RightSizing& b) {
    return a.advice.saving_milli > b.advice.saving_milli;
  });
  return found;
}

}  // namespace

void Telemetry::GetRightSizing(const Caller& caller, absl::StatusOr<Span> span,
                               int32_t headroom_milli, std::string team,
                               Reply<std::vector<RightSizing>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "TelemetryService.GetRightSizing", {});
      !access.ok()) {
    return reply(access);
  }
  if (!span.ok()) return reply(span.status());
  if (span->to - span->from < absl::Hours(1)) {
    return reply(absl::InvalidArgumentError("to: the window must be at least one hour"));
  }
  if (headroom_milli < 0 || headroom_milli > 10'000) {
    return reply(absl::InvalidArgumentError("headroom_milli: must be in 0..10000"));
  }
  const int32_t headroom = headroom_milli == 0 ? 200 : headroom_milli;
  RunRead<std::vector<RightSizing>>(
      ctx_,
      [store = ctx_.store, span = *span, headroom, team = std::move(team)] {
        return AdviseRightSizing(*store, span.from, span.to, headroom, team);
      },
      std::move(reply));
}

void Telemetry::SetIdlePolicy(const Caller& caller, absl::StatusOr<core::IdlePolicy> policy,
                              Reply<Done> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "TelemetryService.SetIdlePolicy", {});
      !access.ok()) {
    return reply(access);
  }
  if (!policy.ok()) return reply(policy.status());
  if (absl::Status valid = core::ValidateIdlePolicy(*policy); !valid.ok()) return reply(valid);
  RunCommand<Done>(
      ctx_, caller.actor(),
      [p = *std::move(policy)](core::State& state, absl::Time,
                               core::ChangeSet& changes) -> absl::StatusOr<Done> {
        if (absl::Status st = core::SetIdlePolicy(state, p, changes); !st.ok()) return st;
        return Done{};
      },
      std::move(reply));
}

void Telemetry::ListIdlePolicies(const Caller& caller,
                                 Reply<std::vector<core::IdlePolicy>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "TelemetryService.ListIdlePolicies", {});
      !access.ok()) {
    return reply(access);
  }
  RunRead<std::vector<core::IdlePolicy>>(
      ctx_,
      [store = ctx_.store]() -> absl::StatusOr<std::vector<core::IdlePolicy>> {
        absl::StatusOr<std::vector<core::IdlePolicy>> stored = store->ListIdlePolicies();
        if (!stored.ok()) return stored.status();
        return core::IdlePoliciesInForce(*stored);
      },
      std::move(reply));
}

}  // namespace arbiter::app
