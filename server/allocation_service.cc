// AllocationService: request, inspect, release and watch capacity.
#include <deque>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include "server/caller.h"
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
                           public app::WatchSubscriber {
 public:
  WatchReactor(app::WatchHub* hub, const app::NodeDirectory* nodes,
               const v1::WatchAllocationsRequest& req)
      : hub_(hub), nodes_(nodes), team_(req.team()), pool_(req.pool()) {
    id_ = hub_->Subscribe(this);
  }

  void Deliver(const app::AllocationEvent& event) override ABSL_LOCKS_EXCLUDED(mu_) {
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

  app::WatchHub* const hub_;
  const app::NodeDirectory* const nodes_;
  const std::string team_;
  const std::string pool_;
  int64_t id_ = 0;
  absl::Mutex mu_;
  std::deque<v1::WatchAllocationsResponse> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> final_status_ ABSL_GUARDED_BY(mu_);
};

// The filter a ListRequests call asks for: INVALID_ARGUMENT naming the
// field for an unknown state, a page size out of range or a foreign token.
absl::StatusOr<store::RequestFilter> RequestFilterFromProto(const v1::ListRequestsRequest& req) {
  store::RequestFilter filter;
  filter.team = req.team();
  absl::StatusOr<core::RequestState> state = RequestStateFromProto(req.state(), "state");
  if (!state.ok()) return state.status();
  filter.state = *state;
  if (req.page_size() < 0 || req.page_size() > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be in [0, ", kMaxPageSize, "], got ", req.page_size()));
  }
  filter.limit = req.page_size() == 0 ? kDefaultPageSize : req.page_size();
  if (!req.page_token().empty() &&
      (!absl::SimpleAtoi(req.page_token(), &filter.before_id) || filter.before_id <= 0)) {
    return absl::InvalidArgumentError("page_token: not a token from this API");
  }
  return filter;
}

// Fills a response's `request` field.
template <typename Response>
std::function<void(const core::CapacityRequest&)> RequestFiller(const app::NodeDirectory* nodes,
                                                                Response* resp) {
  return [nodes, resp](const core::CapacityRequest& request) {
    ToProto(request, *nodes, resp->mutable_request());
  };
}

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
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().RequestCapacity(
      CallerOf(*ctx, ctx_.insecure), app::Resource{req->team(), req->pool()}, SpecFromProto(*req),
      Answer<app::RequestDecision>(
          reactor, "RequestCapacity",
          [nodes = &ctx_.app->nodes(), resp](const app::RequestDecision& d) {
            resp->set_replayed(d.replayed);
            ToProto(d.request, *nodes, resp->mutable_request());
          }));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::GetRequest(grpc::CallbackServerContext* ctx,
                                                        const v1::GetRequestRequest* req,
                                                        v1::GetRequestResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().GetRequest(
      CallerOf(*ctx, ctx_.insecure), req->id(),
      Answer<core::CapacityRequest>(reactor, "GetRequest",
                                    RequestFiller(&ctx_.app->nodes(), resp)));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::ListRequests(grpc::CallbackServerContext* ctx,
                                                          const v1::ListRequestsRequest* req,
                                                          v1::ListRequestsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<store::RequestFilter> filter = RequestFilterFromProto(*req);
  const int32_t limit = filter.ok() ? filter->limit : 0;
  ctx_.app->allocations().ListRequests(
      CallerOf(*ctx, ctx_.insecure), std::move(filter),
      Answer<std::vector<core::CapacityRequest>>(
          reactor, "ListRequests",
          [nodes = &ctx_.app->nodes(), limit,
           resp](const std::vector<core::CapacityRequest>& requests) {
            for (const auto& r : requests) ToProto(r, *nodes, resp->add_requests());
            if (static_cast<int32_t>(requests.size()) == limit && requests.back().id > 1) {
              resp->set_next_page_token(absl::StrCat(requests.back().id));
            }
          }));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::ApproveRequest(grpc::CallbackServerContext* ctx,
                                                            const v1::ApproveRequestRequest* req,
                                                            v1::ApproveRequestResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().ApproveRequest(
      CallerOf(*ctx, ctx_.insecure), req->id(),
      Answer<core::CapacityRequest>(reactor, "ApproveRequest",
                                    RequestFiller(&ctx_.app->nodes(), resp)));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::DenyRequest(grpc::CallbackServerContext* ctx,
                                                         const v1::DenyRequestRequest* req,
                                                         v1::DenyRequestResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().DenyRequest(
      CallerOf(*ctx, ctx_.insecure), req->id(), req->reason(),
      Answer<core::CapacityRequest>(reactor, "DenyRequest",
                                    RequestFiller(&ctx_.app->nodes(), resp)));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::ReleaseAllocation(
    grpc::CallbackServerContext* ctx, const v1::ReleaseAllocationRequest* req,
    v1::ReleaseAllocationResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().ReleaseAllocation(
      CallerOf(*ctx, ctx_.insecure), req->id(),
      Answer<core::CapacityRequest>(reactor, "ReleaseAllocation",
                                    RequestFiller(&ctx_.app->nodes(), resp)));
  return reactor;
}

grpc::ServerWriteReactor<v1::WatchAllocationsResponse>* AllocationService::WatchAllocations(
    grpc::CallbackServerContext* ctx, const v1::WatchAllocationsRequest* req) {
  if (absl::Status access = ctx_.app->allocations().CheckWatch(CallerOf(*ctx, ctx_.insecure));
      !access.ok()) {
    return new RefusedWatch(ToGrpcStatus(access, "WatchAllocations"));
  }
  return new WatchReactor(&ctx_.app->hub(), &ctx_.app->nodes(), *req);
}

}  // namespace arbiter::server
