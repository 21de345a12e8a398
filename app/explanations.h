// Explanations: the current explanation (reason code and text, and for the
// head of a backfill pool its plan: planned start and held GPUs) of each
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
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "core/model.h"

namespace arbiter::app {

class Explanations {
 public:
  // Records `request`'s explanation. REQUIRES: it is queued.
  void Set(const core::CapacityRequest& request) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    current_[request.id] = {request.reason_code, request.reason, request.planned_start,
                            request.holds};
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
    request.reason_code = it->second.reason_code;
    request.reason = it->second.reason;
    request.planned_start = it->second.planned_start;
    if (it->second.planned_start != absl::InfinitePast()) request.holds = it->second.holds;
  }
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return current_.size();
  }

 private:
  // What a queued request's explanation is: its reason and, for a backfill
  // head, its plan (derived state, never stored either).
  struct Entry {
    std::string reason_code;
    std::string reason;
    absl::Time planned_start;
    std::vector<core::GpuHold> holds;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, Entry> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace arbiter::app
