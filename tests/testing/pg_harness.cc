#include "tests/testing/pg_harness.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include <pqxx/pqxx>
#include <unistd.h>

namespace arbiter::testing {

absl::StatusOr<std::string> ClusterDsn() {
  if (const char* dsn = std::getenv("ARBITER_TEST_PG_DSN"); dsn != nullptr && *dsn != '\0') {
    return std::string(dsn);
  }
  const char* file = std::getenv("ARBITER_TEST_PG_DSN_FILE");
  if (file == nullptr) {
    return absl::FailedPreconditionError(
        "no test PostgreSQL: run through ctest (the `pg` fixture) or set ARBITER_TEST_PG_DSN");
  }
  std::ifstream in(file);
  std::string dsn;
  std::getline(in, dsn);
  if (dsn.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no DSN in ", file, ": did the pg_fixture_setup test fail?"));
  }
  return dsn;
}

absl::StatusOr<std::unique_ptr<TestDatabase>> TestDatabase::Create() {
  absl::StatusOr<std::string> cluster = ClusterDsn();
  if (!cluster.ok()) return cluster.status();
  static std::atomic<int> counter{0};
  std::random_device rd;  // Test-only: unique database names across processes.
  const std::string name = absl::StrCat("t_", getpid(), "_", counter++, "_", rd() % 1000000);
  try {
    pqxx::connection conn(*cluster + " dbname=postgres");
    pqxx::nontransaction tx(conn);
    tx.exec("CREATE DATABASE " + tx.quote_name(name) + " TEMPLATE arbiter_template");
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("create test database: ", e.what()));
  }
  return std::unique_ptr<TestDatabase>(new TestDatabase(*cluster, name));
}

TestDatabase::~TestDatabase() {
  try {
    pqxx::connection conn(cluster_dsn_ + " dbname=postgres");
    pqxx::nontransaction tx(conn);
    tx.exec("DROP DATABASE IF EXISTS " + tx.quote_name(name_) + " WITH (FORCE)");
  } catch (const std::exception&) {
    // The cluster is thrown away after the run anyway.
  }
}

absl::StatusOr<std::string> TestDatabase::QueryValue(const std::string& sql) const {
  try {
    pqxx::connection conn(dsn_);
    pqxx::nontransaction tx(conn);
    pqxx::result r = tx.exec(sql);
    if (r.empty() || r[0].empty() || r[0][0].is_null()) return std::string();
    return r[0][0].as<std::string>();
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
}

namespace {

class HeldTableLock : public TestDatabase::TableLock {
 public:
  HeldTableLock(const std::string& dsn, const std::string& table) : conn_(dsn), tx_(conn_) {
    tx_.exec("LOCK TABLE " + tx_.quote_name(table) + " IN EXCLUSIVE MODE");
  }
  ~HeldTableLock() override { tx_.abort(); }

 private:
  pqxx::connection conn_;
  pqxx::work tx_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TestDatabase::TableLock>> TestDatabase::LockTable(
    const std::string& table) const {
  try {
    return std::make_unique<HeldTableLock>(dsn_, table);
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
}

}  // namespace arbiter::testing
