// Where libpqxx exceptions stop: `Guarded` runs a function and maps anything
// it throws to an absl::Status (see store/store.h for the codes). No pqxx
// exception crosses a store interface.
#pragma once

#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include <pqxx/connection_base>
#include <pqxx/errorhandler>
#include <pqxx/except>

namespace arbiter::store {

// Maps the exception currently being handled. Call only inside a catch block.
absl::Status StatusFromCurrentException(absl::string_view operation);

// FAILED_PRECONDITION with the message of a check a SQL function raised
// itself (check_violation: retention's refusals name the check).
absl::Status RefusalStatus(const pqxx::check_violation& e);

// Runs `fn` (returning absl::Status or absl::StatusOr<T>) and maps exceptions.
// `*broken` is set when the connection is unusable afterwards.
template <typename Fn>
auto Guarded(absl::string_view operation, bool* broken, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const pqxx::broken_connection&) {
    *broken = true;
    return StatusFromCurrentException(operation);
  } catch (const pqxx::in_doubt_error&) {
    *broken = true;
    return StatusFromCurrentException(operation);
  } catch (...) {
    return StatusFromCurrentException(operation);
  }
}

// Watches a connection, while it lives, for PostgreSQL's warning that a
// COMMIT stopped waiting for the synchronous standby (a cancel, such as
// statement_timeout, during the wait). Such a commit is durable on this
// server only, and PostgreSQL still reports it as a success: callers must
// not acknowledge it. Not thread-safe; one per connection in use.
class SyncReplicationWatch : public pqxx::errorhandler {
 public:
  explicit SyncReplicationWatch(pqxx::connection_base& conn) : pqxx::errorhandler(conn) {}
  bool operator()(const char message[]) noexcept override;

  bool unconfirmed() const { return unconfirmed_; }
  // UNAVAILABLE naming `operation`, for a commit that was not confirmed.
  absl::Status UnconfirmedError(absl::string_view operation) const;

 private:
  bool unconfirmed_ = false;
};

}  // namespace arbiter::store
