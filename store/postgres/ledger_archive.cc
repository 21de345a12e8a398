#include "store/postgres/ledger_archive.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include <pqxx/pqxx>

#include "store/postgres/pg_errors.h"
#include "store/postgres/pg_rows.h"
#include "store/postgres/statements.h"

namespace arbiter::store {

LedgerArchiveStore::LedgerArchiveStore(std::unique_ptr<pqxx::connection> conn)
    : conn_(std::move(conn)) {}

LedgerArchiveStore::~LedgerArchiveStore() = default;

absl::StatusOr<std::unique_ptr<LedgerArchiveStore>> LedgerArchiveStore::Connect(
    const std::string& dsn) {
  bool broken = false;
  return Guarded("connect", &broken, [&]() -> absl::StatusOr<std::unique_ptr<LedgerArchiveStore>> {
    auto conn = std::make_unique<pqxx::connection>(dsn);
    sql::PrepareAll(*conn);
    return std::unique_ptr<LedgerArchiveStore>(new LedgerArchiveStore(std::move(conn)));
  });
}

absl::StatusOr<std::vector<LedgerPartition>> LedgerArchiveStore::ListPartitions() {
  bool broken = false;
  return Guarded("list ledger partitions", &broken,
                 [&]() -> absl::StatusOr<std::vector<LedgerPartition>> {
                   pqxx::read_transaction tx(*conn_);
                   std::vector<LedgerPartition> out;
                   for (const pqxx::row& row : tx.exec_prepared(sql::kSelectLedgerPartitions)) {
                     LedgerPartition p;
                     p.name = row[0].as<std::string>();
                     const absl::Time from = rows::FromMicrosOrMin(row[1].as<int64_t>());
                     if (from != absl::InfinitePast()) p.from = from;
                     p.to = absl::FromUnixMicros(row[2].as<int64_t>());
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
                   for (const pqxx::row& row : tx.exec_prepared(sql::kSelectLedgerHeadTime)) {
                     head = absl::FromUnixMicros(row[0].as<int64_t>());
                   }
                   return head;
                 });
}

absl::StatusOr<std::vector<ledger::Entry>> LedgerArchiveStore::ReadPartition(
    const LedgerPartition& partition, int64_t after_seq, int limit) {
  bool broken = false;
  return Guarded(absl::StrCat("read ", partition.name), &broken,
                 [&]() -> absl::StatusOr<std::vector<ledger::Entry>> {
                   pqxx::read_transaction tx(*conn_);
                   std::vector<ledger::Entry> out;
                   for (const pqxx::row& row : tx.exec_prepared(
                            sql::kSelectLedgerPartitionPage,
                            rows::ToMicrosOrMin(partition.from.value_or(absl::InfinitePast())),
                            rows::ToMicros(partition.to), after_seq, limit)) {
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
      tx.exec_prepared(sql::kRetireLedgerPartition, partition.name, exported.entries,
                       empty ? std::nullopt : std::optional<int64_t>(exported.first_seq),
                       empty ? std::nullopt : std::optional<int64_t>(exported.last_seq),
                       empty ? std::nullopt : std::optional<std::string>(exported.last_hash),
                       exported.file);
      tx.commit();
      return absl::OkStatus();
    } catch (const pqxx::check_violation& e) {
      return RefusalStatus(e);  // The function's own refusals.
    }
  });
}

}  // namespace arbiter::store
