// History retention (arbiterd archive-history): the closed months of the
// request history (requests by the month they ended, placements by their
// admission's, usage_hourly by its hour's; migration 0033) are exported to
// files and then taken out of PostgreSQL, so that the database holds the
// months an operator keeps, and the files the rest (docs/operations.md,
// "History retention").
//
// An archive file is `<DIR>/<partition>.copy`: a first line
//   # arbiter history archive 1 <partition> of <table>: <col>,<col>,...
// then one line per row in PostgreSQL's COPY text format, which
// `COPY <table> (<cols>) FROM STDIN` loads back.
//
// Not thread-safe; run one at a time per database (the database refuses a
// second retirement of a partition anyway).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "store/postgres/history_archive.h"

namespace arbiter::server {

inline constexpr char kHistoryArchiveHeader[] = "# arbiter history archive 1";

struct HistoryRetentionOptions {
  // Where the archive files go, one per partition.
  std::string out_dir;
  // Months kept in the database before the current one: with 12, in March
  // 2028 the months from March 2027 stay.
  int keep_months = 12;
  // Name what would be archived, and write and change nothing.
  bool dry_run = false;
  // The current time, whose month keep_months counts back from.
  absl::Time now = absl::InfinitePast();
};

struct ArchivedHistory {
  std::string name;
  store::ExportedHistory exported;
};

// Archives, oldest month first, each partition whose month ended
// `keep_months` or more months before the month of `now`: writes its rows
// to a file (written whole, flushed to disk, then renamed into place), then
// retires the partition (store::HistoryArchiveStore::Retire). A placements
// partition that a live request still holds a placement in is kept, and
// the command goes on with the rest. Stops at the first other failure,
// with what was archived before it kept: INVALID_ARGUMENT for keep_months
// < 0, an empty out_dir or no `now`; NOT_FOUND or PERMISSION_DENIED when
// out_dir cannot be written; FAILED_PRECONDITION from Retire. Returns what
// was archived (what would be, with dry_run).
absl::StatusOr<std::vector<ArchivedHistory>> ArchiveClosedHistory(
    store::HistoryArchiveStore& store, const HistoryRetentionOptions& options);

}  // namespace arbiter::server
