// AllocationService: request, inspect, release and watch capacity.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
            resp->set_validated_only(d.preview);
            for (const core::CapacityRequest& victim : d.would_preempt) {
              ToProto(victim, *nodes, resp->add_would_preempt());
            }
          }),
      req->validate_only());
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
      Answer<store::RequestPage>(
          reactor, "ListRequests",
          [nodes = &ctx_.app->nodes(), limit, resp](const store::RequestPage& page) {
            const std::vector<core::CapacityRequest>& requests = page.requests;
            for (const auto& r : requests) ToProto(r, *nodes, resp->add_requests());
            resp->set_revision(page.revision);
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
  if (req->validate_only()) {
    ctx_.app->allocations().PreviewApproval(
        CallerOf(*ctx, ctx_.insecure), req->id(),
        Answer<app::RequestDecision>(
            reactor, "ApproveRequest",
            [nodes = &ctx_.app->nodes(), resp](const app::RequestDecision& d) {
              ToProto(d.request, *nodes, resp->mutable_request());
              resp->set_validated_only(true);
              for (const core::CapacityRequest& victim : d.would_preempt) {
                ToProto(victim, *nodes, resp->add_would_preempt());
              }
            }));
    return reactor;
  }
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
  absl::StatusOr<core::WorkloadRun> run = WorkloadRunFromProto(*req);
  if (!run.ok()) return FinishWith(ctx, run.status(), "ReleaseAllocation");
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().ReleaseAllocation(
      CallerOf(*ctx, ctx_.insecure), req->id(), *run,
      Answer<core::CapacityRequest>(reactor, "ReleaseAllocation",
                                    RequestFiller(&ctx_.app->nodes(), resp)));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::ClaimAllocation(grpc::CallbackServerContext* ctx,
                                                             const v1::ClaimAllocationRequest* req,
                                                             v1::ClaimAllocationResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().ClaimAllocation(
      CallerOf(*ctx, ctx_.insecure), req->id(), req->holder(),
      std::vector<int32_t>(req->members().begin(), req->members().end()),
      Answer<core::CapacityRequest>(reactor, "ClaimAllocation",
                                    RequestFiller(&ctx_.app->nodes(), resp)));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::RenewLease(grpc::CallbackServerContext* ctx,
                                                        const v1::RenewLeaseRequest* req,
                                                        v1::RenewLeaseResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().RenewLease(
      CallerOf(*ctx, ctx_.insecure), req->id(), req->holder(),
      Answer<core::CapacityRequest>(reactor, "RenewLease",
                                    RequestFiller(&ctx_.app->nodes(), resp)));
  return reactor;
}

}  // namespace arbiter::server
