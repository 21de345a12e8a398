#include "server/ledger_retention.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/status_macros.h"
#include "ledger/archive.h"
#include "ledger/chain.h"
#include "server/atomic_file.h"

namespace arbiter::server {
namespace {

constexpr int kPage = 10000;

// The chain link the next archive continues: the last archived entry, or
// genesis.
std::pair<int64_t, std::string> ArchivedHead(const std::vector<store::LedgerPartition>& all) {
  std::pair<int64_t, std::string> head{0, ledger::kGenesisHash};
  for (const store::LedgerPartition& p : all) {
    if (p.archived && p.last_seq > head.first) head = {p.last_seq, p.last_hash};
  }
  return head;
}

// Writes the entries of `partition` to `path`, verifying that they chain
// from `head`, which advances to the last one.
absl::StatusOr<store::ExportedPartition> Export(store::LedgerArchiveStore& store,
                                                const store::LedgerPartition& partition,
                                                const std::string& dir, const std::string& path,
                                                std::pair<int64_t, std::string>& head) {
  ARBITER_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file, AtomicFile::Create(path));
  ARBITER_RETURN_IF_ERROR(file->Append(absl::StrCat(ledger::kArchiveHeader, "\n")));
  store::ExportedPartition exported;
  exported.file = path;
  ledger::Verdict verdict = ledger::VerifyChain({}, head.first, head.second);
  int64_t after = 0;
  for (;;) {
    ARBITER_ASSIGN_OR_RETURN(std::vector<ledger::Entry> page,
                             store.ReadPartition(partition, after, kPage));
    if (page.empty()) break;
    ledger::Continue(verdict, page);
    if (!verdict.ok) {
      return absl::DataLossError(absl::StrCat("ledger entry ", verdict.first_bad_seq, " (in ",
                                              partition.name, "): ", verdict.problem,
                                              "; the partition was not archived"));
    }
    for (const ledger::Entry& e : page) {
      ARBITER_RETURN_IF_ERROR(file->Append(absl::StrCat(ledger::FormatArchiveLine(e), "\n")));
    }
    if (exported.entries == 0) exported.first_seq = page.front().seq;
    exported.entries += static_cast<int64_t>(page.size());
    exported.last_seq = page.back().seq;
    exported.last_hash = page.back().hash;
    after = page.back().seq;
  }
  ARBITER_RETURN_IF_ERROR(file->Commit(dir));
  if (exported.entries > 0) head = {exported.last_seq, exported.last_hash};
  return exported;
}

}  // namespace

absl::StatusOr<std::vector<ArchivedPartition>> ArchiveClosedMonths(
    store::LedgerArchiveStore& store, const RetentionOptions& options) {
  if (options.keep_months < 0) {
    return absl::InvalidArgumentError("keep_months: must be >= 0");
  }
  if (options.out_dir.empty()) return absl::InvalidArgumentError("out_dir: empty");
  ARBITER_ASSIGN_OR_RETURN(std::optional<absl::Time> head_time, store.HeadTime());
  std::vector<ArchivedPartition> out;
  if (!head_time.has_value()) return out;  // An empty ledger.
  const absl::Time keep_from = MonthsBefore(*head_time, options.keep_months);
  ARBITER_ASSIGN_OR_RETURN(std::vector<store::LedgerPartition> partitions, store.ListPartitions());
  std::pair<int64_t, std::string> head = ArchivedHead(partitions);
  for (const store::LedgerPartition& p : partitions) {
    if (p.archived) continue;
    if (p.to > keep_from) break;  // Oldest first: the rest are kept too.
    const std::string path = absl::StrCat(options.out_dir, "/", p.name, ".ledger");
    ArchivedPartition done{p.name, {}};
    if (options.dry_run) {
      done.exported.file = path;
      out.push_back(std::move(done));
      continue;
    }
    ARBITER_ASSIGN_OR_RETURN(done.exported, Export(store, p, options.out_dir, path, head));
    ARBITER_RETURN_IF_ERROR(store.Retire(p, done.exported));
    out.push_back(std::move(done));
  }
  return out;
}

}  // namespace arbiter::server
