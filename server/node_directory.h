// NodeDirectory: node id -> (cluster, name), for presenting placements.
// Nodes are never renamed or removed, so entries only grow.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace arbiter::server {

class NodeDirectory {
 public:
  void Put(int64_t id, std::string cluster, std::string name) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    names_[id] = {std::move(cluster), std::move(name)};
  }
  // Returns ("", "") for an unknown id.
  std::pair<std::string, std::string> Get(int64_t id) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = names_.find(id);
    return it == names_.end() ? std::pair<std::string, std::string>() : it->second;
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::pair<std::string, std::string>> names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace arbiter::server
