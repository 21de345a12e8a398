// CatalogReads: the GPU catalog and the inventory (clusters, pools, nodes),
// served straight from the store by any replica.
//
// Status codes, for every method: UNAVAILABLE when the store cannot be
// reached (retry the call); ABORTED on a serialization failure or deadlock
// (retry the whole operation); INTERNAL for anything else. Further codes are
// stated per method.
//
// Implementations are thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "core/model.h"

namespace arbiter::store {

class CatalogReads {
 public:
  virtual ~CatalogReads() = default;

  // The catalog, by name.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::GpuModel>> ListGpuModels() = 0;
  // By name.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::Cluster>> ListClusters() = 0;
  // By name.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::Pool>> ListPools() = 0;
  // Nodes with their GPUs' current allocations, ordered by cluster, name.
  // Empty filters match all.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::Node>> ListNodes(
      const std::string& cluster, const std::string& pool) = 0;
};

}  // namespace arbiter::store
