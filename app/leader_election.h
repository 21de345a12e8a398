// LeaderElection: makes this replica's Arbiter lead while it holds the
// leader lease (store/lease.h; PostgreSQL: store/postgres/pg_lease.h) and follow otherwise.
//
// Every `poll` a leader renews its lease; a renewal that fails (the epoch
// moved on, the lock's session was lost, the database is unreachable)
// makes the arbiter follow at once. A follower tries to take the lease
// every `poll` and tells the arbiter where the leader is. What a
// takeover costs, measured: docs/operations.md, "Replicas".
//
// Safety does not rest on this thread's timing: a deposed leader's writes
// are refused by the fencing epoch whatever it believes.
//
// Thread-safe; owns one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "app/arbiter.h"
#include "store/lease.h"

namespace arbiter::app {

class LeaderElection {
 public:
  // Makes one attempt at once (so that a lone replica leads when Start
  // returns), then runs. `poll` should be well under the lease's ttl.
  static std::unique_ptr<LeaderElection> Start(std::unique_ptr<store::LeaderLease> lease,
                                               Arbiter* arbiter, absl::Duration poll);
  // Stops; a leader gives its lease up so that a follower takes over at once.
  ~LeaderElection();

 private:
  LeaderElection(std::unique_ptr<store::LeaderLease> lease, Arbiter* arbiter, absl::Duration poll);
  // One round: renew, or try to take over. Election thread (or Start).
  void Step();
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const std::unique_ptr<store::LeaderLease> lease_;
  Arbiter* const arbiter_;
  const absl::Duration poll_;
  int64_t epoch_ = 0;  // Held now; 0: following. Election thread only.
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace arbiter::app
