// InventoryService: the GPU catalog, clusters, pools and nodes.
#include "core/arbitration.h"
#include "core/status_macros.h"
#include "server/convert.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {

grpc::ServerUnaryReactor* InventoryService::ListGpuModels(grpc::CallbackServerContext* ctx,
                                                          const v1::ListGpuModelsRequest*,
                                                          v1::ListGpuModelsResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "InventoryService.ListGpuModels", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListGpuModels");
  }
  return RunRead(ctx, *ctx_.reads, "ListGpuModels", [this, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto models, ctx_.store->ListGpuModels());
    for (const auto& m : models) ToProto(m, resp->add_gpu_models());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InventoryService::CreateCluster(grpc::CallbackServerContext* ctx,
                                                          const v1::CreateClusterRequest* req,
                                                          v1::CreateClusterResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "InventoryService.CreateCluster", {});
      !access.ok()) {
    return FinishWith(ctx, access, "CreateCluster");
  }
  core::Cluster cluster = ClusterFromProto(req->cluster());
  *resp->mutable_cluster() = req->cluster();
  return RunCommand(ctx, *ctx_.arbiter, "CreateCluster",
                    [cluster](core::State& state, absl::Time, core::ChangeSet& changes) {
                      return core::CreateCluster(state, cluster, changes);
                    });
}

grpc::ServerUnaryReactor* InventoryService::ListClusters(grpc::CallbackServerContext* ctx,
                                                         const v1::ListClustersRequest*,
                                                         v1::ListClustersResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "InventoryService.ListClusters", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListClusters");
  }
  return RunRead(ctx, *ctx_.reads, "ListClusters", [this, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto clusters, ctx_.store->ListClusters());
    for (const auto& c : clusters) ToProto(c, resp->add_clusters());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InventoryService::CreatePool(grpc::CallbackServerContext* ctx,
                                                       const v1::CreatePoolRequest* req,
                                                       v1::CreatePoolResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "InventoryService.CreatePool", {});
      !access.ok()) {
    return FinishWith(ctx, access, "CreatePool");
  }
  absl::StatusOr<core::Pool> pool = PoolFromProto(req->pool());
  if (!pool.ok()) return FinishWith(ctx, pool.status(), "CreatePool");
  *resp->mutable_pool() = req->pool();
  return RunCommand(ctx, *ctx_.arbiter, "CreatePool",
                    [pool = *pool](core::State& state, absl::Time, core::ChangeSet& changes) {
                      return core::CreatePool(state, pool, changes);
                    });
}

grpc::ServerUnaryReactor* InventoryService::ListPools(grpc::CallbackServerContext* ctx,
                                                      const v1::ListPoolsRequest*,
                                                      v1::ListPoolsResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "InventoryService.ListPools", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListPools");
  }
  return RunRead(ctx, *ctx_.reads, "ListPools", [this, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto pools, ctx_.store->ListPools());
    for (const auto& p : pools) ToProto(p, resp->add_pools());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InventoryService::RegisterNode(grpc::CallbackServerContext* ctx,
                                                         const v1::RegisterNodeRequest* req,
                                                         v1::RegisterNodeResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "InventoryService.RegisterNode", {});
      !access.ok()) {
    return FinishWith(ctx, access, "RegisterNode");
  }
  auto registered = std::make_shared<core::Node>();
  core::Node node = NodeFromProto(req->node());
  return RunCommand(
      ctx, *ctx_.arbiter, "RegisterNode",
      [node, registered](core::State& state, absl::Time now, core::ChangeSet& changes) {
        ARBITER_ASSIGN_OR_RETURN(*registered, core::RegisterNode(state, node, now, changes));
        return absl::OkStatus();
      },
      [registered, resp] {
        ToProto(*registered, resp->mutable_node());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* InventoryService::ListNodes(grpc::CallbackServerContext* ctx,
                                                      const v1::ListNodesRequest* req,
                                                      v1::ListNodesResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "InventoryService.ListNodes", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListNodes");
  }
  return RunRead(ctx, *ctx_.reads, "ListNodes", [this, req, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto nodes, ctx_.store->ListNodes(req->cluster(), req->pool()));
    for (const auto& n : nodes) ToProto(n, resp->add_nodes());
    return absl::OkStatus();
  });
}

}  // namespace arbiter::server
