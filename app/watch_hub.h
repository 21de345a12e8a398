// WatchHub: fans committed allocation events out to `WatchAllocations`
// streams. The arbiter publishes after each COMMIT, so a watcher never sees a
// decision that could still be lost.
//
// Thread-safe. Subscribers are called with the hub's lock held, in commit
// order; they must not block and must not call back into the hub.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "core/model.h"

namespace arbiter::app {

enum class EventType {
  kAdmitted,
  kQueued,
  kDenied,
  kReleased,
  kCancelled,
  kPreempting,  // A preemption notice: vacate by request.preempt_deadline.
  kPreempted,
  kReserved,
  kPendingApproval,
};

struct AllocationEvent {
  EventType type = EventType::kAdmitted;
  core::CapacityRequest request;
  absl::Time committed_at;
};

class WatchSubscriber {
 public:
  virtual ~WatchSubscriber() = default;
  virtual void Deliver(const AllocationEvent& event) = 0;
};

class WatchHub {
 public:
  int64_t Subscribe(WatchSubscriber* subscriber) ABSL_LOCKS_EXCLUDED(mu_);
  // After this returns, `Deliver` is not running and will not be called for
  // the subscriber again.
  void Unsubscribe(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  void Publish(const std::vector<AllocationEvent>& events) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<int64_t, WatchSubscriber*> subscribers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace arbiter::app
