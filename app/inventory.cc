#include "app/inventory.h"

#include <utility>

#include "core/arbitration.h"

namespace arbiter::app {

void Inventory::ListGpuModels(const Caller& caller,
                              Reply<std::vector<core::GpuModel>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "InventoryService.ListGpuModels", {});
      !access.ok()) {
    return reply(access);
  }
  RunRead<std::vector<core::GpuModel>>(
      ctx_, [store = ctx_.store] { return store->ListGpuModels(); }, std::move(reply));
}

void Inventory::CreateCluster(const Caller& caller, core::Cluster cluster,
                              Reply<Done> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "InventoryService.CreateCluster", {});
      !access.ok()) {
    return reply(access);
  }
  RunCommand<Done>(
      ctx_, caller.actor(),
      [cluster = std::move(cluster)](core::State& state, absl::Time,
                                     core::ChangeSet& changes) -> absl::StatusOr<Done> {
        if (absl::Status st = core::CreateCluster(state, cluster, changes); !st.ok()) return st;
        return Done{};
      },
      std::move(reply));
}

void Inventory::ListClusters(const Caller& caller, Reply<std::vector<core::Cluster>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "InventoryService.ListClusters", {});
      !access.ok()) {
    return reply(access);
  }
  RunRead<std::vector<core::Cluster>>(
      ctx_, [store = ctx_.store] { return store->ListClusters(); }, std::move(reply));
}

void Inventory::CreatePool(const Caller& caller, absl::StatusOr<core::Pool> pool,
                           Reply<Done> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "InventoryService.CreatePool", {});
      !access.ok()) {
    return reply(access);
  }
  if (!pool.ok()) return reply(pool.status());
  RunCommand<Done>(
      ctx_, caller.actor(),
      [pool = *std::move(pool)](core::State& state, absl::Time,
                                core::ChangeSet& changes) -> absl::StatusOr<Done> {
        if (absl::Status st = core::CreatePool(state, pool, changes); !st.ok()) return st;
        return Done{};
      },
      std::move(reply));
}

void Inventory::ListPools(const Caller& caller, Reply<std::vector<core::Pool>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "InventoryService.ListPools", {});
      !access.ok()) {
    return reply(access);
  }
  RunRead<std::vector<core::Pool>>(
      ctx_, [store = ctx_.store] { return store->ListPools(); }, std::move(reply));
}

void Inventory::RegisterNode(const Caller& caller, core::Node node, Reply<core::Node> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "InventoryService.RegisterNode", {});
      !access.ok()) {
    return reply(access);
  }
  RunCommand<core::Node>(
      ctx_, caller.actor(),
      [node = std::move(node)](core::State& state, absl::Time now, core::ChangeSet& changes) {
        return core::RegisterNode(state, node, now, changes);
      },
      std::move(reply));
}

void Inventory::ListNodes(const Caller& caller, std::string cluster, std::string pool,
                          Reply<std::vector<core::Node>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "InventoryService.ListNodes", {});
      !access.ok()) {
    return reply(access);
  }
  RunRead<std::vector<core::Node>>(
      ctx_,
      [store = ctx_.store, cluster = std::move(cluster), pool = std::move(pool)] {
        return store->ListNodes(cluster, pool);
      },
      std::move(reply));
}

}  // namespace arbiter::app
