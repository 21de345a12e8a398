// Ledger retention (arbiterd archive-ledger): closed months of the ledger
// are exported to archive files (ledger/archive.h) and then taken out of
// PostgreSQL, so that the database holds the months an operator keeps and
// the files hold the rest, and `arbctl ledger verify --archive DIR` still
// verifies the whole chain from genesis (docs/operations.md, "Ledger
// retention").
//
// Not thread-safe; run one at a time per database (the database refuses a
// second retirement of a partition anyway).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "store/postgres/ledger_archive.h"

namespace arbiter::server {

struct RetentionOptions {
  // Where the archive files go, one per partition: <DIR>/<partition>.ledger.
  std::string out_dir;
  // Closed months kept in the database before the month of the newest
  // entry: with 12, in March 2027 the months from March 2026 stay.
  int keep_months = 12;
  // Name what would be archived, and write and change nothing.
  bool dry_run = false;
};

struct ArchivedPartition {
  std::string name;
  store::ExportedPartition exported;
};

// Archives, oldest first, each partition not yet archived whose month ended
// `keep_months` or more months before the month of the newest entry: writes
// its entries to a file (written whole, flushed to disk, then renamed into
// place), checking as it goes that they chain from the previous archive,
// then retires the partition (store::LedgerArchiveStore::Retire). Stops at
// the first failure, with what was archived before it kept:
// INVALID_ARGUMENT for keep_months < 0 or an empty out_dir; NOT_FOUND or
// PERMISSION_DENIED when out_dir cannot be written; DATA_LOSS naming the
// entry when the stored chain does not verify (nothing of that partition is
// retired); FAILED_PRECONDITION from Retire. Returns what was archived (what
// would be, with dry_run).
absl::StatusOr<std::vector<ArchivedPartition>> ArchiveClosedMonths(store::LedgerArchiveStore& store,
                                                                   const RetentionOptions& options);

}  // namespace arbiter::server
