#include "store/postgres/migrator.h"

#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include <pqxx/connection>
#include <pqxx/pqxx>

#include "core/status_macros.h"
#include "store/postgres/pg_errors.h"

namespace arbiter::store {
namespace {

// Arbitrary constant naming the migration lock (pg_advisory_xact_lock).
constexpr int64_t kMigrationLockId = 0x4172626974657231;  // "Arbiter1"

struct Applied {
  std::string name;
  std::string checksum;
};

std::string Checksum(pqxx::work& tx, const std::string& text) {
  return tx.exec_params1("SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex')", text)[0]
      .as<std::string>();
}

std::map<int, Applied> ReadApplied(pqxx::work& tx) {
  std::map<int, Applied> applied;
  const bool exists = tx.exec1("SELECT to_regclass('schema_migrations') IS NOT NULL")[0].as<bool>();
  if (!exists) return applied;
  for (const pqxx::row& row : tx.exec("SELECT version, name, checksum FROM schema_migrations")) {
    applied[row[0].as<int>()] = Applied{row[1].as<std::string>(), row[2].as<std::string>()};
  }
  return applied;
}

// Compares what the database has applied with what this binary carries.
absl::Status CompareApplied(pqxx::work& tx, const std::map<int, Applied>& applied,
                            const std::vector<Migration>& migrations) {
  std::map<int, const Migration*> known;
  for (const Migration& m : migrations) known[m.version] = &m;
  for (const auto& [version, a] : applied) {
    auto it = known.find(version);
    if (it == known.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "database has migration ", version, " (", a.name,
          ") that this binary does not know: the database is newer; run a newer arbiterd"));
    }
    if (Checksum(tx, it->second->sql) != a.checksum) {
      return absl::FailedPreconditionError(absl::StrCat(
          "migration ", version, " (", a.name,
          ") differs from the one applied to the database (checksum mismatch); migrations "
          "must never be edited after they are applied"));
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<pqxx::connection> Connect(const std::string& dsn) {
  return std::make_unique<pqxx::connection>(dsn);
}

}  // namespace

absl::StatusOr<MigrationReport> ApplyMigrations(const std::string& dsn,
                                                const std::vector<Migration>& migrations) {
  bool broken = false;
  return Guarded("migrate", &broken, [&]() -> absl::StatusOr<MigrationReport> {
    auto conn = Connect(dsn);
    pqxx::work tx(*conn);
    tx.exec_params("SELECT pg_advisory_xact_lock($1)", kMigrationLockId);
    const std::map<int, Applied> applied = ReadApplied(tx);
    ARBITER_RETURN_IF_ERROR(CompareApplied(tx, applied, migrations));
    MigrationReport report;
    report.applied_before = static_cast<int>(applied.size());
    for (const Migration& m : migrations) {
      if (applied.contains(m.version)) continue;
      tx.exec(m.sql);
      tx.exec_params("INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                     m.version, m.name, Checksum(tx, m.sql));
      report.applied_now.push_back(m.version);
    }
    tx.commit();
    return report;
  });
}

absl::Status VerifyMigrations(const std::string& dsn, const std::vector<Migration>& migrations) {
  bool broken = false;
  return Guarded("verify migrations", &broken, [&]() -> absl::Status {
    auto conn = Connect(dsn);
    pqxx::work tx(*conn);
    const std::map<int, Applied> applied = ReadApplied(tx);
    ARBITER_RETURN_IF_ERROR(CompareApplied(tx, applied, migrations));
    for (const Migration& m : migrations) {
      if (!applied.contains(m.version)) {
        return absl::FailedPreconditionError(
            absl::StrCat("migration ", m.version, " (", m.name,
                         ") is not applied; run `arbiterd migrate` or start with --migrate"));
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace arbiter::store
