// Indexes over the inventory, per pool, so that a placement looks at the
// best-fitting nodes first instead of scanning every node of the pool:
//   - fractions: every GPU that fractional work may use (not held whole, no
//     MIG instance in use), by model and by which workload classes it holds,
//     then by free milli-GPU;
//   - whole GPUs: nodes by GPU model (mixed nodes apart) and by how many GPUs
//     they have empty, then by the GPU capacity they have free (best fit);
//   - MIG: GPUs with a free instance, per profile, by how many free instances
//     the GPU has left (so that partitioned GPUs fill up).
// A cursor walks the groups a member may use (allowed models, classes it may
// share a GPU with) merged in the order the packer's best-fit tie-break would
// use; the packer scores a bounded batch (State::placement_candidates) and
// asks for the next batch only when none of one can take the member. Checks
// the index does not cover (host CPU and memory, GPU memory, reservation
// holds, node-level coexistence) are left to the packer.
//
// Thread-compatible. Owned by `State`, which calls `Put` after every change
// to a node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

#include "core/coexistence.h"
#include "core/model.h"

namespace arbiter::core {

// Whether whole or fractional work may use `gpu`: not held whole, and not
// partitioned into MIG instances that are in use (an idle partitioned GPU may
// be taken back; the placement then clears its layout).
inline bool SharableOrEmpty(const Gpu& gpu) {
  return !gpu.exclusive && (gpu.mig_layout.empty() || gpu.empty());
}

class InventoryIndex {
  struct PoolIndex;

 public:
  // (free milli, node position, GPU index) or (free milli, node position, 0).
  using Key = std::tuple<int64_t, size_t, int32_t>;
  using KeySet = absl::btree_set<Key>;

  // Indexes node `position` (in State::nodes()) as `node` now is, replacing
  // what was indexed for it before. A node that is not schedulable (cordoned,
  // unreachable, failed, removed) is indexed nowhere.
  void Put(size_t position, const Node& node);

  // Node positions that may host one member of `spec` in its pool, best fit
  // first, a batch at a time. Each node comes at most once per cursor.
  // REQUIRES: the index, `spec` and `rules` outlive the cursor, and the index
  // does not change while it is in use.
  class Cursor {
   public:
    Cursor(const InventoryIndex& index, const CapacityRequestSpec& spec,
           const CoexistenceMatrix& rules);
    // Appends up to `limit` more node positions to `out`. Returns false when
    // the cursor had none left.
    bool Next(size_t limit, std::vector<size_t>& out);

   private:
    struct Range {
      KeySet::const_iterator it;
      KeySet::const_iterator end;
    };
    // Merges `ranges` by key, appending up to `limit` unseen nodes.
    size_t Merge(std::vector<Range>& ranges, size_t limit, std::vector<size_t>& out);
    void StartWhole(int32_t gpus);

    const CapacityRequestSpec& spec_;
    const PoolIndex* pool_ = nullptr;  // Null for a pool with no nodes.
    absl::flat_hash_set<size_t> seen_;
    std::vector<Range> ranges_;
    bool mig_partitioning_ = false;  // MIG: existing instances are exhausted.
  };

 private:
  struct PoolIndex {
    // (model, bit mask of the workload classes on the GPU) -> GPUs with room
    // that are SharableOrEmpty.
    absl::btree_map<std::pair<std::string, uint32_t>, KeySet> gpus_by_free;
    // Node model ("" when its GPUs are of several models) -> [empty GPUs] ->
    // nodes by free milli on SharableOrEmpty GPUs.
    absl::btree_map<std::string, std::vector<KeySet>> nodes_by_empty;
    // MIG profile -> (free instances left after taking one, node, GPU).
    absl::flat_hash_map<std::string, KeySet> mig_free;
  };
  // What was indexed for one node, to take it out again.
  struct Entries {
    std::string pool;  // Empty: nothing indexed.
    std::vector<std::pair<std::pair<std::string, uint32_t>, Key>> gpus;
    std::string node_model;
    int32_t empty = 0;
    Key node_key;
    std::vector<std::pair<std::string, Key>> mig;
  };

  void Erase(const Entries& entries);

  absl::flat_hash_map<std::string, PoolIndex> pools_;
  std::vector<Entries> entries_;  // By node position.
};

}  // namespace arbiter::core
