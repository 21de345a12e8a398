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
#include "core/model.h"

namespace arbiter::app {

class Inventory {
 public:
  explicit Inventory(const Context& ctx) : ctx_(ctx) {}

  void ListGpuModels(const Caller& caller, Reply<std::vector<core::GpuModel>> reply) const;
  void CreateCluster(const Caller& caller, core::Cluster cluster, Reply<Done> reply) const;
  void ListClusters(const Caller& caller, Reply<std::vector<core::Cluster>> reply) const;
  // `pool`'s conversion error is answered after the access check.
  void CreatePool(const Caller& caller, absl::StatusOr<core::Pool> pool, Reply<Done> reply) const;
  void ListPools(const Caller& caller, Reply<std::vector<core::Pool>> reply) const;
  // Replies with the node as registered (ids and GPUs filled in).
  void RegisterNode(const Caller& caller, core::Node node, Reply<core::Node> reply) const;
  // Nodes with their GPUs' allocations; empty filters match all.
  void ListNodes(const Caller& caller, std::string cluster, std::string pool,
                 Reply<std::vector<core::Node>> reply) const;

 private:
  const Context ctx_;
};

}  // namespace arbiter::app
