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

}  // namespace arbiter::server
