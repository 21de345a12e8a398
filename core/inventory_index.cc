#include "core/inventory_index.h"

#include <algorithm>

namespace arbiter::core {
void InventoryIndex::Erase(const Entries& e) {
  PoolIndex& pool = pools_[e.pool];
  for (const auto& [group, key] : e.gpus) pool.gpus_by_free[group].erase(key);
  pool.nodes_by_empty[e.node_model][static_cast<size_t>(e.empty)].erase(e.node_key);
  for (const auto& [profile, key] : e.mig) pool.mig_free[profile].erase(key);
}

void InventoryIndex::Put(size_t position, const Node& node) {
  if (entries_.size() <= position) entries_.resize(position + 1);
  Entries& e = entries_[position];
  if (!e.pool.empty()) Erase(e);
  e = Entries();
  if (!node.schedulable()) return;  // Nothing new goes there.
  e.pool = node.pool;
  int64_t free_milli = 0;
  for (const Gpu& gpu : node.gpus) {
    if (gpu.empty()) ++e.empty;
    if (SharableOrEmpty(gpu)) {
      free_milli += gpu.free_milli();
      if (gpu.free_milli() > 0) {
        e.gpus.push_back(
            {{gpu.model, gpu.class_mask()}, Key{gpu.free_milli(), position, gpu.index}});
      }
    }
    int64_t free_instances = 0;
    for (const MigInstance& inst : gpu.mig_layout) free_instances += inst.allocated ? 0 : 1;
    for (const MigInstance& inst : gpu.mig_layout) {
      if (inst.allocated) continue;
      // One entry per profile and GPU: for choosing the GPU, the free
      // instances of one profile on it are interchangeable.
      std::pair<std::string, Key> entry{inst.profile, Key{free_instances - 1, position, gpu.index}};
      if (std::find(e.mig.begin(), e.mig.end(), entry) == e.mig.end()) e.mig.push_back(entry);
    }
  }
  e.node_model = node.gpu_model();
  e.node_key = Key{free_milli, position, 0};
  PoolIndex& pool = pools_[node.pool];
  for (const auto& [group, key] : e.gpus) pool.gpus_by_free[group].insert(key);
  std::vector<KeySet>& buckets = pool.nodes_by_empty[e.node_model];
  if (buckets.size() <= static_cast<size_t>(e.empty)) buckets.resize(e.empty + 1);
  buckets[static_cast<size_t>(e.empty)].insert(e.node_key);
  for (const auto& [profile, key] : e.mig) pool.mig_free[profile].insert(key);
}

InventoryIndex::Cursor::Cursor(const InventoryIndex& index, const CapacityRequestSpec& spec,
                               const CoexistenceMatrix& rules)
    : spec_(spec) {
  auto it = index.pools_.find(spec.pool);
  if (it == index.pools_.end()) return;
  const PoolIndex& pool = it->second;
  pool_ = &pool;
  const MemberShape& shape = spec.shape;
  if (shape.is_mig()) {
    auto free = pool.mig_free.find(shape.mig().profile);
    if (free != pool.mig_free.end()) ranges_.push_back({free->second.begin(), free->second.end()});
  } else if (shape.is_whole()) {
    StartWhole(shape.whole_gpus());
  } else {
    const Key from{shape.fraction().gpu_milli, 0, 0};
    for (const auto& [group, gpus] : pool.gpus_by_free) {
      if (!spec.allows_model(group.first)) continue;
      if (!rules.GpuAdmits(group.second, spec.workload_class, Isolation::kSoftSharing)) continue;
      ranges_.push_back({gpus.lower_bound(from), gpus.end()});
    }
  }
}

// The nodes with at least `gpus` empty GPUs of an allowed model (mixed nodes
// always: the packer checks their models).
void InventoryIndex::Cursor::StartWhole(int32_t gpus) {
  ranges_.clear();
  for (const auto& [model, buckets] : pool_->nodes_by_empty) {
    if (!model.empty() && !spec_.allows_model(model)) continue;
    for (size_t e = static_cast<size_t>(gpus); e < buckets.size(); ++e) {
      if (!buckets[e].empty()) ranges_.push_back({buckets[e].begin(), buckets[e].end()});
    }
  }
}

size_t InventoryIndex::Cursor::Merge(std::vector<Range>& ranges, size_t limit,
                                     std::vector<size_t>& out) {
  size_t taken = 0;
  while (taken < limit) {
    Range* best = nullptr;
    for (Range& r : ranges) {
      if (r.it != r.end && (best == nullptr || *r.it < *best->it)) best = &r;
    }
    if (best == nullptr) break;
    const size_t node = std::get<1>(*best->it);
    ++best->it;
    if (seen_.insert(node).second) {
      out.push_back(node);
      ++taken;
    }
  }
  return taken;
}

bool InventoryIndex::Cursor::Next(size_t limit, std::vector<size_t>& out) {
  if (pool_ == nullptr) return false;
  if (Merge(ranges_, limit, out) > 0) return true;
  // MIG: no GPU has a free instance of the profile that fits; partition an
  // empty GPU.
  if (spec_.shape.is_mig() && !mig_partitioning_) {
    mig_partitioning_ = true;
    StartWhole(1);
    return Merge(ranges_, limit, out) > 0;
  }
  return false;
}

}  // namespace arbiter::core
