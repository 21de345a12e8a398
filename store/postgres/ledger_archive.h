// The database side of ledger retention (arbiterd archive-ledger): the
// ledger's monthly partitions, the entries of one in pages, and taking an
// exported one out (migration 0030). The file side is
// server/ledger_retention.h.
//
// Not thread-safe: one connection, one caller.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include <pqxx/connection>

#include "ledger/chain.h"

namespace arbiter::store {

// One partition of the ledger, as ledger_partitions records it.
struct LedgerPartition {
  std::string name;                // e.g. "ledger_y2026m10"; "ledger_legacy".
  std::optional<absl::Time> from;  // Empty: from the beginning.
  absl::Time to;                   // Exclusive.
  bool archived = false;
  // Of an archived partition with entries: its last entry and the file.
  int64_t last_seq = 0;
  std::string last_hash;
  std::string file;
};

// What was exported of a partition: Retire checks it against the database.
struct ExportedPartition {
  int64_t entries = 0;
  int64_t first_seq = 0;  // 0 when entries == 0.
  int64_t last_seq = 0;
  std::string last_hash;
  std::string file;  // Where it was written, as recorded.
};

class LedgerArchiveStore {
 public:
  // Connects to `dsn`. UNAVAILABLE if the database cannot be reached.
  static absl::StatusOr<std::unique_ptr<LedgerArchiveStore>> Connect(const std::string& dsn);
  ~LedgerArchiveStore();

  // Every partition, archived or not, oldest first.
  absl::StatusOr<std::vector<LedgerPartition>> ListPartitions();
  // The commit time of the newest entry; empty for an empty ledger.
  absl::StatusOr<std::optional<absl::Time>> HeadTime();
  // Up to `limit` entries of `partition` with seq > `after_seq`, in seq order.
  absl::StatusOr<std::vector<ledger::Entry>> ReadPartition(const LedgerPartition& partition,
                                                           int64_t after_seq, int limit);
  // Records `exported` as the archive of `partition`, then detaches and
  // drops it, in one transaction, after the checks of
  // arbiter_retire_ledger_partition (the oldest unarchived partition, closed,
  // holding exactly what was exported, linked on both sides).
  // FAILED_PRECONDITION naming the failed check, with nothing changed.
  absl::Status Retire(const LedgerPartition& partition, const ExportedPartition& exported);

 private:
  explicit LedgerArchiveStore(std::unique_ptr<pqxx::connection> conn);

  std::unique_ptr<pqxx::connection> conn_;
};

}  // namespace arbiter::store
