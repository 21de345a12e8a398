// LeaderLease: one replica's hold on the leader lease, the interface the
// application's leader election (app/leader_election.h) runs on. The
// PostgreSQL implementation is store/postgres/pg_lease.h; its header states
// how the lease, the lock and the epoch work together.
//
// Thread-compatible: one election thread uses it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace arbiter::store {

// The lease as stored.
struct LeaseInfo {
  int64_t epoch = 0;
  std::string holder;
  std::string address;
  absl::Time lease_until = absl::InfinitePast();
  bool expired = true;  // By the store's clock.
};

class LeaderLease {
 public:
  virtual ~LeaderLease() = default;

  // Tries to take the lease. Returns the new epoch, or 0 while another
  // replica holds it. UNAVAILABLE when the store cannot be reached.
  [[nodiscard]] virtual absl::StatusOr<int64_t> TryAcquire() = 0;
  // Extends the lease taken with `epoch` by its ttl. FAILED_PRECONDITION
  // when `epoch` is no longer current; UNAVAILABLE when the hold was lost or
  // the store cannot be reached. After either, this replica is not the
  // leader: it must stop writing and call TryAcquire again.
  [[nodiscard]] virtual absl::Status Renew(int64_t epoch) = 0;
  // Gives up the lease taken with `epoch` (a clean shutdown), so that a
  // follower takes over at once. Best effort.
  virtual void Release(int64_t epoch) = 0;
  // The lease as stored. UNAVAILABLE when the store cannot be reached.
  [[nodiscard]] virtual absl::StatusOr<LeaseInfo> Read() = 0;
};

}  // namespace arbiter::store
