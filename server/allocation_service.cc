// AllocationService: request, inspect, release and watch capacity.
#include <deque>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include "core/arbitration.h"
#include "core/status_macros.h"
#include "server/convert.h"
#include "server/grpc_status.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {
namespace {

constexpr int32_t kDefaultPageSize = 100;
constexpr int32_t kMaxPageSize = 1000;
// Events a slow watcher may have waiting before its stream is ended.
constexpr size_t kMaxPendingEvents = 10000;

// One WatchAllocations stream. Deletes itself when gRPC is done with it.
class WatchReactor final : public grpc::ServerWriteReactor<v1::WatchAllocationsResponse>,
                           public WatchSubscriber {
 public:
  WatchReactor(WatchHub* hub, const NodeDirectory* nodes, const v1::WatchAllocationsRequest& req)
      : hub_(hub), nodes_(nodes), team_(req.team()), pool_(req.pool()) {
    id_ = hub_->Subscribe(this);
  }

  void Deliver(const AllocationEvent& event) override ABSL_LOCKS_EXCLUDED(mu_) {
    if (!team_.empty() && event.request.spec.team != team_) return;
    if (!pool_.empty() && event.request.spec.pool != pool_) return;
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    if (pending_.size() >= kMaxPendingEvents) {
      FinishLocked(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                "watcher fell too far behind; reconnect and re-list"));
      return;
    }
    v1::WatchAllocationsResponse& out = pending_.emplace_back();
    out.set_type(ToProto(event.type));
    ToProto(event.request, *nodes_, out.mutable_request());
    out.mutable_committed_at()->set_seconds(absl::ToUnixSeconds(event.committed_at));
    if (!writing_) WriteNextLocked();
  }

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    pending_.pop_front();
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
    } else if (final_status_.has_value()) {
      Finish(*final_status_);
    } else if (!pending_.empty()) {
      WriteNextLocked();
    }
  }

  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    hub_->Unsubscribe(id_);
    delete this;
  }

 private:
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = true;
    StartWrite(&pending_.front());
  }

  // Finishes now, or after the write in flight completes.
  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finishing_) return;
    finishing_ = true;
    if (writing_) {
      final_status_ = std::move(status);
    } else {
      Finish(std::move(status));
    }
  }

  WatchHub* const hub_;
  const NodeDirectory* const nodes_;
  const std::string team_;
  const std::string pool_;
  int64_t id_ = 0;
  absl::Mutex mu_;
  std::deque<v1::WatchAllocationsResponse> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> final_status_ ABSL_GUARDED_BY(mu_);
};

// A watch refused before it starts. Deletes itself when gRPC is done with it.
class RefusedWatch final : public grpc::ServerWriteReactor<v1::WatchAllocationsResponse> {
 public:
  explicit RefusedWatch(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerUnaryReactor* AllocationService::RequestCapacity(grpc::CallbackServerContext* ctx,
                                                             const v1::RequestCapacityRequest* req,
                                                             v1::RequestCapacityResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "AllocationService.RequestCapacity",
                                        Resource{req->team(), req->pool()});
      !access.ok()) {
    return FinishWith(ctx, access, "RequestCapacity");
  }
  absl::StatusOr<core::CapacityRequestSpec> spec = SpecFromProto(*req);
  if (!spec.ok()) return FinishWith(ctx, spec.status(), "RequestCapacity");
  auto outcome = std::make_shared<core::RequestOutcome>();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.arbiter->Submit(
      [spec = *std::move(spec), outcome](core::State& state, absl::Time now,
                                         core::ChangeSet& changes) -> absl::Status {
        ARBITER_ASSIGN_OR_RETURN(*outcome, core::RequestCapacity(state, spec, now, changes));
        return absl::OkStatus();
      },
      [this, reactor, outcome, resp](const absl::Status& status) {
        if (!status.ok() || !outcome->replayed) {
          if (status.ok()) ToProto(outcome->request, *ctx_.nodes, resp->mutable_request());
          reactor->Finish(ToGrpcStatus(status, "RequestCapacity"));
          return;
        }
        // A replay answers with the stored request, read off the arbiter thread.
        resp->set_replayed(true);
        const bool queued = ctx_.reads->Submit([this, reactor, outcome, resp] {
          absl::StatusOr<core::CapacityRequest> stored =
              ctx_.store->GetRequest(outcome->request.id);
          if (stored.ok()) ToProto(*stored, *ctx_.nodes, resp->mutable_request());
          reactor->Finish(ToGrpcStatus(stored.status(), "RequestCapacity"));
        });
        if (!queued) {
          reactor->Finish(
              ToGrpcStatus(absl::ResourceExhaustedError("too busy; retry"), "RequestCapacity"));
        }
      },
      ActorOf(*ctx));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::GetRequest(grpc::CallbackServerContext* ctx,
                                                        const v1::GetRequestRequest* req,
                                                        v1::GetRequestResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "AllocationService.GetRequest", {});
      !access.ok()) {
    return FinishWith(ctx, access, "GetRequest");
  }
  if (req->id() <= 0) {
    return FinishWith(ctx,
                      absl::InvalidArgumentError(absl::StrCat("id: must be > 0, got ", req->id())),
                      "GetRequest");
  }
  return RunRead(ctx, *ctx_.reads, "GetRequest", [this, req, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto request, ctx_.store->GetRequest(req->id()));
    ToProto(request, *ctx_.nodes, resp->mutable_request());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AllocationService::ListRequests(grpc::CallbackServerContext* ctx,
                                                          const v1::ListRequestsRequest* req,
                                                          v1::ListRequestsResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "AllocationService.ListRequests", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListRequests");
  }
  store::RequestFilter filter;
  filter.team = req->team();
  absl::StatusOr<core::RequestState> state = RequestStateFromProto(req->state(), "state");
  if (!state.ok()) return FinishWith(ctx, state.status(), "ListRequests");
  filter.state = *state;
  if (req->page_size() < 0 || req->page_size() > kMaxPageSize) {
    return FinishWith(ctx,
                      absl::InvalidArgumentError(absl::StrCat(
                          "page_size: must be in [0, ", kMaxPageSize, "], got ", req->page_size())),
                      "ListRequests");
  }
  filter.limit = req->page_size() == 0 ? kDefaultPageSize : req->page_size();
  if (!req->page_token().empty() &&
      (!absl::SimpleAtoi(req->page_token(), &filter.before_id) || filter.before_id <= 0)) {
    return FinishWith(ctx, absl::InvalidArgumentError("page_token: not a token from this API"),
                      "ListRequests");
  }
  return RunRead(ctx, *ctx_.reads, "ListRequests", [this, filter, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto requests, ctx_.store->ListRequests(filter));
    for (const auto& r : requests) ToProto(r, *ctx_.nodes, resp->add_requests());
    if (static_cast<int32_t>(requests.size()) == filter.limit && requests.back().id > 1) {
      resp->set_next_page_token(absl::StrCat(requests.back().id));
    }
    return absl::OkStatus();
  });
}

namespace {

core::Approver ApproverOf(const Caller& caller) {
  return core::Approver{caller.principal, caller.groups};
}

}  // namespace

grpc::ServerUnaryReactor* AllocationService::ApproveRequest(grpc::CallbackServerContext* ctx,
                                                            const v1::ApproveRequestRequest* req,
                                                            v1::ApproveRequestResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "AllocationService.ApproveRequest", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ApproveRequest");
  }
  const Caller caller = CallerOf(*ctx, ctx_.insecure);
  auto approved = std::make_shared<core::CapacityRequest>();
  const int64_t id = req->id();
  return RunCommand(
      ctx, *ctx_.arbiter, "ApproveRequest",
      [this, caller, id, approved](core::State& state, absl::Time now,
                                   core::ChangeSet& changes) -> absl::Status {
        absl::StatusOr<core::CapacityRequest> out =
            core::ApproveRequest(state, id, ApproverOf(caller), now, changes);
        if (!out.ok()) {
          if (absl::IsPermissionDenied(out.status())) {
            RecordRefusal(ctx_, caller.principal, "AllocationService.ApproveRequest", out.status());
          }
          return out.status();
        }
        *approved = *std::move(out);
        return absl::OkStatus();
      },
      [this, approved, resp] {
        ToProto(*approved, *ctx_.nodes, resp->mutable_request());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* AllocationService::DenyRequest(grpc::CallbackServerContext* ctx,
                                                         const v1::DenyRequestRequest* req,
                                                         v1::DenyRequestResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "AllocationService.DenyRequest", {});
      !access.ok()) {
    return FinishWith(ctx, access, "DenyRequest");
  }
  const Caller caller = CallerOf(*ctx, ctx_.insecure);
  auto denied = std::make_shared<core::CapacityRequest>();
  const int64_t id = req->id();
  return RunCommand(
      ctx, *ctx_.arbiter, "DenyRequest",
      [this, caller, id, reason = req->reason(), denied](core::State& state, absl::Time now,
                                                         core::ChangeSet& changes) -> absl::Status {
        absl::StatusOr<core::CapacityRequest> out =
            core::DenyRequest(state, id, ApproverOf(caller), reason, now, changes);
        if (!out.ok()) {
          if (absl::IsPermissionDenied(out.status())) {
            RecordRefusal(ctx_, caller.principal, "AllocationService.DenyRequest", out.status());
          }
          return out.status();
        }
        *denied = *std::move(out);
        return absl::OkStatus();
      },
      [this, denied, resp] {
        ToProto(*denied, *ctx_.nodes, resp->mutable_request());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* AllocationService::ReleaseAllocation(
    grpc::CallbackServerContext* ctx, const v1::ReleaseAllocationRequest* req,
    v1::ReleaseAllocationResponse* resp) {
  // Callers without any team role are refused before the request is
  // looked up, so that they learn nothing about it.
  if (absl::Status access =
          CheckAccess(*ctx, ctx_, "AllocationService.ReleaseAllocation", Resource{kAnyTeam, ""});
      !access.ok()) {
    return FinishWith(ctx, access, "ReleaseAllocation");
  }
  auto released = std::make_shared<core::CapacityRequest>();
  const int64_t id = req->id();
  return RunCommand(
      ctx, *ctx_.arbiter, "ReleaseAllocation",
      [this, ctx, id, released](core::State& state, absl::Time now, core::ChangeSet& changes) {
        // The request's team, known here: check that the caller may act on it.
        if (const core::CapacityRequest* live = state.FindLiveRequest(id)) {
          ARBITER_RETURN_IF_ERROR(CheckAccess(*ctx, ctx_, "AllocationService.ReleaseAllocation",
                                              Resource{live->spec.team, live->spec.pool}));
        }
        ARBITER_ASSIGN_OR_RETURN(*released, core::ReleaseRequest(state, id, now, changes));
        return absl::OkStatus();
      },
      [this, released, resp] {
        ToProto(*released, *ctx_.nodes, resp->mutable_request());
        return absl::OkStatus();
      });
}

grpc::ServerWriteReactor<v1::WatchAllocationsResponse>* AllocationService::WatchAllocations(
    grpc::CallbackServerContext* ctx, const v1::WatchAllocationsRequest* req) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "AllocationService.WatchAllocations", {});
      !access.ok()) {
    return new RefusedWatch(ToGrpcStatus(access, "WatchAllocations"));
  }
  return new WatchReactor(ctx_.hub, ctx_.nodes, *req);
}

}  // namespace arbiter::server
