// NodeDirectory: the names and GPUs of registered nodes, for presenting
// placements (node id -> cluster, name) and for resolving telemetry samples
// (node name or GPU UUID -> node id and GPU index). A removed node keeps its
// id's name (its history is presented with it); its name and UUIDs resolve
// to nothing, or to the node registered with them later.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

#include "core/model.h"

namespace arbiter::app {

class NodeDirectory {
 public:
  void Put(const core::Node& node) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    names_[node.id] = {node.cluster, node.name};
    ids_[{node.cluster, node.name}] = {node.id, static_cast<int32_t>(node.gpus.size())};
    for (const core::Gpu& g : node.gpus) {
      ForgetUuid(node.id, g.index);
      if (g.uuid.empty()) continue;
      gpus_[g.uuid] = {node.id, g.index};
      uuids_[{node.id, g.index}] = g.uuid;
    }
  }
  // Forgets `node`'s name and GPU UUIDs (not its id's name).
  void Remove(const core::Node& node) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = ids_.find({node.cluster, node.name});
    if (it != ids_.end() && it->second.first == node.id) ids_.erase(it);
    for (const core::Gpu& g : node.gpus) ForgetUuid(node.id, g.index);
  }
  // Returns ("", "") for an unknown id.
  std::pair<std::string, std::string> Get(int64_t id) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = names_.find(id);
    return it == names_.end() ? std::pair<std::string, std::string>() : it->second;
  }
  // (node id, GPU count) of a node by name; nullopt when unknown.
  std::optional<std::pair<int64_t, int32_t>> Find(const std::string& cluster,
                                                  const std::string& name) const
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = ids_.find({cluster, name});
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  // (node id, GPU index) of the GPU registered with `uuid`; nullopt when none.
  std::optional<std::pair<int64_t, int32_t>> FindGpu(const std::string& uuid) const
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = gpus_.find(uuid);
    if (it == gpus_.end()) return std::nullopt;
    return it->second;
  }

  // The UUID registered for a GPU; "" when none.
  std::string UuidOf(int64_t node_id, int32_t index) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = uuids_.find({node_id, index});
    return it == uuids_.end() ? std::string() : it->second;
  }

 private:
  void ForgetUuid(int64_t node_id, int32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = uuids_.find({node_id, index});
    if (it == uuids_.end()) return;
    auto gpu = gpus_.find(it->second);
    if (gpu != gpus_.end() && gpu->second == std::make_pair(node_id, index)) gpus_.erase(gpu);
    uuids_.erase(it);
  }

  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::pair<std::string, std::string>> names_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<std::string, std::string>, std::pair<int64_t, int32_t>> ids_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::pair<int64_t, int32_t>> gpus_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<int64_t, int32_t>, std::string> uuids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace arbiter::app
