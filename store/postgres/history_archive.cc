#include "store/postgres/history_archive.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include <pqxx/pqxx>
#include <pqxx/stream_from>

#include "core/status_macros.h"
#include "store/postgres/pg_errors.h"
#include "store/postgres/pg_rows.h"
#include "store/postgres/statements.h"

namespace arbiter::store {

HistoryArchiveStore::HistoryArchiveStore(std::unique_ptr<pqxx::connection> conn)
    : conn_(std::move(conn)) {}

HistoryArchiveStore::~HistoryArchiveStore() = default;

absl::StatusOr<std::unique_ptr<HistoryArchiveStore>> HistoryArchiveStore::Connect(
    const std::string& dsn) {
  bool broken = false;
  return Guarded("connect", &broken, [&]() -> absl::StatusOr<std::unique_ptr<HistoryArchiveStore>> {
    auto conn = std::make_unique<pqxx::connection>(dsn);
    sql::PrepareAll(*conn);
    return std::unique_ptr<HistoryArchiveStore>(new HistoryArchiveStore(std::move(conn)));
  });
}

absl::StatusOr<std::vector<HistoryPartition>> HistoryArchiveStore::ListPartitions() {
  bool broken = false;
  return Guarded("list history partitions", &broken,
                 [&]() -> absl::StatusOr<std::vector<HistoryPartition>> {
                   pqxx::read_transaction tx(*conn_);
                   std::vector<HistoryPartition> out;
                   for (const pqxx::row& row : tx.exec_prepared(sql::kSelectHistoryPartitions)) {
                     HistoryPartition p;
                     p.parent = row[0].as<std::string>();
                     p.name = row[1].as<std::string>();
                     const absl::Time from = rows::FromMicrosOrMin(row[2].as<int64_t>());
                     if (from != absl::InfinitePast()) p.from = from;
                     p.to = absl::FromUnixMicros(row[3].as<int64_t>());
                     out.push_back(std::move(p));
                   }
                   return out;
                 });
}

absl::StatusOr<std::vector<std::string>> HistoryArchiveStore::Columns(
    const HistoryPartition& partition) {
  bool broken = false;
  return Guarded(
      absl::StrCat("read the columns of ", partition.name), &broken,
      [&]() -> absl::StatusOr<std::vector<std::string>> {
        pqxx::read_transaction tx(*conn_);
        std::vector<std::string> out;
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectTableColumns, partition.name)) {
          out.push_back(row[0].as<std::string>());
        }
        return out;
      });
}

absl::StatusOr<int64_t> HistoryArchiveStore::LivePlacementsIn(const HistoryPartition& partition) {
  bool broken = false;
  return Guarded(absl::StrCat("count the live placements in ", partition.name), &broken,
                 [&]() -> absl::StatusOr<int64_t> {
                   pqxx::read_transaction tx(*conn_);
                   const pqxx::result r = tx.exec_prepared(
                       sql::kCountLivePlacements,
                       rows::ToMicrosOrMin(partition.from.value_or(absl::InfinitePast())),
                       rows::ToMicros(partition.to));
                   return r[0][0].as<int64_t>();
                 });
}

absl::StatusOr<int64_t> HistoryArchiveStore::Export(
    const HistoryPartition& partition, const std::function<absl::Status(absl::string_view)>& line) {
  ARBITER_ASSIGN_OR_RETURN(const std::vector<std::string> columns, Columns(partition));
  bool broken = false;
  return Guarded(absl::StrCat("export ", partition.name), &broken,
                 [&]() -> absl::StatusOr<int64_t> {
                   pqxx::read_transaction tx(*conn_);
                   // Times in UTC, ISO: the file reads the same from any
                   // server's settings.
                   tx.exec("SET LOCAL TimeZone = 'UTC'");
                   tx.exec("SET LOCAL DateStyle = 'ISO, YMD'");
                   pqxx::stream_from stream(tx, partition.name, columns.begin(), columns.end());
                   int64_t rows = 0;
                   std::string text;
                   absl::Status written;
                   // After a failed write the rest is read and dropped: the
                   // COPY ends only once it was read whole.
                   while (stream.get_raw_line(text)) {
                     if (written.ok()) written = line(text);
                     ++rows;
                   }
                   stream.complete();
                   if (!written.ok()) return written;
                   return rows;
                 });
}

absl::Status HistoryArchiveStore::Retire(const HistoryPartition& partition,
                                         const ExportedHistory& exported) {
  bool broken = false;
  return Guarded(absl::StrCat("retire ", partition.name), &broken, [&]() -> absl::Status {
    try {
      pqxx::work tx(*conn_);
      tx.exec_prepared(sql::kRetireHistoryPartition, partition.name, exported.rows, exported.file,
                       exported.sha256);
      tx.commit();
      return absl::OkStatus();
    } catch (const pqxx::check_violation& e) {
      return RefusalStatus(e);  // The function's own refusals.
    }
  });
}

}  // namespace arbiter::store
