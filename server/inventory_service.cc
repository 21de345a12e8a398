// InventoryService: the GPU catalog, clusters, pools and nodes
// (app/inventory.h).
#include "server/caller.h"
#include "server/convert.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {
grpc::ServerUnaryReactor* InventoryService::ListGpuModels(grpc::CallbackServerContext* ctx,
                                                          const v1::ListGpuModelsRequest*,
                                                          v1::ListGpuModelsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().ListGpuModels(
      CallerOf(*ctx, ctx_.insecure),
      Answer<std::vector<core::GpuModel>>(
          reactor, "ListGpuModels",
          ListFiller<core::GpuModel>([resp] { return resp->add_gpu_models(); })));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::CreateCluster(grpc::CallbackServerContext* ctx,
                                                          const v1::CreateClusterRequest* req,
                                                          v1::CreateClusterResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().CreateCluster(
      CallerOf(*ctx, ctx_.insecure), ClusterFromProto(req->cluster()),
      Answer<app::Done>(reactor, "CreateCluster", [req, resp](const app::Done&) {
        *resp->mutable_cluster() = req->cluster();
      }));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::ListClusters(grpc::CallbackServerContext* ctx,
                                                         const v1::ListClustersRequest*,
                                                         v1::ListClustersResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().ListClusters(
      CallerOf(*ctx, ctx_.insecure),
      Answer<std::vector<core::Cluster>>(reactor, "ListClusters", ListFiller<core::Cluster>([resp] {
                                           return resp->add_clusters();
                                         })));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::CreatePool(grpc::CallbackServerContext* ctx,
                                                       const v1::CreatePoolRequest* req,
                                                       v1::CreatePoolResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().CreatePool(
      CallerOf(*ctx, ctx_.insecure), PoolFromProto(req->pool()),
      Answer<app::Done>(reactor, "CreatePool",
                        [req, resp](const app::Done&) { *resp->mutable_pool() = req->pool(); }));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::ListPools(grpc::CallbackServerContext* ctx,
                                                      const v1::ListPoolsRequest*,
                                                      v1::ListPoolsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().ListPools(
      CallerOf(*ctx, ctx_.insecure),
      Answer<std::vector<core::Pool>>(
          reactor, "ListPools", ListFiller<core::Pool>([resp] { return resp->add_pools(); })));
  return reactor;
}

namespace {

void FillForecast(const core::ForecastView& f, const app::NodeDirectory& nodes,
                  v1::GetServingForecastResponse* out) {
  out->set_pool(f.pool);
  out->set_lead_seconds(f.lead_seconds);
  out->set_capacity_milli(f.figures.capacity_milli);
  out->set_free_milli(f.figures.free_milli);
  out->set_own_milli(f.figures.own_milli);
  out->set_asked_milli(f.figures.asked_milli);
  out->set_lent_milli(f.figures.lent_milli);
  out->set_leaving_milli(f.figures.leaving_milli);
  out->set_peak_milli(f.peak.milli);
  if (f.peak.milli > 0) *out->mutable_peak_at() = TimestampOf(f.peak.at);
  out->set_reclaim_milli(f.reclaim_milli);
  for (const core::ForecastView::Slot& s : f.slots) {
    v1::ForecastSlot* slot = out->add_slots();
    *slot->mutable_start() = TimestampOf(s.start);
    slot->set_forecast_milli(s.forecast_milli);
    slot->set_observed(s.observed);
  }
  for (const core::CapacityRequest& r : f.notices) ToProto(r, nodes, out->add_notices());
}

}  // namespace

grpc::ServerUnaryReactor* InventoryService::GetServingForecast(
    grpc::CallbackServerContext* ctx, const v1::GetServingForecastRequest* req,
    v1::GetServingForecastResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const app::NodeDirectory* nodes = &ctx_.app->nodes();
  ctx_.app->inventory().GetServingForecast(
      CallerOf(*ctx, ctx_.insecure), req->pool(), req->hours() == 0 ? 24 : req->hours(),
      Answer<core::ForecastView>(
          reactor, "GetServingForecast",
          [nodes, resp](const core::ForecastView& f) { FillForecast(f, *nodes, resp); }));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::RegisterNode(grpc::CallbackServerContext* ctx,
                                                         const v1::RegisterNodeRequest* req,
                                                         v1::RegisterNodeResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().RegisterNode(
      CallerOf(*ctx, ctx_.insecure), NodeFromProto(req->node()),
      Answer<core::Node>(reactor, "RegisterNode",
                         [resp](const core::Node& node) { ToProto(node, resp->mutable_node()); }));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::ListNodes(grpc::CallbackServerContext* ctx,
                                                      const v1::ListNodesRequest* req,
                                                      v1::ListNodesResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().ListNodes(
      CallerOf(*ctx, ctx_.insecure), req->cluster(), req->pool(),
      Answer<std::vector<core::Node>>(
          reactor, "ListNodes", ListFiller<core::Node>([resp] { return resp->add_nodes(); })));
  return reactor;
}

namespace {

core::NodeRef RefOf(const std::string& cluster, const std::string& name) {
  return core::NodeRef{cluster, name};
}

}  // namespace

grpc::ServerUnaryReactor* InventoryService::SetGpuModel(grpc::CallbackServerContext* ctx,
                                                        const v1::SetGpuModelRequest* req,
                                                        v1::SetGpuModelResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().SetGpuModel(
      CallerOf(*ctx, ctx_.insecure), GpuModelFromProto(req->gpu_model()),
      Answer<app::ModelSet>(reactor, "SetGpuModel", [resp](const app::ModelSet& set) {
        ToProto(set.model, resp->mutable_gpu_model());
        resp->set_changed(set.changed);
      }));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::UpdateNode(grpc::CallbackServerContext* ctx,
                                                       const v1::UpdateNodeRequest* req,
                                                       v1::UpdateNodeResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().UpdateNode(
      CallerOf(*ctx, ctx_.insecure), NodeFromProto(req->node()),
      Answer<core::Node>(reactor, "UpdateNode",
                         [resp](const core::Node& node) { ToProto(node, resp->mutable_node()); }));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::CordonNode(grpc::CallbackServerContext* ctx,
                                                       const v1::CordonNodeRequest* req,
                                                       v1::CordonNodeResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().CordonNode(
      CallerOf(*ctx, ctx_.insecure), RefOf(req->cluster(), req->name()), /*cordon=*/true,
      Answer<core::Node>(reactor, "CordonNode",
                         [resp](const core::Node& node) { ToProto(node, resp->mutable_node()); }));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::UncordonNode(grpc::CallbackServerContext* ctx,
                                                         const v1::UncordonNodeRequest* req,
                                                         v1::UncordonNodeResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().CordonNode(
      CallerOf(*ctx, ctx_.insecure), RefOf(req->cluster(), req->name()), /*cordon=*/false,
      Answer<core::Node>(reactor, "UncordonNode",
                         [resp](const core::Node& node) { ToProto(node, resp->mutable_node()); }));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::DrainNode(grpc::CallbackServerContext* ctx,
                                                      const v1::DrainNodeRequest* req,
                                                      v1::DrainNodeResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().DrainNode(
      CallerOf(*ctx, ctx_.insecure), RefOf(req->cluster(), req->name()), req->grace_seconds(),
      Answer<core::DrainOutcome>(reactor, "DrainNode", [resp](const core::DrainOutcome& out) {
        ToProto(out.node, resp->mutable_node());
        for (int64_t id : out.notified) resp->add_notified_request_ids(id);
      }));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::MarkNodeFailed(grpc::CallbackServerContext* ctx,
                                                           const v1::MarkNodeFailedRequest* req,
                                                           v1::MarkNodeFailedResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<absl::Time> failed_at = req->has_failed_at()
                                             ? TimeFromProto(true, req->failed_at(), "failed_at")
                                             : absl::StatusOr<absl::Time>(absl::InfinitePast());
  ctx_.app->inventory().MarkNodeFailed(
      CallerOf(*ctx, ctx_.insecure), RefOf(req->cluster(), req->name()), std::move(failed_at),
      Answer<core::FailOutcome>(reactor, "MarkNodeFailed", [resp](const core::FailOutcome& out) {
        ToProto(out.node, resp->mutable_node());
        for (int64_t id : out.ended) resp->add_ended_request_ids(id);
      }));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::RemoveNode(grpc::CallbackServerContext* ctx,
                                                       const v1::RemoveNodeRequest* req,
                                                       v1::RemoveNodeResponse*) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().RemoveNode(
      CallerOf(*ctx, ctx_.insecure), RefOf(req->cluster(), req->name()),
      Answer<app::Done>(reactor, "RemoveNode", [](const app::Done&) {}));
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::NodeHeartbeat(grpc::CallbackServerContext* ctx,
                                                          const v1::NodeHeartbeatRequest* req,
                                                          v1::NodeHeartbeatResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->inventory().NodeHeartbeat(
      CallerOf(*ctx, ctx_.insecure), RefOf(req->cluster(), req->name()),
      Answer<core::Node>(reactor, "NodeHeartbeat",
                         [resp](const core::Node& node) { ToProto(node, resp->mutable_node()); }));
  return reactor;
}

}  // namespace arbiter::server
