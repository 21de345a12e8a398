// Inventory: the GPU catalog, clusters, pools and nodes. Each call checks the
// caller's access first; changes are engine commands answered after COMMIT,
// listings are reads. See proto/arbiter/v1/inventory.proto for each call's
// contract; errors of the changes are those of core/arbitration.h.
//
// Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "app/authz.h"
#include "app/context.h"
#include "core/arbitration.h"
#include "core/model.h"

namespace arbiter::app {

// A GPU model as SetGpuModel left it, and whether that changed anything.
struct ModelSet {
  core::GpuModel model;
  bool changed = false;
};

class Inventory {
 public:
  explicit Inventory(const Context& ctx) : ctx_(ctx) {}

  void ListGpuModels(const Caller& caller, Reply<std::vector<core::GpuModel>> reply) const;
  void SetGpuModel(const Caller& caller, core::GpuModel model, Reply<ModelSet> reply) const;
  void CreateCluster(const Caller& caller, core::Cluster cluster, Reply<Done> reply) const;
  void ListClusters(const Caller& caller, Reply<std::vector<core::Cluster>> reply) const;
  // `pool`'s conversion error is answered after the access check.
  void CreatePool(const Caller& caller, absl::StatusOr<core::Pool> pool, Reply<Done> reply) const;
  void ListPools(const Caller& caller, Reply<std::vector<core::Pool>> reply) const;
  // `pool`'s serving forecast for `hours` ahead, from the leader's live
  // state (core::ForecastOf, whose errors it answers).
  void GetServingForecast(const Caller& caller, std::string pool, int32_t hours,
                          Reply<core::ForecastView> reply) const;
  // Replies with the node as registered (ids and GPUs filled in).
  void RegisterNode(const Caller& caller, core::Node node, Reply<core::Node> reply) const;
  // Nodes with their GPUs' allocations; empty filters match all.
  void ListNodes(const Caller& caller, std::string cluster, std::string pool,
                 Reply<std::vector<core::Node>> reply) const;

  // Node lifecycle (core/nodes.cc, docs/nodes.md). Each replies with the
  // node as the decision left it.
  void UpdateNode(const Caller& caller, core::Node facts, Reply<core::Node> reply) const;
  // Cordons (`cordon`) or uncordons the node.
  void CordonNode(const Caller& caller, core::NodeRef ref, bool cordon,
                  Reply<core::Node> reply) const;
  void DrainNode(const Caller& caller, core::NodeRef ref, int64_t grace_seconds,
                 Reply<core::DrainOutcome> reply) const;
  // `failed_at`'s conversion error is answered after the access check;
  // InfinitePast: now.
  void MarkNodeFailed(const Caller& caller, core::NodeRef ref, absl::StatusOr<absl::Time> failed_at,
                      Reply<core::FailOutcome> reply) const;
  void RemoveNode(const Caller& caller, core::NodeRef ref, Reply<Done> reply) const;
  void NodeHeartbeat(const Caller& caller, core::NodeRef ref, Reply<core::Node> reply) const;

 private:
  // Checks `method`'s access, then runs `decide` as a command.
  template <typename T>
  void Command(const Caller& caller, const char* method, DecideFn<T> decide, Reply<T> reply) const;

  const Context ctx_;
};

}  // namespace arbiter::app
