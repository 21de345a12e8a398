// Inventory: the GPU catalog, clusters, pools and nodes with their per-GPU
// accounting (what each placement charges, which MIG instances are taken,
// which GPUs reservations hold), and the index the packer searches. A part
// of core::State. Cluster, Pool and Node are their own change types
// (core/model.h): each is recorded as inserted.
//
// Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/inventory_index.h"
#include "core/model.h"

namespace arbiter::core {

class Inventory {
 public:
  // Each Load* returns FAILED_PRECONDITION if the value contradicts what is
  // already loaded (duplicate name, unknown reference).
  [[nodiscard]] absl::Status LoadGpuModel(GpuModel model);
  // Adds `model`, or replaces the model of its name. REQUIRES: no node has
  // GPUs of a model whose memory or MIG table it changes.
  void PutGpuModel(GpuModel model);
  [[nodiscard]] absl::Status LoadCluster(Cluster cluster);
  [[nodiscard]] absl::Status LoadPool(Pool pool);
  // REQUIRES: node.id > 0. GPU memory is taken from the catalog; the node's
  // accounting starts empty.
  [[nodiscard]] absl::Status LoadNode(Node node);

  // Lookups. Pointers are valid until the next mutation.
  const GpuModel* FindGpuModel(const std::string& name) const;
  const Pool* FindPool(const std::string& name) const;
  const std::map<std::string, Pool>& pools() const { return pools_; }
  bool HasCluster(const std::string& name) const { return clusters_.contains(name); }
  const Node* FindNode(int64_t id) const;
  const Node* FindNode(const std::string& cluster, const std::string& name) const;
  // (node id, GPU index) of the GPU registered with `uuid`; nullptr when
  // none is, and for "".
  const std::pair<int64_t, int32_t>* FindGpuByUuid(const std::string& uuid) const;
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::map<std::string, GpuModel>& gpu_models() const { return gpu_models_; }
  // Indices into nodes() of the nodes in `pool`, in registration order.
  const std::vector<size_t>& PoolNodes(const std::string& pool) const;
  // The inventory indexed for placement (see core/inventory_index.h).
  const InventoryIndex& index() const { return index_; }
  // The MIG profiles `gpu` offers: those its node reported, else its model's
  // table. REQUIRES: the GPU's model is in the catalog.
  const std::vector<MigProfile>& MigProfilesOf(const Gpu& gpu) const;
  // Identifier the next new node will get; ids are dense from 1.
  int64_t next_node_id() const { return next_node_id_; }
  int64_t TakeNodeId() { return next_node_id_++; }
  // Keeps `id` (a removed node's, not loaded) from being handed out again.
  void SeeNodeId(int64_t id) {
    if (id >= next_node_id_) next_node_id_ = id + 1;
  }

  // FAILED_PRECONDITION unless `p` fits what its node has free: the node
  // exists, each GPU index is valid and has room, and a MIG placement's
  // instance is in the layout and free.
  [[nodiscard]] absl::Status CheckFits(const Placement& p) const;
  // Charges (`sign` = +1) or frees (-1) one placement on its node and GPUs.
  // Charging applies the placement's MIG layout change; freeing leaves the
  // layout as it is (an empty MIG GPU keeps its layout until reused).
  // REQUIRES: the placement fits (charging) or was charged (freeing).
  void ApplyPlacement(const Placement& p, int sign);
  // Sets node `id`'s lifecycle (cordoned, health, drain deadline, failure
  // time, last heartbeat) to `node`'s, and re-indexes it. REQUIRES: it exists.
  void SetLifecycle(const Node& node);
  // Sets node `id`'s facts that may change while it is in use: topology
  // domain, host capacity, GPU UUIDs and reported MIG placements (with the
  // MIG profiles they offer). REQUIRES: it exists, `node` has its GPUs'
  // models in the same order, its host capacity covers what is allocated,
  // and the reports were validated (core::ApplyReportedPlacements).
  void UpdateFacts(const Node& node);
  // Takes node `id` out of its pool, the index and every lookup; its slot in
  // nodes() stays, marked removed. REQUIRES: it exists and holds nothing.
  void RemoveNode(int64_t id);
  // Puts back a node copied before a failed gang placement.
  // REQUIRES: a node with `node.id` exists.
  void RestoreNode(Node node);
  // Adds (`sign` +1) or removes (-1) `window` on each GPU in `holds`.
  // Holds on nodes or GPUs that do not exist are skipped.
  void SetHolds(const std::vector<GpuHold>& holds, std::pair<absl::Time, absl::Time> window,
                int sign);

 private:
  std::map<std::string, GpuModel> gpu_models_;
  std::map<std::string, Cluster> clusters_;
  std::map<std::string, Pool> pools_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<int64_t, size_t> node_index_;
  std::map<std::pair<std::string, std::string>, size_t> node_by_name_;
  std::map<std::string, std::vector<size_t>> pool_nodes_;
  absl::flat_hash_map<std::string, std::pair<int64_t, int32_t>> gpu_by_uuid_;
  InventoryIndex index_;
  int64_t next_node_id_ = 1;
};

}  // namespace arbiter::core
