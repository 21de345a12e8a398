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

template <typename T>
void Inventory::Command(const Caller& caller, const char* method, DecideFn<T> decide,
                        Reply<T> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, method, {}); !access.ok()) {
    return reply(access);
  }
  RunCommand<T>(ctx_, caller.actor(), std::move(decide), std::move(reply));
}

void Inventory::SetGpuModel(const Caller& caller, core::GpuModel model,
                            Reply<ModelSet> reply) const {
  Command<ModelSet>(
      caller, "InventoryService.SetGpuModel",
      [model = std::move(model)](core::State& state, absl::Time,
                                 core::ChangeSet& changes) -> absl::StatusOr<ModelSet> {
        absl::StatusOr<bool> changed = core::SetGpuModel(state, model, changes);
        if (!changed.ok()) return changed.status();
        return ModelSet{*state.FindGpuModel(model.name), *changed};
      },
      std::move(reply));
}

void Inventory::UpdateNode(const Caller& caller, core::Node facts, Reply<core::Node> reply) const {
  Command<core::Node>(
      caller, "InventoryService.UpdateNode",
      [facts = std::move(facts)](core::State& state, absl::Time now, core::ChangeSet& changes) {
        return core::UpdateNode(state, facts, now, changes);
      },
      std::move(reply));
}

void Inventory::CordonNode(const Caller& caller, core::NodeRef ref, bool cordon,
                           Reply<core::Node> reply) const {
  Command<core::Node>(
      caller, cordon ? "InventoryService.CordonNode" : "InventoryService.UncordonNode",
      [ref = std::move(ref), cordon](core::State& state, absl::Time now, core::ChangeSet& changes) {
        return core::CordonNode(state, ref, cordon, now, changes);
      },
      std::move(reply));
}

void Inventory::DrainNode(const Caller& caller, core::NodeRef ref, int64_t grace_seconds,
                          Reply<core::DrainOutcome> reply) const {
  Command<core::DrainOutcome>(
      caller, "InventoryService.DrainNode",
      [ref = std::move(ref), grace_seconds](core::State& state, absl::Time now,
                                            core::ChangeSet& changes) {
        return core::DrainNode(state, ref, grace_seconds, now, changes);
      },
      std::move(reply));
}

void Inventory::MarkNodeFailed(const Caller& caller, core::NodeRef ref,
                               absl::StatusOr<absl::Time> failed_at,
                               Reply<core::FailOutcome> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "InventoryService.MarkNodeFailed", {});
      !access.ok()) {
    return reply(access);
  }
  if (!failed_at.ok()) return reply(failed_at.status());
  RunCommand<core::FailOutcome>(
      ctx_, caller.actor(),
      [ref = std::move(ref), at = *failed_at](core::State& state, absl::Time now,
                                              core::ChangeSet& changes) {
        return core::FailNode(state, ref, at, now, changes);
      },
      std::move(reply));
}

void Inventory::RemoveNode(const Caller& caller, core::NodeRef ref, Reply<Done> reply) const {
  Command<Done>(
      caller, "InventoryService.RemoveNode",
      [ref = std::move(ref)](core::State& state, absl::Time,
                             core::ChangeSet& changes) -> absl::StatusOr<Done> {
        if (absl::Status st = core::RemoveNode(state, ref, changes); !st.ok()) return st;
        return Done{};
      },
      std::move(reply));
}

void Inventory::GetServingForecast(const Caller& caller, std::string pool, int32_t hours,
                                   Reply<core::ForecastView> reply) const {
  Command<core::ForecastView>(
      caller, "InventoryService.GetServingForecast",
      [pool = std::move(pool), hours](core::State& state, absl::Time now, core::ChangeSet&) {
        return core::ForecastOf(state, pool, now, hours);
      },
      std::move(reply));
}

void Inventory::NodeHeartbeat(const Caller& caller, core::NodeRef ref,
                              Reply<core::Node> reply) const {
  Command<core::Node>(
      caller, "InventoryService.NodeHeartbeat",
      [ref = std::move(ref)](core::State& state, absl::Time now, core::ChangeSet& changes) {
        return core::NodeHeartbeat(state, ref, now, changes);
      },
      std::move(reply));
}

}  // namespace arbiter::app
