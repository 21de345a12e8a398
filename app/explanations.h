// Explanations: the current explanation (reason code and text) of each
// queued request whose explanation changed since it was written. A queued
// request's explanation is state, not history (core::ChangeSet::explained):
// the store keeps the reason of its first queueing until it is decided, so
// reads of a queued request take the current one from here.
//
// Thread-safe: the arbiter's committer sets and erases, readers overlay.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

#include "core/model.h"

namespace arbiter::app {

class Explanations {
 public:
  // Records `request`'s explanation. REQUIRES: it is queued.
  void Set(const core::CapacityRequest& request) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    current_[request.id] = {request.reason_code, request.reason};
  }
  // Forgets request `id`'s: it was written with its explanation.
  void Erase(int64_t id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    current_.erase(id);
  }
  // Forgets all: the state was reloaded from the store.
  void Clear() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    current_.clear();
  }
  // Gives `request`, read from the store, its current explanation when it
  // is queued and has a newer one.
  void Overlay(core::CapacityRequest& request) const ABSL_LOCKS_EXCLUDED(mu_) {
    if (request.state != core::RequestState::kQueued) return;
    absl::MutexLock lock(&mu_);
    auto it = current_.find(request.id);
    if (it == current_.end()) return;
    request.reason_code = it->second.first;
    request.reason = it->second.second;
  }
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return current_.size();
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::pair<std::string, std::string>> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace arbiter::app
