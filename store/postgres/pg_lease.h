// PgLease: one replica's hold on the leader lease (migration 0021).
//
// The leader is the replica whose dedicated session holds a PostgreSQL
// advisory lock and whose epoch is the one in `leader_lease`. Taking over
// increments the epoch; the new leader then fences its store to it
// (Store::SetFencingEpoch), so that writes of any older leader fail.
//
// The lock alone frees itself when the holder's session ends (the process
// died, or PostgreSQL noticed a dead connection). A holder that is alive but
// stalled (SIGSTOP, a long pause, a partition PostgreSQL has not noticed yet)
// keeps its session; for that the lease also has an expiry, which the leader
// renews. A follower that finds the lease expired by PostgreSQL's clock ends
// every session of the holder in this database (they carry the holder's
// name as application_name), which frees the lock and aborts the holder's
// open transactions, and takes over on its next try.
//
// Thread-compatible: one election thread uses it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include <pqxx/connection>

#include "store/lease.h"

namespace arbiter::store {

struct LeaseOptions {
  // libpq connection string (keyword form or URI) of the shared database.
  std::string dsn;
  // This replica's name: unique among the replicas, at most 40 characters.
  // Its sessions carry it as application_name (see ApplicationName).
  std::string holder;
  // Where followers should send arbitration calls (host:port).
  std::string address;
  // How long a lease lasts without renewal. Default: 5 s.
  absl::Duration ttl = absl::Seconds(5);
};

// The application_name every session of replica `holder` carries.
std::string ApplicationName(const std::string& holder);

// `dsn` with `options` (space-separated key=value pairs) added, in the
// keyword form or as URI query parameters.
std::string AppendDsnOptions(const std::string& dsn, const std::string& options);

class PgLease final : public LeaderLease {
 public:
  explicit PgLease(LeaseOptions options);
  ~PgLease();

  // Tries to take the lease. Returns the new epoch, or 0 while another
  // replica holds it; when that replica's lease has expired, first ends its
  // sessions, so that a later call can succeed. UNAVAILABLE when the
  // database cannot be reached.
  absl::StatusOr<int64_t> TryAcquire() override;
  // Extends the lease taken with `epoch` by the ttl. FAILED_PRECONDITION
  // when `epoch` is no longer current; UNAVAILABLE when the lock's session
  // was lost or the database cannot be reached. After either, this replica
  // is not the leader: it must stop writing and call TryAcquire again.
  absl::Status Renew(int64_t epoch) override;
  // Gives up the lease taken with `epoch` (a clean shutdown), so that a
  // follower takes over at once. Best effort.
  void Release(int64_t epoch) override;
  // The lease as stored. UNAVAILABLE when the database cannot be reached.
  absl::StatusOr<LeaseInfo> Read() override;

 private:
  // Opens the lock session if it is closed. Throws what pqxx throws.
  pqxx::connection& Session();
  // Runs `fn` on the lock session, mapping exceptions; drops the session
  // when it broke.
  template <typename Fn>
  auto OnSession(const char* operation, Fn&& fn) -> decltype(fn(std::declval<pqxx::connection&>()));

  const LeaseOptions options_;
  std::unique_ptr<pqxx::connection> session_;
};

}  // namespace arbiter::store
