// Applies and verifies schema migrations (store/migrations.h) against a
// PostgreSQL database. Each applied migration is recorded in
// `schema_migrations` with the SHA-256 of its text, computed by PostgreSQL.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "store/migrations.h"

namespace arbiter::store {

struct MigrationReport {
  int applied_before = 0;        // Migrations already applied.
  std::vector<int> applied_now;  // Versions applied by this call.
};

// Applies every pending migration of `migrations`, in order, in one
// transaction holding an advisory lock (so concurrent migrators serialize).
// FAILED_PRECONDITION if the database has a migration this binary lacks
// (it is newer) or one whose checksum differs; UNAVAILABLE if unreachable.
absl::StatusOr<MigrationReport> ApplyMigrations(const std::string& dsn,
                                                const std::vector<Migration>& migrations);

// Checks that the database holds exactly `migrations`, no more, no less,
// with matching checksums. FAILED_PRECONDITION names the first difference
// and what to do about it.
absl::Status VerifyMigrations(const std::string& dsn, const std::vector<Migration>& migrations);

}  // namespace arbiter::store
