#include "app/allocations.h"

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "core/arbitration.h"
#include "core/status_macros.h"

namespace arbiter::app {
namespace {

constexpr char kApprove[] = "AllocationService.ApproveRequest";
constexpr char kDeny[] = "AllocationService.DenyRequest";
constexpr char kRelease[] = "AllocationService.ReleaseAllocation";

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

// `reply`, given the queue positions of the queued requests among
// `requests_of(value)` first: taken on the arbiter's thread, as of what it has
// decided (core::QueuePositions). Without a leader to ask (a follower, an
// overloaded arbiter) the value is answered with positions 0.
template <typename T>
Reply<T> WithQueuePositions(const Context& ctx,
                            std::function<std::vector<core::CapacityRequest*>(T&)> requests_of,
                            Reply<T> reply) {
  return [ctx, requests_of = std::move(requests_of),
          reply = std::move(reply)](absl::StatusOr<T> value) {
    if (!value.ok()) return reply(std::move(value));
    auto shared = std::make_shared<T>(*std::move(value));
    std::vector<int64_t> ids;
    for (const core::CapacityRequest* r : requests_of(*shared)) {
      if (r->state == core::RequestState::kQueued) ids.push_back(r->id);
    }
    if (ids.empty()) return reply(std::move(*shared));
    auto positions = std::make_shared<std::vector<int64_t>>();
    ctx.arbiter->Submit(
        [ids = std::move(ids), positions](core::State& state, absl::Time, core::ChangeSet&) {
          *positions = core::QueuePositions(state, ids);
          return absl::OkStatus();
        },
        [shared, positions, requests_of, reply](const absl::Status& status) {
          if (status.ok()) {
            size_t next = 0;
            for (core::CapacityRequest* r : requests_of(*shared)) {
              if (r->state == core::RequestState::kQueued) r->queue_position = (*positions)[next++];
            }
          }
          reply(std::move(*shared));
        });
  };
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
                                  Reply<RequestDecision> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "AllocationService.RequestCapacity", target);
      !access.ok()) {
    return reply(access);
  }
  if (!spec.ok()) return reply(spec.status());
  auto outcome = std::make_shared<core::RequestOutcome>();
  ctx_.arbiter->Submit(
      [spec = *std::move(spec), outcome](core::State& state, absl::Time now,
                                         core::ChangeSet& changes) -> absl::Status {
        absl::StatusOr<core::RequestOutcome> out = core::RequestCapacity(state, spec, now, changes);
        if (!out.ok()) return out.status();
        *outcome = *std::move(out);
        return absl::OkStatus();
      },
      [ctx = ctx_, outcome, reply = std::move(reply)](const absl::Status& status) {
        if (!status.ok()) return reply(status);
        if (!outcome->replayed) return reply(RequestDecision{std::move(outcome->request), false});
        // A replay answers with the stored request, read off the engine's
        // threads: it may have moved on since it was decided.
        RunRead<RequestDecision>(
            ctx,
            [ctx, id = outcome->request.id]() -> absl::StatusOr<RequestDecision> {
              absl::StatusOr<core::CapacityRequest> stored = ReadRequest(ctx, id);
              if (!stored.ok()) return stored.status();
              return RequestDecision{*std::move(stored), true};
            },
            reply, "too busy; retry");
      },
      caller.actor());
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
      WithQueuePositions<core::CapacityRequest>(ctx_, RequestOf, std::move(reply)));
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
      WithQueuePositions<store::RequestPage>(ctx_, RequestsOf, std::move(reply)));
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

void Allocations::ReleaseAllocation(const Caller& caller, int64_t id,
                                    Reply<core::CapacityRequest> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, kRelease, Resource{kAnyTeam, ""});
      !access.ok()) {
    return reply(access);
  }
  RunCommand<core::CapacityRequest>(
      ctx_, caller.actor(),
      [access = ctx_.access, caller, id](
          core::State& state, absl::Time now,
          core::ChangeSet& changes) -> absl::StatusOr<core::CapacityRequest> {
        // The request's team, known here: check that the caller may act on it.
        if (const core::CapacityRequest* live = state.FindLiveRequest(id)) {
          if (absl::Status on_team =
                  access->Check(caller, kRelease, Resource{live->spec.team, live->spec.pool});
              !on_team.ok()) {
            return on_team;
          }
        }
        return core::ReleaseRequest(state, id, now, changes);
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
