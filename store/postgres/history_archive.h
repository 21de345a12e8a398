// The database side of history retention (arbiterd archive-history): the
// monthly partitions of the history tables (requests by the month they
// ended, placements by their admission's, usage_hourly by its hour's;
// migration 0033), the rows of one, and taking an exported one out. The
// file side is server/history_retention.h.
//
// Not thread-safe: one connection, one caller.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include <pqxx/connection>

namespace arbiter::store {

// One monthly (or legacy) partition of a history table.
struct HistoryPartition {
  std::string parent;              // "requests", "placements" or "usage_hourly".
  std::string name;                // e.g. "requests_y2027m03"; "requests_legacy".
  std::optional<absl::Time> from;  // Empty: from the beginning (legacy).
  absl::Time to;                   // Exclusive.
};

// What was written of a partition: Retire checks the count against it.
struct ExportedHistory {
  int64_t rows = 0;
  std::string file;    // Where it was written, as recorded.
  std::string sha256;  // Of the file's bytes, lower-case hex.
};

class HistoryArchiveStore {
 public:
  // Connects to `dsn`. UNAVAILABLE if the database cannot be reached.
  static absl::StatusOr<std::unique_ptr<HistoryArchiveStore>> Connect(const std::string& dsn);
  ~HistoryArchiveStore();

  // The partitions not archived yet, by end of month, then table.
  absl::StatusOr<std::vector<HistoryPartition>> ListPartitions();
  // The column names of `partition`'s table, in the order Export writes them.
  absl::StatusOr<std::vector<std::string>> Columns(const HistoryPartition& partition);
  // How many live requests hold a placement in `partition` (of
  // placements): while any does, it stays.
  absl::StatusOr<int64_t> LivePlacementsIn(const HistoryPartition& partition);
  // Calls `line` with each row of `partition` in PostgreSQL's COPY text
  // format (tab-separated, \N for NULL, without the newline), in one
  // snapshot; stops at the first error `line` returns. Returns the rows.
  absl::StatusOr<int64_t> Export(const HistoryPartition& partition,
                                 const std::function<absl::Status(absl::string_view)>& line);
  // Records `exported` as the archive of `partition`, then detaches and
  // drops it, in one transaction, after the checks of
  // arbiter_retire_history_partition (its month over, no live placement in
  // it, exactly the rows exported). FAILED_PRECONDITION naming the failed
  // check, with nothing changed.
  absl::Status Retire(const HistoryPartition& partition, const ExportedHistory& exported);

 private:
  explicit HistoryArchiveStore(std::unique_ptr<pqxx::connection> conn);

  std::unique_ptr<pqxx::connection> conn_;
};

}  // namespace arbiter::store
