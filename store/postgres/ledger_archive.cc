#include "store/postgres/ledger_archive.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include <pqxx/pqxx>

#include "store/postgres/pg_errors.h"
#include "store/postgres/pg_rows.h"

namespace arbiter::store {
namespace {

// Unix microseconds of a timestamptz column, NULL as NULL.
#define ARBITER_MICROS(column) "(extract(epoch FROM " column ") * 1000000)::bigint"

absl::Time FromMicros(const pqxx::field& f) { return absl::FromUnixMicros(f.as<int64_t>()); }

// The bounds of `p` as statement parameters: NULL (from the beginning) or
// unix microseconds.
std::optional<int64_t> FromParam(const LedgerPartition& p) {
  if (!p.from.has_value()) return std::nullopt;
  return absl::ToUnixMicros(*p.from);
}

}  // namespace

LedgerArchiveStore::LedgerArchiveStore(std::unique_ptr<pqxx::connection> conn)
    : conn_(std::move(conn)) {}

LedgerArchiveStore::~LedgerArchiveStore() = default;

absl::StatusOr<std::unique_ptr<LedgerArchiveStore>> LedgerArchiveStore::Connect(
    const std::string& dsn) {
  bool broken = false;
  return Guarded("connect", &broken, [&]() -> absl::StatusOr<std::unique_ptr<LedgerArchiveStore>> {
    auto conn = std::make_unique<pqxx::connection>(dsn);
    return std::unique_ptr<LedgerArchiveStore>(new LedgerArchiveStore(std::move(conn)));
  });
}

absl::StatusOr<std::vector<LedgerPartition>> LedgerArchiveStore::ListPartitions() {
  bool broken = false;
  return Guarded("list ledger partitions", &broken,
                 [&]() -> absl::StatusOr<std::vector<LedgerPartition>> {
                   pqxx::read_transaction tx(*conn_);
                   std::vector<LedgerPartition> out;
                   for (const pqxx::row& row :
                        tx.exec("SELECT name, " ARBITER_MICROS("from_at") ", " ARBITER_MICROS(
                            "to_at") ", archived_at IS NOT NULL, COALESCE(last_seq, 0),"
                                     " COALESCE(last_hash, ''), COALESCE(file, '')"
                                     " FROM ledger_partitions ORDER BY to_at")) {
                     LedgerPartition p;
                     p.name = row[0].as<std::string>();
                     if (!row[1].is_null()) p.from = FromMicros(row[1]);
                     p.to = FromMicros(row[2]);
                     p.archived = row[3].as<bool>();
                     p.last_seq = row[4].as<int64_t>();
                     p.last_hash = row[5].as<std::string>();
                     p.file = row[6].as<std::string>();
                     out.push_back(std::move(p));
                   }
                   return out;
                 });
}

absl::StatusOr<std::optional<absl::Time>> LedgerArchiveStore::HeadTime() {
  bool broken = false;
  return Guarded("read the ledger head", &broken,
                 [&]() -> absl::StatusOr<std::optional<absl::Time>> {
                   pqxx::read_transaction tx(*conn_);
                   std::optional<absl::Time> head;
                   for (const pqxx::row& row :
                        tx.exec("SELECT " ARBITER_MICROS("at") " FROM ledger"
                                                               " ORDER BY seq DESC LIMIT 1")) {
                     head = FromMicros(row[0]);
                   }
                   return head;
                 });
}

absl::StatusOr<std::vector<ledger::Entry>> LedgerArchiveStore::ReadPartition(
    const LedgerPartition& partition, int64_t after_seq, int limit) {
  bool broken = false;
  return Guarded(
      absl::StrCat("read ", partition.name), &broken,
      [&]() -> absl::StatusOr<std::vector<ledger::Entry>> {
        pqxx::read_transaction tx(*conn_);
        std::vector<ledger::Entry> out;
        // The bounds prune to the one partition.
        for (const pqxx::row& row : tx.exec_params(
                 "SELECT seq, " ARBITER_MICROS(
                     "at") ", actor, action, subject, payload,"
                           " prev_hash, hash FROM ledger"
                           " WHERE ($1::bigint IS NULL OR at >= to_timestamp($1::bigint / 1e6))"
                           " AND at < to_timestamp($2::bigint / 1e6) AND seq > $3"
                           " ORDER BY seq LIMIT $4",
                 FromParam(partition), absl::ToUnixMicros(partition.to), after_seq, limit)) {
          out.push_back(rows::LedgerEntryFromRow(row));
        }
        return out;
      });
}

absl::Status LedgerArchiveStore::Retire(const LedgerPartition& partition,
                                        const ExportedPartition& exported) {
  bool broken = false;
  const bool empty = exported.entries == 0;
  return Guarded(absl::StrCat("retire ", partition.name), &broken, [&]() -> absl::Status {
    try {
      pqxx::work tx(*conn_);
      tx.exec_params(
          "SELECT arbiter_retire_ledger_partition($1, $2, $3, $4, $5, $6)", partition.name,
          exported.entries, empty ? std::nullopt : std::optional<int64_t>(exported.first_seq),
          empty ? std::nullopt : std::optional<int64_t>(exported.last_seq),
          empty ? std::nullopt : std::optional<std::string>(exported.last_hash), exported.file);
      tx.commit();
      return absl::OkStatus();
    } catch (const pqxx::check_violation& e) {
      // The function's own refusals: the message names the check.
      std::string message = e.what();
      if (!message.empty() && message.back() == '\n') message.pop_back();
      return absl::FailedPreconditionError(message);
    }
  });
}

}  // namespace arbiter::store
