// Databases for `pg` and `integration` tests. The CTest fixture
// (tests/testing/pg_fixture) starts one throwaway PostgreSQL cluster per run
// with a migrated template; each test takes a fresh database cloned from it,
// so tests are isolated and may run in parallel. A missing cluster fails the
// test: database tests never skip.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace arbiter::testing {

// The cluster's DSN (no dbname) from ARBITER_TEST_PG_DSN, or from the file
// named by ARBITER_TEST_PG_DSN_FILE. FAILED_PRECONDITION when neither is set.
absl::StatusOr<std::string> ClusterDsn();

// A database created from `arbiter_template` and dropped on destruction.
class TestDatabase {
 public:
  // FAILED_PRECONDITION without a cluster; UNAVAILABLE if it is unreachable.
  static absl::StatusOr<std::unique_ptr<TestDatabase>> Create();
  ~TestDatabase();

  const std::string& dsn() const { return dsn_; }
  const std::string& name() const { return name_; }
  // Runs `sql` (no parameters; tests only) and returns the first column of
  // the first row, or "" when there is none.
  absl::StatusOr<std::string> QueryValue(const std::string& sql) const;

  // Holds `LOCK TABLE <table> IN EXCLUSIVE MODE` in an open transaction of
  // its own session until the returned lock is destroyed: writers of the
  // table wait, readers do not. For tests that stall a commit on purpose.
  class TableLock {
   public:
    virtual ~TableLock() = default;
  };
  absl::StatusOr<std::unique_ptr<TableLock>> LockTable(const std::string& table) const;

 private:
  TestDatabase(std::string cluster_dsn, std::string name)
      : cluster_dsn_(std::move(cluster_dsn)),
        name_(std::move(name)),
        dsn_(cluster_dsn_ + " dbname=" + name_) {}

  std::string cluster_dsn_;
  std::string name_;
  std::string dsn_;
};

}  // namespace arbiter::testing
