#include "app/allocations.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

#include "core/arbitration.h"
#include "core/fingerprint.h"
#include "core/status_macros.h"
#include "core/validate.h"

namespace arbiter::app {
namespace {

constexpr char kApprove[] = "AllocationService.ApproveRequest";
constexpr char kDeny[] = "AllocationService.DenyRequest";
constexpr char kRelease[] = "AllocationService.ReleaseAllocation";
constexpr char kClaim[] = "AllocationService.ClaimAllocation";
constexpr char kRenew[] = "AllocationService.RenewLease";

core::Approver ApproverOf(const Caller& caller) {
  return core::Approver{caller.principal, caller.groups};
}

// Request `id` as stored, with its current explanation when it is queued
// (app/explanations.h). Runs on a read worker.
absl::StatusOr<core::CapacityRequest> ReadRequest(const Context& ctx, int64_t id) {
  absl::StatusOr<core::CapacityRequest> stored = ctx.store->GetRequest(id);
  if (stored.ok()) ctx.arbiter->explanations().Overlay(*stored);
  return stored;
}

// Answers a replay of request `id` (a preview's, with `preview`) with the
// request as stored now, read on a read worker.
void ReplayStored(const Context& ctx, int64_t id, bool preview, Reply<RequestDecision> reply) {
  RunRead<RequestDecision>(
      ctx,
      [ctx, id, preview]() -> absl::StatusOr<RequestDecision> {
        absl::StatusOr<core::CapacityRequest> stored = ReadRequest(ctx, id);
        if (!stored.ok()) return stored.status();
        return RequestDecision{*std::move(stored), true, preview, {}};
      },
      std::move(reply), "too busy; retry");
}

// What the leader's arbiter knows of a request that the store does not:
// a queued request's position, an admitted one's claims with their last
// renewals and when it ends unless claimed or renewed.
struct LiveView {
  int64_t queue_position = 0;
  std::vector<core::Claim> claims;
  absl::Time enforce_at = absl::InfiniteFuture();
};

// `reply`, given what the arbiter knows of the queued and admitted requests
// among `requests_of(value)` first (LiveView, taken on its thread). Without
// a leader to ask (a follower, an overloaded arbiter) the value is answered
// as the store has it: positions 0, renewals at the claim.
template <typename T>
Reply<T> WithLiveState(const Context& ctx,
                       std::function<std::vector<core::CapacityRequest*>(T&)> requests_of,
                       Reply<T> reply) {
  return [ctx, requests_of = std::move(requests_of),
          reply = std::move(reply)](absl::StatusOr<T> value) {
    if (!value.ok()) return reply(std::move(value));
    auto shared = std::make_shared<T>(*std::move(value));
    std::vector<int64_t> queued;
    std::vector<int64_t> admitted;
    for (const core::CapacityRequest* r : requests_of(*shared)) {
      if (r->state == core::RequestState::kQueued) queued.push_back(r->id);
      if (r->state == core::RequestState::kAdmitted) admitted.push_back(r->id);
    }
    if (queued.empty() && admitted.empty()) return reply(std::move(*shared));
    auto views = std::make_shared<absl::flat_hash_map<int64_t, LiveView>>();
    ctx.arbiter->Submit(
        [queued = std::move(queued), admitted = std::move(admitted), views](
            core::State& state, absl::Time, core::ChangeSet&) {
          const std::vector<int64_t> positions = core::QueuePositions(state, queued);
          for (size_t i = 0; i < queued.size(); ++i)
            (*views)[queued[i]].queue_position = positions[i];
          for (int64_t id : admitted) {
            const core::CapacityRequest* live = state.FindLiveRequest(id);
            if (live == nullptr || live->state != core::RequestState::kAdmitted) continue;
            LiveView& view = (*views)[id];
            view.claims = live->claims;
            view.enforce_at = live->enforce_at;
          }
          return absl::OkStatus();
        },
        [shared, views, requests_of, reply](const absl::Status& status) {
          if (status.ok()) {
            for (core::CapacityRequest* r : requests_of(*shared)) {
              auto it = views->find(r->id);
              if (it == views->end()) continue;
              if (r->state == core::RequestState::kQueued) {
                r->queue_position = it->second.queue_position;
              } else if (r->state == core::RequestState::kAdmitted) {
                r->claims = it->second.claims;
                r->enforce_at = it->second.enforce_at;
              }
            }
          }
          reply(std::move(*shared));
        });
  };
}

// The access check of `method` on live request `id`'s team and pool, made
// on the arbiter's thread where they are known; OK when `id` is not live
// (the core answers for it).
absl::Status CheckOnTeam(const Access& access, const Caller& caller, const char* method,
                         const core::State& state, int64_t id) {
  const core::CapacityRequest* live = state.FindLiveRequest(id);
  if (live == nullptr) return absl::OkStatus();
  return access.Check(caller, method, Resource{live->spec.team, live->spec.pool});
}

std::vector<core::CapacityRequest*> RequestOf(core::CapacityRequest& r) { return {&r}; }
std::vector<core::CapacityRequest*> RequestsOf(store::RequestPage& page) {
  std::vector<core::CapacityRequest*> out;
  for (core::CapacityRequest& r : page.requests) out.push_back(&r);
  return out;
}

}  // namespace

void Allocations::RequestCapacity(const Caller& caller, const Resource& target,
                                  absl::StatusOr<core::CapacityRequestSpec> spec,
                                  Reply<RequestDecision> reply, bool preview) const {
  if (absl::Status access = ctx_.access->Check(caller, "AllocationService.RequestCapacity", target);
      !access.ok()) {
    return reply(access);
  }
  if (!spec.ok()) return reply(spec.status());
  if (absl::Status valid = core::ValidateRequestSpec(*spec); !valid.ok()) return reply(valid);
  // The engine remembers the live keys and those of its last minutes; the
  // store knows the rest of the window's.
  std::string key = spec->idempotency_key;
  ctx_.ended_keys->Find(
      std::move(key),
      [this, spec = *std::move(spec), actor = caller.actor(), preview,
       reply = std::move(reply)](absl::StatusOr<EndedKeyLookup::Result> looked_up) mutable {
        if (!looked_up.ok()) return reply(looked_up.status());
        if (looked_up->found.has_value()) {
          return ReplayEnded(spec, *looked_up->found, preview, std::move(reply));
        }
        if (preview) {
          return Preview(std::move(spec), looked_up->checked_at, std::move(actor),
                         std::move(reply));
        }
        Decide(std::move(spec), looked_up->checked_at, std::move(actor), std::move(reply));
      });
}

void Allocations::ReplayEnded(const core::CapacityRequestSpec& spec, const store::EndedKey& ended,
                              bool preview, Reply<RequestDecision> reply) const {
  if (ended.body_hash != core::FingerprintRequestSpec(spec)) {
    return reply(core::KeyUsedForAnotherBody(spec.idempotency_key, ended.request_id));
  }
  // An ended request is final: its stored row is the decision's last word.
  ReplayStored(ctx_, ended.request_id, preview, std::move(reply));
}

void Allocations::Decide(core::CapacityRequestSpec spec, absl::Time keys_checked_at,
                         std::string actor, Reply<RequestDecision> reply) const {
  auto outcome = std::make_shared<core::RequestOutcome>();
  ctx_.arbiter->Submit(
      [spec = std::move(spec), keys_checked_at, outcome](core::State& state, absl::Time now,
                                                         core::ChangeSet& changes) -> absl::Status {
        absl::StatusOr<core::RequestOutcome> out =
            core::RequestCapacity(state, spec, now, changes, keys_checked_at);
        if (!out.ok()) return out.status();
        *outcome = *std::move(out);
        return absl::OkStatus();
      },
      [ctx = ctx_, outcome, reply = std::move(reply)](const absl::Status& status) {
        if (!status.ok()) return reply(status);
        if (!outcome->replayed) return reply(RequestDecision{std::move(outcome->request), false});
        // A replay answers with the stored request, read off the engine's
        // threads: it may have moved on since it was decided.
        ReplayStored(ctx, outcome->request.id, false, reply);
      },
      std::move(actor));
}

void Allocations::Preview(core::CapacityRequestSpec spec, absl::Time keys_checked_at,
                          std::string actor, Reply<RequestDecision> reply) const {
  RunPreview(
      [spec = std::move(spec), keys_checked_at](
          const core::State& state, core::State& what_if, absl::Time now,
          core::ChangeSet& changes) -> absl::StatusOr<std::pair<int64_t, bool>> {
        // A clone starts without the idempotency keys: a used key is looked
        // up in the arbiter's state, and previews as its replay.
        absl::StatusOr<std::optional<int64_t>> seen = core::SeenIdempotencyKey(state, spec);
        if (!seen.ok()) return seen.status();
        if (seen->has_value()) return std::make_pair(**seen, true);
        absl::StatusOr<core::RequestOutcome> out =
            core::RequestCapacity(what_if, spec, now, changes, keys_checked_at);
        if (!out.ok()) return out.status();
        return std::make_pair(out->request.id, out->replayed);
      },
      std::move(actor), std::move(reply));
}

void Allocations::PreviewApproval(const Caller& caller, int64_t id,
                                  Reply<RequestDecision> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, kApprove, {}); !access.ok()) {
    return reply(access);
  }
  RunPreview(
      [caller, id](const core::State&, core::State& what_if, absl::Time now,
                   core::ChangeSet& changes) -> absl::StatusOr<std::pair<int64_t, bool>> {
        absl::StatusOr<core::CapacityRequest> out =
            core::ApproveRequest(what_if, id, ApproverOf(caller), now, changes);
        if (!out.ok()) return out.status();
        return std::make_pair(id, false);
      },
      caller.actor(), std::move(reply));
}

void Allocations::RunPreview(PreviewDecide decide, std::string actor,
                             Reply<RequestDecision> reply) const {
  if (absl::Status admitted = preview_budget_->Admit(ctx_.clock->TimeNow()); !admitted.ok()) {
    return reply(absl::ResourceExhaustedError(
        absl::StrCat("previews may use a tenth of the arbiter's time: ", admitted.message())));
  }
  auto decision = std::make_shared<RequestDecision>();
  decision->preview = true;
  ctx_.arbiter->Submit(
      [decide = std::move(decide), decision, clock = ctx_.clock, budget = preview_budget_](
          core::State& state, absl::Time now, core::ChangeSet&) -> absl::Status {
        // Charged however the decision ends.
        struct Charge {
          Clock* clock;
          DutyLimiter* budget;
          absl::Time started;
          ~Charge() { budget->Charge(started, clock->TimeNow()); }
        } charge{clock, budget.get(), clock->TimeNow()};
        // Decided now, as a real call would be, on a clone (as preemption
        // plans are): `state` and the batch's changes stay as they are.
        core::State what_if = state.Clone();
        core::ChangeSet discarded;
        absl::StatusOr<std::pair<int64_t, bool>> decided = decide(state, what_if, now, discarded);
        if (!decided.ok()) return decided.status();
        const auto [id, replayed] = *decided;
        decision->request.id = id;
        decision->replayed = replayed;
        if (replayed) return absl::OkStatus();  // Answered from the store.
        for (const core::Change& change : discarded.changes) {
          const auto* write = std::get_if<core::RequestWrite>(&change);
          if (write == nullptr) continue;
          if (write->request.id == id) {
            decision->request = write->request;  // Its last write is what it would be.
          } else if (write->request.state == core::RequestState::kPreempting ||
                     write->request.state == core::RequestState::kPreempted) {
            decision->would_preempt.push_back(write->request);
          }
        }
        if (const core::CapacityRequest* live = what_if.FindLiveRequest(id)) {
          decision->request = *live;
        }
        return absl::OkStatus();
      },
      [ctx = ctx_, decision, reply = std::move(reply)](const absl::Status& status) {
        if (!status.ok()) return reply(status);
        if (!decision->replayed) return reply(std::move(*decision));
        // A key already used: its request as it stands, as a real call answers.
        ReplayStored(ctx, decision->request.id, true, reply);
      },
      std::move(actor));
}

absl::Status DutyLimiter::Admit(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  if (now >= free_at_) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("retry in ", absl::ToInt64Milliseconds(free_at_ - now) + 1, " ms"));
}

void DutyLimiter::Charge(absl::Time started, absl::Time ended) {
  absl::MutexLock lock(&mu_);
  free_at_ = std::max(free_at_, started + share_ * (ended - started));
}

void Allocations::GetRequest(const Caller& caller, int64_t id,
                             Reply<core::CapacityRequest> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "AllocationService.GetRequest", {});
      !access.ok()) {
    return reply(access);
  }
  if (id <= 0) return reply(absl::InvalidArgumentError(absl::StrCat("id: must be > 0, got ", id)));
  RunRead<core::CapacityRequest>(
      ctx_, [ctx = ctx_, id] { return ReadRequest(ctx, id); },
      WithLiveState<core::CapacityRequest>(ctx_, RequestOf, std::move(reply)));
}

void Allocations::ListRequests(const Caller& caller, absl::StatusOr<store::RequestFilter> filter,
                               Reply<store::RequestPage> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "AllocationService.ListRequests", {});
      !access.ok()) {
    return reply(access);
  }
  if (!filter.ok()) return reply(filter.status());
  RunRead<store::RequestPage>(
      ctx_,
      [store = ctx_.store, arbiter = ctx_.arbiter,
       filter = *std::move(filter)]() -> absl::StatusOr<store::RequestPage> {
        absl::StatusOr<store::RequestPage> page = store->ListRequestPage(filter);
        if (page.ok()) {
          for (core::CapacityRequest& r : page->requests) arbiter->explanations().Overlay(r);
        }
        return page;
      },
      WithLiveState<store::RequestPage>(ctx_, RequestsOf, std::move(reply)));
}

void Allocations::ApproveRequest(const Caller& caller, int64_t id,
                                 Reply<core::CapacityRequest> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, kApprove, {}); !access.ok()) {
    return reply(access);
  }
  RunCommand<core::CapacityRequest>(
      ctx_, caller.actor(),
      [access = ctx_.access, caller, id](core::State& state, absl::Time now,
                                         core::ChangeSet& changes) {
        absl::StatusOr<core::CapacityRequest> out =
            core::ApproveRequest(state, id, ApproverOf(caller), now, changes);
        if (absl::IsPermissionDenied(out.status())) {
          access->RecordRefusal(caller.principal, kApprove, out.status());
        }
        return out;
      },
      std::move(reply));
}

void Allocations::DenyRequest(const Caller& caller, int64_t id, std::string reason,
                              Reply<core::CapacityRequest> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, kDeny, {}); !access.ok()) {
    return reply(access);
  }
  RunCommand<core::CapacityRequest>(
      ctx_, caller.actor(),
      [access = ctx_.access, caller, id, reason = std::move(reason)](
          core::State& state, absl::Time now, core::ChangeSet& changes) {
        absl::StatusOr<core::CapacityRequest> out =
            core::DenyRequest(state, id, ApproverOf(caller), reason, now, changes);
        if (absl::IsPermissionDenied(out.status())) {
          access->RecordRefusal(caller.principal, kDeny, out.status());
        }
        return out;
      },
      std::move(reply));
}

void Allocations::ReleaseAllocation(const Caller& caller, int64_t id, core::WorkloadRun run,
                                    Reply<core::CapacityRequest> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, kRelease, Resource{kAnyTeam, ""});
      !access.ok()) {
    return reply(access);
  }
  // A reported run changes what the team is charged: enforcers only.
  if (run.started != absl::InfinitePast() || run.ended != absl::InfinitePast()) {
    if (absl::Status enforcer = ctx_.access->CheckEnforcer(
            caller, kRelease,
            run.started != absl::InfinitePast() ? "workload_started_at" : "workload_ended_at");
        !enforcer.ok()) {
      return reply(enforcer);
    }
  }
  RunCommand<core::CapacityRequest>(
      ctx_, caller.actor(),
      [access = ctx_.access, caller, id, run](
          core::State& state, absl::Time now,
          core::ChangeSet& changes) -> absl::StatusOr<core::CapacityRequest> {
        if (absl::Status on_team = CheckOnTeam(*access, caller, kRelease, state, id);
            !on_team.ok()) {
          return on_team;
        }
        return core::ReleaseRequest(state, id, now, changes, run);
      },
      std::move(reply));
}

void Allocations::ClaimAllocation(const Caller& caller, int64_t id, std::string holder,
                                  std::vector<int32_t> members,
                                  Reply<core::CapacityRequest> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, kClaim, Resource{kAnyTeam, ""});
      !access.ok()) {
    return reply(access);
  }
  RunCommand<core::CapacityRequest>(
      ctx_, caller.actor(),
      [access = ctx_.access, caller, id, holder = std::move(holder), members = std::move(members)](
          core::State& state, absl::Time now,
          core::ChangeSet& changes) -> absl::StatusOr<core::CapacityRequest> {
        if (absl::Status on_team = CheckOnTeam(*access, caller, kClaim, state, id); !on_team.ok()) {
          return on_team;
        }
        return core::ClaimAllocation(state, id, holder, members, now, changes);
      },
      std::move(reply));
}

void Allocations::RenewLease(const Caller& caller, int64_t id, std::string holder,
                             Reply<core::CapacityRequest> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, kRenew, Resource{kAnyTeam, ""});
      !access.ok()) {
    return reply(access);
  }
  RunCommand<core::CapacityRequest>(
      ctx_, caller.actor(),
      [access = ctx_.access, caller, id, holder = std::move(holder)](
          core::State& state, absl::Time now,
          core::ChangeSet&) -> absl::StatusOr<core::CapacityRequest> {
        if (absl::Status on_team = CheckOnTeam(*access, caller, kRenew, state, id); !on_team.ok()) {
          return on_team;
        }
        return core::RenewLease(state, id, holder, now);
      },
      std::move(reply));
}

absl::Status Allocations::CheckWatch(const Caller& caller) const {
  return ctx_.access->Check(caller, "AllocationService.WatchAllocations", {});
}

absl::StatusOr<int64_t> Allocations::Watch(const Caller& caller, const WatchFilter& filter,
                                           int64_t start_revision,
                                           WatchSubscriber* subscriber) const {
  ARBITER_RETURN_IF_ERROR(CheckWatch(caller));
  return ctx_.hub->Subscribe(caller.principal, filter, start_revision, subscriber);
}

}  // namespace arbiter::app
